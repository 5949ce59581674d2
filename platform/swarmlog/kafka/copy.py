"""An offset-exact copy of a log prefix into a new topic: what ``swarmlog fork`` writes with.

Event ids (``<agent>@<offset>#<i>``), causes, timer offsets and every ``ctx.random()``
derive from offsets, so a fork must hold each copied event at the offset it had in the
source — and the source's offsets have gaps: transaction markers, and the records of
aborted transactions, which ``read_committed`` readers never see. A plain producer
would close those gaps and shift everything after the first one.

So the copy rebuilds the gaps with Kafka's own invisible records, using two
transactional producers (:func:`swarmlog.log.protocol.copy_transactional_ids`): **visible**,
whose transactions commit and hold the copied events, and **gaps**, whose transactions
abort and hold filler records. Each offset of a gap becomes, in this order of
preference, the abort marker of an open gaps transaction, the commit marker of the open
visible transaction, or a filler record in a gaps transaction (aborted later). Any
layout of gaps can be built that way.

**Ordering across two producers.** The broker appends records in the order they
arrive, so before one producer writes anything after the other did, the other's records
and markers must be in the log: the copy flushes it and waits until the log end
(the high watermark, which counts open transactions and markers) is where the plan says.
A transaction marker is written by the coordinator after ``commit_transaction`` /
``abort_transaction`` returns, which is why waiting on the log end, not on the call,
is what orders them. Every record's delivered offset is checked against the plan; a
mismatch raises :class:`~swarmlog.errors.CopyFailed`, never a silently shifted fork.

**Timestamps.** The copy is written with ``message.timestamp.type=CreateTime`` and each
record carries its source timestamp (``ctx.log_time_ms()`` and wall-clock timers read
them), then the topic is switched to ``LogAppendTime`` for what comes after.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from ..errors import CopyFailed, TopicExists
from ..log.protocol import copy_transactional_ids
from ..settings import Settings
from .config import PRODUCER_REQUIRED, new_client, watermark_consumer
from .errors import translate
from .reader import watermarks
from .topic import TOPIC_CONFIG, create_topic, set_topic_config

__all__ = ["create_copy"]

logger = logging.getLogger(__name__)

_FILLER = b"swarmlog copy: a gap of the source log (aborted, never read)"
_TIMEOUT_S = 30.0
_COPY_TXN_TIMEOUT_MS = 900_000
"""The broker's default ``transaction.max.timeout.ms``: the visible transaction stays open over a long
stretch of the source without gaps."""


class _Writer:
    """One transactional producer of the copy, and what the plan expects of it."""

    def __init__(self, settings: Settings, topic: str, transactional_id: str) -> None:
        self.topic = topic
        self.producer = new_client(Producer, settings,
                                   {**PRODUCER_REQUIRED, "transactional.id": transactional_id,
                                    "transaction.timeout.ms": _COPY_TXN_TIMEOUT_MS},
                                   tuning={"linger.ms": 5, "compression.type": "lz4"})
        self.open = False
        self.errors: list[str] = []
        self.producer.init_transactions(_TIMEOUT_S)

    def send(self, value: bytes | None, key: bytes | None, headers: Any, timestamp: int, expected: int) -> None:
        if not self.open:
            self.producer.begin_transaction()
            self.open = True

        def delivered(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                self.errors.append(err.str())
            elif msg.offset() != expected:
                self.errors.append(f"a record planned at offset {expected} landed at {msg.offset()}")

        while True:
            try:
                self.producer.produce(self.topic, value, key, partition=0, headers=headers, timestamp=timestamp,
                                      on_delivery=delivered)
                return
            except BufferError:
                self.producer.poll(0.05)

    def flush(self) -> None:
        if self.producer.flush(_TIMEOUT_S):
            self.errors.append("records still unacknowledged after the flush timed out")
        if self.errors:
            raise CopyFailed(topic=self.topic, detail="; ".join(self.errors[:3]))

    def end(self, *, commit: bool) -> None:
        self.flush()
        if commit:
            self.producer.commit_transaction(_TIMEOUT_S)
        else:
            self.producer.abort_transaction(_TIMEOUT_S)
        self.open = False


def create_copy(settings: Settings, topic: str, messages: Iterable[Any], *, end: int = 0) -> int:
    """:meth:`swarmlog.log.base.LogBackend.create_copy` on Kafka."""
    info = create_topic(settings, topic, overrides={"message.timestamp.type": "CreateTime",
                                                    "message.timestamp.before.max.ms": str(2**63 - 1)})
    if not info.created:
        raise TopicExists(topic=topic)
    visible_id, gaps_id = copy_transactional_ids(topic)
    ends = watermark_consumer(settings)
    try:
        visible = _Writer(settings, topic, visible_id)
        gaps = _Writer(settings, topic, gaps_id)
        plan = _Plan(settings, topic, visible, gaps, ends)
        for m in messages:
            plan.fill_to(m.offset())
            _, ts = m.timestamp()
            plan.write(visible, m.value(), m.key(), m.headers(), ts)
        plan.fill_to(end)
        plan.close()
        set_topic_config(settings, topic, {"message.timestamp.type": TOPIC_CONFIG["message.timestamp.type"]})
        return plan.end_offset()
    except KafkaException as exc:
        raise translate(exc, operation=f"copying into {topic!r}", bootstrap=settings.bootstrap_servers,
                        topic=topic) from None
    finally:
        ends.close()


class _Plan:
    """Where the next record of the copy lands, and who wrote last."""

    def __init__(self, settings: Settings, topic: str, visible: _Writer, gaps: _Writer, ends: Any) -> None:
        self.settings = settings
        self.topic = topic
        self.visible = visible
        self.gaps = gaps
        self.ends = ends
        self.next = 0  # the offset the next record (or marker) will take
        self.last: _Writer | None = None

    def _turn(self, writer: _Writer) -> None:
        """Before ``writer`` adds to the log, everything the other one wrote must be in it."""
        if self.last is not None and self.last is not writer:
            self.last.flush()
            self._wait_for_end(self.next)
        self.last = writer

    def _wait_for_end(self, offset: int) -> None:
        deadline = time.monotonic() + _TIMEOUT_S
        while True:
            end = watermarks(self.settings, self.topic, consumer=self.ends)[1]
            if end == offset:
                return
            if end > offset or time.monotonic() > deadline:
                raise CopyFailed(topic=self.topic, detail=f"the log ends at {end}, the plan at {offset}")
            time.sleep(0.002)

    def write(self, writer: _Writer, value: bytes | None, key: bytes | None, headers: Any, ts: int) -> None:
        self._turn(writer)
        writer.send(value, key, headers, ts, self.next)
        self.next += 1

    def fill_to(self, offset: int) -> None:
        if offset < self.next:
            raise CopyFailed(topic=self.topic, detail=f"offset {offset} is not after the previous record's")
        while self.next < offset:
            if self.gaps.open:
                self._end(self.gaps, commit=False)
            elif self.visible.open:
                self._end(self.visible, commit=True)
            else:
                self.write(self.gaps, _FILLER, None, None, int(time.time() * 1000))
                self.gaps.flush()  # a filler must be in the log before the visible writer's next record

    def _end(self, writer: _Writer, *, commit: bool) -> None:
        self._turn(writer)
        writer.end(commit=commit)
        self.next += 1  # the marker

    def close(self) -> None:
        if self.visible.open:
            self._end(self.visible, commit=True)
        if self.gaps.open:
            self._end(self.gaps, commit=False)
        if self.last is not None:
            self._wait_for_end(self.next)

    def end_offset(self) -> int:
        return self.next
