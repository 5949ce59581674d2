"""The hash chain of a replay token (version 2): links over segments of K events.

The log's events in offset order are cut into segments of K events each (the last
one shorter). Each segment's link is::

    link[0]   = sha256("swarmlog.chain.v1" | start offset)          (the genesis)
    link[j+1] = sha256(link[j] | frame(e) for every event e of segment j)
    frame(e)  = 8-byte big-endian offset | 4-byte big-endian length | the value's bytes

exactly the frames of the v1 stream hash, so two logs chain alike only if they hold
the same bytes at the same offsets. A token keeps every link with the offset where its
segment ends (a *checkpoint*). Because a link starts from the previous link *as the
token holds it*, each segment of a topic can be checked on its own: a change in one
segment fails that segment's checkpoint and no other. So a check reads the topic once
and names every segment that differs, rather than bisecting a prefix hash (which reads
just as much of a Kafka partition, and finds only the first); the first differing
segment is then compared event by event with a copy that still matches the token.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..log.hashing import FRAME, frame

DEFAULT_EVERY = 1000
"""Events per checkpoint: a token of a million events holds 1,000 checkpoints (about 90 kB),
and a change is located to within 1,000 events without any other copy of the log."""

_GENESIS_TAG = b"swarmlog.chain.v1"


def genesis(start_offset: int) -> str:
    """The link before the first segment of a chain that starts at ``start_offset``."""
    return hashlib.sha256(_GENESIS_TAG + struct.pack(">Q", start_offset)).hexdigest()


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The end of one segment: how many events the chain holds there, where the segment ends, its link."""

    events: int
    """Events from the chain's start to the end of this segment."""
    end_offset: int
    """The segment holds the events before this offset (exclusive) and after the previous checkpoint's."""
    link: str

    def to_json(self) -> list[Any]:
        return [self.events, self.end_offset, self.link]

    @classmethod
    def from_json(cls, doc: list[Any]) -> Checkpoint:
        events, end, link = doc
        return cls(events=int(events), end_offset=int(end), link=str(link))


class ChainBuilder:
    """Builds a chain from a log's messages, in offset order (``token create``)."""

    __slots__ = ("every", "start_offset", "checkpoints", "events", "_h", "_in_segment", "_last_offset")

    def __init__(self, *, start_offset: int, every: int = DEFAULT_EVERY) -> None:
        if every < 1:
            raise ValueError("checkpoints come every 1 or more events")
        self.every = every
        self.start_offset = start_offset
        self.checkpoints: list[Checkpoint] = []
        self.events = 0
        self._h = hashlib.sha256(bytes.fromhex(genesis(start_offset)))
        self._in_segment = 0
        self._last_offset = start_offset - 1

    @property
    def last_link(self) -> str:
        return self.checkpoints[-1].link if self.checkpoints else genesis(self.start_offset)

    def update_batch(self, msgs: Iterable[Any]) -> None:
        h = self._h
        pack = FRAME.pack
        for m in msgs:
            value = m.value() or b""
            off = m.offset()
            h.update(pack(off, len(value)) + value)
            self.events += 1
            self._in_segment += 1
            self._last_offset = off
            if self._in_segment == self.every:
                self._close(off + 1)
                h = self._h

    def _close(self, end_offset: int) -> None:
        link = self._h.hexdigest()
        self.checkpoints.append(Checkpoint(events=self.events, end_offset=end_offset, link=link))
        self._h = hashlib.sha256(bytes.fromhex(link))
        self._in_segment = 0

    def finish(self, end_offset: int) -> list[Checkpoint]:
        """Close the last segment at the chain's end (exclusive), which may lie past its last event."""
        if self._in_segment or not self.checkpoints:
            self._close(end_offset)
        elif self.checkpoints[-1].end_offset != end_offset:
            # The last full segment ends at its last event; transaction markers after it up to the
            # end belong to no event. Stretch it, so that checkpoints tile [start, end).
            last = self.checkpoints[-1]
            self.checkpoints[-1] = Checkpoint(events=last.events, end_offset=end_offset, link=last.link)
        return self.checkpoints


@dataclass(slots=True)
class SegmentResult:
    """One segment of a token's chain, checked against a topic."""

    index: int
    start_offset: int
    end_offset: int
    token_events: int
    topic_events: int
    ok: bool


class ChainChecker:
    """Checks a topic's messages against a token's checkpoints, segment by segment, in one pass."""

    def __init__(self, *, start_offset: int, checkpoints: list[Checkpoint]) -> None:
        self.start_offset = start_offset
        self.checkpoints = checkpoints
        self.results: list[SegmentResult] = []
        self._seg = 0
        self._count = 0
        self._h = hashlib.sha256(bytes.fromhex(genesis(start_offset)))

    def _segment_start(self, j: int) -> int:
        return self.checkpoints[j - 1].end_offset if j else self.start_offset

    def _token_events(self, j: int) -> int:
        return self.checkpoints[j].events - (self.checkpoints[j - 1].events if j else 0)

    def _close(self) -> None:
        j = self._seg
        cp = self.checkpoints[j]
        self.results.append(SegmentResult(index=j, start_offset=self._segment_start(j), end_offset=cp.end_offset,
                                          token_events=self._token_events(j), topic_events=self._count,
                                          ok=self._h.hexdigest() == cp.link))
        self._seg = j + 1
        self._count = 0
        self._h = hashlib.sha256(bytes.fromhex(cp.link))  # the token's link: each segment stands alone

    def update_batch(self, msgs: Iterable[Any]) -> None:
        pack = FRAME.pack
        for m in msgs:
            off = m.offset()
            while self._seg < len(self.checkpoints) and off >= self.checkpoints[self._seg].end_offset:
                self._close()
            if self._seg >= len(self.checkpoints):
                return  # past the token's range
            value = m.value() or b""
            self._h.update(pack(off, len(value)) + value)
            self._count += 1

    def finish(self) -> list[SegmentResult]:
        while self._seg < len(self.checkpoints):
            self._close()
        return self.results


def segment_link(previous_link: str, msgs: Iterable[Any]) -> str:
    """The link a run of messages makes after ``previous_link`` (one segment, checked alone)."""
    h = hashlib.sha256(bytes.fromhex(previous_link))
    for m in msgs:
        h.update(frame(m.offset(), m.value()))
    return h.hexdigest()
