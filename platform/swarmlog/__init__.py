"""swarmlog: a clock-free, Kafka-backed event log that gives agent swarms deterministic replay.

The public surface: the agent API (``Agent``, ``Swarm``, the handler decorators and
``ctx``), running and replaying a swarm, appending events, the settings and the
errors. Subpackages have faces of their own (``swarmlog.debug``, ``swarmlog.kafka``, ``swarmlog.log``,
``swarmlog.runtime``, ``swarmlog.schema``); modules whose names start with ``_`` are
machinery. ``swarmlog.debug`` is the debugging API (the log decoded, state at any offset,
a debugger at a step, snapshots, forks). ``tests/unit/test_layout.py`` pins this list.
"""

from .agent import Agent, Swarm, on, on_message, on_timer
from .context import Context
from .errors import (
    AgentFenced,
    AppendFailed,
    ConfigurationError,
    CopyFailed,
    DatabasePermissionDenied,
    EffectDiverged,
    EffectFailed,
    EventNotFound,
    ForkPointInsideStep,
    GroupHasActiveMembers,
    GroupNotAtStart,
    GroupResetFailed,
    InvalidEvent,
    InvalidSetting,
    KafkaHandshakeFailed,
    KafkaOperationFailed,
    MissingDependency,
    NondeterminismError,
    NoRunStarted,
    OutsideStep,
    ReadFailed,
    RunAlreadyRecorded,
    RunNotStarted,
    SchemaClash,
    SchemaError,
    SchemaNotFound,
    ServiceUnavailable,
    SwarmlogError,
    TopicCreateFailed,
    TopicExists,
    TopicNotFound,
    TopicNotSinglePartition,
    TransactionAborted,
    UndecodableMessage,
    UnknownEventType,
    UsageError,
)
from .events import Event
from .http import HTTPRequestDiverged
from .log.append import EventLog
from .log.memory import InMemoryLog
from .replay import Divergence, ReplayResult, SwarmReplayResult, replay, replay_swarm
from .runtime import run_agents, start_run
from .settings import Settings

__all__ = [
    "Agent",
    "AgentFenced",
    "AppendFailed",
    "ConfigurationError",
    "DatabasePermissionDenied",
    "Context",
    "CopyFailed",
    "Divergence",
    "EffectDiverged",
    "EffectFailed",
    "Event",
    "EventLog",
    "EventNotFound",
    "ForkPointInsideStep",
    "GroupHasActiveMembers",
    "GroupNotAtStart",
    "GroupResetFailed",
    "InMemoryLog",
    "HTTPRequestDiverged",
    "InvalidEvent",
    "InvalidSetting",
    "KafkaHandshakeFailed",
    "KafkaOperationFailed",
    "MissingDependency",
    "NoRunStarted",
    "NondeterminismError",
    "OutsideStep",
    "ReadFailed",
    "ReplayResult",
    "RunAlreadyRecorded",
    "RunNotStarted",
    "SchemaClash",
    "SchemaError",
    "SchemaNotFound",
    "ServiceUnavailable",
    "Settings",
    "Swarm",
    "SwarmReplayResult",
    "SwarmlogError",
    "TopicCreateFailed",
    "TopicExists",
    "TopicNotFound",
    "TopicNotSinglePartition",
    "TransactionAborted",
    "UndecodableMessage",
    "UnknownEventType",
    "UsageError",
    "on",
    "on_message",
    "on_timer",
    "replay",
    "replay_swarm",
    "run_agents",
    "start_run",
]
