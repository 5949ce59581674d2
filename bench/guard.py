"""The determinism guard's cost: handlers run with its profile hook beside the same handlers without it.

The hook runs on every call and return inside a handler, so what it costs depends on how many
calls a handler makes. Two measurements, both in this process with repetitions interleaved:

* ``guard.replay_handlers``: ``replay_swarm`` of a recorded two-agent ping-pong on the in-memory
  log (no broker: what is left is decoding, the fold, and the handlers), whose handlers do the
  kind of work an agent does between LLM calls — parse a JSON body, count and rank words, keep a
  bounded list of notes in its state, build a dataclass, log at a disabled level, send the next
  message: about 150 calls per step. Its baseline is the same replay with the runtime's
  ``guarded`` replaced by a context manager that does nothing.
* ``guard.log_calls``: ``LOG_CALLS`` ``logger.info(...)`` calls inside ``guarded()`` into a
  ``StreamHandler`` whose format stamps the time, the process and the thread (what the guard lets
  a Logger call do), beside the same calls outside it.
* ``guard.calls``: a handler-shaped loop of ``CALLS`` iterations of one Python call (a helper
  function) and four C calls (``len`` twice, ``dict.get``, ``str.join``) inside ``guarded()``,
  beside the same loop outside it: the hook's cost per call, with nothing else in the way; and the
  same loop under a profile function that does nothing, the floor any ``sys.setprofile`` hook
  written in Python pays (``empty_hook_ns_per_call``).
* ``guard.agent_step_cpu``: ``bench.swarm.agent_steps_cpu``, one ring agent's live step (routing,
  decoding, the handler under the guard, its output validated and encoded, its state digest), no
  Kafka.

The guard's hook is the one this process installs (:func:`swarmlog.guard.hook_in_use`: the C one
where it is built); each measurement with it has a ``*_python_hook`` row beside it, the same with
the Python hook (``SWARMLOG_GUARD_HOOK=python``'s), interleaved with it. Times are the process's
CPU time (``time.process_time``): steadier than the wall clock on a shared machine, and all of it
is this process's work.

Usage: part of ``make bench``; alone, with no cluster, ``PYTHONPATH=platform .venv/bin/python -m bench.guard``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import logging
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from swarmlog import Agent, Swarm, on, on_message
from swarmlog.guard import _hook, guarded, hook_in_use
from swarmlog.log.memory import InMemoryLog
from swarmlog.replaying import replay_swarm
from swarmlog.runtime import engine, run_agents, start_run
from swarmlog.schema.registry import SchemaRegistry
from swarmlog.settings import Settings

from .common import Run, env_int, interleave, log, reps, row
from .swarm import STEP_MESSAGES, agent_steps_cpu

STEPS = env_int("BENCH_GUARD_STEPS", 4000)
CALLS = env_int("BENCH_GUARD_CALLS", 200_000)
LOG_CALLS = env_int("BENCH_GUARD_LOG_CALLS", 5_000)
TEXT = ("the swarm appends and replays events in one total order without any clock while agents "
        "plan review and answer questions about logs offsets and states") * 2
logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class Note:
    step: int
    top: tuple[tuple[str, int], ...]


def _render(ranked: list[tuple[str, int]]) -> str:
    return ", ".join(f"{word}:{count}" for word, count in ranked)


class Player(Agent):
    def initial_state(self) -> dict[str, Any]:
        return {"n": 0, "notes": []}

    @on("run.started")
    def serve(self, ctx, event):
        if self.name == "a":
            ctx.send("b", "hop", json.dumps({"ttl": STEPS, "text": TEXT}))

    @on_message("hop")
    def hop(self, ctx, event):
        task = json.loads(event.body)
        counts: dict[str, int] = {}
        for word in task["text"].split():
            if word.isalpha():
                counts[word] = counts.get(word, 0) + 1
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
        note = Note(step=ctx.now(), top=tuple(ranked))
        notes = self.state["notes"]
        notes.append(_render(list(note.top)))
        if len(notes) > 20:
            del notes[:10]
        self.state["n"] += 1
        logger.debug("step %d: %s", note.step, notes[-1])
        if task["ttl"] > 0:
            ctx.send("a" if self.name == "b" else "b", "hop", json.dumps({"ttl": task["ttl"] - 1, "text": TEXT}))


@contextlib.contextmanager
def _unguarded(**_: Any) -> Iterator[None]:
    yield


T = TypeVar("T")


def timed(fn: Callable[[], T]) -> tuple[float, T]:
    """CPU seconds of this process (every thread of it) that ``fn`` took, and its result."""
    t0 = time.process_time()
    result = fn()
    return time.process_time() - t0, result


@contextlib.contextmanager
def _python_hook() -> Iterator[None]:
    """Guards install the Python hook meanwhile (what SWARMLOG_GUARD_HOOK=python chooses at import)."""
    chosen = hook_in_use()
    _hook._select(_hook.GuardHook(native=False, why="bench: the Python hook"))
    try:
        yield
    finally:
        _hook._select(chosen)


def _empty_hook(frame: object, event: str, arg: object) -> None:
    pass


def _helper(x: int) -> int:
    return x + 1


def _calls() -> int:
    total, table, parts = 0, {"a": 1}, ["x", "y"]
    for _ in range(CALLS):
        total = _helper(total)
        total += len(parts) + table.get("a", 0) + len("".join(parts))
    return total


def run(s: Settings | None = None, registry: SchemaRegistry | None = None) -> list[dict[str, Any]]:
    registry = registry or SchemaRegistry.load(Settings().schema_dirs())
    backend = InMemoryLog()
    topic = "swarmlog.bench-guard"
    backend.create_topic(topic)
    settings = Settings(topic=topic, bootstrap_servers="127.0.0.1:1", database_url="postgresql://nobody@127.0.0.1:1/x")
    swarm = Swarm(name="guard-bench", agents=lambda: [Player("a"), Player("b")], code_version="1")
    start_run(settings=settings, swarm=swarm, run_id="guard-bench", seed=1, backend=backend, registry=registry)
    live = run_agents(settings=settings, swarm=swarm, backend=backend, registry=registry, until_quiet=0.5)
    steps = sum(r.steps for r in live)
    log(f"guard: recorded {steps} steps on the in-memory log")

    hook = str(hook_in_use())
    log(f"guard: {hook}")
    with_guard, without = Run("guard.replay_handlers", steps), Run("guard.replay_handlers_unguarded", steps)
    python_replay = Run("guard.replay_handlers_python_hook", steps)

    def replay(which: Run, unguard: bool, python: bool = False) -> None:
        original = engine.guarded
        if unguard:
            engine.guarded = _unguarded  # type: ignore[assignment]
        try:
            with _python_hook() if python else contextlib.nullcontext():
                seconds, result = timed(lambda: replay_swarm(settings=settings, swarm=swarm, registry=registry,
                                                             backend=backend))
        finally:
            engine.guarded = original  # type: ignore[assignment]
        assert result.divergences == [] and sum(result.steps.values()) == steps
        which.add(seconds)
        log(f"{which.name}: {steps / seconds:,.0f} steps/s")

    guarded_calls, plain_calls = Run("guard.calls", 5 * CALLS), Run("guard.calls_unguarded", 5 * CALLS)
    empty_calls = Run("guard.calls_empty_hook", 5 * CALLS)
    python_calls = Run("guard.calls_python_hook", 5 * CALLS)

    def calls(which: Run, guard: bool | None, python: bool = False) -> None:
        def body() -> int:
            if guard:
                with _python_hook() if python else contextlib.nullcontext():
                    with guarded(agent="bench", offset=0):
                        return _calls()
            if guard is None:  # the floor: what any Python profile function costs, doing nothing
                sys.setprofile(_empty_hook)
                try:
                    return _calls()
                finally:
                    sys.setprofile(None)
            return _calls()

        seconds, _ = timed(body)
        which.add(seconds)
        log(f"{which.name}: {5 * CALLS / seconds / 1e6:,.2f} M calls/s")

    step, python_step = Run("guard.agent_step_cpu", STEP_MESSAGES), Run("guard.agent_step_cpu_python_hook",
                                                                        STEP_MESSAGES)

    def agent_step(which: Run, python: bool) -> None:
        with _python_hook() if python else contextlib.nullcontext():
            seconds = agent_steps_cpu(registry, digests=True)
        which.add(seconds)
        log(f"{which.name}: {seconds / STEP_MESSAGES * 1e6:.1f} CPU-µs/step")

    stamped = logging.getLogger("bench.guard.stamped")
    stamped.propagate = False
    stamped.setLevel(logging.INFO)
    sink = logging.StreamHandler(io.StringIO())
    sink.setFormatter(logging.Formatter("%(asctime)s %(process)d %(threadName)s %(levelname)s %(message)s"))
    stamped.addHandler(sink)
    guarded_logs, plain_logs = Run("guard.log_calls", LOG_CALLS), Run("guard.log_calls_unguarded", LOG_CALLS)

    def logs(which: Run, guard: bool) -> None:
        def body() -> None:
            scope = guarded(agent="bench", offset=0) if guard else contextlib.nullcontext()
            with scope:
                for i in range(LOG_CALLS):
                    stamped.info("step %d", i)

        sink.stream = io.StringIO()
        seconds, _ = timed(body)
        which.add(seconds)
        log(f"{which.name}: {seconds / LOG_CALLS * 1e6:,.1f} us per call")

    replay(Run("warm-up", steps), False)  # imports, caches, the first replay's allocations
    agent_step(Run("warm-up", STEP_MESSAGES), False)
    interleave(reps(5), lambda r: replay(with_guard, False), lambda r: replay(without, True),
               lambda r: replay(python_replay, False, python=True),
               lambda r: logs(guarded_logs, True), lambda r: logs(plain_logs, False),
               lambda r: calls(guarded_calls, True), lambda r: calls(plain_calls, False),
               lambda r: calls(empty_calls, None), lambda r: calls(python_calls, True, python=True),
               lambda r: agent_step(step, False), lambda r: agent_step(python_step, True))
    per_step_us = {r.name: round(r.seconds / steps * 1e6, 2) for r in (with_guard, without, python_replay)}

    def ns_per_call(hooked: Run) -> dict[str, float]:
        """What a hooked call costs beyond the same call unhooked: median, and min of the minima."""
        n = 5 * CALLS
        return {"median": round((hooked.seconds - plain_calls.seconds) / n * 1e9, 1),
                "min": round((min(hooked.samples) - min(plain_calls.samples)) / n * 1e9, 1)}

    per_log_us = {r.name: round(r.seconds / LOG_CALLS * 1e6, 2) for r in (guarded_logs, plain_logs)}
    step_us = {r.name: {"median": round(statistics.median(r.samples) / STEP_MESSAGES * 1e6, 1),
                        "min": round(min(r.samples) / STEP_MESSAGES * 1e6, 1)} for r in (step, python_step)}
    return [row(with_guard, without, per_step_us=per_step_us, hook=hook, headline=True),
            row(python_replay, without, per_step_us=per_step_us, hook="Python profile hook"),
            row(guarded_logs, plain_logs, per_log_call_us=per_log_us, hook=hook),
            row(guarded_calls, plain_calls, hook_ns_per_call=ns_per_call(guarded_calls)["median"],
                hook_ns_per_call_min=ns_per_call(guarded_calls)["min"],
                empty_hook_ns_per_call=ns_per_call(empty_calls)["median"], hook=hook),
            row(python_calls, plain_calls, hook_ns_per_call=ns_per_call(python_calls)["median"],
                hook_ns_per_call_min=ns_per_call(python_calls)["min"], hook="Python profile hook"),
            row(step, python_step, cpu_us_per_step=step_us, unit="steps", hook=hook)]


if __name__ == "__main__":
    for result in run():
        print(json.dumps({k: v for k, v in result.items() if not k.endswith("samples_s")}))
