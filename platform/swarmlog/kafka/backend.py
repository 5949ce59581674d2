"""Kafka as a :class:`swarmlog.log.base.LogBackend`: what production runs on."""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..log import base
from ..log.base import AgentChannel, History, LogBackend
from ..settings import Settings
from .channel import KafkaAgentChannel
from .config import SHORT_READ_TUNING, admin_client, watermark_consumer
from .copy import create_copy
from .groups import committed_offset, reset_group
from .producer import KafkaAppender
from .reader import LogReader, watermarks
from .topic import create_topic, deletes_history, require_single_partition, topic_config

__all__ = ["IDLE_READERS", "KafkaBackend", "backend_for"]

logger = logging.getLogger(__name__)

IDLE_READERS = 4
"""Readers a backend keeps for reuse once closed (see :meth:`KafkaBackend.reader`)."""
_CHECKED_KEPT = 1024
"""Topics a backend remembers having checked, at most (a sink of many topics reads no kept readers)."""


class KafkaBackend:
    """The topics of the Kafka cluster that ``settings`` point at."""

    def __init__(self, settings: Settings, *, producer_config: Mapping[str, object] | None = None,
                 reader_config: Mapping[str, object] | None = None) -> None:
        self.settings = settings
        self.producer_config = dict(producer_config or {})
        """librdkafka properties over swarmlog's producer tuning, for the appenders this makes."""
        self.reader_config = dict(reader_config or {})
        """librdkafka properties over the consumer tuning, for the readers of no group this makes."""
        self._admin: Any = None
        self._watermarks: Any = None  # one consumer for every watermark query (the quiet watcher asks often)
        self._idle: list[LogReader] = []
        self._checked: set[str] = set()  # topics a reader of this backend found single-partition
        self._closed_readers = False
        self._lock = threading.Lock()
        # The kept readers' consumers are closed when the backend goes, by reference count (the
        # end of the call that made it, as before readers were kept) or at exit, in that thread:
        # never left to the cycle collector to destroy in whatever thread it runs, or to the
        # interpreter's teardown. So a kept reader reaches its backend only through a weak
        # reference, and nothing the backend holds refers back to it.
        backend = weakref.ref(self)
        self._keep_reader = lambda reader: (b := backend()) is not None and b._keep(reader)
        weakref.finalize(self, _close_idle, self._idle)

    def _admin_client(self) -> Any:
        if self._admin is None:
            self._admin = admin_client(self.settings)
        return self._admin

    def reader(self, topic: str, *, group: str | None = None) -> LogReader:
        """A reader of ``topic``; one that reads no group's position comes back here when closed.

        Why: a debugging session folds again and again (``state --at N`` per query, a step view's
        every move), and each fold opens readers — the log's, the effect lookahead's, the snapshot
        topic's. A new consumer costs a connection, its handshake and a metadata request before
        its first fetch (tens of ms on a loaded machine, bench/snapshots.py); a closed one is
        unassigned and kept (up to :data:`IDLE_READERS`), and the next reader of any topic
        reuses it. Readers of a consumer group are never kept: their membership is the group's.

        A topic is checked (it exists, it has one partition) by the first reader of it this
        backend makes, not again by the readers that reuse a kept consumer: that check is a
        metadata request, a round trip to a broker each, and a fold of ``state --at N`` opens
        three readers per query. A topic deleted and made again meanwhile under the same name is
        another log: a fold from a snapshot refuses it by the snapshot's last message
        (``SnapshotStale``); a new backend checks it again.
        """
        if group is None:
            with self._lock:
                reused = self._idle.pop() if self._idle else None
                checked = topic in self._checked
            if reused is not None:
                try:
                    reused.reopen(topic, checked=checked)
                except BaseException:
                    if not self._keep(reused):  # e.g. no such topic: the consumer itself is fine
                        reused._on_close = None
                        reused.close()
                    raise
                self._remember_checked(topic)
                return reused
            reader = LogReader(settings=self.settings, topic=topic, on_close=self._keep_reader,
                               consumer_config=self.reader_config or None)
            self._remember_checked(topic)
            return reader
        return LogReader(settings=self.settings, topic=topic, group=group)

    def _remember_checked(self, topic: str) -> None:
        with self._lock:
            if len(self._checked) >= _CHECKED_KEPT:
                self._checked.clear()
            self._checked.add(topic)

    def _keep(self, reader: LogReader) -> bool:
        with self._lock:
            if len(self._idle) < IDLE_READERS and not self._closed_readers:
                self._idle.append(reader)
                return True
        return False

    def appender(self, topic: str) -> KafkaAppender:
        require_single_partition(self.settings, topic)
        self.warn_if_history_is_finite(topic)
        return KafkaAppender(settings=self.settings, topic=topic, producer_config=self.producer_config)

    def history(self, topic: str) -> History:
        low, _ = self.watermarks(topic)
        return History(log_start=low, deletes=deletes_history(topic_config(self.settings, topic,
                                                                           client=self._admin_client())))

    def warn_if_history_is_finite(self, topic: str) -> History:
        """Log (once per process and topic: :func:`~swarmlog.log.base.warn_about_history`) that the topic
        deletes or has lost history; its History (:class:`~swarmlog.errors.TopicNotFound` if there is none)."""
        history = self.history(topic)
        base.warn_about_history(history, topic)
        return history

    def agent_channel(self, topic: str, agent: str) -> KafkaAgentChannel:
        return KafkaAgentChannel(settings=self.settings, topic=topic, agent=agent)

    def watermarks(self, topic: str) -> tuple[int, int]:
        with self._lock:
            if self._watermarks is None:
                self._watermarks = watermark_consumer(self.settings)
            return watermarks(self.settings, topic, consumer=self._watermarks)

    def close(self) -> None:
        """Close the clients this backend keeps (they are also closed when it is collected)."""
        with self._lock:
            if self._watermarks is not None:
                self._watermarks.close()
                self._watermarks = None
            self._closed_readers = True  # readers closed from now on close their consumers
        _close_idle(self._idle)

    def committed(self, group: str, topic: str) -> int | None:
        return committed_offset(self._admin_client(), group=group, topic=topic)

    def reset_group(self, group: str, topic: str, offset: int) -> None:
        reset_group(self._admin_client(), group=group, topic=topic, offset=offset)

    def create_topic(self, topic: str) -> bool:
        return create_topic(self.settings, topic).created

    def create_copy(self, topic: str, messages: Iterable[Any], *, end: int = 0) -> int:
        return create_copy(self.settings, topic, messages, end=end)

    def settle(self, topic: str, channels: Sequence[AgentChannel], timeout: float) -> None:
        """Nothing to wait on: other processes append, and a commit is in flight until it is read back
        (:meth:`~swarmlog.log.base.LogBackend.settle`)."""
        return None

    def wait_for_append(self, topic: str, end: int, timeout: float) -> None:
        """Nothing to wait on: a reader polls the broker."""
        return None

    def abandoned_end(self, topic: str) -> None:
        """Not known: a producer that died with its transaction open is not told from a slow one
        (:meth:`~swarmlog.log.base.LogBackend.abandoned_end`)."""
        return None

    def after_fork(self) -> KafkaBackend:
        # A librdkafka client lives in threads a fork does not copy: the child makes its own. The
        # parent's stay referenced by the child's copy of the parent's objects and are never used
        # or closed there (closing one would wait for threads that do not exist): see runtime._processes.
        return KafkaBackend(self.settings, producer_config=self.producer_config, reader_config=self.reader_config)


def _close_idle(idle: list[LogReader]) -> None:
    """Close every kept reader's consumer (a backend's close, or its finalizer)."""
    while True:
        try:
            reader = idle.pop()
        except IndexError:
            return
        reader._on_close = None
        reader.close()


def warn_about_history(settings: Settings, topic: str | None = None) -> None:
    """For a command that reads or writes a swarm's log without going through the runtime or a replay:
    warn (once) if ``topic`` deletes events or has lost its beginning
    (:func:`~swarmlog.log.base.warn_if_history_is_finite`: a topic that does not exist is the command's own
    error to report, not this warning's)."""
    backend = KafkaBackend(settings)
    try:
        base.warn_if_history_is_finite(backend, topic or settings.topic)
    finally:
        backend.close()


def backend_for(settings: Settings, backend: LogBackend | None = None, *, short_reads: bool = False) -> LogBackend:
    """``backend`` if given, else the Kafka cluster ``settings`` point at: every entry point's default.

    ``short_reads``: its readers mostly read a short way from an offset and stop (the debugger's
    folds), so they fetch in small responses (:data:`~swarmlog.kafka.config.SHORT_READ_TUNING`)."""
    if backend is not None:
        return backend
    return KafkaBackend(settings, reader_config=SHORT_READ_TUNING if short_reads else None)
