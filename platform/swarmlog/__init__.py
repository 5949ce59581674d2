"""swarmlog: a clock-free, Kafka-backed event log that gives agent swarms deterministic replay.

The public surface; everything else is importable but internal.
"""

from .agent import Agent, Swarm, on, on_message, on_timer
from .context import Context, EffectFailed
from .errors import (
    AppendFailed,
    ConfigurationError,
    GroupHasActiveMembers,
    GroupNotAtStart,
    InvalidEvent,
    MissingDependency,
    NondeterminismError,
    SchemaError,
    SchemaNotFound,
    ServiceUnavailable,
    SwarmlogError,
    TopicNotFound,
    TopicNotSinglePartition,
    UndecodableMessage,
    UnknownEventType,
)
from .events import Event
from .log import EventLog
from .replay import ReplayResult, replay, replay_swarm
from .settings import Settings

__all__ = [
    "Agent",
    "AppendFailed",
    "ConfigurationError",
    "Context",
    "EffectFailed",
    "Event",
    "EventLog",
    "GroupHasActiveMembers",
    "GroupNotAtStart",
    "InvalidEvent",
    "MissingDependency",
    "NondeterminismError",
    "ReplayResult",
    "SchemaError",
    "SchemaNotFound",
    "ServiceUnavailable",
    "Settings",
    "Swarm",
    "SwarmlogError",
    "TopicNotFound",
    "TopicNotSinglePartition",
    "UndecodableMessage",
    "UnknownEventType",
    "on",
    "on_message",
    "on_timer",
    "replay",
    "replay_swarm",
]
