"""Folding the log into per-agent states with a reducer: the engine of a plain replay.

A *reducer* folds events, in offset order, into per-agent state; the default is
the :class:`~swarmlog.replaying.ledger.Ledger`. A plain replay knows nothing of a swarm's code
(that is :func:`swarmlog.replay_swarm`); it rebuilds what a reducer makes of
the log alone, and hashes it beside the stream.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import SwarmlogError
from ..events import Event
from ..log.hashing import StreamHasher, frame, state_hash
from ..schema.codec import Decoder
from ..schema.registry import SchemaRegistry
from .ledger import Ledger

__all__ = ["Fold", "Reducer", "ReplayResult", "Undecodable"]


class Reducer(Protocol):
    """Folds one event into the states of the agents it concerns."""

    def apply(self, states: dict[str, Any], event: Event) -> None: ...


@dataclass(frozen=True, slots=True)
class Undecodable:
    offset: int
    error: str


@dataclass(slots=True)
class ReplayResult:
    end_offset: int
    """The next offset after the replayed range (exclusive): state is "as of everything before it"."""
    events: int
    agents: dict[str, str]
    """Agent name -> sha256 of its canonical state."""
    stream_hash: str
    undecodable: list[Undecodable] = field(default_factory=list)
    states: dict[str, Any] = field(default_factory=dict, repr=False)
    start_offset: int = 0
    """The first offset replayed: 0, unless a replay ``from_log_start`` found history deleted."""

    def to_json(self) -> dict[str, Any]:
        return {
            "start_offset": self.start_offset,
            "end_offset": self.end_offset,
            "events": self.events,
            "agents": dict(sorted(self.agents.items())),
            "stream_hash": self.stream_hash,
            "undecodable": [{"offset": u.offset, "error": u.error} for u in self.undecodable],
        }


class Fold:
    """Applies decoded messages, batch by batch, to per-agent states with a reducer."""

    __slots__ = ("decoder", "reducer", "states", "hasher", "events", "undecodable")

    def __init__(self, *, registry: SchemaRegistry, reducer: Reducer | None = None,
                 decoder: Decoder | None = None) -> None:
        self.decoder = decoder or Decoder(registry)
        self.reducer = reducer or Ledger()
        self.states: dict[str, Any] = {}
        self.hasher = StreamHasher()
        self.events = 0
        self.undecodable: list[Undecodable] = []

    def apply_batch(self, msgs: list[Any]) -> None:
        """Hash, decode and fold a batch of messages (in offset order), in one pass over it.

        One pass, not a hashing loop and then a decoding one: per event, the loop's own cost
        is a good part of what a replay does beyond consuming and decoding (bench/README.md,
        Replay). A message that does not decode is hashed all the same (the stream hash covers
        every message's bytes) and reported in :attr:`undecodable` with its offset.
        """
        reducer = self.reducer
        frames = self.hasher.sink(len(msgs))
        undecodable = len(self.undecodable)
        if type(reducer) is Ledger:
            # The default ledger folds the raw messages itself, as they are decoded: no Event
            # per event, no row handed between loops, and a batch's 5,000 decoded records
            # never live at once (holding them cost more than decoding them one by one into
            # the same few freed blocks). Exactly Ledger: a subclass may override apply(), and
            # like any other reducer it is given Events.
            reducer.fold_messages(self.states, msgs, decode=self.decoder.decode, frames=frames,
                                  undecodable=self._undecodable)
        else:
            decode = self.decoder.decode
            apply = reducer.apply
            states = self.states
            from_message = Event.from_message
            for m in msgs:
                value = m.value()
                off = m.offset()
                frames(frame(off, value))
                try:
                    writer, record = decode(value, off)
                except SwarmlogError as exc:
                    self._undecodable(off, exc)
                    continue
                apply(states, from_message(m, writer, record))
        self.events += len(msgs) - (len(self.undecodable) - undecodable)

    def _undecodable(self, offset: int, exc: SwarmlogError) -> None:
        self.undecodable.append(Undecodable(offset=offset, error=str(exc)))

    def result(self, end_offset: int, *, start_offset: int = 0) -> ReplayResult:
        return ReplayResult(
            start_offset=start_offset,
            end_offset=end_offset,
            events=self.events,
            agents={agent: state_hash(s) for agent, s in self.states.items()},
            stream_hash=self.hasher.hexdigest(),
            undecodable=list(self.undecodable),
            states=self.states,
        )
