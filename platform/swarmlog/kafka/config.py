"""librdkafka configuration of every client swarmlog makes, by role.

Each role has what its guarantees *require* (never overridable) and swarmlog's
performance *tuning* (the user's ``SWARMLOG_KAFKA_*`` properties override it);
:meth:`swarmlog.settings.Settings.kafka_config` layers them. Names are
librdkafka's (CONFIGURATION.md), not the Java client's.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

from ..settings import Settings

PRODUCER_REQUIRED: dict[str, object] = {
    # One producer's events land exactly once and in the order it produced them, even
    # across retries: librdkafka keeps at most five requests in flight and the broker
    # de-duplicates retries by sequence number.
    "enable.idempotence": True,
    "acks": "all",
    # A producer must never create the topic by accident: a broker default of N
    # partitions would silently give the swarm N clocks.
    "allow.auto.create.topics": False,
}
PRODUCER_TUNING: dict[str, object] = {
    "linger.ms": 5,
    "batch.num.messages": 10000,
    "batch.size": 1_000_000,
    "compression.type": "lz4",
    "queue.buffering.max.messages": 500_000,
    "queue.buffering.max.kbytes": 1_048_576,
}

CONSUMER_REQUIRED: dict[str, object] = {
    # The runtime writes its outputs in transactions: an aborted transaction's events must
    # never be replayed or mirrored, nor anything past a transaction still open.
    "isolation.level": "read_committed",
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": True,
    "allow.auto.create.topics": False,
}
CONSUMER_TUNING: dict[str, object] = {
    "fetch.wait.max.ms": 50,
    "fetch.min.bytes": 1,
    "queued.min.messages": 200_000,
    "fetch.max.bytes": 64 * 1024 * 1024,
    # librdkafka's default. Measured (bench/replay.py): at 16 MiB a replay's peak RSS was
    # ~560 MB (prefetched, decompressed batches), at 1 MiB ~190 MB, with the same replay
    # throughput: decoding and folding in Python, not fetching, set the pace.
    "max.partition.fetch.bytes": 1024 * 1024,
    "auto.offset.reset": "earliest",
}

TRANSACTION_TIMEOUT_MS = 60_000
"""How long the broker lets an agent's transaction stay open before aborting it itself."""


def consumer(settings: Settings, *, group: str | None = None,
             extra: Mapping[str, object] | None = None) -> Consumer:
    """A read_committed consumer (a throwaway group unless ``group`` is given)."""
    config = settings.kafka_config(
        {**CONSUMER_REQUIRED, "group.id": group or f"swarmlog-reader-{uuid.uuid4().hex}"},
        tuning={**CONSUMER_TUNING, **(extra or {})},
    )
    return Consumer(config)


def watermark_consumer(settings: Settings) -> Consumer:
    """A consumer that only asks for watermarks: read_uncommitted, so that the high watermark
    it reports includes open transactions."""
    return Consumer(settings.kafka_config(
        {"group.id": f"swarmlog-watermark-{uuid.uuid4().hex}", "isolation.level": "read_uncommitted",
         "enable.auto.commit": False}))


def admin_client(settings: Settings) -> AdminClient:
    return AdminClient(settings.kafka_config())  # type: ignore[arg-type]
