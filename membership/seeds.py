"""Seeds found by DNS: ``dns:NAME[:PORT]`` resolved to every A/AAAA record, again before each retry.

Why. In Kubernetes (a headless Service) or behind any DNS name that lists the current members,
the seed addresses change as pods come and go: the addresses resolved when a node started may
all be gone by its second join attempt. So the driver resolves the names again after each
failed attempt (the core reports one as a ``JoinAttempt`` event) and hands the core the fresh
list (``Swim.set_seeds``); the core itself does no I/O. Hashicorp's go-discover and Consul's
``retry_join`` work the same way: resolve on every retry, not once.

The lookup itself is I/O and lives in the driver (``aio.system_resolver``: ``getaddrinfo``
through the event loop's thread pool, so a slow DNS server does not stall gossip); this module
only decides what to do with the answers, and tests hand it a stub resolver. Only addresses of
the gossip socket's family are kept: an IPv4 socket cannot send to an AAAA record.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

from .messages import Addr

__all__ = ["DnsSeed", "Resolver", "SeedFinder"]

_log = logging.getLogger("membership.seeds")

#: ``resolver(name, port)`` -> every (host, port) the name stands for; raises OSError on failure.
Resolver = Callable[[str, int], Awaitable[Sequence[Addr]]]


@dataclass(frozen=True)
class DnsSeed:
    """A seed given as a DNS name: all its A/AAAA records, at ``port``."""

    name: str
    port: int

    def __str__(self) -> str:
        return f"dns:{self.name}:{self.port}"


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


class SeedFinder:
    """The seed addresses of one member: fixed ``HOST:PORT`` seeds plus what the ``DnsSeed``
    names resolve to now. ``ipv6``: the gossip socket is an IPv6 one."""

    def __init__(self, seeds: Iterable[Addr | DnsSeed], ipv6: bool, resolver: Resolver) -> None:
        seeds = list(seeds)
        # A HOST:PORT seed whose host is a name ("localhost", "seed-1") is looked up like a
        # DnsSeed: the core then holds the addresses it sends its joins to, which is how it
        # knows a refusal came from a seed it contacted (keyless, a refusal from anywhere else
        # is ignored as a possible forgery: a seed named "localhost" was never matched, and a
        # refused joiner retried for ever, issue 31).
        self.fixed = [s for s in seeds if not isinstance(s, DnsSeed) and _is_ip(s[0])]
        self.names = [s if isinstance(s, DnsSeed) else DnsSeed(s[0], s[1]) for s in seeds
                      if isinstance(s, DnsSeed) or not _is_ip(s[0])]
        self.ipv6 = ipv6
        self._resolver = resolver

    async def resolve(self) -> list[Addr]:
        """Fixed seeds, then every address the names resolve to (deduplicated, in order). A
        name that does not resolve is logged and skipped: the other seeds may still answer."""
        found: list[Addr] = list(self.fixed)
        for seed in self.names:
            try:
                addrs = await self._resolver(seed.name, seed.port)
            except (OSError, UnicodeError) as exc:  # (a label over 63 bytes is a UnicodeError)
                _log.warning("seed %s does not resolve: %s", seed, getattr(exc, "strerror", None) or exc)
                continue
            kept = [a for a in addrs if (":" in a[0]) == self.ipv6]
            if not kept:
                _log.warning("seed %s resolves to no %s address (%s)", seed,
                             "IPv6" if self.ipv6 else "IPv4", addrs or "no records")
            found += kept
        return list(dict.fromkeys(found))
