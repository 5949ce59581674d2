"""Regression replay: every recorded run replayed against candidate code, before it is deployed.

``swarmlog replay --swarm`` checks one run; this checks many at once and says which ones the
candidate code changes, and where::

    from swarmlog.regression import regress, topics_matching

    report = regress(settings=settings, swarm="myswarm.agents:swarm",
                     topics=topics_matching(settings, r"swarm\\.research\\..*"))
    for group in report.groups():        # runs grouped by where the code first departs
        print(group.key, [r.topic for r in group.runs])

The face: :func:`regress` (the replay, in parallel worker processes: ``_pool``, ``_worker``);
choosing the runs (``runs``: :func:`topics_matching`, :func:`runs_in_mirror`, :func:`shard`);
the report (``report``: :class:`RegressionReport`, :class:`RunOutcome`, JSON, a table, JUnit XML).
``command`` is ``swarmlog regress``; ``swarmlog.testing.pytest_plugin`` has the ``regress``
fixture for a CI test that fails when the candidate code changes a recorded run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from ..settings import Settings
from .report import STATUSES, DivergenceGroup, RegressionReport, RunOutcome, RunsChanged
from .runs import parse_since, runs_in_mirror, shard, topics_matching

__all__ = ["STATUSES", "DivergenceGroup", "RegressionReport", "RunOutcome", "RunsChanged", "parse_since", "regress",
           "runs_in_mirror", "shard", "topics_matching"]

logger = logging.getLogger(__name__)


def regress(*, settings: Settings, swarm: str, topics: list[str], jobs: int | None = None,
            progress: Callable[[RunOutcome], None] | None = None, verbosity: int | None = None) -> RegressionReport:
    """Replay every run in ``topics`` against the code of ``swarm`` (``module:swarm``), ``jobs`` runs
    at a time, each in a worker process (None: one per CPU this process may use).

    The workers log to stderr at ``verbosity`` (the command line's ``-v`` count; None: as much as this
    process logs of ``swarmlog``: INFO is ``-v``, DEBUG ``-vv``).

    Nothing is written to the logs, and no agent's consumer group is touched. ``progress`` is
    called with each run's outcome as it comes (from a worker's thread). Kafka unreachable stops it
    with :class:`~swarmlog.errors.ServiceUnavailable`; anything wrong with one run is that run's
    verdict (``unreadable``, ``history-incomplete``, ``failed``).
    """
    from ..errors import UsageError
    from ..runtime import available_cpus, interpreter, load_swarm
    from ._pool import run_pool

    loaded = load_swarm(swarm)  # here first: a swarm that does not load is one clear error, not one per worker
    if jobs is not None and jobs < 1:
        raise UsageError(f"--jobs must be 1 or more, not {jobs}")
    jobs = jobs or available_cpus()
    seed = interpreter.current().seed
    started = time.monotonic()
    logger.info("regression replay of %d run(s) against %s in %d process(es)", len(topics), swarm,
                min(jobs, len(topics)))
    if verbosity is None:
        level = logging.getLogger("swarmlog").getEffectiveLevel()
        verbosity = 2 if level <= logging.DEBUG else 1 if level <= logging.INFO else 0
    outcomes = run_pool(topics, swarm_spec=swarm, jobs=jobs, progress=progress, verbosity=verbosity,
                        seed=interpreter.DEFAULT_HASH_SEED if seed is None else seed)
    report = RegressionReport(swarm=swarm, outcomes=outcomes, seconds=time.monotonic() - started,
                              jobs=min(jobs, max(1, len(topics))), meta={"swarm_name": loaded.name})
    logger.info("%s", report.summary())
    return report
