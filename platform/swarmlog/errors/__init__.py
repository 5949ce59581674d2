"""swarmlog's typed errors, and the tree they form.

Every error carries the facts as fields and says what to do in its message; callers (and the
runtime itself) decide by the error's type and fields, never by its text. Driver exceptions are
translated into these at one seam per driver: librdkafka's ``KafkaException`` in
:mod:`swarmlog.kafka.errors`, psycopg's where the mirror is written and read (:mod:`swarmlog_connectors`).

The intermediate classes exist to be caught: ``except KafkaSideError`` catches every failure of
the log's side (Kafka, or the in-memory log for the same conditions), ``except EventError`` every
event or message that does not fit the schemas or the protocol, ``except MirrorError`` every
failure of the Postgres mirror, ``except RunError`` every run that cannot go on,
``except NondeterminismError`` every replay that departs from the log, ``except TokenError`` and
``except LLMError`` the rest. Two axes cross the tree: :class:`ServiceUnavailable` (Kafka or
Postgres did not answer: the CLI's exit 69) and :class:`Retriable` (the same operation may succeed
later, nothing changed; every error's ``retriable`` says so). The CLI maps
:class:`ConfigurationError`, :class:`SchemaError` and :class:`TokenError` to exit 2: fix the
command, the settings or the schemas.

Each error is written once: in this package, one module per branch of the tree (``_base``: the root
and its two axes; ``_config``, ``_kafka_side``, ``_events``, ``_mirror``, ``_runs``,
``_nondeterminism``, ``_tokens``), or in its wing's ``errors.py`` (in brackets). The modules are
machinery: ``swarmlog.errors`` (and ``swarmlog``) is where every one of them is imported from, and
each class says so as its ``__module__``. ``__all__`` and the package's face are derived from the
classes, and ``tests/unit/test_errors.py`` holds this drawing to them::

    SwarmlogError
    ├── Retriable
    ├── ServiceUnavailable
    ├── ConfigurationError
    │   ├── UsageError
    │   │   └── NotAnAgentOfTheRun
    │   ├── InvalidSetting
    │   ├── TracingExporterMissing
    │   ├── UnmodelledEffect
    │   ├── ScheduleMismatch
    │   ├── StateUnavailable
    │   ├── SwarmImportFailed
    │   └── CredentialMissing  [swarmlog.llm.errors]
    ├── MissingDependency
    ├── EventError
    │   ├── InvalidEvent
    │   │   ├── InvalidCause
    │   │   └── DuplicateEventId
    │   ├── UndecodableMessage
    │   │   └── TrailingBytesInValue
    │   ├── RoutingHeaderMismatch
    │   └── SchemaError
    │       ├── SchemaClash
    │       ├── SchemaNotFound
    │       └── UnknownEventType
    ├── KafkaSideError
    │   ├── KafkaUnavailable (also ServiceUnavailable, Retriable)
    │   ├── KafkaHandshakeFailed (also ServiceUnavailable)
    │   ├── KafkaOperationFailed
    │   ├── TopicNotFound
    │   ├── TopicNotSinglePartition
    │   ├── TopicExists
    │   ├── TopicCreateFailed
    │   ├── CopyFailed
    │   ├── ReadFailed
    │   ├── EventNotFound
    │   ├── HistoryIncomplete
    │   ├── HistoryHoles
    │   ├── AppendFailed
    │   │   └── AppendIncomplete
    │   ├── TransactionAborted
    │   │   └── AgentFenced
    │   ├── GroupHasActiveMembers
    │   ├── GroupResetFailed
    │   └── GroupNotAtStart
    ├── MirrorError
    │   ├── PostgresUnavailable (also ServiceUnavailable, Retriable)
    │   ├── DatabasePermissionDenied
    │   ├── MirrorNotMigrated
    │   ├── MirrorMigrationFailed
    │   └── MirrorBehind (also Retriable)
    ├── NondeterminismError
    │   ├── EffectDiverged
    │   │   ├── FailedStepChanged
    │   │   ├── RequestDiverged  [swarmlog.llm.errors]
    │   │   │   ├── HTTPRequestDiverged  [swarmlog.llm.errors]
    │   │   │   └── ModelRequestDiverged  [swarmlog.integrations.errors]
    │   │   ├── AsyncCallDiverged  [swarmlog.aio.errors]
    │   │   └── ToolResultDiverged  [swarmlog.integrations.errors]
    │   ├── StateDiverged
    │   ├── PatchUnknown
    │   └── ForbiddenCall  [swarmlog.guard.errors]
    ├── RunError
    │   ├── RunAlreadyRecorded
    │   ├── ContinueRefused
    │   ├── RunContinuedElsewhere
    │   ├── RunNotStarted
    │   │   └── InputBeforeRun
    │   ├── NoReply
    │   │   ├── ReplyTimeout (also TimeoutError)
    │   │   └── InputHandlerFailed
    │   ├── NoRunStarted
    │   ├── HashSeedMismatch
    │   ├── OutsideStep
    │   ├── EffectFailed
    │   ├── StateNotSerialisable
    │   ├── StateNotCapturable
    │   ├── CheckpointUnreadable
    │   ├── SnapshotStale
    │   ├── ReplayWorkerFailed
    │   ├── RegressionWorkerFailed
    │   ├── ForkPointInsideStep
    │   ├── CodeVersionRefused
    │   ├── RunCannotGoOn
    │   └── AsyncStepError  [swarmlog.aio.errors]
    │       ├── StepLeftWork  [swarmlog.aio.errors]
    │       ├── StepStalled  [swarmlog.aio.errors]
    │       ├── StepCancelled  [swarmlog.aio.errors]
    │       └── NestedRun  [swarmlog.aio.errors]
    ├── TokenError
    │   └── InvalidToken
    │       └── SignatureUnchecked
    └── LLMError  [swarmlog.llm.errors]
        ├── LLMUnavailable (also Retriable)  [swarmlog.llm.errors]
        ├── LLMRequestFailed  [swarmlog.llm.errors]
        ├── LLMResponseInvalid  [swarmlog.llm.errors]
        └── ScriptExhausted  [swarmlog.llm.errors]
"""

from __future__ import annotations

# The branches, each the classes it defines (its ``__all__``); the tree is drawn in the order they bind.
from ._base import *  # noqa: F403
from ._base import SwarmlogError
from ._config import *  # noqa: F403
from ._events import *  # noqa: F403
from ._kafka_side import *  # noqa: F403
from ._kafka_side import EventFate
from ._mirror import *  # noqa: F403
from ._nondeterminism import *  # noqa: F403
from ._runs import *  # noqa: F403
from ._tokens import *  # noqa: F403

__all__ = ["EventFate", *sorted(name for name, value in list(globals().items())
                               if isinstance(value, type) and issubclass(value, SwarmlogError))]

# Every error is swarmlog.errors.X wherever its branch is written: the path users import it from, the
# name a traceback shows, and the reference pickle stores for the class (a replay process sends an
# error back to its parent as its class and fields: swarmlog.runtime._processes), so that moving a
# class between the branches moves nothing anyone refers to. The price: inspect.getsource looks for a
# class in the file of its __module__, so it cannot show an error's source (the branch's file does).
for _name in __all__:
    globals()[_name].__module__ = __name__
del _name
