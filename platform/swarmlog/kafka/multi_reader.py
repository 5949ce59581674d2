"""Reading many swarms' topics at once, each from an offset its caller keeps (the many-swarm sink).

Partition 0 of each topic is *assigned* at an explicit offset, never subscribed: the
positions live in Postgres, written in the same transaction as the rows, and a rebalance
must never move them. Topics come and go with :meth:`MultiTopicReader.add` and
:meth:`MultiTopicReader.remove` (librdkafka's incremental assignment: the other topics'
fetches go on undisturbed).

``read_committed`` as every reader (:mod:`swarmlog.kafka.reader`): offsets have gaps. Each
topic's end of log is tracked on its own (``enable.partition.eof``), so the caller knows
which topics it has caught up on.

The consumer has a group id, :func:`swarmlog.log.protocol.sink_group`, but never joins the
group: :meth:`MultiTopicReader.commit_advisory` commits offsets to it
(:class:`~swarmlog.kafka.groups.AdvisoryCommits`), for Kafka's tools to show the sink's lag.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from itertools import groupby
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, Message, TopicPartition

from ..errors import ReadFailed
from ..settings import Settings
from .config import consumer as make_consumer
from .errors import UNKNOWN_TOPIC, translate
from .groups import AdvisoryCommits

__all__ = ["MULTI_TUNING", "MultiTopicReader"]

_error = Message.error
_topic = Message.topic

logger = logging.getLogger(__name__)


MULTI_TUNING: dict[str, object] = {
    # A fetch request names every assigned partition; with a thousand topics mostly at their
    # end, one topic's reader's fetch.wait.max.ms would have the broker answer a thousand-partition
    # fetch many times a second for nothing. The broker answers as soon as any data arrives
    # (fetch.min.bytes 1), so the longer wait costs no latency.
    "fetch.wait.max.ms": 500,
}


class MultiTopicReader:
    """Runs of messages (``(topic, [messages])``, each run in offset order) of the assigned topics."""

    def __init__(self, *, settings: Settings, group: str, consumer_config: Mapping[str, object] | None = None) -> None:
        self.settings = settings
        self.group = group
        self._advisory = AdvisoryCommits(group=group)
        self.consumer = make_consumer(settings, group=group,
                                      extra={**MULTI_TUNING, **(consumer_config or {}), **self._advisory.config()})
        self.assigned: set[str] = set()
        self.ends: dict[str, int] = {}
        """Per topic: the offset after the last message read, or the end of the log when reached."""
        self.at_end: set[str] = set()
        """The topics whose end of log was the last thing read (nothing more to read there, yet)."""

    # -- assignment --------------------------------------------------------------------------

    def add(self, positions: Mapping[str, int]) -> None:
        """Start reading each topic at its offset (topics already read are re-seeked there)."""
        again = [t for t in positions if t in self.assigned]
        if again:
            self.remove(again)
        if not positions:
            return
        tps = [TopicPartition(t, 0, o if o > 0 else OFFSET_BEGINNING) for t, o in positions.items()]
        try:
            self.consumer.incremental_assign(tps)
        except KafkaException as exc:
            raise translate(exc, operation=f"assigning {len(tps)} topic(s)",
                            bootstrap=self.settings.bootstrap_servers) from None
        for t, o in positions.items():
            self.assigned.add(t)
            self.ends[t] = o
            self.at_end.discard(t)

    def remove(self, topics: Iterable[str]) -> None:
        """Stop reading ``topics`` (messages of theirs already fetched are discarded)."""
        gone = [t for t in topics if t in self.assigned]
        if not gone:
            return
        try:
            self.consumer.incremental_unassign([TopicPartition(t, 0) for t in gone])
        except KafkaException as exc:
            raise translate(exc, operation=f"unassigning {len(gone)} topic(s)",
                            bootstrap=self.settings.bootstrap_servers) from None
        for t in gone:
            self.assigned.discard(t)
            self.ends.pop(t, None)
            self.at_end.discard(t)

    def all_at_end(self) -> bool:
        return self.at_end >= self.assigned

    # -- reading -----------------------------------------------------------------------------

    def runs(self, *, batch_size: int, timeout: float) -> list[tuple[str, list[Any]]]:
        """One consume call's messages, as runs of one topic each; [] when nothing came in ``timeout``.

        A topic may have several runs in one call, always in offset order.
        """
        try:
            msgs: list[Any] = self.consumer.consume(batch_size, timeout)
        except KafkaException as exc:
            raise translate(exc, operation=f"reading {len(self.assigned)} topic(s)",
                            bootstrap=self.settings.bootstrap_servers) from None
        if not msgs:
            return []
        eofs: dict[str, int] = {}
        if any(map(_error, msgs)):
            msgs = self._without_events(msgs, eofs)
        # Fetches come per partition, so a batch is long runs of one topic: grouped in C.
        runs: list[tuple[str, list[Any]]] = [(t, list(g)) for t, g in groupby(msgs, _topic)]  # type: ignore[misc]
        ends, at_end = self.ends, self.at_end
        for t, run in runs:
            ends[t] = run[-1].offset() + 1
            at_end.discard(t)
        # After the messages: a topic's end-of-log event follows its last message in the batch.
        for t, end in eofs.items():
            if t in self.assigned:
                ends[t] = max(ends.get(t, 0), end)
                at_end.add(t)
        return runs

    def _without_events(self, msgs: list[Any], eofs: dict[str, int]) -> list[Any]:
        """The messages, with error events acted on and end-of-log events taken out into ``eofs``."""
        out = []
        for m in msgs:
            err = m.error()
            if err is None:
                out.append(m)
                continue
            t = m.topic()
            if err.code() == KafkaError._PARTITION_EOF:
                eofs[t] = m.offset()
            elif err.code() in UNKNOWN_TOPIC:
                # Deleted under the sink: the next discovery drops it.
                logger.warning("topic %s: %s (deleted?)", t, err.str())
            elif err.fatal() or not err.retriable():
                raise ReadFailed(topic=t or "(many)", detail=err.str())
        return out

    # -- the advisory group offsets ----------------------------------------------------------

    def commit_advisory(self, offsets: Mapping[str, int]) -> None:
        """Commit ``offsets`` (topic -> the next offset to read) to the group, for Kafka's tools only."""
        self._advisory.commit(self.consumer, {t: o for t, o in offsets.items() if t in self.assigned})

    def close(self) -> None:
        self.consumer.close()

    def __enter__(self) -> MultiTopicReader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
