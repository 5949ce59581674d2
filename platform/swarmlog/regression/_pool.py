"""The worker processes of a regression replay, and which run goes to which.

**Why processes, and why not forked ones.** Runs are independent, so they replay in parallel,
one per process (a swarm replay is CPU-bound Python: threads would share one core). Each run
must be replayed by an interpreter that hashes strings as its live agents did
(:mod:`swarmlog.runtime.interpreter`), which is fixed when a process starts: a forked child
keeps its parent's seed. So the workers are new interpreters
(:mod:`swarmlog.regression._worker`) started with a ``PYTHONHASHSEED``; a run pinned to another
seed comes back (``reroute``) and goes to a worker restarted with that seed. Runs of one
deployment share a seed (the chart and the image set it), so in practice every worker keeps
the one it started with.

**Scheduling.** One thread per worker takes the next run from a shared list, preferring runs
whose seed it already has; a run stays *outstanding* until its verdict is in, so a worker
whose list looks empty still waits for a rerouted run to come back. A worker that dies
(killed, out of memory) costs only the run it was replaying: that run is ``failed``, with the
exit status, and a fresh worker takes the next one. Kafka or Postgres unreachable is not one
run's fault: the first worker to meet it stops the whole replay with that error.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from ..errors import RegressionWorkerFailed
from ..runtime.interpreter import REEXEC_ENV
from ._worker import error_of
from .report import RunOutcome

__all__ = ["run_pool"]

logger = logging.getLogger(__name__)


class _WorkerDied(Exception):
    def __init__(self, returncode: int | None, worker: str) -> None:
        self.returncode = returncode
        self.worker = worker


class _WorkerFatal(Exception):
    """A worker's ``fatal`` answer: an error that is no one run's verdict (``topic`` None: as it started)."""

    def __init__(self, answer: dict[str, Any], *, worker: str, topic: str | None) -> None:
        self.answer = answer
        self.worker = worker
        self.topic = topic


class _Worker:
    """One worker process, started with ``PYTHONHASHSEED=seed``."""

    def __init__(self, *, swarm_spec: str, seed: int, env: dict[str, str], verbosity: int) -> None:
        self.seed = seed
        self.proc = subprocess.Popen([sys.executable, "-m", "swarmlog.regression._worker", swarm_spec,
                                      str(verbosity)],
                                     env={**env, "PYTHONHASHSEED": str(seed)}, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1)
        self.name = f"pid {self.proc.pid}, PYTHONHASHSEED={seed}"
        ready = self._answer(None)
        if "ready" not in ready:
            self.close()
            raise _WorkerFatal(ready, worker=self.name, topic=None)

    def _answer(self, topic: str | None) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise _WorkerDied(self.proc.wait(), self.name)
        answer: dict[str, Any] = json.loads(line)
        if "fatal" in answer:
            raise _WorkerFatal(answer, worker=self.name, topic=topic)
        return answer

    def ask(self, topic: str) -> dict[str, Any]:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps({"topic": topic}) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise _WorkerDied(self.proc.wait(), self.name) from None
        return self._answer(topic)

    def close(self) -> None:
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


class _Runs:
    """The runs not yet given a verdict, shared by the workers' threads."""

    def __init__(self, topics: list[str], progress: Callable[[RunOutcome], None] | None) -> None:
        self.pending: deque[tuple[str, int | None]] = deque((t, None) for t in topics)
        self.outstanding = len(topics)
        self.outcomes: dict[str, RunOutcome] = {}
        self.error: BaseException | None = None
        self.progress = progress
        self.cond = threading.Condition()
        self.workers: set[_Worker] = set()
        """The worker processes alive now: killed if the caller is interrupted."""

    def started(self, worker: _Worker) -> None:
        with self.cond:
            self.workers.add(worker)

    def ended(self, worker: _Worker) -> None:
        with self.cond:
            self.workers.discard(worker)

    def kill_all(self) -> None:
        with self.cond:
            workers = list(self.workers)
        for w in workers:
            w.proc.kill()

    def take(self, seed: int | None) -> tuple[str, int | None] | None:
        """The next run, one this seed can replay first; None when every run has its verdict."""
        with self.cond:
            while True:
                if self.error is not None or self.outstanding == 0:
                    return None
                if self.pending:
                    for i, (topic, needs) in enumerate(self.pending):
                        if needs is None or needs == seed:
                            del self.pending[i]
                            return topic, needs
                    return self.pending.popleft()
                self.cond.wait()

    def back(self, topic: str, seed: int) -> None:
        with self.cond:
            self.pending.append((topic, seed))
            self.cond.notify_all()

    def done(self, outcome: RunOutcome) -> None:
        with self.cond:
            self.outcomes[outcome.topic] = outcome
            self.outstanding -= 1
            self.cond.notify_all()
        if self.progress is not None:
            self.progress(outcome)

    def fail(self, error: BaseException) -> None:
        with self.cond:
            if self.error is None:
                self.error = error
            self.cond.notify_all()


def _child_env() -> dict[str, str]:
    """The workers' environment: this one, with what this process could import importable there too
    (a swarm module found through the current directory or a test runner's rootdir)."""
    env = dict(os.environ)
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    extra = [p for p in sys.path if p and os.path.isdir(p) and not any(p.startswith(x) for x in prefixes)]
    if os.getcwd() not in extra:
        extra.append(os.getcwd())
    env["PYTHONPATH"] = os.pathsep.join([*extra, *filter(None, [env.get("PYTHONPATH")])])
    env.pop(REEXEC_ENV, None)
    return env


def _serve(runs: _Runs, *, swarm_spec: str, seed: int, env: dict[str, str], verbosity: int) -> None:
    """One worker's thread: take runs, replay them in the worker process, record their verdicts."""
    worker: _Worker | None = None
    try:
        while (item := runs.take(worker.seed if worker else seed)) is not None:
            topic, needs = item
            want = needs if needs is not None else (worker.seed if worker else seed)
            if worker is None or worker.seed != want:
                if worker is not None:
                    worker.close()
                    runs.ended(worker)
                logger.info("starting a regression worker with PYTHONHASHSEED=%d", want)
                worker = _Worker(swarm_spec=swarm_spec, seed=want, env=env, verbosity=verbosity)
                runs.started(worker)
            try:
                answer = worker.ask(topic)
            except _WorkerDied as died:
                runs.ended(worker)
                worker = None
                runs.done(RunOutcome(topic=topic, status="failed", detail=(
                    f"the worker process replaying it ended with exit status {died.returncode} (killed, or out of "
                    f"memory?): its stderr says why; replay this run alone with `swarmlog replay --swarm`")))
                continue
            if "reroute" in answer:
                if needs is not None:  # a worker of the very seed it asked for refused it: do not loop
                    runs.done(RunOutcome(topic=topic, status="failed", detail=(
                        f"pinned to PYTHONHASHSEED={answer['reroute']}, which a worker started with "
                        f"PYTHONHASHSEED={want} does not satisfy (another hash algorithm?)")))
                else:
                    runs.back(topic, int(answer["reroute"]))
                continue
            runs.done(RunOutcome.from_json(answer["outcome"]))
    except _WorkerFatal as fatal:  # decided by the error's type, through _worker.CARRIED
        runs.fail(error_of(fatal.answer, topic=fatal.topic, worker=fatal.worker))
    except _WorkerDied as died:  # as it started (a run's worker that dies is that run's verdict, above)
        runs.fail(RegressionWorkerFailed(topic=None, worker=died.worker, error_type=None, detail=(
            f"it ended with exit status {died.returncode} before it was ready; its stderr (above) says why")))
    except BaseException as exc:  # noqa: BLE001 - carried to the caller's thread, raised there
        runs.fail(exc)
    finally:
        if worker is not None:
            worker.close()
            runs.ended(worker)


def run_pool(topics: list[str], *, swarm_spec: str, jobs: int, seed: int, verbosity: int = 0,
             progress: Callable[[RunOutcome], None] | None = None) -> list[RunOutcome]:
    """Replay ``topics`` in ``jobs`` worker processes (first started with ``PYTHONHASHSEED=seed``, logging
    at ``verbosity``: a ``-v`` count); their outcomes in ``topics``' order. Raises the first error that is
    not one run's."""
    runs = _Runs(topics, progress)
    env = _child_env()
    serve = {"runs": runs, "swarm_spec": swarm_spec, "seed": seed, "env": env, "verbosity": verbosity}
    threads = [threading.Thread(target=_serve, kwargs=serve, name=f"regress-worker-{i}", daemon=True)
               for i in range(max(1, min(jobs, len(topics))))]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    except BaseException as exc:  # Ctrl-C (KeyboardInterrupt) or the like: no worker outlives the caller
        runs.fail(exc)
        runs.kill_all()
        raise
    if runs.error is not None:
        raise runs.error
    return [runs.outcomes[t] for t in topics]
