"""Simulation: schedules of the case study per minute, beside what finding its race took before.

Rows (each repetition of each row interleaved with the others):

* ``simulate.sampled``: ``Simulator(case_study.buggy).run(seed)`` for N seeds — N seeded
  schedules, no Hypothesis, no shrinking: for each, a fresh in-memory log, the five agents' steppers, the schedule's
  steps (handlers under the guard, outputs validated, encoded and committed one
  transaction per step), the checks (end state, ``no_message_ignored``).
* ``simulate.sampled_crashes``: the same with ``crashes=2`` (agents die before commits,
  their next lives rebuild from offset zero).
* ``simulate.hypothesis_fixed``: ``Simulator(case_study.fixed, crashes=2).explore(1000)``:
  Hypothesis choosing, its own bookkeeping included (every schedule distinct).
* ``simulate.replay_floor`` (baseline): the logs of the same N schedules replayed with the
  runtime's swarm replayer in memory (``replay_swarm_log``): the same agents' folds with
  nothing scheduled and nothing written — what a schedule cannot cost less than.
* ``simulate.live_kafka`` (baseline): live runs of the buggy case study on the broker
  (fresh topic, ``start_run``, ``run_agents(until_quiet=1.0)``): how its deadlock was
  found before (``swarmlog.examples.case_study.find_deadlock``, 2 live runs in the demo).

``events`` counts schedules (runs for the live baseline); ``schedules_per_min`` is the
rate a minute; ``cpu_s`` is the process CPU time of a repetition (on a shared machine
the wall clock also counts other people's work). ``BENCH_SIM_SCHEDULES`` (default 2000),
``BENCH_SIM_LIVE_RUNS`` (default 3).
"""

from __future__ import annotations

import time
from typing import Any

from swarmlog.examples import case_study
from swarmlog.runtime import replay_swarm_log, run_agents, start_run
from swarmlog.schema.registry import SchemaRegistry
from swarmlog.settings import Settings
from swarmlog.testing import Simulator, no_message_ignored

from .common import Run, env_int, fresh_topic, log, reps, row

SCHEDULES = env_int("BENCH_SIM_SCHEDULES", 2000)
LIVE_RUNS = env_int("BENCH_SIM_LIVE_RUNS", 3, scale=False)


def _sim(swarm: Any, **kw: Any) -> Simulator:
    return Simulator(swarm, effects=case_study.MODELS, end_state=case_study.finished, invariants=[no_message_ignored],
                     **kw)


class _Sampled:
    """N seeded schedules run one after the other (no shrinking: every run is counted)."""

    def __init__(self, sim: Simulator, n: int, seed: int) -> None:
        runs = [sim.run(seed * n + i) for i in range(n)]
        self.distinct = len({r.schedule.trimmed() for r in runs})
        self.failures = sum(1 for r in runs if not r.ok)
        self.found_after = next((i + 1 for i, r in enumerate(runs) if not r.ok), None)

    def __str__(self) -> str:
        return f"{self.distinct} distinct, {self.failures} failed"


def run(s: Settings, registry: SchemaRegistry) -> list[dict[str, Any]]:
    buggy, crashing = _sim(case_study.buggy), _sim(case_study.buggy, crashes=2)
    fixed = _sim(case_study.fixed, crashes=2)
    logs = [buggy.run(i) for i in range(SCHEDULES)]  # the floor replays these logs
    rows = {name: Run(f"simulate.{name}", n, extra={"unit": "schedules"})
            for name, n in (("sampled", SCHEDULES), ("sampled_crashes", SCHEDULES), ("hypothesis_fixed", 1000),
                            ("replay_floor", SCHEDULES))}
    live = Run("simulate.live_kafka", LIVE_RUNS, extra={"unit": "live runs"})
    found = {}

    def measure(r: Run, fn: Any) -> Any:
        c0, t0 = time.process_time(), time.perf_counter()
        out = fn()
        seconds = time.perf_counter() - t0
        r.add(seconds, cpu_s=time.process_time() - c0, schedules_per_min=r.events / seconds * 60)
        return out

    def live_runs() -> None:
        for i in range(LIVE_RUNS):
            topic = fresh_topic(s, "sim-live")
            ts = s.model_copy(update={"topic": topic})
            start_run(settings=ts, swarm=case_study.buggy, run_id=f"live-{i}", seed=i)
            run_agents(settings=ts, swarm=case_study.buggy, until_quiet=1.0)

    for rep in range(reps(3)):
        found["sampled"] = measure(rows["sampled"], lambda rep=rep: _Sampled(buggy, SCHEDULES, rep))
        found["sampled_crashes"] = measure(rows["sampled_crashes"], lambda rep=rep: _Sampled(crashing, SCHEDULES, rep))
        found["hypothesis_fixed"] = measure(rows["hypothesis_fixed"],
                                            lambda rep=rep: fixed.explore(max_examples=1000, seed=rep))
        rows["hypothesis_fixed"].events = found["hypothesis_fixed"].examples
        measure(rows["replay_floor"], lambda: [replay_swarm_log(backend=r.log, swarm=r.swarm, topic=r.topic,
                                                                registry=registry) for r in logs])
        measure(live, live_runs)
        log(" ".join(f"{k}: {v}" for k, v in found.items()))
    sampled, crashes, hyp = found["sampled"], found["sampled_crashes"], found["hypothesis_fixed"]
    return [
        row(rows["sampled"], live, headline=True, target="thousands of schedules per minute",
            distinct=sampled.distinct, failed=sampled.failures, found_after=sampled.found_after),
        row(rows["sampled"], rows["replay_floor"], distinct=sampled.distinct),
        row(rows["sampled_crashes"], rows["replay_floor"], distinct=crashes.distinct, failed=crashes.failures),
        row(rows["hypothesis_fixed"], rows["sampled_crashes"], distinct=hyp.distinct, failed=0 if hyp.failure is None
            else 1),
        row(rows["replay_floor"]),
        row(live),
    ]
