"""The flush step every driver of a ``Swim`` core runs after each input it gives the core.

The core is sans-I/O: after a datagram, a timer, or an API call it only *queues* datagrams and
events. Each driver - the asyncio UDP driver (``membership.aio``) and the simulator's node models
(``simulations.nodes``, ``simulations.members``) - must then hand them on, in the same order, or
the simulator would test a different protocol from the one that runs. ``drain`` is that shared
part, and nothing else, so it costs one call per input on the simulator's hot path.

What stays in each driver, because the shapes differ:

* arming the timer: asyncio cancels and replaces one ``TimerHandle`` whenever ``get_timer()``
  changes; the simulator cannot cancel heap entries, so its node models invalidate stale ones
  lazily, and the placement node (``SwimNode``) also merges the ownership core's deadline into
  the one it arms, runs it ``lag_s`` late on a starved process, and only ever arms an earlier
  one;
* what an event means to the driver (subscribers, seed re-resolution, the placement view, an
  ownership core, a test's event list);
* what follows the drain: ``SwimNode`` feeds the ownership core, which may make the membership
  core leave and send again before the timer is armed.
"""

from __future__ import annotations

from collections.abc import Callable

from .core import Swim
from .messages import Addr, Event

__all__ = ["drain"]


def drain(core: Swim, send: Callable[[bytes, Addr], object], on_event: Callable[[Event], object]) -> None:
    """Give every queued datagram to ``send(data, addr)``, then every queued event, oldest first,
    to ``on_event(event)``.

    Datagrams go first: they are the protocol's own answers (acks, refutations, gossip) and must
    not wait for what an event handler does. Events are popped one at a time, not as a snapshot
    of the queue, so an event a handler causes is handed on in this same drain (a datagram it
    causes goes out with the next one)."""
    for data, addr in core.datagrams_to_send():
        send(data, addr)
    event = core.next_event()
    while event is not None:
        on_event(event)
        event = core.next_event()
