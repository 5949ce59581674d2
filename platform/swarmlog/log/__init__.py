"""The log behind one interface: what swarmlog's mechanisms read from and write to.

:mod:`swarmlog.log.base` is the interface and the semantics every backend keeps;
:class:`InMemoryLog` the backend for unit tests and simulation; Kafka's backend is
:class:`swarmlog.kafka.KafkaBackend`. :class:`swarmlog.log.append.EventLog` appends
validated events through any of them.
"""

from .base import BATCH, AgentChannel, Appender, Delivered, History, LogBackend, Message, Reader, ReadPosition
from .memory import InMemoryLog, MemoryMessage

__all__ = [
    "BATCH",
    "AgentChannel",
    "Appender",
    "Delivered",
    "History",
    "InMemoryLog",
    "LogBackend",
    "MemoryMessage",
    "Message",
    "ReadPosition",
    "Reader",
]
