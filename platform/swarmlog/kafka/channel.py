"""One live agent's exactly-once link to Kafka: a transactional producer and a group consumer.

* **Fence.** ``init_transactions`` with the agent's stable ``transactional.id``
  (:func:`swarmlog.log.protocol.agent_transactional_id`) aborts whatever a previous life
  left open and fences it off: a zombie of this agent can no longer commit anything.
* **Read from zero.** The consumer joins the agent's group (so Kafka's tools show
  the agent and its lag), but every assignment starts where this life's fold is —
  offset zero for a new life, whatever the group's committed offset says.
* **One batch, one transaction.** Outputs, and the consumer position
  (``send_offsets_to_transaction``), commit together or not at all.
* **A position is committed by a member of the group's current generation.** Once
  started, a transaction opens, and a position goes into it, only while the consumer
  holds its assignment (:meth:`KafkaAgentChannel._await_membership`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, Producer, TopicPartition

from ..errors import ReadFailed, TransactionAborted
from ..log.protocol import Headers, agent_group, agent_transactional_id
from ..settings import Settings
from .config import PRODUCER_REQUIRED, PRODUCER_TUNING, TRANSACTION_TIMEOUT_MS, new_client
from .config import consumer as make_consumer
from .errors import translate
from .topic import cluster_metadata

__all__ = ["KafkaAgentChannel", "next_batch"]

logger = logging.getLogger(__name__)

_TXN_TIMEOUT_S = 30.0
"""How long one transactional call may take before it counts as failed."""
_TXN_RETRY_S = 40.0
"""How long a transactional call is retried while the coordinator moves (see :func:`_retrying`):
past a leader election (the dead broker's session timeout, then the election), and well
inside ``transaction.timeout.ms`` (60 s), after which the coordinator aborts the transaction itself."""
_OFFSETS_TIMEOUT_S = 20.0
_STUCK_GRACE_S = 10.0
"""``send_offsets_to_transaction``'s own timeout, and how much longer it may take before it counts
as stuck (see :func:`_within`). Shorter than the other calls': while it is stuck, the agent's open
transaction holds back every read_committed reader, i.e. the whole swarm."""
_JOIN_WAIT_S = 60.0
"""How long a transaction waits for the consumer to be let into its group (see
:meth:`KafkaAgentChannel._await_membership`): past an earlier life's member that the group
waits out (a dead one's session timeout; a hung one is removed only after its rebalance
timeout, max.poll.interval.ms, which a new life is better placed to outlast)."""


class KafkaAgentChannel:
    """:class:`swarmlog.log.base.AgentChannel` on Kafka."""

    def __init__(self, *, settings: Settings, topic: str, agent: str) -> None:
        self.settings = settings
        self.topic = topic
        self.agent = agent
        self._producer = new_client(Producer, settings,
                                    {**PRODUCER_REQUIRED, "transactional.id": agent_transactional_id(topic, agent),
                                     "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS},
                                    tuning={**PRODUCER_TUNING, "linger.ms": 1})
        self._consumer: Any = None
        self._in_txn = False
        self._located = -1
        self._errors: list[KafkaError] = []
        self._abandoned = False
        self._member = False
        """The consumer holds an assignment of the group's current generation (see _await_membership)."""
        self._early: list[Any] = []
        """Messages read while waiting to be let into the group, handed out by the next poll."""
        self._stopping = False

    # -- errors, translated at this seam ----------------------------------------------------

    def _failed(self, exc: KafkaException, operation: str) -> Exception:
        return translate(exc, operation=f"agent {self.agent!r}: {operation}", bootstrap=self.settings.bootstrap_servers,
                         topic=self.topic, agent=self.agent)

    # -- AgentChannel -------------------------------------------------------------------------

    def fence(self) -> None:
        # A first request bounded by the connect timeout: init_transactions alone would wait
        # _TXN_TIMEOUT_S for a cluster that is not there, and say less about why.
        cluster_metadata(self.settings, self._producer, topic=self.topic,
                         operation=f"agent {self.agent!r}: connecting")
        producer = self._producer
        try:
            _retrying(lambda: producer.init_transactions(_TXN_TIMEOUT_S), agent=self.agent, what="init_transactions")
        except KafkaException as exc:
            raise self._failed(exc, "init_transactions") from None

    def start(self, position: Callable[[], int]) -> None:
        # A crashed agent's replacement cannot consume until the group has evicted the dead
        # member; a short session (the broker's default minimum) bounds that wait to seconds.
        self._consumer = make_consumer(self.settings, group=agent_group(self.topic, self.agent),
                                       extra={"client.id": f"swarmlog-agent-{self.agent}",
                                              "session.timeout.ms": 6000, "heartbeat.interval.ms": 1500})

        def on_assign(c: Any, partitions: list[TopicPartition]) -> None:
            # Restart is rebuild: a new life reads from offset zero, whatever the group's
            # committed offset says. A later re-assignment (a rebalance after a missed
            # heartbeat) resumes where this life's fold is, never rewinds it.
            at = position()
            for p in partitions:
                p.offset = at if at > 0 else OFFSET_BEGINNING
            c.assign(partitions)
            self._member = True

        def on_revoke(c: Any, partitions: list[TopicPartition]) -> None:
            # A rebalance began (or the member was lost): until the next assignment, the
            # generation this consumer knows may no longer be the group's.
            self._member = False

        self._consumer.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)

    def poll(self, max_messages: int, timeout: float) -> tuple[list[Any], int | None]:
        if self._early:
            msgs, self._early = self._early[:max_messages], self._early[max_messages:]
        else:
            try:
                msgs = next_batch(self._consumer, max_messages, timeout)
            except KafkaException as exc:
                raise self._failed(exc, "consuming") from None
        eof = None
        out = msgs
        for m in msgs:
            if m.error() is not None:  # rare: filter only then
                out = []
                for m2 in msgs:
                    err = m2.error()
                    if err is None:
                        out.append(m2)
                    elif err.code() == KafkaError._PARTITION_EOF:
                        # Offsets end in transaction markers: the end of the log is what the
                        # end-of-partition event says, not the last message's offset + 1.
                        eof = m2.offset()
                    elif err.fatal():
                        raise ReadFailed(topic=self.topic, detail=f"agent {self.agent!r}: {err.str()}")
                break
        return out, eof

    def begin(self) -> None:
        if self._consumer is not None and not self._member:
            self._await_membership()  # before the transaction opens: a wait holds back no reader
        try:
            self._producer.begin_transaction()
        except KafkaException as exc:
            raise self._failed(exc, "begin_transaction") from None
        self._in_txn = True

    def send(self, value: bytes, key: bytes | None, headers: Headers) -> None:
        self._producer.produce(self.topic, value, key, partition=0, headers=headers,  # type: ignore[arg-type]
                               on_delivery=self._delivered)

    def send_beside(self, topic: str, value: bytes, key: bytes | None, headers: Headers) -> None:
        # The same transactional producer: librdkafka adds the side topic's partition to the open
        # transaction, and the coordinator commits or aborts both partitions as one.
        self._producer.produce(topic, value, key, partition=0, headers=headers,  # type: ignore[arg-type]
                               on_delivery=self._delivered)

    def send_located(self, value: bytes, key: bytes | None, headers: Headers) -> int:
        try:
            self._producer.produce(self.topic, value, key, partition=0, headers=headers,  # type: ignore[arg-type]
                                   on_delivery=self._locate)
            self._producer.flush(_TXN_TIMEOUT_S)
        except (KafkaException, SystemError) as exc:  # fatal, e.g. fenced by a newer life
            fatal = _fatal_cause(exc)
            self._errors.clear()
            if fatal is None:
                # The SystemError lost its cause (a log or error callback ran while the fatal
                # error was pending). What is certain is what the caller needs: this producer
                # committed nothing of its open transaction, and can commit nothing more.
                raise TransactionAborted(agent=self.agent,
                                         detail=f"its producer failed while flushing ({exc})") from None
            raise self._failed(fatal, "producing its outputs") from None
        self._raise_delivery_errors()
        return self._located

    def commit(self, position: int | None) -> None:
        producer = self._producer
        agent = self.agent
        if position is not None and not self._member:
            try:
                self._await_membership()  # begin() waited, unless it ran before start() or a rebalance since
            except BaseException:
                self.abort()
                raise
        try:
            if position is not None:
                offsets = [TopicPartition(self.topic, 0, position)]
                group = self._consumer.consumer_group_metadata()
                what = "adding the consumer position to the transaction"
                _retrying(lambda: _within(
                    lambda: producer.send_offsets_to_transaction(offsets, group, _OFFSETS_TIMEOUT_S),
                    seconds=_OFFSETS_TIMEOUT_S + _STUCK_GRACE_S, agent=agent, what=what), agent=agent, what=what)
            _retrying(lambda: producer.commit_transaction(_TXN_TIMEOUT_S), agent=agent,
                      what="committing the transaction")
        except TransactionAborted:
            self._abandoned = True  # a thread still waits in librdkafka: leave the producer to the next fence
            raise
        except KafkaException as exc:
            failure = self._failed(exc, "committing its transaction")
            if exc.args[0].txn_requires_abort():
                self.abort()
            raise failure from None
        finally:
            self._in_txn = False
        self._raise_delivery_errors()

    def abort(self) -> None:
        if not self._in_txn:
            return
        self._in_txn = False
        try:
            self._producer.abort_transaction(_TXN_TIMEOUT_S)
        except KafkaException:
            pass  # the next life's fence (init_transactions) aborts it anyway

    def wake(self) -> None:
        """A wait to be let into the group ends (see :meth:`_await_membership`); nothing else: the
        worker's polls wait at most 0.1 s, and a consumer is not to be touched from another thread
        while it polls."""
        self._stopping = True

    def _await_membership(self) -> None:
        """Wait until the consumer holds its assignment: a member of the group's current generation.

        ``send_offsets_to_transaction`` hands the group coordinator the consumer's group
        metadata as it is at that instant (KIP-447), and the coordinator checks it. While
        the consumer is still joining, librdkafka already knows the member id the group gave
        it (KIP-394: the first JoinGroup only hands one out) but not yet the generation (-1):
        once the coordinator counts the member in, it refuses that commit with
        ILLEGAL_GENERATION (UNKNOWN_MEMBER_ID before it does, REBALANCE_IN_PROGRESS until
        the assignment is synced). librdkafka then makes the transaction abortable: the
        batch's outputs are lost and its steps must run again. The join is quick on an
        empty group, but takes the broker's group.initial.rebalance.delay.ms (Kafka's
        default: 3 s) or, after a crash, the dead life's session timeout; a life that
        commits a position before its first read (a checkpoint's, or a stop) met it.

        So the consumer is polled (which serves the assignment callback) until it is
        assigned; what the polls read is kept for the next :meth:`poll`, nothing is
        skipped. Once assigned, the generation stays current until a rebalance, and a
        rebalance revokes first (``on_revoke``), which sends the next transaction here
        again. Raises :class:`~swarmlog.errors.TransactionAborted` (nothing was committed)
        when the group has not let the consumer in within ``_JOIN_WAIT_S`` or the agent
        is stopping.
        """
        consumer = self._consumer
        deadline = time.monotonic() + _JOIN_WAIT_S
        waited = False
        while not self._member:
            if self._stopping or time.monotonic() > deadline:
                why = "it is stopping" if self._stopping else f"{_JOIN_WAIT_S:.0f} s passed"
                raise TransactionAborted(agent=self.agent, detail=(
                    f"its consumer was not yet let into group {agent_group(self.topic, self.agent)!r} when {why} "
                    f"(the group may still wait for an earlier life's member to leave or time out); "
                    f"no position was committed"))
            if not waited:
                waited = True
                logger.debug("agent %s: waiting to be let into its group before committing a position", self.agent)
            try:
                msg = consumer.poll(0.1)
            except KafkaException as exc:
                raise self._failed(exc, "joining its group") from None
            if msg is not None:
                self._early.append(msg)

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        if self._abandoned:
            return  # its open transaction is aborted by the next life's fence; nothing to deliver
        try:
            self._producer.flush(_TXN_TIMEOUT_S)
        except (KafkaException, SystemError) as exc:
            # A fenced or failed producer has nothing left to deliver that could count: whatever
            # it had in an open transaction is aborted by the life that fenced it.
            logger.debug("agent %s: closing its producer: %s", self.agent, exc)

    # -- delivery reports ----------------------------------------------------------------------


    def _locate(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            self._errors.append(err)
        else:
            self._located = msg.offset()

    def _delivered(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            self._errors.append(err)

    def _raise_delivery_errors(self) -> None:
        if self._errors:
            errors, self._errors = self._errors, []
            raise TransactionAborted(agent=self.agent,
                                     detail=f"producing its outputs failed: {'; '.join(e.str() for e in errors)}")


def _retrying(call: Callable[[], object], *, agent: str, what: str, limit: float = _TXN_RETRY_S) -> None:
    """Run one of librdkafka's transactional calls, again while it fails with a retriable error.

    On several brokers the transaction coordinator of an agent is one of them, and it
    moves when that broker dies: until the new one has loaded the transaction state,
    the calls fail with errors librdkafka marks retriable (broker transport failure,
    coordinator not available, a concurrent operation on the transaction), which its
    documentation says to answer by making the same call again. The transaction is
    still open and whole, so repeating the call commits it exactly once; giving up
    would throw away a batch that was about to commit, and stop the agent.
    """
    deadline = time.monotonic() + limit
    while True:
        try:
            call()
            return
        except KafkaException as exc:
            err = exc.args[0]
            if not err.retriable() or err.fatal() or err.txn_requires_abort() or time.monotonic() > deadline:
                raise
            logger.warning("agent %s: %s failed with a retriable error (%s); trying again", agent, what, err.str())
            time.sleep(0.1)


def _within(call: Callable[[], object], *, seconds: float, agent: str, what: str) -> None:
    """Make a librdkafka call that may never return, and give up on it after ``seconds``.

    ``send_offsets_to_transaction`` ignores its timeout and can block for good when the
    consumer group's coordinator broker dies (confluentinc/librdkafka#5456, #5511, seen
    here on a three-broker cluster): the producer keeps the dead coordinator cached and
    waits for it. So the call runs on a thread of its own, and when it has not returned
    in time the transaction is abandoned (that thread and its producer are left behind)
    and the agent starts a new life, whose ``init_transactions`` fences this producer and
    aborts the open transaction: nothing of the batch stays visible, and the rebuild runs
    it again.
    """
    failed: list[BaseException] = []
    done = threading.Event()

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # handed to the caller's thread below
            failed.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, name=f"agent-{agent}-txn-call", daemon=True).start()
    if not done.wait(seconds):
        raise TransactionAborted(agent=agent, detail=(
            f"{what} did not return within {seconds:.0f} s (librdkafka can wait forever for a group "
            f"coordinator that died); the transaction is abandoned, to be aborted by the next life's fence"))
    if failed:
        raise failed[0]


def _fatal_cause(exc: BaseException) -> KafkaException | None:
    """The KafkaException behind ``exc``, or None for a SystemError that lost it.

    A fenced producer's ``flush()`` holds the fatal error to raise while it still runs the
    delivery callbacks; the first Python call a callback makes then fails with a SystemError
    whose cause (or context) is that KafkaException. When a log or error callback runs in
    between, the SystemError says only that ``flush`` "returned NULL without setting an
    exception". Anything else is not ours to translate.
    """
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, KafkaException):
            return seen
        seen = seen.__cause__ or seen.__context__
    if isinstance(exc, SystemError):
        return None
    raise exc


def next_batch(consumer: Any, size: int, wait: float) -> list[Any]:
    """Up to ``size`` messages, returned as soon as there is one: adaptive batching.

    ``consume(size, wait)`` returns a short batch only when ``wait`` expires, so a lone
    message (one chain, one hop at a time) would sit in the queue for the rest of the
    timeout, for every hop (bench/README.md, "Where a hop's time goes").
    Waiting for the first message only and then taking, without waiting, whatever else
    has already been fetched commits a lone step at once and, under load, as big a batch
    as the backlog (up to ``size``) in one transaction.
    """
    first = consumer.poll(wait)
    if first is None:
        return []
    return [first, *consumer.consume(size - 1, 0)] if size > 1 else [first]
