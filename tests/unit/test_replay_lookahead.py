"""A swarm replay reads its log once, ahead of its fold only as far as a step needs (in memory).

``runtime.history``: effects and state digests are found by reading on from the fold, not
by a pass over the whole log first. What a replay reports must not depend on how far it read
ahead, nor on whether it read ahead with the fold's reader or with a reader of its own.
"""

from __future__ import annotations

from typing import Any

import pytest

from swarmlog import Agent, Swarm, on, on_message
from swarmlog.log.memory import InMemoryLog
from swarmlog.replaying import replay_swarm
from swarmlog.runtime import _replayer, history, run_agents, start_run

JOBS = 40


def _work(n: int) -> dict[str, int]:
    return {"n": n * n}


class _Sender(Agent):
    def initial_state(self) -> dict[str, Any]:
        return {"done": 0}

    @on("run.started")
    def start(self, ctx, event):
        for i in range(JOBS):
            ctx.send("w", "job", str(i))
            ctx.send("q", "note", str(i))

    @on_message("done")
    def done(self, ctx, event):
        self.state["done"] += 1


class _Worker(Agent):
    def initial_state(self) -> dict[str, Any]:
        return {"sum": 0}

    @on_message("job")
    def job(self, ctx, event):
        got = ctx.effect("work", _work, int(event.body))
        self.state["sum"] += got["n"]
        ctx.send("s", "done", event.body)


class _Quiet(Agent):
    """Steps that write nothing: only a digest record, or nothing at all with digests off, follows them."""

    def initial_state(self) -> dict[str, Any]:
        return {"got": 0}

    @on_message("note")
    def note(self, ctx, event):
        self.state["got"] += 1


class _WorkerChanged(_Worker):
    @on_message("job")
    def job(self, ctx, event):
        n = int(event.body)
        got = ctx.effect("work", _work, n)
        if n == 7:
            ctx.effect("more-work", _work, n)  # a second effect: the log has no record of it
        self.state["sum"] += got["n"]
        ctx.send("s", "done", event.body if n != 3 else "changed")


def _swarm(worker: type[_Worker] = _Worker) -> Swarm:
    return Swarm(name="lookahead", agents=lambda: [_Sender("s"), worker("w"), _Quiet("q")], code_version="1")


def _record(backend: InMemoryLog, run_settings: Any, *, digests: bool) -> None:
    settings = run_settings.model_copy(update={"state_digest_every": 1 if digests else 0})
    start_run(settings=settings, swarm=_swarm(), run_id="r", seed=1, backend=backend)
    run_agents(settings=settings, swarm=_swarm(), until_quiet=0.3, backend=backend)


def _report(result: Any) -> dict[str, Any]:
    return {**result.to_json(), "states": result.states,
            "all": [d.to_json() for d in result.divergences]}


READS = [(1, 0, 1), (3, 2, 1), (7, 50_000, 500)]
"""(the fold's batch, messages kept ahead, the lookahead's own batch): every way of reading ahead —
message by message with nothing kept (the history's own reader does all of it), a little kept, all kept."""


def _replays(backend: InMemoryLog, run_settings: Any, registry: Any, monkeypatch: pytest.MonkeyPatch,
             swarm: Swarm, **kw: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The replay as it runs (whole batches), and the same replay read ahead in each way of :data:`READS`."""
    whole = _report(replay_swarm(settings=run_settings, swarm=swarm, registry=registry, backend=backend, **kw))
    others = []
    for read, kept, alone in READS:
        monkeypatch.setattr(_replayer, "READ_BATCH", read)
        monkeypatch.setattr(history, "AHEAD_KEPT", kept)
        monkeypatch.setattr(history, "AHEAD_BATCH", alone)
        others.append(_report(replay_swarm(settings=run_settings, swarm=swarm, registry=registry, backend=backend,
                                           **kw)))
    monkeypatch.undo()
    return whole, others


@pytest.mark.parametrize("digests", [True, False], ids=["digests", "no-digests"])
def test_what_a_replay_reports_does_not_depend_on_how_it_read_ahead(backend, run_settings, registry, monkeypatch,
                                                                   digests):
    _record(backend, run_settings, digests=digests)
    kept, others = _replays(backend, run_settings, registry, monkeypatch, _swarm())
    assert others == [kept] * len(READS)
    assert not kept["diverged"] and not kept["unverified_from"]
    assert kept["steps"] == {"s": JOBS + 1, "w": JOBS, "q": JOBS}
    if digests:  # every step's state was checked against the digest recorded for it
        assert kept["states_checked"] == kept["steps"]
    else:
        assert kept["states_checked"] == {"s": 0, "w": 0, "q": 0}


def test_changed_code_diverges_at_the_same_places_however_the_replay_read_ahead(backend, run_settings, registry,
                                                                               monkeypatch):
    _record(backend, run_settings, digests=True)
    kept, others = _replays(backend, run_settings, registry, monkeypatch, _swarm(_WorkerChanged))
    assert others == [kept] * len(READS)
    kinds = [(d["kind"], d["detail"]) for d in kept["all"]]
    assert ("effect", "the step now calls an effect or LLM the log has no record of") in kinds
    assert any(kind == "output" for kind, _ in kinds)


def test_a_cut_replay_scans_nothing_past_the_cut_however_it_read_ahead(backend, run_settings, registry, monkeypatch):
    _record(backend, run_settings, digests=True)
    _, high = backend.watermarks(run_settings.topic)
    for cut in (1, high // 3, high // 2, high - 1):
        kept, others = _replays(backend, run_settings, registry, monkeypatch, _swarm(), to=cut)
        assert others == [kept] * len(READS), cut
        assert not kept["diverged"], cut


class _CountingLog(InMemoryLog):
    """Counts the readers that read (a reader opened only to check the topic reads nothing)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def reader(self, topic: str, *, group: str | None = None) -> Any:
        reader = super().reader(topic, group=group)
        batches = reader.batches

        def counted(**kw: Any) -> Any:
            self.reads += 1
            return batches(**kw)

        reader.batches = counted  # type: ignore[method-assign]
        return reader


def test_a_swarm_replay_reads_its_log_once(run_settings, registry):
    backend = _CountingLog()
    backend.create_topic(run_settings.topic)
    _record(backend, run_settings, digests=True)
    backend.reads = 0
    result = replay_swarm(settings=run_settings, swarm=_swarm(), registry=registry, backend=backend)
    assert not result.divergences and sum(result.states_checked.values()) == 3 * JOBS + 1
    assert backend.reads == 1
