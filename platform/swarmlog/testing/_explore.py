"""Many runs of one simulation: explored by Hypothesis, sampled from seeds, or all of them.

* :func:`explore` lets Hypothesis choose (``st.data()``): it tries schedules, and once one
  fails, shrinks it toward the default order — fewer choices, smaller ones — until no
  smaller schedule fails; :func:`shrink` then finishes the job on the :class:`Schedule`.
* :func:`sample` runs seeded random schedules with no Hypothesis at all (what ``make
  bench`` times): schedule ``i`` of seed ``s`` is the same in every process. Its first
  failure is shrunk the same way.
* :func:`exhaust` runs every schedule there is, depth-first over the choices, and keeps
  the smallest failure (fewest choices away from the default, then fewest steps): for a
  swarm small enough, a proof rather than a sample.

**Why a last shrinking pass.** A choice is an index into what is possible *at that point*,
so removing one early choice (say, a crash) changes what every later index means.
Hypothesis shrinks the draws it made and can stop at a schedule that is locally minimal
for its representation but not for ours; :func:`shrink` tries, on the schedule itself,
deleting each choice and lowering each one, and keeps any smaller schedule that still
fails the same check, until nothing smaller does.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import ScheduleMismatch
from ._run import SimRun, SimulationFailed
from ._schedule import Schedule, require_hypothesis


class Simulator(Protocol):
    """What exploring needs of a :class:`swarmlog.testing.Simulator`."""

    swarm: Any

    def run(self, schedule: Any = None) -> SimRun: ...

logger = logging.getLogger(__name__)


@dataclass(eq=False)
class Exploration:
    """What many runs of a simulation found."""

    how: str
    """``hypothesis``, ``sampled`` or ``exhaustive``."""
    examples: int
    """Runs made (for Hypothesis: generated and shrinking runs together)."""
    distinct: int
    """Distinct schedules among them."""
    found_after: int | None
    """Runs made when the first failure appeared (None: nothing failed)."""
    failure: SimRun | None
    """The failing run to look at: the first failure, shrunk (Hypothesis, sampled), or the smallest
    of all (exhaustive)."""
    seconds: float
    complete: bool = False
    """Exhaustive only: every schedule of the swarm was run."""
    failures: int = 0
    """How many runs failed (exhaustive and sampled)."""

    @property
    def per_minute(self) -> float:
        return self.examples / self.seconds * 60 if self.seconds else 0.0

    def __str__(self) -> str:
        what = {"hypothesis": "Hypothesis explored", "sampled": "sampled", "exhaustive": "ran"}[self.how]
        head = (f"{what} {self.examples} schedules ({self.distinct} distinct"
                f"{', all there are' if self.complete else ''}) in {self.seconds:.1f} s")
        if self.failure is None:
            return f"{head}: none failed"
        f = self.failure
        shape = f"{len(f.steps)} steps, {f.schedule.deviations} choice(s) away from the default order"
        kind = {"hypothesis": "shrunk to", "sampled": "shrunk to", "exhaustive": "the smallest:"}[self.how]
        failed = f"{self.failures} failed; " if self.failures else ""
        return f"{head}: {failed}the first failure after {self.found_after}; {kind} {shape}"

    def check(self) -> None:
        """Raise :class:`SimulationFailed` with the failing run if there is one."""
        if self.failure is not None:
            raise SimulationFailed(self.failure, header=str(self))


def explore(sim: Simulator, *, max_examples: int = 1000, seed: int = 0) -> Exploration:
    """Up to ``max_examples`` schedules chosen by Hypothesis (seeded: the same exploration every
    time); on the first failure, shrink it. Hypothesis stops early once it has tried every
    schedule the swarm has."""
    require_hypothesis("Simulator.explore, the simulate fixture")
    from hypothesis import HealthCheck, Phase, Verbosity, given, settings
    from hypothesis import seed as fixed_seed
    from hypothesis import strategies as st

    count = 0
    found_after: int | None = None
    seen: set[Schedule] = set()

    @fixed_seed(seed)
    @settings(max_examples=max_examples, database=None, deadline=None, derandomize=False,
              phases=[Phase.explicit, Phase.generate, Phase.shrink], suppress_health_check=list(HealthCheck),
              verbosity=Verbosity.quiet, report_multiple_bugs=False, print_blob=False)
    @given(st.data())
    def prop(data: object) -> None:
        nonlocal count, found_after
        run = sim.run(data)
        count += 1
        seen.add(run.schedule.trimmed())
        if not run.ok:
            if found_after is None:
                found_after = count
            raise SimulationFailed(run)

    started = time.perf_counter()
    failure = None
    try:
        prop()
    except SimulationFailed as exc:  # raised again by Hypothesis for the smallest failing example
        failure = exc.run
    extra = 0
    if failure is not None and failure.replayable:
        failure, extra = shrink(sim, failure)
    result = Exploration(how="hypothesis", examples=count + extra, distinct=len(seen), found_after=found_after,
                         failure=failure, seconds=time.perf_counter() - started)
    logger.info("%s: %s", sim.swarm.name, result)
    return result


def sample(sim: Simulator, *, schedules: int = 1000, seed: int = 0) -> Exploration:
    """``schedules`` runs, schedule ``i`` chosen by ``random.Random(seed * 1_000_003 + i)``."""
    started = time.perf_counter()
    seen: set[Schedule] = set()
    first: SimRun | None = None
    found_after = None
    failures = 0
    for i in range(schedules):
        run = sim.run(seed * 1_000_003 + i)
        seen.add(run.schedule.trimmed())
        if not run.ok:
            failures += 1
            if first is None:
                first, found_after = run, i + 1
    extra = 0
    if first is not None:
        first, extra = shrink(sim, first)
    return Exploration(how="sampled", examples=schedules + extra, distinct=len(seen), found_after=found_after,
                       failure=first, seconds=time.perf_counter() - started, failures=failures)


def exhaust(sim: Simulator, *, limit: int = 100_000) -> Exploration:
    """Every schedule, depth-first from the default order, up to ``limit`` runs.

    Each run follows a prefix of choices and takes the default after it; it records how many
    options each later choice had, and every other option there is a prefix still to run.
    So each complete schedule runs exactly once.
    """
    started = time.perf_counter()
    stack: list[tuple[int, ...]] = [()]
    runs = 0
    failures = 0
    found_after = None
    best: SimRun | None = None
    while stack and runs < limit:
        prefix = stack.pop()
        run = sim.run(Schedule(prefix))
        runs += 1
        choices, sizes = run.schedule.choices, run.sizes
        for i in range(len(choices) - 1, len(prefix) - 1, -1):
            for alt in range(sizes[i] - 1, 0, -1):
                stack.append(choices[:i] + (alt,))
        if not run.ok:
            failures += 1
            if found_after is None:
                found_after = runs
            if best is None or _size(run) < _size(best):
                best = run
    return Exploration(how="exhaustive", examples=runs, distinct=runs, found_after=found_after, failure=best,
                       seconds=time.perf_counter() - started, complete=not stack, failures=failures)


def _size(run: SimRun) -> tuple[int, int, tuple[int, ...]]:
    return run.schedule.deviations, len(run.steps), run.schedule.trimmed().choices


def shrink(sim: Simulator, run: SimRun, *, budget: int = 1000) -> tuple[SimRun, int]:
    """A smallest schedule near ``run``'s that still fails one of the checks it failed (see the
    module); and how many runs it took (at most ``budget``)."""
    checks = {v.check for v in run.violations}
    best = run
    runs = 0
    improved = True
    while improved and runs < budget:
        improved = False
        choices = best.schedule.trimmed().choices
        candidates = [choices[:i] + choices[i + 1:] for i in range(len(choices))]
        candidates += [choices[:i] + (v,) + choices[i + 1:] for i, c in enumerate(choices) for v in range(c)]
        for cand in candidates:
            if runs >= budget:
                break
            try:
                trial = sim.run(Schedule(cand))
            except ScheduleMismatch:
                continue
            runs += 1
            if not trial.ok and checks & {v.check for v in trial.violations} and _size(trial) < _size(best):
                best, improved = trial, True
                break
    return best, runs
