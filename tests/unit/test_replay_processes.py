"""A swarm replay split across forked processes gives what one process gives (in memory).

``runtime._processes``: each process folds some of the agents over the whole log; the results are
put together as one fold of every agent would have left them. Errors come back as themselves.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest

from swarmlog import Swarm, on_message
from swarmlog.errors import ReplayWorkerFailed, StateNotSerialisable, UsageError
from swarmlog.replaying import replay_swarm
from swarmlog.runtime import _processes, _replayer

from ..conftest import cannot_run_here
from .test_replay_lookahead import _Quiet, _record, _Sender, _swarm, _Worker, _WorkerChanged


@pytest.fixture(autouse=True)
def _forks_here() -> None:
    if not _processes.can_fork():
        cannot_run_here("parts run in forked processes on Linux only")


def _report(result: Any) -> dict[str, Any]:
    return {**result.to_json(), "states": result.states, "all": [d.to_json() for d in result.divergences]}


def _replay(backend: Any, run_settings: Any, registry: Any, swarm: Swarm, **kw: Any) -> dict[str, Any]:
    return _report(replay_swarm(settings=run_settings, swarm=swarm, registry=registry, backend=backend, **kw))


@pytest.mark.parametrize("workers", [2, 3])
def test_a_replay_split_across_processes_reports_what_one_process_reports(backend, run_settings, registry, workers):
    _record(backend, run_settings, digests=True)
    one = _replay(backend, run_settings, registry, _swarm(), workers=1)
    split = _replay(backend, run_settings, registry, _swarm(), workers=workers)
    assert split == one
    assert not one["diverged"] and sum(one["states_checked"].values()) > 0


def test_changed_code_diverges_at_the_same_places_split_or_not(backend, run_settings, registry):
    _record(backend, run_settings, digests=True)
    one = _replay(backend, run_settings, registry, _swarm(_WorkerChanged), workers=1)
    split = _replay(backend, run_settings, registry, _swarm(_WorkerChanged), workers=3)
    assert split == one and one["diverged"] and one["divergences"] > 1


def test_a_cut_replay_split_across_processes_reports_what_one_process_reports(backend, run_settings, registry):
    _record(backend, run_settings, digests=True)
    _, high = backend.watermarks(run_settings.topic)
    for cut in (high // 3, high - 1):
        assert (_replay(backend, run_settings, registry, _swarm(), to=cut, workers=3)
                == _replay(backend, run_settings, registry, _swarm(), to=cut, workers=1))


def test_progress_of_a_split_replay_reaches_the_end_of_the_log(backend, run_settings, registry):
    _record(backend, run_settings, digests=True)
    seen: list[tuple[int, int]] = []
    replay_swarm(settings=run_settings, swarm=_swarm(), registry=registry, backend=backend, workers=3,
                 progress=lambda done, total: seen.append((done, total)))
    _, high = backend.watermarks(run_settings.topic)
    assert seen and seen[-1] == (high, high)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


class _Unserialisable(_Quiet):
    @on_message("note")
    def note(self, ctx, event):
        self.state["got"] = object()  # no JSON, so no state digest


def test_an_error_in_another_process_is_raised_as_itself_with_its_fields(backend, run_settings, registry):
    _record(backend, run_settings, digests=True)
    swarm = Swarm(name="lookahead", agents=lambda: [_Sender("s"), _Worker("w"), _Unserialisable("q")],
                  code_version="1")
    with pytest.raises(StateNotSerialisable) as caught:
        replay_swarm(settings=run_settings, swarm=swarm, registry=registry, backend=backend, workers=3)
    assert caught.value.agent == "q" and caught.value.offset > 0
    assert any("replay process for agent(s) q" in note for note in getattr(caught.value, "__notes__", []))


def test_a_process_that_dies_without_a_result_is_a_named_error(backend, run_settings, registry, monkeypatch):
    _record(backend, run_settings, digests=True)
    fold = _replayer._fold

    def dying(**kw: Any) -> Any:
        if kw["part"].index == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        return fold(**kw)

    monkeypatch.setattr(_replayer, "_fold", dying)
    with pytest.raises(ReplayWorkerFailed) as caught:
        replay_swarm(settings=run_settings, swarm=_swarm(), registry=registry, backend=backend, workers=3)
    assert caught.value.agents == ["q"] and "signal 9" in caught.value.detail


def test_workers_must_be_at_least_one(backend, run_settings, registry):
    _record(backend, run_settings, digests=True)
    with pytest.raises(UsageError):
        replay_swarm(settings=run_settings, swarm=_swarm(), registry=registry, backend=backend, workers=0)


def test_a_strict_replay_runs_in_one_process(backend, run_settings, registry, monkeypatch):
    _record(backend, run_settings, digests=True)
    forks: list[int] = []
    real_fork = os.fork
    monkeypatch.setattr(os, "fork", lambda: forks.append(1) or real_fork())
    replay_swarm(settings=run_settings, swarm=_swarm(), registry=registry, backend=backend, workers=3, strict=True)
    assert forks == []
    replay_swarm(settings=run_settings, swarm=_swarm(), registry=registry, backend=backend, workers=3)
    assert forks == [1, 1]


def test_a_short_log_is_split_only_when_asked(backend, run_settings, registry, monkeypatch):
    _record(backend, run_settings, digests=True)
    forks: list[int] = []
    real_fork = os.fork
    monkeypatch.setattr(os, "fork", lambda: forks.append(1) or real_fork())
    monkeypatch.setattr(_processes, "available_cpus", lambda: 4)
    replay_swarm(settings=run_settings, swarm=_swarm(), registry=registry, backend=backend)
    assert forks == []  # shorter than MIN_EVENTS_TO_SPLIT: one process
    monkeypatch.setattr(_replayer, "MIN_EVENTS_TO_SPLIT", 10)
    replay_swarm(settings=run_settings, swarm=_swarm(), registry=registry, backend=backend)
    assert forks == [1, 1]  # one process per agent, at most (3 agents, 4 CPUs)
