r"""swarmlog's pytest plugin: the ``simulate`` fixture, a property test of a swarm in a line, and the
``regress`` fixture, a test that fails when candidate code changes a recorded run.

Installed with swarmlog (the ``pytest11`` entry point), so any test can ask for it::

    from swarmlog.examples import case_study

    def test_the_review_always_finishes(simulate):
        simulate(case_study.fixed, effects={"work": {"summary": "done", "took_ms": 1}},
                 end_state=case_study.finished, crashes=2)

``simulate(swarm, **options)`` builds a :class:`~swarmlog.testing.Simulator` with the
options, lets Hypothesis explore its schedules (``max_examples``, default 1000; ``seed``,
default 0, so a run of the suite explores the same schedules every time;
``exhaustive=True`` runs every schedule instead), and returns the
:class:`~swarmlog.testing.Exploration`; if a schedule fails, the test fails with the
smallest failing schedule as a readable sequence of steps. The terminal summary says what
each exploration covered.

Command-line options: ``--swarmlog-examples N`` and ``--swarmlog-seed N`` override every
exploration's; ``--swarmlog-export`` writes each failing run to a new Kafka topic (the
cluster of ``SWARMLOG_BOOTSTRAP_SERVERS``) with its replay token in the test's
``tmp_path``, and says how to replay it.

``regress(swarm, topics=... | pattern=..., jobs=None, junit=None)`` replays recorded runs (on the
cluster of ``SWARMLOG_BOOTSTRAP_SERVERS``) against ``swarm`` (``"module:swarm"``) with
:func:`swarmlog.regression.regress`, and fails the test naming every run the code changes, where
it first departs (offset, agent, handler), and every run it could not check
(:class:`~swarmlog.regression.RunsChanged`, an ``AssertionError``); it returns the
:class:`~swarmlog.regression.RegressionReport` when no run changed (docs/regression.md)::

    def test_the_candidate_keeps_every_recorded_run(regress):
        regress("research.swarm:swarm", pattern=r"swarm\.research\..*")
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

__all__ = ["pytest_addoption", "pytest_configure", "pytest_terminal_summary", "regress", "simulate"]

_RESULTS = pytest.StashKey[list[tuple[str, Any]]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("swarmlog", "swarmlog simulation (the simulate fixture)")
    group.addoption("--swarmlog-examples", type=int, default=None, metavar="N",
                    help="schedules each simulate() exploration tries (default: its own max_examples, 1000)")
    group.addoption("--swarmlog-seed", type=int, default=None, metavar="N",
                    help="seed of every simulate() exploration (default: its own, 0)")
    group.addoption("--swarmlog-export", action="store_true",
                    help="export each failing schedule to Kafka (SWARMLOG_BOOTSTRAP_SERVERS) with its replay token")


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_RESULTS] = []


@pytest.fixture
def simulate(request: pytest.FixtureRequest, tmp_path: Any) -> Callable[..., Any]:
    """``simulate(swarm, *, max_examples=1000, seed=0, exhaustive=False, **simulator_options)``:
    explore ``swarm``'s schedules; fail the test with the smallest failing one."""
    from ..settings import Settings
    from . import SimulationFailed, Simulator, export

    config = request.config

    def run(swarm: Any, *, max_examples: int = 1000, seed: int = 0, exhaustive: bool = False,
            **options: Any) -> Any:
        sim = Simulator(swarm, **options)
        if exhaustive:
            result = sim.exhaust()
        else:
            n = config.getoption("--swarmlog-examples") or max_examples
            s = config.getoption("--swarmlog-seed")
            result = sim.explore(max_examples=n, seed=seed if s is None else s)
        config.stash[_RESULTS].append((request.node.nodeid, result))
        if result.failure is not None:
            exported = None
            if config.getoption("--swarmlog-export"):
                exported = export(result.failure, settings=Settings.from_env(),
                                  token_path=tmp_path / "replay-token.json")
            raise SimulationFailed(result.failure, header=str(result), exported=exported)
        return result

    return run


@pytest.fixture
def regress() -> Callable[..., Any]:
    """``regress(swarm, *, topics=None, pattern=None, jobs=None, junit=None)``: replay the recorded runs
    (``topics``, or every topic matching ``pattern``) against ``swarm``; fail the test naming each run the
    code changes and where; ``junit``: also write the JUnit report there."""
    from ..regression import RunsChanged, topics_matching
    from ..regression import regress as run_regression
    from ..settings import Settings

    def run(swarm: str, *, topics: list[str] | None = None, pattern: str | None = None, jobs: int | None = None,
            junit: Any = None) -> Any:
        __tracebackhide__ = True  # the failure is the report, not this fixture's code
        if (topics is None) == (pattern is None):
            raise TypeError("regress(swarm, topics=[...]) or regress(swarm, pattern=REGEX): one of the two")
        settings = Settings.from_env()
        chosen = list(topics) if topics is not None else topics_matching(settings, str(pattern))
        if not chosen:
            pytest.fail(f"no recorded run to replay: no topic matches {pattern!r} on {settings.bootstrap_servers}",
                        pytrace=False)
        report = run_regression(settings=settings, swarm=swarm, topics=chosen, jobs=jobs)
        if junit is not None:
            from pathlib import Path

            Path(junit).write_text(report.junit())
        if report.diverged or report.unchecked:
            raise RunsChanged(report)
        return report

    return run


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    results = config.stash.get(_RESULTS, [])
    if not results:
        return
    terminalreporter.section("swarmlog simulation")
    for nodeid, result in results:
        terminalreporter.write_line(f"{nodeid}: {result}")
