"""``placement keygen``: a gossip key for ``--key-file`` (issue 31 item 2).

One random 256-bit AES-GCM key (``secrets``) as hex, the form ``read_key_file`` reads. To stdout,
or with ``--out FILE`` into a new file only its owner may read (mode 0600; an existing file is
never overwritten: a key file lost to a typo splits the cluster). Every node of a cluster gets
the same file; to rotate, add the new key as the last line everywhere, then move it first
everywhere, then drop the old one (the first line encrypts, every line decrypts).
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys

from ..errors import PlacementError

KEY_BYTES = 32


def new_key() -> str:
    return secrets.token_bytes(KEY_BYTES).hex()


def cmd_keygen(args: argparse.Namespace) -> int:
    line = new_key() + "\n"
    if args.out is None:
        sys.stdout.write(line)
        return 0
    try:
        fd = os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise PlacementError(f"--out {args.out}: the file exists; keygen never overwrites a key file "
                             "(remove it first, or add the printed key to it by hand to rotate)") from None
    except OSError as exc:
        raise PlacementError(f"--out {args.out}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "w", encoding="ascii") as fh:
        fh.write("# placement gossip keys (AES-256-GCM), one per line: the first encrypts, all decrypt\n")
        fh.write(line)
    print(f"wrote a new gossip key to {args.out} (mode 0600); give every node --key-file {args.out}",
          file=sys.stderr)
    return 0


def add_subcommands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("keygen", help="make a gossip key for --key-file (AES-256-GCM, hex)",
                       description=__doc__.split("\n\n")[1])
    p.add_argument("--out", metavar="FILE", default=None,
                   help="write a new key file (mode 0600; never overwrites) instead of printing the key")
    p.set_defaults(func=cmd_keygen)
