"""A swarm's log held in this process: :class:`InMemoryLog`.

For unit tests of pure logic (the runtime's steps, restarts, timers, effects and
divergence, with no broker) and for simulation. Never the test of anything Kafka or
Postgres does: the contract suite runs the same behaviour against Kafka.

It keeps the semantics swarmlog's guarantees depend on (see :mod:`swarmlog.log.base`),
so that code which would be wrong on Kafka is wrong here too:

* one partition per topic, topics created explicitly (a missing one is
  :class:`~swarmlog.errors.TopicNotFound`, as on Kafka);
* a transaction's messages take their offsets when sent; its commit or abort takes one
  more (a control record no reader sees), so **offsets have gaps**;
* readers are **read_committed**: nothing of an open or aborted transaction, and
  nothing past the first offset of an open one (the last stable offset);
* opening an agent's channel again and fencing aborts what the previous life left open,
  and the previous life's later sends and commits raise
  :class:`~swarmlog.errors.AgentFenced`;
* a channel's commit makes its outputs visible and moves its group's offset at once;
* **LogAppendTime**: every message is stamped with the log's clock as it is appended,
  never decreasing (``clock_ms`` is injectable: the simulator's clock is its schedule).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import AgentFenced, CopyFailed, GroupHasActiveMembers, TopicExists, TopicNotFound, UsageError
from ..guard import allowed
from .base import BATCH, AgentChannel, Delivered, History, ReadPosition
from .protocol import Headers, agent_group, agent_transactional_id

__all__ = ["InMemoryLog", "MemoryAgentChannel", "MemoryAppender", "MemoryMessage", "MemoryReader",
           "TIMESTAMP_LOG_APPEND_TIME"]

logger = logging.getLogger(__name__)

TIMESTAMP_LOG_APPEND_TIME = 2
"""``confluent_kafka.TIMESTAMP_LOG_APPEND_TIME``: what ``Message.timestamp()[0]`` says."""


class MemoryMessage:
    """A message of an :class:`InMemoryLog`, with ``confluent_kafka.Message``'s reading methods."""

    __slots__ = ("_offset", "_value", "_key", "_headers", "_ts")

    def __init__(self, offset: int, value: bytes | None, key: bytes | None, headers: Headers | None,
                 ts: int) -> None:
        self._offset = offset
        self._value = value
        self._key = key
        self._headers = headers
        self._ts = ts

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes | None:
        return self._value

    def key(self) -> bytes | None:
        return self._key

    def headers(self) -> Headers | None:
        return list(self._headers) if self._headers else None

    def timestamp(self) -> tuple[int, int]:
        return TIMESTAMP_LOG_APPEND_TIME, self._ts

    def error(self) -> None:
        return None

    def partition(self) -> int:
        return 0

    def __repr__(self) -> str:
        return f"MemoryMessage(offset={self._offset}, headers={self._headers!r})"


@dataclass(eq=False, slots=True)
class _Txn:
    transactional_id: str
    state: str = "open"  # open | committed | aborted
    first_offset: int | None = None
    abandoned: bool = False
    """Its channel closed with it open (a life that died between sending and committing): only the
    agent's next life, fencing, ends it (:meth:`InMemoryLog.abandoned_end`)."""


@dataclass(slots=True)
class _Entry:
    message: MemoryMessage | None  # None: a transaction's control record
    txn: _Txn | None

    def visible(self) -> bool:
        return self.message is not None and (self.txn is None or self.txn.state == "committed")


@dataclass(slots=True)
class _Topic:
    name: str
    entries: list[_Entry] = field(default_factory=list)
    open_txns: list[_Txn] = field(default_factory=list)
    log_start: int = 0
    """Offsets below this were deleted (:meth:`InMemoryLog.delete_records`)."""

    def last_stable(self) -> int:
        """The first offset of the oldest open transaction, else the end of the log."""
        firsts = [t.first_offset for t in self.open_txns if t.first_offset is not None]
        return min(firsts) if firsts else len(self.entries)

    def read(self, start: int, limit: int, end: int | None) -> tuple[list[MemoryMessage], int, bool]:
        """Visible messages from ``start``: (messages, next offset to read, reached the stable end)."""
        stop = self.last_stable()
        if end is not None:
            stop_at = min(stop, end)
        else:
            stop_at = stop
        out: list[MemoryMessage] = []
        i = max(start, self.log_start)  # as a Kafka reader at a deleted offset resets to the earliest
        entries = self.entries
        while i < stop_at and len(out) < limit:
            entry = entries[i]
            if entry.visible():
                out.append(entry.message)  # type: ignore[arg-type]
            i += 1
        return out, i, i >= stop


class InMemoryLog:
    """Topics of one partition each, in this process; a :class:`~swarmlog.log.base.LogBackend`."""

    def __init__(self, *, clock_ms: Callable[[], int] | None = None) -> None:
        self._clock = clock_ms or (lambda: int(time.time() * 1000))
        self._last_ts = 0
        self._topics: dict[str, _Topic] = {}
        lock = threading.RLock()
        self._cond = threading.Condition(lock)  # what readers wait on: an append, a transaction's end, a wake
        # What settle() waits on, under the same lock: a poll arriving at the end, a transaction's end. Apart
        # from _cond so that a poll saying "I wait" wakes no other poll: every idle agent's poll woke all the
        # others, which returned empty, polled again and woke them in turn — a futex storm that spent more
        # system time than the runs' own work while nothing happened.
        self._idle = threading.Condition(lock)
        self._epochs: dict[str, int] = {}  # transactional id -> current epoch
        self._open: dict[str, _Txn] = {}  # transactional id -> its open transaction
        self._committed: dict[tuple[str, str], int] = {}  # (group, topic) -> offset
        self._members: dict[str, set[object]] = {}  # group -> who is in it

    # -- topics ------------------------------------------------------------------------------

    def create_topic(self, topic: str) -> bool:
        with self._cond:
            if topic in self._topics:
                return False
            self._topics[topic] = _Topic(topic)
            return True

    def _topic(self, topic: str) -> _Topic:
        t = self._topics.get(topic)
        if t is None:
            raise TopicNotFound(topic=topic)
        return t

    def after_fork(self) -> InMemoryLog:
        """:meth:`~swarmlog.log.base.LogBackend.after_fork`: a forked process has its own copy of the
        log, as it was when it was forked."""
        return self

    def create_copy(self, topic: str, messages: Iterable[Any], *, end: int = 0) -> int:
        """:meth:`~swarmlog.log.base.LogBackend.create_copy`: each gap becomes control records, as on Kafka."""
        with self._cond:
            if topic in self._topics:
                raise TopicExists(topic=topic)
            t = self._topics[topic] = _Topic(topic)
            gap = _Txn("swarmlog-copy", state="committed")
            for m in messages:
                off = m.offset()
                if off < len(t.entries):
                    raise CopyFailed(topic=topic, detail=f"offset {off} is not after the previous message's")
                while len(t.entries) < off:
                    t.entries.append(_Entry(None, gap))
                _, ts = m.timestamp()
                self._last_ts = max(self._last_ts, ts)
                t.entries.append(_Entry(MemoryMessage(off, m.value(), m.key(), m.headers(), ts), None))
            while len(t.entries) < end:
                t.entries.append(_Entry(None, gap))
            self._cond.notify_all()
            return len(t.entries)

    def watermarks(self, topic: str) -> tuple[int, int]:
        with self._cond:
            t = self._topic(topic)
            return t.log_start, len(t.entries)

    def delete_records(self, topic: str, before: int) -> None:
        """Delete the offsets below ``before``, as Kafka's DeleteRecords (or retention) does."""
        with self._cond:
            t = self._topic(topic)
            t.log_start = max(t.log_start, min(before, len(t.entries)))

    def history(self, topic: str) -> History:
        with self._cond:
            return History(log_start=self._topic(topic).log_start)  # no retention here: only delete_records

    def settle(self, topic: str, channels: Sequence[AgentChannel], timeout: float) -> bool:
        """:meth:`~swarmlog.log.base.LogBackend.settle`. Every write here is visible when it returns,
        and nothing outside the process appends: once the channels wait at the end with no
        transaction open, nothing more happens until someone appends (a run's input, a test)."""
        with self._cond:
            t = self._topic(topic)
            return self._idle.wait_for(
                lambda: not t.open_txns and all(getattr(c, "waiting", False) for c in channels), timeout)

    def abandoned_end(self, topic: str) -> int | None:
        """:meth:`~swarmlog.log.base.LogBackend.abandoned_end`: the first offset of the oldest open
        transaction, if its channel was closed with it open. Nothing else in this process can end it:
        only a channel of the same agent opened and fenced again, which is a new life."""
        with self._cond:
            t = self._topic(topic)
            firsts = [(txn.first_offset, txn.abandoned) for txn in t.open_txns if txn.first_offset is not None]
            if not firsts:
                return None
            first, abandoned = min(firsts)
            return first if abandoned else None

    def wait_for_append(self, topic: str, end: int, timeout: float) -> bool:
        """:meth:`~swarmlog.log.base.LogBackend.wait_for_append`."""
        with self._cond:
            t = self._topic(topic)
            return self._cond.wait_for(lambda: len(t.entries) > end, timeout)

    def messages(self, topic: str) -> list[MemoryMessage]:
        """Every message a read_committed reader would see now, in offset order."""
        with self._cond:
            t = self._topic(topic)
            return t.read(0, len(t.entries), None)[0]

    # -- the LogBackend interface ----------------------------------------------------------------

    def reader(self, topic: str, *, group: str | None = None) -> MemoryReader:
        with self._cond:
            self._topic(topic)
        return MemoryReader(log=self, topic=topic, group=group)

    def appender(self, topic: str) -> MemoryAppender:
        with self._cond:
            self._topic(topic)
        return MemoryAppender(log=self, topic=topic)

    def agent_channel(self, topic: str, agent: str) -> MemoryAgentChannel:
        with self._cond:
            self._topic(topic)
        return MemoryAgentChannel(log=self, topic=topic, agent=agent)

    def committed(self, group: str, topic: str) -> int | None:
        with self._cond:
            return self._committed.get((group, topic))

    def reset_group(self, group: str, topic: str, offset: int) -> None:
        with self._cond:
            members = self._members.get(group)
            if members:
                raise GroupHasActiveMembers(group=group, members=[repr(m) for m in members])
            self._committed[(group, topic)] = offset

    # -- internals, called with the lock held --------------------------------------------------------

    def _stamp(self) -> int:
        # The log's clock, read on behalf of whoever appends: a handler's outputs are appended
        # inside its step, but the stamp is the log's, as the broker's is on Kafka.
        with allowed():
            now = self._clock()
        ts = max(self._last_ts, now)
        self._last_ts = ts
        return ts

    def _append(self, topic: _Topic, value: bytes | None, key: bytes | None, headers: Headers | None,
                txn: _Txn | None) -> int:
        offset = len(topic.entries)
        topic.entries.append(_Entry(MemoryMessage(offset, value, key, headers, self._stamp()), txn))
        if txn is not None and txn.first_offset is None:
            txn.first_offset = offset
        self._cond.notify_all()
        return offset

    def _end_txn(self, topic: _Topic, txn: _Txn, state: str) -> None:
        txn.state = state
        if txn in topic.open_txns:
            topic.open_txns.remove(txn)
        if self._open.get(txn.transactional_id) is txn:
            del self._open[txn.transactional_id]
        if txn.first_offset is not None:  # a transaction that wrote nothing leaves no marker
            topic.entries.append(_Entry(None, txn))
        self._cond.notify_all()
        self._idle.notify_all()

    def _wait(self, timeout: float) -> None:
        if timeout > 0:
            self._cond.wait(timeout)

    def _join(self, group: str, who: object) -> None:
        self._members.setdefault(group, set()).add(who)

    def _leave(self, group: str, who: object) -> None:
        members = self._members.get(group)
        if members is not None:
            members.discard(who)


class MemoryReader:
    """:class:`~swarmlog.log.base.Reader` of an :class:`InMemoryLog` topic."""

    def __init__(self, *, log: InMemoryLog, topic: str, group: str | None) -> None:
        self.log = log
        self.topic = topic
        self.group = group
        self.position = ReadPosition(end_offset=0, reached_end_of_log=False)
        self._next = 0
        self._joined = False
        self._woken = False

    def assign(self, start: int) -> None:
        self._next = max(0, start)
        self.position.end_offset = self._next

    def subscribe(self) -> None:
        if self.group is None:
            raise UsageError("subscribe() needs a consumer group: reader(topic, group=...)")
        with self.log._cond:
            self.log._join(self.group, self)
            self._joined = True
            self._next = self.log._committed.get((self.group, self.topic), 0)

    def batches(self, *, end: int | None = None, follow: bool = False, timeout: float = 1.0,
                batch_size: int = BATCH) -> Iterator[list[Any]]:
        pos = self.position
        log = self.log
        while True:
            if end is not None and pos.end_offset >= end:
                return
            with log._cond:
                topic = log._topic(self.topic)
                msgs, nxt, at_end = topic.read(self._next, batch_size, end)
                if not msgs and at_end and follow:
                    if self._woken:
                        self._woken = False  # woken before it waited: this wait returns at once
                    else:
                        log._wait(timeout)
                    msgs, nxt, at_end = topic.read(self._next, batch_size, end)
            self._next = nxt
            pos.end_offset = max(pos.end_offset, nxt)
            pos.reached_end_of_log = at_end
            if msgs:
                yield msgs
            if end is not None and nxt >= end:
                pos.end_offset = end
                return
            if at_end and not follow:
                return
            if follow and not msgs:
                yield []

    def commit(self, next_offset: int) -> None:
        if self.group is None:
            raise UsageError("commit() needs a consumer group")
        with self.log._cond:
            self.log._committed[(self.group, self.topic)] = next_offset

    def close(self) -> None:
        if self._joined and self.group is not None:
            with self.log._cond:
                self.log._leave(self.group, self)
            self._joined = False

    def wake(self) -> None:
        with self.log._cond:
            self._woken = True
            self.log._cond.notify_all()

    def __enter__(self) -> MemoryReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class MemoryAppender:
    """:class:`~swarmlog.log.base.Appender`: each send is appended (and acknowledged) at once."""

    def __init__(self, *, log: InMemoryLog, topic: str) -> None:
        self.log = log
        self.topic = topic
        self._delivered = Delivered()

    def send(self, value: bytes | None, key: bytes | None, headers: Headers | None) -> None:
        with self.log._cond:
            offset = self.log._append(self.log._topic(self.topic), value, key, headers, None)
        self._delivered.offsets.append(offset)

    def flush(self, timeout: float) -> Delivered:
        delivered, self._delivered = self._delivered, Delivered()
        return delivered

    def close(self, timeout: float = 30.0) -> int:
        return 0


class MemoryAgentChannel:
    """:class:`~swarmlog.log.base.AgentChannel` on an :class:`InMemoryLog`."""

    def __init__(self, *, log: InMemoryLog, topic: str, agent: str) -> None:
        self.log = log
        self.topic = topic
        self.agent = agent
        self.transactional_id = agent_transactional_id(topic, agent)
        self.group = agent_group(topic, agent)
        self._epoch = -1
        self._txn: _Txn | None = None
        self._beside: dict[str, _Txn] = {}
        """The open transaction's part in side topics (:meth:`send_beside`), by topic."""
        self._next = 0
        self._position: Callable[[], int] = lambda: 0
        self._started = False
        self._woken = False
        self.waiting = False
        """Whether a poll of it waits at the end of the log now (:meth:`InMemoryLog.settle`)."""

    def _check_epoch(self) -> None:
        if self.log._epochs.get(self.transactional_id) != self._epoch:
            raise AgentFenced(agent=self.agent, detail=f"transactional id {self.transactional_id!r} was "
                                                       f"initialised by a newer instance")

    def fence(self) -> None:
        log = self.log
        with log._cond:
            self._epoch = log._epochs.get(self.transactional_id, -1) + 1
            log._epochs[self.transactional_id] = self._epoch
            previous = log._open.get(self.transactional_id)
            if previous is not None:
                logger.info("agent %s: aborting the transaction its previous life left open", self.agent)
                log._end_txn(log._topic(self.topic), previous, "aborted")
            for topic in log._topics.values():  # its part in side topics (send_beside)
                for txn in [t for t in topic.open_txns if t.transactional_id == self.transactional_id]:
                    log._end_txn(topic, txn, "aborted")

    def start(self, position: Callable[[], int]) -> None:
        with self.log._cond:
            self.log._join(self.group, self)
            self._started = True
        self._position = position
        self._next = max(0, position())

    def poll(self, max_messages: int, timeout: float) -> tuple[list[Any], int | None]:
        log = self.log
        with log._cond:
            topic = log._topic(self.topic)
            msgs, nxt, at_end = topic.read(self._next, max_messages, None)
            if not msgs and at_end and self._woken:
                self._woken = False  # woken before it waited: this poll returns at once
            elif not msgs and at_end:
                # Said while it waits, so that settle() knows the agent has nothing left to do.
                self.waiting = True
                log._idle.notify_all()
                try:
                    log._wait(timeout)
                finally:
                    self.waiting = False
                msgs, nxt, at_end = topic.read(self._next, max_messages, None)
        self._next = nxt
        return msgs, (nxt if at_end else None)

    def wake(self) -> None:
        with self.log._cond:
            self._woken = True
            self.log._cond.notify_all()

    def begin(self) -> None:
        log = self.log
        with log._cond:
            self._check_epoch()
            txn = self._txn = _Txn(self.transactional_id)
            log._open[self.transactional_id] = txn
            log._topic(self.topic).open_txns.append(txn)

    def send(self, value: bytes, key: bytes | None, headers: Headers) -> None:
        self.send_located(value, key, headers)

    def send_beside(self, topic: str, value: bytes, key: bytes | None, headers: Headers) -> None:
        log = self.log
        with log._cond:
            self._check_epoch()
            if self._txn is None or self._txn.state != "open":
                raise AgentFenced(agent=self.agent, detail="its transaction was aborted")
            side = self._beside.get(topic)
            if side is None:
                # One transaction over both topics, as Kafka's coordinator keeps it: this part
                # ends (committed or aborted) with the main one, and a fence aborts it too.
                side = self._beside[topic] = _Txn(self.transactional_id)
                log._topic(topic).open_txns.append(side)
            log._append(log._topic(topic), value, key, headers, side)

    def send_located(self, value: bytes, key: bytes | None, headers: Headers) -> int:
        log = self.log
        with log._cond:
            self._check_epoch()
            if self._txn is None or self._txn.state != "open":
                raise AgentFenced(agent=self.agent, detail="its transaction was aborted")
            return log._append(log._topic(self.topic), value, key, headers, self._txn)

    def commit(self, position: int | None) -> None:
        log = self.log
        with log._cond:
            txn, self._txn = self._txn, None
            self._check_epoch()
            if txn is None or txn.state != "open":
                raise AgentFenced(agent=self.agent, detail="its transaction was aborted")
            log._end_txn(log._topic(self.topic), txn, "committed")
            self._end_beside("committed")
            if position is not None:
                log._committed[(self.group, self.topic)] = position

    def abort(self) -> None:
        log = self.log
        with log._cond:
            txn, self._txn = self._txn, None
            if txn is not None and txn.state == "open":
                log._end_txn(log._topic(self.topic), txn, "aborted")
            self._end_beside("aborted")

    def _end_beside(self, state: str) -> None:
        beside, self._beside = self._beside, {}
        for topic, txn in beside.items():
            if txn.state == "open":
                self.log._end_txn(self.log._topic(topic), txn, state)

    def close(self) -> None:
        with self.log._cond:
            # Closed with its transaction open (a dead life: nothing aborted it): it stays open, holding every
            # reader's end at its first offset, until the next life fences it, as on Kafka until its
            # coordinator's timeout. Marked, so that a reader need not wait for an end that cannot move now.
            for txn in (self._txn, *self._beside.values()):
                if txn is not None and txn.state == "open":
                    txn.abandoned = True
            if self._started:
                self.log._leave(self.group, self)
                self._started = False
