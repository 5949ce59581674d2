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

Each error is written once: here, or in its wing's ``errors.py`` (in brackets). ``__all__`` and
the package's face are derived from the classes, and ``tests/unit/test_errors.py`` holds this
drawing to them::

    SwarmlogError
    ├── Retriable
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
    ├── ServiceUnavailable
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
    ├── MirrorError
    │   ├── PostgresUnavailable (also ServiceUnavailable, Retriable)
    │   ├── DatabasePermissionDenied
    │   ├── MirrorNotMigrated
    │   ├── MirrorMigrationFailed
    │   └── MirrorBehind (also Retriable)
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

from collections.abc import Sequence
from typing import NamedTuple


class SwarmlogError(Exception):
    """Base of every error swarmlog raises on purpose."""

    retriable = False
    """Whether the same operation may succeed later, nothing changed (see :class:`Retriable`)."""


class Retriable(SwarmlogError):
    """The retriable axis: nothing is wrong with the request or the settings, and the same operation may
    succeed later (a service came back, a rate limit passed, the mirror caught up). Mixed into the
    errors that are so by their nature; :class:`KafkaOperationFailed` says so per error
    (``retriable``, librdkafka's verdict)."""

    retriable = True


# --- configuration and environment ------------------------------------------------------------------


class ConfigurationError(SwarmlogError):
    """A setting is missing or wrong."""


class UsageError(ConfigurationError):
    """A command was called wrongly (arguments that do not fit together)."""


class InvalidSetting(ConfigurationError):
    """A setting (an environment variable, or a librdkafka property) has a value swarmlog cannot use."""

    def __init__(self, *, variable: str, value: str | None, problem: str, hint: str = "") -> None:
        self.variable = variable
        self.value = value
        """What it was set to; None when it may hold a secret (a password in a URL)."""
        self.problem = problem
        self.hint = hint
        shown = f"={value!r}" if value is not None else ""
        super().__init__(f"{variable}{shown}: {problem}" + (f"; expected {hint}" if hint else ""))


class TracingExporterMissing(ConfigurationError):
    """``OTEL_TRACES_EXPORTER`` (or an OTLP endpoint) asks for an exporter whose package is not installed."""

    def __init__(self, *, exporter: str, package: str) -> None:
        self.exporter = exporter
        self.package = package
        super().__init__(f"tracing is asked to export through {exporter!r}, but {package} is not installed: "
                         f"pip install 'swarmlog[otel]' (OTLP over HTTP and the console), or install {package}; "
                         f"or unset OTEL_TRACES_EXPORTER / OTEL_EXPORTER_OTLP_ENDPOINT to run without traces")


class UnmodelledEffect(ConfigurationError):
    """A simulated step called an effect or the LLM that the simulation has no answer for.

    The simulator never calls the world: every ``ctx.effect`` and ``ctx.llm`` is answered
    from the simulation's models, so that a run is a function of its schedule.
    """

    def __init__(self, *, agent: str, offset: int, kind: str, name: str) -> None:
        self.agent = agent
        self.offset = offset
        self.kind = kind
        self.name = name
        if kind == "HTTP exchange":
            what = ("ctx.http() is not simulated (a raw HTTP exchange has no model to answer it): in a swarm "
                    "you simulate, make the call through ctx.llm (Swarm(llm=...)) or ctx.effect, which the "
                    "Simulator models with llm=... / effects={...}")
        else:
            how = (f"effects={{{name!r}: ...}}" if kind == "effect" else "llm=...")
            what = (f"the simulation has no model for {kind} {name!r}. Give the Simulator {how}: a value, a "
                    f"function of the call's arguments, Fail(exception) or one_of(...) to let the schedule "
                    f"choose")
        super().__init__(f"agent {agent!r}, step at offset {offset}: {what}; the simulator never calls the "
                         f"world itself")


class ScheduleMismatch(ConfigurationError):
    """A recorded schedule does not fit the swarm it is run on (other code, another swarm)."""

    def __init__(self, *, decision: int, choice: int, options: int) -> None:
        self.decision = decision
        self.choice = choice
        self.options = options
        super().__init__(f"the schedule takes option {choice} at decision {decision}, where the swarm has only "
                         f"{options} option(s): it was recorded on other code or another swarm. Explore again "
                         f"with this code to get a schedule for it")


class NotAnAgentOfTheRun(UsageError):
    """An input names an agent the run does not have, or comes from one of the run's own agents."""

    def __init__(self, *, topic: str, run_id: str, name: str, agents: Sequence[str], role: str) -> None:
        self.topic = topic
        self.run_id = run_id
        self.name = name
        self.agents = list(agents)
        self.role = role
        """``recipient``: no agent of the run is called ``name`` (the input would be read by nobody);
        ``sender``: ``name`` is an agent of the run (the input would pass for that agent's own record)."""
        listed = ", ".join(self.agents) or "none"
        if role == "recipient":
            problem = f"run {run_id!r} of topic {topic!r} has no agent {name!r}: nobody would read this input"
        else:
            problem = (f"{name!r} is an agent of run {run_id!r} of topic {topic!r}: input comes from outside the "
                       f"swarm, so write it as another name (Client(sender=...), --agent)")
        super().__init__(f"{problem} (the run's agents: {listed})")


class StateUnavailable(ConfigurationError):
    """The console cannot compute this state (no code for the run's swarm, or the fold failed)."""


class SwarmImportFailed(ConfigurationError):
    """The module a ``module:swarm`` names raised while it was imported: the swarm's own code is at fault.

    ``where`` is the line it raised at, in the swarm's code where the traceback passes through it
    (``path:line``; "" when not known); the exception itself is the ``__cause__``, whose traceback
    the command line shows with ``-v``."""

    def __init__(self, *, spec: str, module: str, error: str, where: str) -> None:
        self.spec = spec
        self.module = module
        self.error = error
        """The exception, as ``Type: message``."""
        self.where = where
        at = f" at {where}" if where else ""
        super().__init__(f"the swarm's module {module!r} ({spec}) raised while it was imported: {error}{at}. "
                         f"Fix the module (-v shows the traceback)")


class MissingDependency(SwarmlogError):
    """A program swarmlog needs is not installed (Java, Maven, PostgreSQL)."""

    def __init__(self, *, program: str, install_hint: str) -> None:
        self.program = program
        self.install_hint = install_hint
        super().__init__(f"{program} is required but was not found. {install_hint}")


class ServiceUnavailable(SwarmlogError):
    """Kafka or Postgres could not be reached."""

    def __init__(self, *, service: str, address: str, detail: str, hint: str | None = None) -> None:
        self.service = service
        self.address = address
        self.detail = detail
        self.hint = hint or (
            "Start the local cluster with `swarmlog dev up` and `eval \"$(swarmlog dev env)\"`, "
            "or point SWARMLOG_BOOTSTRAP_SERVERS / SWARMLOG_DATABASE_URL at a running one "
            "(SWARMLOG_CONNECT_TIMEOUT sets how long to wait).")
        super().__init__(f"cannot reach {service} at {address}: {detail}. {self.hint}")


# --- the Kafka side (the log) -----------------------------------------------------------------------


class KafkaSideError(SwarmlogError):
    """The log's side failed: Kafka (or the in-memory log, which raises the same errors for the same
    conditions) could not be reached, refused an operation, or holds a topic, a group or a history that
    does not fit. ``except KafkaSideError`` catches every one of them."""


class KafkaUnavailable(KafkaSideError, ServiceUnavailable, Retriable):
    """Kafka could not be reached, or did not answer in time (``SWARMLOG_CONNECT_TIMEOUT``)."""

    def __init__(self, *, address: str, detail: str, hint: str | None = None) -> None:
        super().__init__(service="Kafka", address=address, detail=detail, hint=hint)


class KafkaHandshakeFailed(KafkaSideError, ServiceUnavailable):
    """A broker answered, but the TLS or SASL handshake with it failed: a configuration problem."""

    _HINTS = {
        "TLS": "Check SWARMLOG_KAFKA_SECURITY_PROTOCOL (SSL or SASL_SSL only if that listener speaks TLS) "
               "and SWARMLOG_KAFKA_SSL_CA_LOCATION (the CA that signed the brokers' certificates).",
        "SASL": "Check SWARMLOG_KAFKA_SASL_MECHANISM, SWARMLOG_KAFKA_SASL_USERNAME and "
                "SWARMLOG_KAFKA_SASL_PASSWORD, and that the listener has SASL enabled for that mechanism.",
    }

    def __init__(self, *, address: str, stage: str, detail: str) -> None:
        self.stage = stage
        """``"TLS"`` or ``"SASL"``: which handshake failed."""
        super().__init__(service="Kafka", address=address, detail=f"the {stage} handshake failed: {detail}",
                         hint=self._HINTS.get(stage))


class KafkaOperationFailed(KafkaSideError):
    """Kafka refused an operation for a reason none of the more specific errors covers."""

    def __init__(self, *, operation: str, code: int, name: str, detail: str, retriable: bool = False) -> None:
        self.operation = operation
        self.code = code
        self.name = name
        self.detail = detail
        self.retriable = retriable
        super().__init__(f"{operation} failed: Kafka error {name}: {detail}")


class TopicNotFound(KafkaSideError):
    def __init__(self, *, topic: str) -> None:
        self.topic = topic
        super().__init__(f"topic {topic!r} does not exist; create it with `swarmlog topic create {topic}`")


class TopicNotSinglePartition(KafkaSideError):
    """The topic's offsets are only a total order if the topic has exactly one partition."""

    def __init__(self, *, topic: str, partitions: int) -> None:
        self.topic = topic
        self.partitions = partitions
        super().__init__(
            f"topic {topic!r} has {partitions} partitions; swarmlog needs exactly one, because the "
            f"offsets of a single partition are the swarm's only clock (a total order). "
            f"Create a new topic with `swarmlog topic create` and move the swarm there."
        )


class TopicExists(KafkaSideError):
    """A topic that must be new already exists."""

    def __init__(self, *, topic: str) -> None:
        self.topic = topic
        super().__init__(f"topic {topic!r} already exists; choose a new name (a fork is always written into a new "
                         f"topic, so that nothing of another log can mix into it)")


class TopicCreateFailed(KafkaSideError):
    def __init__(self, *, topic: str, detail: str) -> None:
        self.topic = topic
        self.detail = detail
        super().__init__(f"cannot create topic {topic!r}: {detail}; check the broker's log and that this "
                         f"principal may create topics (Kafka ACL: CREATE on the topic or the cluster)")


class CopyFailed(KafkaSideError):
    """A log copy did not land at the offsets it must keep; the half-made topic is left for inspection."""

    def __init__(self, *, topic: str, detail: str) -> None:
        self.topic = topic
        self.detail = detail
        super().__init__(f"copying into {topic!r} failed: {detail}; delete that topic and fork again (nothing was "
                         f"written to the source)")


class ReadFailed(KafkaSideError):
    """Reading the log failed with an error that retrying will not cure."""

    def __init__(self, *, topic: str, detail: str) -> None:
        self.topic = topic
        self.detail = detail
        super().__init__(f"reading {topic!r} failed: {detail}")


class EventNotFound(KafkaSideError):
    """No readable event at an offset (a transaction marker, an aborted write, or past the end)."""

    def __init__(self, *, topic: str, offset: int, log_end: int) -> None:
        self.topic = topic
        self.offset = offset
        self.log_end = log_end
        where = "past the end of the log" if offset >= log_end else "a transaction marker or an aborted write"
        super().__init__(f"{topic!r} has no event at offset {offset} ({where}; the log ends at {log_end}); "
                         f"`swarmlog log` lists the offsets that hold events")


class HistoryIncomplete(KafkaSideError):
    """The topic no longer holds its history from offset 0: replaying it cannot rebuild the run."""

    def __init__(self, *, topic: str, log_start: int, retention: str) -> None:
        self.topic = topic
        self.log_start = log_start
        self.retention = retention
        super().__init__(
            f"topic {topic!r} starts at offset {log_start}, not 0: its first {log_start} offset(s) were deleted "
            f"({retention}). Replay and agents rebuild state from offset 0, so what they would rebuild from here is "
            f"not the run. Keep history forever (`retention.ms=-1`, `retention.bytes=-1`, as `swarmlog topic "
            f"create` makes it); to look at what is left anyway, `swarmlog replay --from-log-start` (its token "
            f"records the real start)")


class HistoryHoles(KafkaSideError):
    """Offsets inside the log hold no event any more, though later events name them as causes: the log
    lost events (compaction keeps only the newest message per key; a topic once compacted keeps its
    holes). What a fold rebuilds from the rest is not the run, so it stops and says where."""

    def __init__(self, *, topic: str, holes: dict[int, int], remedy: str) -> None:
        self.topic = topic
        self.holes = dict(sorted(holes.items()))
        """Offset that holds nothing -> the first event that names it as a cause."""
        shown = ", ".join(f"{o} (named by {by})" for o, by in list(self.holes.items())[:10])
        more = f" and {len(self.holes) - 10} more" if len(self.holes) > 10 else ""
        super().__init__(
            f"topic {topic!r} has lost events: offset(s) {shown}{more} hold nothing, though later events name them "
            f"as causes (causes are checked when written). Compaction or a deletion removed them, so what would be "
            f"rebuilt is not the run. {remedy}; to look at what is left anyway, `swarmlog replay --from-log-start` "
            f"(it reports the holes)")


class AppendFailed(KafkaSideError):
    """The broker did not acknowledge an event."""

    def __init__(self, *, topic: str, detail: str) -> None:
        self.topic = topic
        self.detail = detail
        super().__init__(f"append to {topic!r} failed: {detail}")


class EventFate(NamedTuple):
    """What became of one appended event: written at ``offset``, still ``pending``, or ``error``."""

    event_id: str
    offset: int | None
    """Its offset once the broker acknowledged it."""
    error: str | None = None
    """Why it was not written (the broker refused it); None while it is pending or once written."""

    @property
    def state(self) -> str:
        """``written``, ``pending`` (queued in the producer; it lands once, in order) or ``failed``."""
        return "written" if self.offset is not None else ("failed" if self.error is not None else "pending")


class AppendIncomplete(AppendFailed):
    """Not every event of an append was acknowledged in time; ``fates`` says what became of each.

    Definite, event by event (``fates``, in the order they were appended):

    * ``written``: in the log at ``offset``.
    * ``pending``: still queued in this producer (Kafka did not answer in time). The
      idempotent producer writes it exactly once, in order, when Kafka answers; nothing
      times it out. Append it again with the same ``event_id`` (or flush again) to get its
      offset: it is not sent a second time.
    * ``failed``: the broker refused it (``error``); it is not in the log, and appending it
      again sends it again.
    """

    def __init__(self, *, topic: str, fates: Sequence[EventFate], timeout: float) -> None:
        self.fates = list(fates)
        self.timeout = timeout
        written = sum(f.offset is not None for f in self.fates)
        failed = [f for f in self.fates if f.error is not None]
        pending = len(self.fates) - written - len(failed)
        why = f"; the broker refused {len(failed)} ({failed[0].error})" if failed else ""
        super().__init__(topic=topic, detail=(
            f"{written} of {len(self.fates)} event(s) acknowledged within {timeout}s, {pending} still queued{why}. "
            f"Queued events are written exactly once, in order, when Kafka answers: append them again with the "
            f"same event ids (nothing is sent twice) or flush again; the fate of each is in .fates"))

    @property
    def offsets(self) -> dict[str, int]:
        return {f.event_id: f.offset for f in self.fates if f.offset is not None}

    @property
    def pending(self) -> list[str]:
        return [f.event_id for f in self.fates if f.offset is None and f.error is None]

    @property
    def failed(self) -> dict[str, str]:
        return {f.event_id: f.error for f in self.fates if f.error is not None}


class TransactionAborted(KafkaSideError):
    """An agent's transaction did not commit: none of its outputs became visible.

    Nothing is lost: the inputs of the aborted batch are re-run by the agent's next life.
    """

    def __init__(self, *, agent: str, detail: str) -> None:
        self.agent = agent
        self.detail = detail
        super().__init__(f"agent {agent!r}: its transaction was aborted ({detail}); none of the batch's outputs "
                         f"became visible, and its next start re-runs those steps")


class AgentFenced(TransactionAborted):
    """Another life of the same agent started (same transactional id): this one may write nothing more."""

    def __init__(self, *, agent: str, detail: str) -> None:
        super().__init__(agent=agent, detail=f"fenced by a newer instance of the agent: {detail}")


class GroupHasActiveMembers(KafkaSideError):
    """A consumer group's offsets can only be reset while nobody consumes in it."""

    def __init__(self, *, group: str, members: list[str]) -> None:
        self.group = group
        self.members = members
        super().__init__(
            f"consumer group {group!r} has {len(members)} active member(s) ({', '.join(members)}); "
            f"Kafka only resets the offsets of an empty group. Stop its consumers "
            f"(e.g. `kubectl scale --replicas=0`) and run the replay again."
        )


class GroupResetFailed(KafkaSideError):
    def __init__(self, *, group: str, detail: str) -> None:
        self.group = group
        self.detail = detail
        super().__init__(f"cannot reset consumer group {group!r}: {detail}")


class GroupNotAtStart(KafkaSideError):
    def __init__(self, *, group: str, committed: int, log_start: int) -> None:
        self.group = group
        self.committed = committed
        self.log_start = log_start
        super().__init__(
            f"consumer group {group!r} is at offset {committed}, not at the log start {log_start}; "
            f"reset it (`swarmlog replay --group {group}` without --no-reset, or "
            f"kafka-consumer-groups --reset-offsets --to-earliest --execute)"
        )


# --- events and schemas -----------------------------------------------------------------------------


class EventError(SwarmlogError):
    """An event or a message is not what the schemas and the log protocol say it must be."""


class InvalidEvent(EventError):
    """An event failed validation before anything was written."""

    def __init__(self, *, event_type: str, field: str, problem: str) -> None:
        self.event_type = event_type
        self.field = field
        self.problem = problem
        super().__init__(f"invalid {event_type!r} event: field {field!r}: {problem}")


class InvalidCause(InvalidEvent):
    """An event's cause that cannot be one: negative, at or past the log's end (the writer's own offset
    is later still), or an offset that holds no event (a transaction marker, an aborted or deleted
    record, a message that is not an event). Refused before anything is written."""

    def __init__(self, *, event_type: str, cause: int, why: str) -> None:
        self.cause = cause
        self.why = why
        super().__init__(event_type=event_type, field="causes", problem=(
            f"cause {cause} {why}; a cause names an earlier event of the same log by its offset "
            f"(`swarmlog log` lists them)"))


class DuplicateEventId(InvalidEvent):
    """An event id this writer already appended: a second event with it would be a copy that every
    reader must name and skip. Refused before anything is written."""

    def __init__(self, *, event_type: str, event_id: str, offset: int | None) -> None:
        self.event_id = event_id
        self.offset = offset
        """Where the first event with the id is (None: still queued in this producer)."""
        where = f"at offset {offset}" if offset is not None else "(still queued, not acknowledged yet)"
        super().__init__(event_type=event_type, field="event_id", problem=(
            f"{event_id!r} was already appended by this log {where}: an event id names one event, and readers "
            f"skip a second one as a copy. Give the new event an id of its own; to finish an incomplete append, "
            f"append the same ids again after AppendIncomplete (written and queued ones are not sent twice)"))


class UndecodableMessage(EventError):
    """A message is not a swarmlog event (wrong framing, truncated, garbage)."""

    def __init__(self, *, offset: int | None, reason: str) -> None:
        self.offset = offset
        self.reason = reason
        where = f"at offset {offset}" if offset is not None else ""
        super().__init__(f"undecodable message {where}: {reason}")


class TrailingBytesInValue(UndecodableMessage):
    """A message's value holds a whole event and then more bytes: a second event appended to it,
    or garbage. A value is exactly one event, so the message is not one: readers name it, the sink
    dead-letters it, and nothing vouches for the event alone while the log holds something else."""

    def __init__(self, *, offset: int | None, end: int, size: int) -> None:
        self.end = end
        """Where the event ends in the value (bytes)."""
        self.size = size
        """The value's size (bytes)."""
        super().__init__(offset=offset, reason=(
            f"the event ends at byte {end} of its {size}-byte value: {size - end} byte(s) follow it (a second "
            f"event or bytes appended to it). A message's value is exactly one event; fix the producer that "
            f"wrote it"))


class RoutingHeaderMismatch(EventError):
    """A message's routing header says something else than its envelope (its Avro body).

    Headers let readers skip a message without decoding it; a header that lies would route the
    message to the wrong agent, or to nobody. So wherever a header steers what happens, it is
    checked against the body, and a mismatch stops there instead of guessing.
    """

    def __init__(self, *, offset: int, header: str, header_value: str | None, envelope_value: str | None) -> None:
        self.offset = offset
        self.header = header
        self.header_value = header_value
        self.envelope_value = envelope_value
        said = "is absent" if header_value is None else f"says {header_value!r}"
        super().__init__(
            f"message at offset {offset}: header {header} {said}, but its envelope says {envelope_value!r}. "
            f"A producer wrote routing headers that do not match the event; fix that producer. "
            f"`swarmlog check causality` lists every such message; the sink dead-letters them")


class SchemaError(EventError):
    """The schema directory is inconsistent (duplicate fingerprints, bad names, bad Avro)."""


class SchemaClash(SchemaError):
    """One event type is defined in two schema directories (the built-ins and ``SWARMLOG_SCHEMA_PATH``)."""

    def __init__(self, *, event_type: str, first: str, second: str) -> None:
        self.event_type = event_type
        self.first = first
        self.second = second
        super().__init__(
            f"event type {event_type!r} is defined twice: {first} and {second}. An event type lives in one "
            f"schema directory, every version and its upcasters together; rename your type (e.g. "
            f"myteam.{event_type}) or drop that directory from SWARMLOG_SCHEMA_PATH")


class SchemaNotFound(SchemaError):
    """A message names a writer schema this process does not know.

    Where the message's routing headers say what it is (``sl.type``, ``sl.v``), the error says so:
    most often a writer already upgraded to a newer version than this reader (a rolling upgrade),
    which an upgraded reader reads — nothing is lost, the message waits in the log.
    """

    def __init__(self, *, offset: int | None, fingerprint: str, event_type: str | None = None,
                 version: int | None = None, known_version: int | None = None) -> None:
        self.offset = offset
        self.fingerprint = fingerprint
        self.event_type = event_type
        """What the message's ``sl.type`` header says it is (None: no header to go by)."""
        self.version = version
        """What its ``sl.v`` header says (None: none)."""
        self.known_version = known_version
        """The newest version of ``event_type`` this reader knows (None: not that type at all)."""
        where = f"at offset {offset} " if offset is not None else ""
        if event_type is not None and version is not None and known_version is not None and version > known_version:
            what = (f"; its routing headers say it is a newer {event_type} (v{version}) than this reader knows "
                    f"(up to v{known_version}): a writer was upgraded before this reader. Upgrade this reader (its "
                    f"swarmlog and schemas, or SWARMLOG_SCHEMA_PATH) to one that has {event_type} v{version}; the "
                    f"message stays in the log and is read then")
        elif event_type is not None and known_version is None:
            what = (f"; its routing headers say it is a {event_type}, an event type this reader does not know: "
                    f"add {event_type}'s schemas (SWARMLOG_SCHEMA_PATH)")
        elif event_type is not None:
            what = (f"; its routing headers say {event_type} v{version}, which this reader knows with another "
                    f"fingerprint: the writer's schema file differs from this reader's (a version edited after "
                    f"events were written with it?)")
        else:
            what = ("; deploy the schema that wrote it (built-in, or in a directory on SWARMLOG_SCHEMA_PATH: old "
                    "versions must stay there forever)")
        super().__init__(
            f"message {where}was written with schema fingerprint {fingerprint}, which no schema this "
            f"process loaded has{what}")


class UnknownEventType(SchemaError):
    def __init__(self, *, event_type: str, known: list[str]) -> None:
        self.event_type = event_type
        self.known = known
        super().__init__(
            f"no schema for event type {event_type!r}; add {event_type}/v1.avsc to a directory on "
            f"SWARMLOG_SCHEMA_PATH (known types: {', '.join(known) or 'none'})"
        )


# --- the Postgres mirror ----------------------------------------------------------------------------


class MirrorError(SwarmlogError):
    """The Postgres mirror: unreachable, not migrated, not permitted, or behind the log."""


class PostgresUnavailable(MirrorError, ServiceUnavailable, Retriable):
    """Postgres (the mirror) could not be reached."""

    def __init__(self, *, address: str, detail: str, hint: str | None = None) -> None:
        super().__init__(service="Postgres", address=address, detail=detail, hint=hint)


class DatabasePermissionDenied(MirrorError):
    """The Postgres role may not do what the mirror needs (read its position, write rows)."""

    def __init__(self, *, role: str, database: str, action: str, detail: str) -> None:
        self.role = role
        self.database = database
        self.action = action
        self.detail = detail
        super().__init__(
            f"Postgres role {role!r} may not {action} in database {database!r} ({detail}). The sink needs only "
            f"the group role `swarmlog mirror migrate` creates: GRANT swarmlog_sink TO {role} (the migration, "
            f"run as the database owner, makes the tables and grants that role what mirroring needs).")


class MirrorNotMigrated(MirrorError):
    """The mirror's tables are missing or older than the sink writes: migrations are a separate step."""

    def __init__(self, *, database: str, found: int, required: int) -> None:
        self.database = database
        self.found = found
        self.required = required
        super().__init__(
            f"the mirror at {database} has schema version {found}, the sink needs {required}. Run "
            f"`swarmlog mirror migrate` as the database owner (on Kubernetes the chart's migrate hook Job does), "
            f"then start the sink again; the sink itself needs only the swarmlog_sink role")


class MirrorMigrationFailed(MirrorError):
    def __init__(self, *, detail: str) -> None:
        self.detail = detail
        super().__init__(f"migrating the mirror's schema failed: {detail}")


class MirrorBehind(MirrorError, Retriable):
    """A reader that must see its own writes waited for the Postgres mirror in vain (the sink is
    stopped, or far behind): LangGraph's checkpointer (:mod:`swarmlog.integrations.langgraph`)."""

    def __init__(self, *, topic: str, written: int, mirrored: int, waited_s: float) -> None:
        self.topic = topic
        self.written = written
        self.mirrored = mirrored
        self.waited_s = waited_s
        super().__init__(f"the mirror of topic {topic!r} has not reached offset {written} (this process's last "
                         f"write) after {waited_s:g} s: it is at {mirrored}. Is `swarmlog sink` running for this "
                         f"topic (`swarmlog mirror status`, the sink's /readyz)? The write itself is in the log")


# --- runs -------------------------------------------------------------------------------------------


class RunError(SwarmlogError):
    """Running, replaying or debugging a swarm's code: a run that does not fit the topic or the
    interpreter, a handler's misuse of ``ctx``, state that cannot be kept, a replay process lost."""


class RunAlreadyRecorded(RunError):
    """The topic holds another run: one topic holds one run."""

    def __init__(self, *, topic: str, run_id: str, seed: int, requested_run_id: str, requested_seed: int) -> None:
        self.topic = topic
        self.run_id = run_id
        self.seed = seed
        self.requested_run_id = requested_run_id
        self.requested_seed = requested_seed
        super().__init__(
            f"topic {topic!r} already holds run {run_id!r} (seed {seed}), not {requested_run_id!r} (seed "
            f"{requested_seed}); one topic holds one run, so that replay from offset zero rebuilds exactly one "
            f"history. Use a new topic for a new run.")


class ContinueRefused(RunError):
    """``swarmlog continue`` cannot continue a run from ``from_topic`` on ``to_topic``: nothing was written
    (or what was is the same link, already there). ``reason`` says why, ``remedy`` what to do."""

    def __init__(self, *, from_topic: str, to_topic: str, reason: str, remedy: str) -> None:
        self.from_topic = from_topic
        self.to_topic = to_topic
        self.reason = reason
        self.remedy = remedy
        super().__init__(f"cannot continue the run of topic {from_topic!r} on {to_topic!r}: {reason}. {remedy}")


class RunContinuedElsewhere(RunError):
    """A live agent read the end of its run's part on this topic: the run goes on on ``to_topic``
    (``swarmlog continue``). It does not handle this topic any more (the runtime parks it, not ready)."""

    def __init__(self, *, topic: str, to_topic: str, end: int, agent: str) -> None:
        self.topic = topic
        self.to_topic = to_topic
        self.end = end
        self.agent = agent
        super().__init__(f"agent {agent!r}: the run of topic {topic!r} goes on on topic {to_topic!r} (this topic's "
                         f"part ends at offset {end}): run the swarm there (`swarmlog run ... --topic {to_topic}`) and "
                         f"retire this deployment")


class RunNotStarted(RunError):
    """An agent waited for the topic's ``run.started`` and none came: nothing started the run."""

    def __init__(self, *, topic: str, waited_s: float) -> None:
        self.topic = topic
        self.waited_s = waited_s
        super().__init__(
            f"no run.started in topic {topic!r} after waiting {waited_s:.0f} s, so the agents have nothing to do. "
            f"Start the run with `swarmlog run <module:swarm> --start --run-id ID --seed N` (the Helm chart's "
            f"run-start hook Job does it on install: see its logs), or wait longer with --wait-for-run SECONDS")


class InputBeforeRun(RunNotStarted):
    """An input waited for its run to start and it did not: nothing was written.

    Input is held by the client, never written ahead of ``run.started``: an event the agents
    read before their run would belong to no run (no run id, no seed)."""

    def __init__(self, *, topic: str, waited_s: float, event_type: str, to: str | None) -> None:
        self.topic = topic
        self.waited_s = waited_s
        self.event_type = event_type
        self.to = to
        SwarmlogError.__init__(
            self,
            f"no run.started in topic {topic!r} after waiting {waited_s:.0f} s: the {event_type} "
            f"{'to ' + repr(to) + ' ' if to else ''}was not written (input belongs to a run, and this topic holds "
            f"none yet). Start the run first (`swarmlog run <module:swarm> --run-id ID --seed N`, or "
            f"Client.start), or give it longer (timeout=, --wait-for-run SECONDS)")


class NoReply(RunError):
    """An input was written, but the reply it was waited for did not come (see the subclasses).

    Fields say what was sent and where it is in the log: ``topic``, ``run_id``, ``offset``,
    ``event_id``, ``to``, ``kind``; and what it set off so far: ``caused`` (how many events
    chain back to it through their causes) and ``last`` (the latest of them, described)."""

    def __init__(self, message: str, *, topic: str, run_id: str, offset: int, event_id: str, to: str | None,
                 kind: str | None, caused: int, last: str | None) -> None:
        self.topic = topic
        self.run_id = run_id
        self.offset = offset
        self.event_id = event_id
        self.to = to
        self.kind = kind
        self.caused = caused
        self.last = last
        super().__init__(message)

    @staticmethod
    def _sent(*, topic: str, run_id: str, offset: int, event_id: str, to: str | None, kind: str | None) -> str:
        what = f"{kind!r} to agent {to!r}" if kind is not None else f"the event to {to!r}"
        return f"{what} (event {event_id}, offset {offset} of topic {topic!r}, run {run_id!r})"


class ReplyTimeout(NoReply, TimeoutError):
    """No reply came within the timeout; the input stays in the log, and the swarm may still answer it."""

    def __init__(self, *, topic: str, run_id: str, offset: int, event_id: str, to: str | None, kind: str | None,
                 timeout: float, caused: int, last: str | None, reply: str) -> None:
        self.timeout = timeout
        sent = self._sent(topic=topic, run_id=run_id, offset=offset, event_id=event_id, to=to, kind=kind)
        so_far = (f"it set off {caused} event(s) so far, the last {last}" if caused
                  else "nothing in the log chains back to it yet (is the swarm running? `swarmlog run`)")
        super().__init__(
            f"no {reply} within {timeout:g} s of sending {sent}: {so_far}. It stays in the log: "
            f"`swarmlog show {offset}` shows what it caused",
            topic=topic, run_id=run_id, offset=offset, event_id=event_id, to=to, kind=kind, caused=caused,
            last=last)


class InputHandlerFailed(NoReply):
    """A handler that the input set off raised (recorded as ``handler.failed``): no reply will come from it."""

    def __init__(self, *, topic: str, run_id: str, offset: int, event_id: str, to: str | None, kind: str | None,
                 caused: int, last: str | None, agent: str, failed_at: int, error_type: str,
                 error: str) -> None:
        self.agent = agent
        self.failed_at = failed_at
        self.error_type = error_type
        self.error = error
        sent = self._sent(topic=topic, run_id=run_id, offset=offset, event_id=event_id, to=to, kind=kind)
        super().__init__(
            f"agent {agent!r}'s handler failed at offset {failed_at} on work set off by {sent}: "
            f"{error_type}: {error}. `swarmlog show {failed_at}` shows the step",
            topic=topic, run_id=run_id, offset=offset, event_id=event_id, to=to, kind=kind, caused=caused,
            last=last)


class NoRunStarted(RunError):
    """A handler drew randomness, but no ``run.started`` precedes its step: there is no seed."""

    def __init__(self, *, agent: str, offset: int) -> None:
        self.agent = agent
        self.offset = offset
        super().__init__(f"agent {agent!r} at offset {offset}: no run.started event precedes this step, so there is "
                         f"no seed to derive randomness from; start runs with `swarmlog run` (it writes run.started)")


class HashSeedMismatch(RunError):
    """This interpreter hashes strings differently from the one the run was recorded with
    (see :mod:`swarmlog.runtime.interpreter`)."""

    def __init__(self, *, run_id: str, recorded_seed: int, recorded_algorithm: str, current_seed: int | None,
                 current_algorithm: str) -> None:
        self.run_id = run_id
        self.recorded_seed = recorded_seed
        self.recorded_algorithm = recorded_algorithm
        self.current_seed = current_seed
        """None: this process's seed is random (PYTHONHASHSEED unset)."""
        self.current_algorithm = current_algorithm
        if recorded_algorithm == current_algorithm:
            fix = (f"start this process with PYTHONHASHSEED={recorded_seed} (the swarmlog command re-executes "
                   f"itself with it; the image and the chart set it)")
        else:
            fix = f"run the swarm on an interpreter whose string hash is {recorded_algorithm}"
        here = "unset (random per process)" if current_seed is None else str(current_seed)
        super().__init__(
            f"run {run_id!r} was recorded by an interpreter hashing strings with PYTHONHASHSEED={recorded_seed} "
            f"({recorded_algorithm}); this one has PYTHONHASHSEED={here} ({current_algorithm}). A handler "
            f"iterating a set of strings would do things in another order than the log recorded: {fix}")


class OutsideStep(RunError):
    """``ctx`` was used outside a handler."""

    def __init__(self, *, agent: str) -> None:
        self.agent = agent
        super().__init__(f"ctx of agent {agent!r} can only be used inside a handler, while a step runs")


class EffectFailed(RunError):
    """A recorded effect raised; replay raises the same failure at the same place."""

    def __init__(self, *, name: str, error: str) -> None:
        self.name = name
        self.error = error
        super().__init__(f"effect {name!r} failed: {error}")


class StateNotSerialisable(RunError):
    """An agent's state holds something canonical JSON cannot encode, so it cannot be digested or compared."""

    def __init__(self, *, agent: str, offset: int, detail: str) -> None:
        self.agent = agent
        self.offset = offset
        self.detail = detail
        super().__init__(f"agent {agent!r}: its state after the step at offset {offset} cannot be digested: "
                         f"{detail}. Keep only JSON values in self.state (dicts with string keys, lists, strings, "
                         f"numbers, booleans, None; bytes and sets are encoded too): the runtime records and "
                         f"compares its digest after every step")


class StateNotCapturable(RunError):
    """An agent's state holds a value a snapshot cannot keep faithfully."""

    def __init__(self, *, agent: str, path: str, type_name: str) -> None:
        self.agent = agent
        self.path = path
        self.type_name = type_name
        super().__init__(f"agent {agent!r}: state{path} is a {type_name}; snapshots keep plain data (dict, list, "
                         f"tuple, set, str, int, float, bool, None, bytes) — keep {type_name} out of self.state")


class CheckpointUnreadable(RunError):
    """A captured fold this swarmlog cannot restore (another format, or damaged)."""

    def __init__(self, *, agent: str, reason: str) -> None:
        self.agent = agent
        self.reason = reason
        super().__init__(f"agent {agent!r}: cannot restore its captured fold: {reason}")


class SnapshotStale(RunError):
    """The message a snapshot was taken after is not in the log any more: it is another log's."""

    def __init__(self, *, topic: str, offset: int) -> None:
        self.topic = topic
        self.offset = offset
        super().__init__(f"a snapshot of {topic!r} was taken after the message at offset {offset}, which the log no "
                         f"longer holds as it was: the topic was re-made; delete {topic}.snapshots")


class ReplayWorkerFailed(RunError):
    """A process that replayed some of a swarm's agents ended without a result (killed, out of
    memory, or an error that could not be carried back as itself)."""

    def __init__(self, *, agents: Sequence[str], detail: str) -> None:
        self.agents = list(agents)
        self.detail = detail
        super().__init__(f"the replay process for agent(s) {', '.join(self.agents)} failed: {detail}. Nothing "
                         f"was written; run the replay again, or with --workers 1 to replay in one process")


class RegressionWorkerFailed(RunError):
    """A worker process of a regression replay (``swarmlog regress``) could not start, or failed with an
    error that is no single run's verdict and is not one the pool carries back as itself (Kafka or
    Postgres unreachable are: :class:`KafkaUnavailable`, :class:`PostgresUnavailable`)."""

    def __init__(self, *, topic: str | None, worker: str, error_type: str | None, detail: str) -> None:
        self.topic = topic
        """The run it was replaying; None: it failed as it started."""
        self.worker = worker
        """Which worker: its process id and string hash seed."""
        self.error_type = error_type
        """The name of the error the worker reported; None: it ended without reporting one."""
        self.detail = detail
        what = f"replaying {topic}" if topic is not None else "as it started"
        error = f"{error_type}: " if error_type else ""
        super().__init__(f"a regression worker ({worker}) failed {what}: {error}{detail}. Replay one run alone with "
                         f"`swarmlog replay --swarm` to see the error where it happens, then run the regression "
                         f"again")


class ForkPointInsideStep(RunError):
    """A fork would cut one step's recorded outputs in two: the fork's agent could neither replay
    that step (part of its record is missing) nor run it live (part of it is history)."""

    def __init__(self, *, at: int, agent: str, step: int, first: int, last: int) -> None:
        self.at = at
        self.agent = agent
        self.step = step
        self.first = first
        self.last = last
        super().__init__(f"offset {at} falls inside the outputs agent {agent!r} recorded for its step at {step} "
                         f"(offsets {first}..{last}); fork at {first} (the step runs again, live, on the fork) "
                         f"or at {last + 1} (the step is history on the fork)")


# --- nondeterminism: replayed code departs from the log ---------------------------------------------


class NondeterminismError(SwarmlogError):
    """Replayed code did something the log says it did not do the first time."""

    def __init__(self, *, offset: int | None, agent: str | None, detail: str,
                 recorded: object = None, replayed: object = None) -> None:
        self.offset = offset
        self.agent = agent
        self.detail = detail
        self.recorded = recorded
        self.replayed = replayed
        parts = [detail]
        if agent is not None or offset is not None:
            parts.insert(0, f"agent {agent!r} at offset {offset}:")
        if recorded is not None or replayed is not None:
            parts.append(f"(recorded: {recorded!r}; now: {replayed!r})")
        super().__init__(" ".join(parts))


class EffectDiverged(NondeterminismError):
    """A recorded effect or LLM call cannot be served: the log has no record of it here, or a
    different one. The handler cannot go on without its result, so this agent's replay stops."""


class StateDiverged(NondeterminismError):
    """The agent's state after a step is not the one the live run recorded, though the step's outputs
    may all agree: nondeterminism that reached only the state (``id()`` ordering, a C extension's
    value). Everything the agent does later may differ; its later digests are not reported again."""

    def __init__(self, *, offset: int, agent: str, recorded_digest: str, replayed_digest: str,
                 diff: list[str] | None = None) -> None:
        self.recorded_digest = recorded_digest
        self.replayed_digest = replayed_digest
        self.diff = diff
        """How the live state and the replayed one differ, when the live state is known
        (:class:`swarmlog.runtime.LiveStates`); None otherwise."""
        detail = "the state after this step differs from the one the live run recorded"
        if diff is None:
            detail += " (the log holds its digest, not the state itself)"
        super().__init__(offset=offset, agent=agent, detail=detail, recorded={"state_digest": recorded_digest},
                         replayed={"state_digest": replayed_digest, **({"diff": diff} if diff is not None else {})})


# --- code that changes while runs are in flight (swarmlog.runtime.patches, .failures) ------------


class PatchUnknown(NondeterminismError):
    """The log records that a step took the patched path of ``ctx.patched(patch_id)``, and the code
    replaying it does not call that patch there: older code, or a patch removed too early."""

    def __init__(self, *, offset: int, agent: str, patch_id: str) -> None:
        self.patch_id = patch_id
        super().__init__(offset=offset, agent=agent, recorded={"patch": patch_id},
                         detail=f"the log records that this step ran with patch {patch_id!r} "
                                f"(ctx.patched({patch_id!r})), which this code does not call here: it is older "
                                f"than the code that wrote the log. Run code that has the patch (or "
                                f"ctx.deprecate_patch({patch_id!r}) once the patch is retired)")


class FailedStepChanged(EffectDiverged):
    """A step the log records as failed (``handler.failed``) does not fail, or fails otherwise, with
    this code: a fix deployed without a versioned step, so the recorded failure no longer replays.
    The step cannot go on where it failed live (an :class:`EffectDiverged`: the replay of this agent stops)."""

    def __init__(self, *, offset: int, agent: str, error_type: str, message: str, replayed: object) -> None:
        self.error_type = error_type
        self.message = message
        super().__init__(offset=offset, agent=agent, recorded={"failed": f"{error_type}: {message}"},
                         replayed=replayed,
                         detail=f"this step failed live ({error_type}: {message}) and this code does not fail "
                                f"the same way there. Put the fix behind a versioned step "
                                f"(`if ctx.patched('fix-...'):` new code, `else:` the old), so the recorded "
                                f"failure replays as it happened, then let the run go on from the failed step "
                                f"with `swarmlog retry` (docs/evolution.md)")


class CodeVersionRefused(RunError):
    """An agent's code is not the version its run is pinned to, and is not declared compatible with it."""

    def __init__(self, *, topic: str, run_id: str, agent: str, recorded: str, current: str,
                 compatible: Sequence[str]) -> None:
        self.topic = topic
        self.run_id = run_id
        self.agent = agent
        self.recorded = recorded
        self.current = current
        self.compatible = tuple(compatible)
        also = f" (declared compatible with: {', '.join(self.compatible)})" if self.compatible else ""
        super().__init__(f"agent {agent!r} runs code version {current!r}{also}, and run {run_id!r} (topic {topic!r}) "
                         f"is pinned to {recorded!r}: leave the run to the agents of version {recorded!r} until it "
                         f"drains, or declare the change compatible (Swarm(compatible_with=[{recorded!r}]) with "
                         f"versioned steps for what changed, or `swarmlog run --accept-version {recorded}`)")


class RunCannotGoOn(RunError):
    """``swarmlog run`` stopped with steps that failed and were not retried, or agents that refused the run."""

    def __init__(self, *, topic: str, problems: Sequence[str]) -> None:
        self.topic = topic
        self.problems = tuple(problems)
        super().__init__(f"the run in topic {topic!r} cannot go on: " + "; ".join(self.problems))


# --- replay tokens ----------------------------------------------------------------------------------


class TokenError(SwarmlogError):
    """A replay token cannot be used (a token that does not match is no error: ``verify`` reports it)."""


class InvalidToken(TokenError):
    """A replay token that cannot be used: unreadable, of an unknown version, malformed, or badly signed."""

    def __init__(self, *, source: str, problem: str) -> None:
        self.source = source
        self.problem = problem
        super().__init__(f"replay token {source}: {problem}")


class SignatureUnchecked(InvalidToken):
    """A signed token, and no key to check its signature with: accepting it would accept a forgery."""

    def __init__(self, *, source: str) -> None:
        super().__init__(source=source, problem=(
            "it is signed, but SWARMLOG_TOKEN_KEY is not set, so its signature cannot be checked; "
            "a token whose contents were altered with the log would pass. Set SWARMLOG_TOKEN_KEY to the key "
            "that signed it, or pass --unchecked-signature to check the contents alone (which proves "
            "nothing about who made the token)"))


__all__ = ["EventFate", *sorted(name for name, value in list(globals().items())
                               if isinstance(value, type) and issubclass(value, SwarmlogError))]
