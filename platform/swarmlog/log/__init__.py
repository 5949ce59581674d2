"""The log behind one interface: what swarmlog's mechanisms read from and write to.

:mod:`swarmlog.log.base` is the interface and the semantics every backend keeps;
:class:`InMemoryLog` the backend for unit tests and simulation; Kafka's backend is
:class:`swarmlog.kafka.KafkaBackend`. :class:`swarmlog.log.append.EventLog` appends
validated events through any of them.
"""

from typing import TYPE_CHECKING

from .._lazy import exports
from .base import BATCH, AgentChannel, Appender, Delivered, History, LogBackend, Message, Reader, ReadPosition

if TYPE_CHECKING:
    from .memory import InMemoryLog, MemoryMessage

# The in-memory backend brings the determinism guard along (its clock is read under ``allowed``):
# imported when first used, so that what reads Kafka does not pay for it (swarmlog._lazy).
__getattr__ = exports(globals(), {"InMemoryLog": ".memory", "MemoryMessage": ".memory"})

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
