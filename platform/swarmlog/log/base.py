"""The log as swarmlog's mechanisms see it: one interface, a backend per kind of log.

Two backends implement it: Kafka (:class:`swarmlog.kafka.KafkaBackend`, what
production runs on) and memory (:class:`swarmlog.log.InMemoryLog`, for unit tests of
pure logic and for simulation). The runtime, replay and the append API are written
against this interface only, and one contract suite (``tests/contract``) holds both
backends to the same behaviour.

What every backend must keep, because the guarantees rest on it:

* **One partition per topic**: offsets are a total order and the swarm's only clock.
* **Offsets are ordered, not contiguous**: a transaction's commit or abort takes an
  offset of its own (a control record no reader sees).
* **read_committed**: readers see a transaction's messages only once it committed,
  never an aborted one, and nothing past the first offset of a transaction still open
  (the last stable offset).
* **Fencing**: opening an agent's channel again (a restart) aborts what an earlier
  life left open, and the earlier life can commit nothing more.
* **A channel's commit is atomic**: its outputs and the position they account for.
* **LogAppendTime**: the log stamps each message as it appends it.
* **An exact copy** (:meth:`LogBackend.create_copy`, what ``swarmlog fork`` stands on): a
  new topic can be made to hold another log's messages at the *same offsets*, with the
  same bytes, keys, headers and timestamps, and nothing a reader sees in between. Event
  ids, causes, timer offsets and every ``ctx.random()`` derive from offsets, so a copy
  at other offsets would replay as a different run.
* **History from offset 0**: replay and agents rebuild state from the log start, which is
  the run only if nothing was ever deleted (:class:`History`); they refuse a log that
  no longer starts at 0 (:class:`~swarmlog.errors.HistoryIncomplete`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import GroupNotAtStart, HistoryIncomplete, TopicNotFound
from .protocol import Headers

__all__ = ["AgentChannel", "Appender", "BATCH", "Delivered", "History", "LogBackend", "Message", "ReadPosition",
           "Reader", "message_at", "messages_at", "read_from_log_start", "require_complete_history",
           "warn_if_history_deletes", "warn_about_history", "warn_if_history_is_finite"]

logger = logging.getLogger(__name__)

BATCH = 5000
"""Messages per batch a reader hands out at most."""


class Message(Protocol):
    """A message of the log: the reading methods of ``confluent_kafka.Message``.

    Readers hand out their backend's own message objects (on Kafka, ``confluent_kafka.Message``
    itself, with no wrapper on the hot path), typed ``Any`` in batches; this says what they have.
    """

    def offset(self) -> int: ...

    def value(self) -> bytes | None: ...

    def key(self) -> bytes | None: ...

    def headers(self) -> Headers | None: ...

    def timestamp(self) -> tuple[int, int]: ...

    def error(self) -> Any: ...


@dataclass(slots=True)
class ReadPosition:
    """Where a read ended: ``end_offset`` is the next offset it would read (exclusive)."""

    end_offset: int
    reached_end_of_log: bool


class Reader(Protocol):
    """Batches of a topic's committed messages, in offset order."""

    position: ReadPosition

    def assign(self, start: int) -> None:
        """Read from offset ``start`` without joining a group."""

    def subscribe(self) -> None:
        """Join the reader's consumer group and read from its committed offset."""

    def batches(self, *, end: int | None = None, follow: bool = False, timeout: float = 1.0,
                batch_size: int = BATCH) -> Iterator[list[Any]]:
        """Batches until the end of the log (or ``end``, exclusive); with ``follow``, forever,
        an idle wait yielding an empty batch."""

    def commit(self, next_offset: int) -> None:
        """Commit ``next_offset`` for the reader's group."""

    def wake(self) -> None:
        """Its follower is stopping (called from another thread): an idle wait of ``batches(follow=True)``
        returns now, or else the next one returns without waiting. A log whose idle waits are the short
        ``timeout`` anyway (Kafka's consumer, not to be touched while another thread polls) may do nothing."""

    def close(self) -> None: ...

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: object) -> None: ...


@dataclass(slots=True)
class Delivered:
    """The delivery reports a flush collected: of the messages sent so far, in send order.

    Reports arrive in send order (one partition, an idempotent producer), so report ``i`` is
    of the ``i``-th message not reported before; the sender pairs them with what it sent by
    position alone. What is not reported yet is ``pending``: still queued or in flight, and
    reported, in order, by a later flush.
    """

    offsets: list[int] = field(default_factory=list)
    """One per reported message, in send order: its offset, or -1 if it failed (see ``errors``)."""
    errors: dict[int, str] = field(default_factory=dict)
    """Index into ``offsets`` -> why that message was not written."""
    pending: int = 0
    """Messages sent but not reported yet (the flush gave up waiting): they are not lost."""


@dataclass(frozen=True, slots=True)
class History:
    """How much of a topic's history it holds, and whether it will go on holding it."""

    log_start: int
    """The first offset the log still holds: 0 unless retention or DeleteRecords removed some."""
    deletes: str | None = None
    """What deletes history (``retention.ms=60000``, ``cleanup.policy=compact``), None if nothing does."""

    @property
    def complete(self) -> bool:
        return self.log_start == 0

    def describe(self) -> str:
        if self.deletes:
            return f"the topic deletes history: {self.deletes}"
        return "deleted by DeleteRecords or an earlier retention setting; the topic now keeps what is left"

    @staticmethod
    def remedy(topic: str) -> str:
        """What keeps every event of ``topic`` from now on (the one wording every command gives)."""
        return (f"A swarm's log must keep every event forever: set cleanup.policy=delete, retention.ms=-1 and "
                f"retention.bytes=-1 on it (kafka-configs.sh --alter --entity-type topics --entity-name {topic} "
                f"--add-config cleanup.policy=delete,retention.ms=-1,retention.bytes=-1), as `swarmlog topic "
                f"create` makes it; what compaction or retention already deleted is gone")


class Appender(Protocol):
    """An idempotent, ordered producer: one producer's messages land once, in send order.

    It never gives up on a message by itself (no delivery timeout): a message is acknowledged,
    refused by the broker, or still pending; and a flush that times out leaves the pending
    ones to be reported by the next.
    """

    def send(self, value: bytes | None, key: bytes | None, headers: Headers | None) -> None: ...

    def flush(self, timeout: float) -> Delivered: ...

    def close(self, timeout: float = 30.0) -> int:
        """Wait up to ``timeout`` for what is pending; return how many messages were abandoned."""


class AgentChannel(Protocol):
    """One live agent's exactly-once link to the log.

    It reads the whole log from offset zero (restart is rebuild) as a member of the
    agent's consumer group, and writes a batch of outputs together with the position
    they account for in one transaction: either both become visible or neither does.
    """

    def fence(self) -> None:
        """Abort whatever an earlier life of the agent left open, and fence that life off."""

    def start(self, position: Callable[[], int]) -> None:
        """Join the agent's group; reading starts at ``position()`` (0: the log start), and a
        re-assignment later resumes there too, never rewinds."""

    def poll(self, max_messages: int, timeout: float) -> tuple[list[Any], int | None]:
        """Up to ``max_messages`` committed messages, waiting up to ``timeout`` s; and the log end
        (exclusive) when the read reached it, else None."""

    def begin(self) -> None:
        """Open a transaction."""

    def send(self, value: bytes, key: bytes | None, headers: Headers) -> None:
        """Write into the open transaction."""

    def send_located(self, value: bytes, key: bytes | None, headers: Headers) -> int:
        """Write into the open transaction and return the offset the message got (waits for it)."""

    def send_beside(self, topic: str, value: bytes, key: bytes | None, headers: Headers) -> None:
        """Write into the open transaction, to ``topic``, a side topic of the same log (the agent's
        checkpoints, :mod:`swarmlog.runtime.resume`): it becomes visible exactly when the transaction's
        outputs and position do, and never if the transaction aborts."""

    def commit(self, position: int | None) -> None:
        """Commit the open transaction together with the agent's position (None: outputs only, for a
        writer that consumes nothing, e.g. the run's starter); raises
        :class:`~swarmlog.errors.TransactionAborted` (aborted, nothing visible) if it cannot."""

    def abort(self) -> None:
        """Abort the open transaction, if any (best effort: a later fence aborts it anyway)."""

    def wake(self) -> None:
        """Its agent is stopping (called from another thread): a poll waiting at the end returns now,
        or else the next one returns without waiting. A log whose polls wait a short while anyway
        (Kafka's: the worker polls for 0.1 s) may do nothing."""

    def close(self) -> None: ...


class LogBackend(Protocol):
    """A kind of log: the topics of one cluster (or of one process, in memory)."""

    def reader(self, topic: str, *, group: str | None = None) -> Reader:
        """A read_committed reader of ``topic`` (refuses a topic that is missing or has more
        than one partition)."""

    def appender(self, topic: str) -> Appender: ...

    def agent_channel(self, topic: str, agent: str) -> AgentChannel: ...

    def watermarks(self, topic: str) -> tuple[int, int]:
        """(first offset held, end of the log *including* open transactions)."""

    def history(self, topic: str) -> History:
        """Where the topic's history starts now, and what (if anything) deletes it."""

    def committed(self, group: str, topic: str) -> int | None:
        """The group's committed offset on ``topic``, None if it has none."""

    def reset_group(self, group: str, topic: str, offset: int) -> None:
        """Set the group's committed offset; refused (GroupHasActiveMembers) while it has members."""

    def create_topic(self, topic: str) -> bool:
        """Create a single-partition topic; False if it already existed."""

    def create_copy(self, topic: str, messages: Iterable[Any], *, end: int = 0) -> int:
        """Create ``topic`` (refused if it exists) holding ``messages`` — read from another topic, in
        offset order — at their own offsets, with their bytes, keys, headers and timestamps, and
        nothing readable between them, up to ``end`` at least; then let it take new appends, stamped
        by the log as usual. Returns the offset the next append will get (``end`` or more)."""

    def settle(self, topic: str, channels: Sequence[AgentChannel], timeout: float) -> bool | None:
        """Wait at most ``timeout`` seconds for nothing to be left to do on ``topic`` for ``channels``
        (a run's, of this log): each waiting at the end for more, and no transaction open — True;
        False if the time ran out first. None, at once, where the log
        cannot know: on Kafka other processes append, and a commit is in flight until it is read
        back, so a run waits for the log to stay still instead (``run_agents(until_quiet=...)``)."""

    def wait_for_append(self, topic: str, end: int, timeout: float) -> bool | None:
        """Wait at most ``timeout`` seconds for ``topic``'s end to pass ``end``: True once it has,
        False if the time ran out. None, at once, where the log cannot be waited on (Kafka: poll)."""

    def abandoned_end(self, topic: str) -> int | None:
        """Where read_committed readers of ``topic`` are held now by a transaction that its producer
        left open and no one will end until that agent's next life fences it (a life that died between
        sending a batch and committing it): the transaction's first offset. None if no such transaction
        holds them, or where the log cannot tell (Kafka: a dead producer's transaction looks like a slow
        one until its coordinator aborts it, ``transaction.timeout.ms`` later)."""

    def after_fork(self) -> LogBackend:
        """This backend as a process forked from the one that made it may use it: nothing the parent
        opened (a Kafka client's connections and threads are the parent's), the same log."""


def message_at(backend: LogBackend, topic: str, offset: int) -> Any | None:
    """The message a read_committed reader sees at ``offset`` of ``topic``, or None where it sees none.

    None is every way an offset can hold no message to read: a transaction's commit or abort marker,
    an aborted record, the first record of a transaction still open, an offset not written yet (at
    or past the end of the log), one deleted (before the log start), a negative one. The caller that
    must tell these apart asks the watermarks itself (``EventLog``'s cause check). It never waits for
    an offset to be written; an offset inside a transaction still open, past its first record, is
    read as any read_committed reader reads it: once that transaction ends.
    """
    return messages_at(backend, topic, (offset,)).get(offset)


def messages_at(backend: LogBackend, topic: str, offsets: Iterable[int]) -> dict[int, Any]:
    """The messages a read_committed reader sees at ``offsets`` of ``topic``, by offset; an offset that
    holds none (see :func:`message_at`) is not in it. One read from the first offset to past the last:
    the offsets between are read too, so for a few far-apart offsets call :func:`message_at` for each."""
    offsets = list(offsets)
    found: dict[int, Any] = {}
    if not offsets:
        return found
    with backend.reader(topic) as reader:  # first: it refuses a missing topic by name (TopicNotFound)
        # Only offsets the log holds are read. A Kafka reader assigned past the end of the log
        # starts again at its start (auto.offset.reset=earliest) and reads all of it to find
        # nothing; one assigned at the end while a transaction is open waits for that transaction
        # (it is past what read_committed may read, and no end-of-partition event comes there).
        # One watermark request tells both apart from the offsets the log holds.
        low, high = backend.watermarks(topic)
        wanted = {o for o in offsets if low <= o < high}
        if not wanted:
            return found
        reader.assign(min(wanted))
        for batch in reader.batches(end=max(wanted) + 1):
            for m in batch:
                if m.offset() in wanted:
                    found[m.offset()] = m
    return found


_warned: set[tuple[str, str]] = set()
"""(topic, what deletes it) already warned about by this process: once is enough for a log line."""


def warn_if_history_deletes(history: History, topic: str) -> None:
    """Log (once per process, topic and setting) that ``topic``'s configuration deletes events."""
    if history.deletes and (topic, history.deletes) not in _warned:
        _warned.add((topic, history.deletes))
        logger.warning(
            "topic %r deletes events (%s): compaction keeps only the newest message per key and leaves holes in the "
            "offsets, retention deletes the oldest; replay, `swarmlog check` and the agents rebuild from every offset "
            "and stop at a hole or a lost beginning. %s", topic, history.deletes, History.remedy(topic))


def warn_if_history_is_finite(backend: LogBackend, topic: str) -> History | None:
    """For a command that reads a swarm's log without rebuilding it (``log``, ``show``, the debugger): log
    (once per process and topic) that ``topic`` deletes events (:func:`warn_if_history_deletes`) or has lost
    its beginning — what it shows or rebuilds then is not the whole run. None for a topic that does not
    exist: the command's own error to report, not this warning's."""
    try:
        history = backend.history(topic)
    except TopicNotFound:
        return None
    warn_about_history(history, topic)
    return history


def warn_about_history(history: History, topic: str) -> None:
    """Log (once per process and topic) that ``topic`` deletes events or has lost its beginning: the one
    home of these two warnings, for every backend and command."""
    warn_if_history_deletes(history, topic)
    key = (topic, f"starts at {history.log_start}")
    if not history.complete and not history.deletes and key not in _warned:
        _warned.add(key)
        logger.warning("topic %r starts at offset %d, not 0 (%s): replay and agents rebuild from offset 0 "
                       "and refuse it. %s", topic, history.log_start, history.describe(), History.remedy(topic))


def require_complete_history(backend: LogBackend, topic: str, *, log_start: int | None = None) -> History:
    """:class:`~swarmlog.errors.HistoryIncomplete` unless the topic starts at offset 0; a warning
    (:func:`warn_if_history_deletes`) if its configuration deletes events (compaction, retention).

    Every command that reads or writes a swarm's log asks, so that a topic which will lose events is
    named before it has (a config request: a few ms). ``log_start``: the first offset held, when the
    caller has just read the watermarks (it is read again with the configuration).
    """
    history = backend.history(topic)
    warn_if_history_deletes(history, topic)
    if not history.complete:
        raise HistoryIncomplete(topic=topic, log_start=history.log_start, retention=history.describe())
    return history


def read_from_log_start(backend: LogBackend, reader: Reader, *, topic: str, group: str | None, low: int,
                        reset: bool) -> None:
    """Position a replay's ``reader`` at the log start ``low``.

    Without a group, by assignment. With one (a replay as a consumer group, as Kafka's tools
    see it), the group's committed offset must be at the start: ``reset`` moves it there
    (the group must have no active member), otherwise anything else is refused with
    :class:`~swarmlog.errors.GroupNotAtStart` rather than silently replaying a suffix.
    """
    if group is None:
        reader.assign(low)
        return
    if reset:
        backend.reset_group(group, topic, low)
    else:
        committed = backend.committed(group, topic)
        if committed is None or committed != low:
            raise GroupNotAtStart(group=group, committed=-1 if committed is None else committed, log_start=low)
    reader.position.end_offset = low
    reader.subscribe()
