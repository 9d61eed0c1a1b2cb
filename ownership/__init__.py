"""Exclusive ownership: each partition has one owner at a time, with no lease store.

Sans-I/O, like ``membership``: the state machines take messages and ``now`` and return what to
send and what to do; none reads a clock, opens a socket or uses global randomness, so the node
(``placement.service.node_ownership``) and the simulator (``simulations.nodes``) run the very same
code. The rules, what they guarantee and under which assumptions: docs/ownership.md.

``views``     the numbered stable views, each chosen by the witnesses of the one before (Paxos)
``lease``     the quorum lease from those witnesses, condemnation, fencing-epoch reserves
``core``      ``Ownership``: handoffs, takeovers, taking back, the census, founding again (rules 1-11)
``protocol``  ``OwnershipProtocol``: the core in membership's shape, datagrams in and out
``driver``    ``MemberOwnership``: that protocol joined to a membership core (view feed, declared
              deaths, addresses, leave after the handoffs, merged timer); the node and the
              simulator drive this same glue
``states``    a partition's state at one member as one type, and the table of the moves the rules
              make between states (checked by the simulator after every step)
``messages``  the core's actions (``Acquired``, ``Release``, ``Ended``) and handoff messages
``config``    ``ExclusiveConfig``, the rules' timing
``wire``      the datagram form of every ownership message (fragments, optional AES-GCM)
``durable``   the record of a witness's promises (``lease.WitnessState``) as checked bytes

Layers: ``ownership`` uses the placement math (``placement.table``) and the membership core's
types (``driver``), and nothing of the service;
``placement.service`` and ``simulations`` drive it.
"""

from .config import ExclusiveConfig
from .core import Counters, Ownership
from .messages import (
    CENSUS_BATCH,
    Acquired,
    Action,
    Census,
    Disown,
    Ended,
    Message,
    Note,
    NoteAck,
    NoteRefused,
    NoView,
    Query,
    Redirect,
    Release,
    ViewAsk,
)
from .protocol import OwnershipProtocol

__all__ = [
    "ExclusiveConfig", "Ownership", "OwnershipProtocol", "Counters",
    "Acquired", "Release", "Ended", "Action", "Note", "NoteAck", "NoteRefused", "Redirect", "Query", "Census", "Disown",
    "ViewAsk", "NoView", "Message", "CENSUS_BATCH",
]
