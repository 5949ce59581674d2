"""Runs (:class:`RunError`): a run that does not fit its topic or the interpreter, input that gets no reply, a
handler's misuse of ``ctx``, state that cannot be kept, a replay or regression process lost, a fork inside a
step, and code whose version the run refuses."""

from __future__ import annotations

from collections.abc import Sequence

from ._base import SwarmlogError

__all__ = ["RunError", "RunAlreadyRecorded", "ContinueRefused", "RunContinuedElsewhere", "RunNotStarted",
           "InputBeforeRun", "NoReply", "ReplyTimeout", "InputHandlerFailed", "NoRunStarted", "HashSeedMismatch",
           "OutsideStep", "EffectFailed", "StateNotSerialisable", "StateNotCapturable", "CheckpointUnreadable",
           "SnapshotStale", "ReplayWorkerFailed", "RegressionWorkerFailed", "ForkPointInsideStep",
           "CodeVersionRefused", "RunCannotGoOn"]


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


# --- code that changes while runs are in flight (its nondeterminism: _nondeterminism.py) ---------------


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
