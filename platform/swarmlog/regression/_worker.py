"""One worker process of a regression replay: replays the runs it is handed, one at a time.

Started by :mod:`swarmlog.regression._pool` as ``python -m swarmlog.regression._worker SWARM VERBOSITY``
with the ``PYTHONHASHSEED`` of the runs it will take (:mod:`swarmlog.runtime.interpreter`: a
run's handlers must hash strings as its live agents did, and only a new process can change how
an interpreter hashes). It reads one JSON line per run (``{"topic": ...}``) on stdin and writes
one JSON line per answer on stdout: ``{"outcome": ...}`` (a
:class:`~swarmlog.regression.report.RunOutcome`), or ``{"reroute": seed}`` for a run pinned to
another seed, which the pool gives to a process started with that one. Nothing else reaches
stdout: file descriptor 1 is pointed at stderr before any handler runs, so a ``print`` in a
handler cannot corrupt the answers; logging goes to stderr as well, configured as the command line's
(:func:`swarmlog.observe.logs.configure_logging`) at the verbosity the pool passes (its own ``-v``).

The process keeps its Kafka backend (its readers' consumers, reassigned from one run's topic to
the next, fetching without waiting at a log's end: ``ENDED_LOG_TUNING``) and the swarm's imported
code from one run to the next: a regression replay of many short runs is mostly their starts otherwise.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import IO, Any

from ..errors import (
    HashSeedMismatch,
    HistoryIncomplete,
    InvalidEvent,
    KafkaUnavailable,
    PostgresUnavailable,
    RegressionWorkerFailed,
    RoutingHeaderMismatch,
    SchemaError,
    SchemaNotFound,
    ServiceUnavailable,
    SwarmlogError,
    TopicNotFound,
    TopicNotSinglePartition,
    UndecodableMessage,
    UnknownEventType,
)
from .report import RunOutcome

__all__ = ["CARRIED", "Replayer", "error_of", "fatal_answer", "main"]

logger = logging.getLogger(__name__)

UNREADABLE = (UndecodableMessage, InvalidEvent, UnknownEventType, SchemaError, SchemaNotFound, RoutingHeaderMismatch,
              TopicNotFound, TopicNotSinglePartition)
"""Errors that say the run's log cannot be read as a swarm's events (the verdict ``unreadable``)."""


CARRIED: dict[str, tuple[type[ServiceUnavailable], tuple[str, ...]]] = {
    "KafkaUnavailable": (KafkaUnavailable, ("address", "detail", "hint")),
    "PostgresUnavailable": (PostgresUnavailable, ("address", "detail", "hint")),
    "ServiceUnavailable": (ServiceUnavailable, ("service", "address", "detail", "hint")),
}
"""The errors a worker's ``fatal`` answer carries back as themselves (name -> class, the fields that
rebuild it): the one table both sides read. A service that did not answer stops the whole replay, and
the pool raises it as the class the worker met (so ``KafkaUnavailable`` stays :class:`~swarmlog.errors.Retriable`
and the CLI's exit 69); any other service error goes as its nearest class here (``KafkaHandshakeFailed``
as ``ServiceUnavailable``), and every other error as :class:`~swarmlog.errors.RegressionWorkerFailed`."""


def fatal_answer(exc: SwarmlogError) -> dict[str, Any]:
    """The worker's ``fatal`` answer for ``exc``: its text, its type's name and, for a carried error
    (:data:`CARRIED`), the type it travels as and the fields that rebuild it."""
    answer: dict[str, Any] = {"fatal": str(exc), "type": type(exc).__name__}
    carried = next((c.__name__ for c in type(exc).__mro__ if c.__name__ in CARRIED), None)
    if carried is not None:
        answer["carried"] = carried
        answer["fields"] = {f: getattr(exc, f) for f in CARRIED[carried][1]}
    return answer


def error_of(answer: dict[str, Any], *, topic: str | None, worker: str) -> SwarmlogError:
    """The error a worker's ``fatal`` answer reports, as the pool raises it (see :data:`CARRIED`)."""
    carried = CARRIED.get(answer.get("carried") or "")
    if carried is not None:
        cls, fields = carried
        given = answer.get("fields") or {}
        kwargs: dict[str, Any] = {f: given.get(f) for f in fields}
        return cls(**kwargs)
    return RegressionWorkerFailed(topic=topic, worker=worker, error_type=answer.get("type"),
                                  detail=str(answer.get("fatal", "no detail")))


class Replayer:
    """Replays runs of one swarm against its (candidate) code, in this process."""

    def __init__(self, *, swarm_spec: str) -> None:
        from ..kafka.backend import KafkaBackend
        from ..kafka.config import ENDED_LOG_TUNING
        from ..runtime import interpreter, load_swarm
        from ..schema.registry import SchemaRegistry
        from ..settings import Settings

        self.settings = Settings.from_env()
        self.swarm = load_swarm(swarm_spec)
        self.registry = SchemaRegistry.load(self.settings.schema_dirs())
        # Recorded runs, each read to its end and no further: a fetch held at a log's end would delay
        # the next run's first fetch on the same kept consumer (ENDED_LOG_TUNING).
        self.backend = KafkaBackend(self.settings, reader_config=ENDED_LOG_TUNING)
        self.seed = interpreter.current().seed

    def replay(self, topic: str) -> dict[str, Any]:
        """The answer for ``topic``: ``{"outcome": ...}`` or ``{"reroute": seed}``."""
        started = time.monotonic()
        logger.info("replaying %s (worker pid %d, PYTHONHASHSEED=%s)", topic, os.getpid(), self.seed)
        try:
            answer = self._replay(topic)
        except HashSeedMismatch as exc:
            return {"reroute": exc.recorded_seed}
        except ServiceUnavailable:
            raise  # not this run's fault: the regression replay as a whole cannot go on
        except HistoryIncomplete as exc:
            answer = RunOutcome(topic=topic, status="history-incomplete", detail=str(exc))
        except UNREADABLE as exc:
            answer = RunOutcome(topic=topic, status="unreadable", detail=str(exc))
        except SwarmlogError as exc:
            answer = RunOutcome(topic=topic, status="failed", detail=str(exc))
        if isinstance(answer, RunOutcome):
            answer.seconds = time.monotonic() - started
            logger.debug("%s: %s in %.3fs (%d events)", topic, answer.status, answer.seconds, answer.events)
            return {"outcome": answer.to_json()}
        logger.debug("%s: recorded with PYTHONHASHSEED=%s, sent back for a worker of that seed", topic,
                     answer.get("reroute"))
        return answer

    def _replay(self, topic: str) -> RunOutcome | dict[str, Any]:
        from ..log.base import require_complete_history
        from ..replaying import replay_swarm
        from ..runtime import find_run

        run = find_run(self.settings, topic, self.registry, backend=self.backend)
        if run is None:
            # A log that lost its first offsets lost its run.started with them: that is no run to skip.
            require_complete_history(self.backend, topic)
            return RunOutcome(topic=topic, status="skipped", detail="no run.started: not a recorded run")
        outcome = RunOutcome(topic=topic, status="clean", run_id=run.run_id, swarm=run.swarm,
                             code_version=run.code_version)
        if run.swarm and run.swarm != self.swarm.name:
            outcome.status, outcome.detail = "skipped", f"a run of swarm {run.swarm!r}, not {self.swarm.name!r}"
            return outcome
        if run.hash_seed is not None and run.hash_seed != self.seed:
            return {"reroute": run.hash_seed}
        # One process per run: the pool runs as many runs at once as it has processes.
        result = replay_swarm(settings=self.settings, swarm=self.swarm, topic=topic, registry=self.registry,
                              backend=self.backend, workers=1)
        outcome.events, outcome.end_offset = result.events, result.end_offset
        first = result.first_divergence
        if first is not None:
            outcome.status, outcome.divergences = "diverged", len(result.divergences)
            outcome.first_divergence = json.loads(json.dumps(first.to_json(), default=str))
            outcome.handler = self._handler_at(topic, first.offset, first.agent)
        return outcome

    def _handler_at(self, topic: str, offset: int, agent_name: str) -> str | None:
        """``Class.method`` of the handler that ran the step at ``offset`` (its input event's handler)."""
        from ..events import Event
        from ..log.base import message_at
        from ..schema.codec import Decoder

        if offset < 0:
            return None
        agent = next((a for a in self.swarm.agents() if a.name == agent_name), None)
        if agent is None:
            return None
        m = message_at(self.backend, topic, offset)
        if m is None:
            return None
        writer, rec = Decoder(self.registry).decode(m.value(), m.offset())
        handler = agent.handler_for(Event.from_message(m, writer, rec))
        if handler is None:
            return f"{type(agent).__qualname__} ({writer.event_type}: no handler)"
        # The agent's class, not the one that defined the method: a change made in a subclass
        # (an override of a helper the handler calls) is named after the subclass.
        return f"{type(agent).__qualname__}.{getattr(handler, '__name__', repr(handler))}"


def _answers() -> IO[str]:
    """stdout for the answers alone: a copy of fd 1, then fd 1 pointed at stderr (see the module's doc)."""
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    return answers


def main(argv: list[str] | None = None) -> int:
    import signal

    from ..observe.logs import configure_logging

    args = sys.argv[1:] if argv is None else argv
    swarm_spec, verbosity = args
    # Ctrl-C reaches the whole process group: the pool decides (it kills its workers), not each
    # worker with a traceback of its own; a pool that went away ends a worker by closing its stdin.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    answers = _answers()
    configure_logging(int(verbosity))  # to stderr, as the pool's own command line logs
    try:
        replayer = Replayer(swarm_spec=swarm_spec)
    except SwarmlogError as exc:
        answers.write(json.dumps(fatal_answer(exc)) + "\n")
        return 1
    answers.write(json.dumps({"ready": replayer.seed}) + "\n")
    for line in sys.stdin:
        topic = json.loads(line)["topic"]
        try:
            answer = replayer.replay(topic)
        except ServiceUnavailable as exc:
            answer = fatal_answer(exc)
        answers.write(json.dumps(answer, default=str) + "\n")
    return 0


if __name__ == "__main__":  # run as the module itself, not a copy named __main__: one Replayer class
    from swarmlog.regression._worker import main as _main

    sys.exit(_main())
