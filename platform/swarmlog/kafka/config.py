"""librdkafka configuration of every client swarmlog makes, by role, and making them.

Each role has what its guarantees *require* (never overridable) and swarmlog's
performance *tuning* (the user's ``SWARMLOG_KAFKA_*`` properties override it);
:meth:`swarmlog.settings.Settings.kafka_config` layers them. Names are
librdkafka's (CONFIGURATION.md), not the Java client's.

Every client is made by :func:`new_client`, which adds what every client has:

* ``logger``: librdkafka's own log lines (``%3|…|FAIL|…``, ``%4|…|GETPID|…``) go to the
  Python logger :data:`LIBRDKAFKA_LOGGER` instead of straight to stderr, so the command
  line decides whether they reach the terminal (only with ``-v``);
* ``error_cb``: librdkafka's error events are recorded (:mod:`swarmlog.kafka.errors`) to
  say *why* a broker could not be reached (refused, TLS, SASL) when a request times out;
* ``socket.connection.setup.timeout.ms``: the connect timeout (``SWARMLOG_CONNECT_TIMEOUT``),
  so that a handshake that hangs fails within it too;
* ``reconnect.backoff.ms`` (:data:`CLIENT_TUNING`): a client's first request is not held up
  by a fixed wait after the bootstrap connection is dropped.

A property librdkafka does not know, or a value it refuses, is an
:class:`~swarmlog.errors.InvalidSetting` naming the ``SWARMLOG_KAFKA_*`` variable.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from ..errors import InvalidSetting, KafkaOperationFailed
from ..redaction import SecretStr
from ..settings import Settings
from .errors import error_recorder, kafka_error

__all__ = ["APPENDER_REQUIRED", "CLIENT_TUNING", "CONSUMER_REQUIRED", "CONSUMER_TUNING", "Client",
           "ENDED_LOG_TUNING", "LIBRDKAFKA_LOGGER", "PRODUCER_REQUIRED", "PRODUCER_TUNING", "SHORT_READ_TUNING",
           "TRANSACTION_TIMEOUT_MS", "admin_client", "consumer", "new_client", "settings_variable",
           "watermark_consumer"]

LIBRDKAFKA_LOGGER = "swarmlog.librdkafka"
"""Where librdkafka's log lines go (hidden by the command line unless ``-v``)."""
_librdkafka_log = logging.getLogger(LIBRDKAFKA_LOGGER)
# A program that configures no logging gets none of librdkafka's lines on its terminal (Python's
# last-resort handler would print its warnings); configured handlers still receive them.
_librdkafka_log.addHandler(logging.NullHandler())

CLIENT_TUNING: dict[str, object] = {
    # A new client's first request (the metadata every command starts with) goes out on the
    # bootstrap connection; once the answer names the broker, librdkafka (2.10 on) decommissions
    # that connection, failing a request still in flight on it, and may connect to the named
    # broker only after its "sparse connection" interval: half of reconnect.backoff.ms. At
    # librdkafka's default about one first request in two waited that interval out, a large part
    # of a short command's start (cli.cli_replay_3; the figures in bench/README.md, "The figures
    # behind the code's comments").
    # A broker that is down is still retried with exponential backoff up to
    # reconnect.backoff.max.ms (10 s).
    "reconnect.backoff.ms": 20,
}
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
APPENDER_REQUIRED: dict[str, object] = {
    **PRODUCER_REQUIRED,
    # Never time a message out (0 is infinite): a message that timed out in flight may or may
    # not be in the log, a fate no caller can act on. Pending, it is written once, in order,
    # when the broker answers (swarmlog.kafka.producer). Agents' transactional producers are
    # bounded by their transaction timeout instead, and an abort settles their fate.
    "message.timeout.ms": 0,
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
    # Below librdkafka's default (16 MiB): a replay's peak RSS is mostly prefetched, decompressed
    # batches, and a smaller fetch keeps the same throughput, since decoding and folding in Python,
    # not fetching, set the pace (replay.swarmlog's peak RSS; bench/README.md, "The figures behind
    # the code's comments").
    "max.partition.fetch.bytes": 1024 * 1024,
    "auto.offset.reset": "earliest",
}

SHORT_READ_TUNING: dict[str, object] = {
    # The debugger's readers start at an offset, read a tail of a few thousand messages and stop
    # (``state --at N`` from a snapshot, once per query), and the next query's reader is the same
    # consumer, assigned elsewhere. With the replay's tuning a reader's first message came late
    # after its assign, and each query burnt CPU in librdkafka's threads fetching ahead of a fold
    # that stops (up to queued.min.messages, 200k) — a fetch still under way, or held at the log's
    # end, delays the next assign's first fetch. These make both a fraction of what they were
    # (snapshots.*; bench/README.md, "The figures behind the code's comments").
    # The first response arrives whole before its first message: 64 KiB, ~200 messages.
    "max.partition.fetch.bytes": 64 * 1024,
    # Fetch ahead only a few thousand messages (the fold's Python takes tens of ms over that
    # many) ...
    "queued.min.messages": 2000,
    # ... and resume fetching soon once the fold has taken them (librdkafka waits 1 s by
    # default once its queue is over that threshold).
    "fetch.queue.backoff.ms": 5,
}

ENDED_LOG_TUNING: dict[str, object] = {
    # A regression replay's readers read many recorded runs, one after the other, each to its end and
    # no further: nobody waits for a new message. A fetch held open at a log's end (the replay's
    # tuning waits for more, as a live agent wants) delays the next run's first fetch on the same
    # kept consumer by as long, on every run: most of a short run's replay (regress.*;
    # bench/README.md, "Regression replay"). A fetch that returns at once costs nothing here.
    "fetch.wait.max.ms": 5,
}

TRANSACTION_TIMEOUT_MS = 60_000
"""How long the broker lets an agent's transaction stay open before aborting it itself."""


Client = TypeVar("Client", Producer, Consumer, AdminClient)


def new_client(kind: type[Client], settings: Settings, required: Mapping[str, object] | None = None, *,
               tuning: Mapping[str, object] | None = None) -> Client:
    """A librdkafka client of ``kind`` with ``settings.kafka_config(required, tuning=...)``, its logs
    routed to :data:`LIBRDKAFKA_LOGGER` and its errors recorded for diagnosis."""
    config = settings.kafka_config(
        {**(required or {}), "logger": _librdkafka_log,
         "error_cb": error_recorder(settings.bootstrap_servers)},
        tuning={**CLIENT_TUNING, "socket.connection.setup.timeout.ms": int(settings.connect_timeout * 1000),
                **(tuning or {})})
    try:
        return kind(config)
    except KafkaException as exc:
        raise _bad_property(settings, kind, exc) from None


def consumer(settings: Settings, *, group: str | None = None, required: Mapping[str, object] | None = None,
             extra: Mapping[str, object] | None = None) -> Consumer:
    """A read_committed consumer (a throwaway group unless ``group`` is given); ``required`` adds to
    what every consumer requires, ``extra`` to its tuning (which the user's properties override)."""
    return new_client(Consumer, settings, {**CONSUMER_REQUIRED, **(required or {}),
                                           "group.id": group or f"swarmlog-reader-{uuid.uuid4().hex}"},
                      tuning={**CONSUMER_TUNING, **(extra or {})})


def watermark_consumer(settings: Settings) -> Consumer:
    """A consumer that only asks for watermarks: read_uncommitted, so that the high watermark
    it reports includes open transactions."""
    return new_client(Consumer, settings,
                      {"group.id": f"swarmlog-watermark-{uuid.uuid4().hex}", "isolation.level": "read_uncommitted",
                       "enable.auto.commit": False})


def admin_client(settings: Settings) -> AdminClient:
    return new_client(AdminClient, settings)


def _bad_property(settings: Settings, kind: type[Any], exc: KafkaException) -> Exception:
    """librdkafka refused the configuration: name the user's variable that it refused.

    librdkafka says which property in its message only; rather than parse that, each of the
    user's ``SWARMLOG_KAFKA_*`` properties is tried alone on a client with no brokers (which
    connects to nothing). Only on this error path.
    """
    err = kafka_error(exc)
    for key, value in settings.kafka.items():
        try:
            # A secret is tried with a stand-in: any string is a valid password, and the secret
            # stays unwrapped in one place only (Settings.kafka_config).
            Producer({key: "x" if isinstance(value, SecretStr) else value, "logger": _librdkafka_log})
        except KafkaException as alone:
            # The value is not shown: it may be a password (librdkafka's message shows a refused value).
            return InvalidSetting(variable=settings_variable(key), value=None, problem=kafka_error(alone).str(),
                                  hint="a librdkafka property and a value it accepts (librdkafka's CONFIGURATION.md; "
                                       "in the variable's name `_` stands for `.`)")
    if settings.kafka:
        return InvalidSetting(variable="SWARMLOG_KAFKA_*", value=None, problem=err.str(),
                              hint=f"librdkafka properties that work together (set: "
                                   f"{', '.join(map(settings_variable, settings.kafka))})")
    return KafkaOperationFailed(operation=f"creating a Kafka {kind.__name__}", code=err.code(), name=err.name(),
                                detail=err.str())


def settings_variable(prop: str) -> str:
    """The environment variable that sets librdkafka property ``prop``."""
    return "SWARMLOG_KAFKA_" + prop.upper().replace(".", "_")
