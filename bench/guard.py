"""The determinism guard's cost on every CPython swarmlog supports: handlers with its hook beside the same
handlers without it, in the same run.

The hook runs on every call inside a handler, so what it costs depends on how many calls a handler
makes. Measured in this process, with repetitions interleaved:

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
  Kafka, beside the same with the runtime's ``guarded`` doing nothing.

The guard's hook is the one this process installs (:func:`swarmlog.guard.hook_in_use`: the C one
where it is built, a profile function on CPython 3.11 and through sys.monitoring from 3.12); each
measurement with it has a ``*_python_hook`` row beside it, the same with the Python hook through the
same API, and from 3.12 a ``*_python_profile_hook`` row, the Python hook as a profile function (what
3.12 would run without sys.monitoring: the measurement behind the choice of API). Every unguarded
baseline runs with the guard's events off, as in a process that never entered a handler: under
sys.monitoring they stay on once a handler has run, and ``guard.calls_unguarded_events_on`` is what
code outside handlers then pays. Times are the process's CPU time (``time.process_time``): steadier
than the wall clock on a shared machine, and all of it is this process's work.

Then the same in a process of each other CPython (``BENCH_PYTHONS``, which ``make bench`` sets to the
versions ``make test`` runs; alone, the ``.venv-3.*`` venvs there are), whose rows are named
``...@3.12``: every row says its ``python``.

Usage: part of ``make bench``; alone, with no cluster, ``PYTHONPATH=platform .venv/bin/python -m bench.guard``
(``--here`` measures this interpreter only).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import logging
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
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

REPO = Path(__file__).resolve().parents[1]
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


PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
# The hooks each measurement runs with (a name, and what _hook_as selects): the one in use, the Python
# hook through the same API, and from 3.12 the Python hook as a profile function.
HOOKS = ("", "python") + (("python_profile",) if _hook._API == _hook.MONITORING else ())


@contextlib.contextmanager
def _hook_as(which: str) -> Iterator[None]:
    """Guards install ``which`` hook meanwhile ("": the one this process chose at import)."""
    chosen = hook_in_use()
    if which:
        api = _hook.PROFILE if which == "python_profile" else chosen.api
        _hook._select(_hook.GuardHook(native=False, why=f"bench: {which}", api=api))
    try:
        yield
    finally:
        _hook._select(chosen)


@contextlib.contextmanager
def _events_off() -> Iterator[None]:
    """No guard events meanwhile, as in a process that never entered a handler (a baseline). Under
    sys.monitoring they stay on once a handler ran; the next guard turns them on again."""
    if _hook._events is not None:
        _hook._events.turn_off()
        _hook._select(hook_in_use())  # bound afresh: the next install turns the events on
    yield


def _suffix(which: str) -> str:
    return f"_{which}_hook" if which else ""


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


def measure(registry: SchemaRegistry) -> list[dict[str, Any]]:
    """Every measurement, in this process (this interpreter)."""
    backend = InMemoryLog()
    topic = "swarmlog.bench-guard"
    backend.create_topic(topic)
    settings = Settings(topic=topic, bootstrap_servers="127.0.0.1:1", database_url="postgresql://nobody@127.0.0.1:1/x")
    swarm = Swarm(name="guard-bench", agents=lambda: [Player("a"), Player("b")], code_version="1")
    start_run(settings=settings, swarm=swarm, run_id="guard-bench", seed=1, backend=backend, registry=registry)
    live = run_agents(settings=settings, swarm=swarm, backend=backend, registry=registry, until_quiet=0.5)
    steps = sum(r.steps for r in live)
    log(f"guard: CPython {PYTHON}, recorded {steps} steps on the in-memory log")

    hook = str(hook_in_use())
    log(f"guard: {hook}")

    @contextlib.contextmanager
    def runtime_unguarded() -> Iterator[None]:
        original = engine.guarded
        engine.guarded = _unguarded  # type: ignore[assignment]
        try:
            with _events_off():
                yield
        finally:
            engine.guarded = original  # type: ignore[assignment]

    replays = {which: Run(f"guard.replay_handlers{_suffix(which)}", steps) for which in HOOKS}
    replay_plain = Run("guard.replay_handlers_unguarded", steps)

    def replay(which: Run, hooked: str | None) -> None:
        with _hook_as(hooked) if hooked is not None else runtime_unguarded():
            seconds, result = timed(lambda: replay_swarm(settings=settings, swarm=swarm, registry=registry,
                                                         backend=backend))
        assert result.divergences == [] and sum(result.steps.values()) == steps
        which.add(seconds)
        log(f"{which.name}: {steps / seconds:,.0f} steps/s")

    calls = {which: Run(f"guard.calls{_suffix(which)}", 5 * CALLS) for which in HOOKS}
    plain_calls = Run("guard.calls_unguarded", 5 * CALLS)
    empty_calls = Run("guard.calls_empty_hook", 5 * CALLS)
    events_on_calls = Run("guard.calls_unguarded_events_on", 5 * CALLS)

    def time_calls(which: Run, mode: str, hooked: str = "") -> None:
        def body() -> int:
            if mode == "guarded":
                with guarded(agent="bench", offset=0):
                    return _calls()
            if mode == "empty":  # the floor: what any Python profile function costs, doing nothing
                sys.setprofile(_empty_hook)
                try:
                    return _calls()
                finally:
                    sys.setprofile(None)
            return _calls()

        if mode == "events_on":  # no guard on this thread; the guard's events on, as after any handler
            with guarded(agent="bench", offset=0):
                pass
            seconds, _ = timed(body)
        elif mode == "unguarded":
            with _events_off():
                seconds, _ = timed(body)
        else:
            with _hook_as(hooked):
                seconds, _ = timed(body)
        which.add(seconds)
        log(f"{which.name}: {5 * CALLS / seconds / 1e6:,.2f} M calls/s")

    agent_steps = {which: Run(f"guard.agent_step_cpu{_suffix(which)}", STEP_MESSAGES) for which in HOOKS}
    plain_steps = Run("guard.agent_step_cpu_unguarded", STEP_MESSAGES)

    def agent_step(which: Run, hooked: str | None) -> None:
        with _hook_as(hooked) if hooked is not None else runtime_unguarded():
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
        with contextlib.nullcontext() if guard else _events_off():
            seconds, _ = timed(body)
        which.add(seconds)
        log(f"{which.name}: {seconds / LOG_CALLS * 1e6:,.1f} us per call")

    replay(Run("warm-up", steps), "")  # imports, caches, the first replay's allocations
    agent_step(Run("warm-up", STEP_MESSAGES), "")
    steps_each_rep: list[Callable[[int], None]] = [lambda r: replay(replay_plain, None)]
    steps_each_rep += [lambda r, w=which: replay(replays[w], w) for which in HOOKS]
    steps_each_rep += [lambda r: logs(guarded_logs, True), lambda r: logs(plain_logs, False)]
    steps_each_rep += [lambda r: time_calls(plain_calls, "unguarded"), lambda r: time_calls(empty_calls, "empty")]
    steps_each_rep += [lambda r, w=which: time_calls(calls[w], "guarded", w) for which in HOOKS]
    if _hook._API == _hook.MONITORING:
        steps_each_rep.append(lambda r: time_calls(events_on_calls, "events_on"))
    steps_each_rep.append(lambda r: agent_step(plain_steps, None))
    steps_each_rep += [lambda r, w=which: agent_step(agent_steps[w], w) for which in HOOKS]
    interleave(reps(5), *steps_each_rep)

    def ns_per_call(hooked: Run) -> dict[str, float]:
        """What a hooked call costs beyond the same call unhooked: median, and min of the minima."""
        n = 5 * CALLS
        return {"median": round((hooked.seconds - plain_calls.seconds) / n * 1e9, 1),
                "min": round((min(hooked.samples) - min(plain_calls.samples)) / n * 1e9, 1)}

    def hook_name(which: str) -> str:
        return hook if not which else ("Python profile hook" if which == "python_profile"
                                       else f"Python {hook_in_use().api} hook")

    per_step_us = {r.name: round(r.seconds / steps * 1e6, 2) for r in (*replays.values(), replay_plain)}
    per_log_us = {r.name: round(r.seconds / LOG_CALLS * 1e6, 2) for r in (guarded_logs, plain_logs)}
    step_us = {r.name: {"median": round(statistics.median(r.samples) / STEP_MESSAGES * 1e6, 1),
                        "min": round(min(r.samples) / STEP_MESSAGES * 1e6, 1)}
               for r in (*agent_steps.values(), plain_steps)}
    rows = [row(replays[w], replay_plain, per_step_us=per_step_us, hook=hook_name(w), headline=not w) for w in HOOKS]
    rows.append(row(guarded_logs, plain_logs, per_log_call_us=per_log_us, hook=hook))
    rows += [row(calls[w], plain_calls, hook_ns_per_call=ns_per_call(calls[w])["median"],
                 hook_ns_per_call_min=ns_per_call(calls[w])["min"], hook=hook_name(w),
                 unguarded_ns_per_call=round(plain_calls.seconds / (5 * CALLS) * 1e9, 1),
                 **({"empty_hook_ns_per_call": ns_per_call(empty_calls)["median"]} if not w else {}))
             for w in HOOKS]
    if events_on_calls.samples:
        rows.append(row(events_on_calls, plain_calls, events_on_ns_per_call=ns_per_call(events_on_calls)["median"],
                        hook="none on this thread; the guard's sys.monitoring events on"))
    rows += [row(agent_steps[w], plain_steps, cpu_us_per_step=step_us, unit="steps", hook=hook_name(w)) for w in HOOKS]
    for r in rows:
        r["python"] = PYTHON
    return rows


def _other_pythons() -> list[tuple[str, Path]]:
    """The other CPythons to measure, and their venvs' interpreters."""
    asked = os.environ.get("BENCH_PYTHONS")
    versions = asked.split() if asked is not None else sorted(
        (p.name.removeprefix(".venv-") for p in REPO.glob(".venv-3.*")), key=lambda v: int(v.split(".")[1]))
    found = []
    for version in versions:
        if version == PYTHON:
            continue
        interpreter = REPO / f".venv-{version}" / "bin" / "python"
        if not interpreter.exists():
            raise SystemExit(f"bench.guard: no venv for CPython {version} ({interpreter}): "
                             f"make .venv-{version}/.installed")
        found.append((version, interpreter))
    return found


def _elsewhere(version: str, interpreter: Path) -> list[dict[str, Any]]:
    """The same measurements in a process of another CPython, its rows named ``...@<version>``."""
    log(f"guard: CPython {version} ({interpreter})")
    done = subprocess.run([str(interpreter), "-m", "bench.guard", "--here", "--json"], cwd=REPO, text=True,
                          stdout=subprocess.PIPE, env={**os.environ, "BENCH_PYTHONS": ""})
    if done.returncode != 0:
        raise RuntimeError(f"bench.guard on CPython {version} failed (exit status {done.returncode})")
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    for r in rows:
        r["name"] = f"{r['name']}@{version}"
        if r.get("baseline"):
            r["baseline"] = f"{r['baseline']}@{version}"
    return rows


def run(s: Settings | None = None, registry: SchemaRegistry | None = None) -> list[dict[str, Any]]:
    registry = registry or SchemaRegistry.load(Settings().schema_dirs())
    rows = measure(registry)
    for version, interpreter in _other_pythons():
        rows += _elsewhere(version, interpreter)
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.guard", description=__doc__.splitlines()[0])
    parser.add_argument("--here", action="store_true", help="this interpreter only")
    parser.add_argument("--json", action="store_true", help="every field, samples included")
    args = parser.parse_args(argv)
    registry = SchemaRegistry.load(Settings().schema_dirs())
    rows = measure(registry) if args.here else run(registry=registry)
    for result in rows:
        print(json.dumps(result if args.json else {k: v for k, v in result.items() if not k.endswith("samples_s")}))


if __name__ == "__main__":
    main()
