"""A restarted agent on a long log: live again from its latest checkpoint, against a rebuild from offset zero.

Subject ``restart.from_checkpoint``: an :class:`~swarmlog.runtime.AgentWorker` of agent ``a``
started on a log of ``BENCH_RESTART_OFFSETS`` (2M) offsets with ``SWARMLOG_CHECKPOINT_EVERY``
= ``BENCH_RESTART_EVERY`` (10k steps): the seconds from its start until it is live (caught up
with the log it found: what ``/readyz`` waits for) — fence, read the snapshot topic, restore
and verify the latest checkpoint, read the log from its position on, replay and check the steps
after it. Baseline ``restart.from_zero``: the same worker with ``from_zero=True`` (every message
read, every step of the agent re-run and checked). Repetitions interleaved; each restart's state
is compared with the other's, or the benchmark fails. ``events`` is the log's length, so the
ratio of rates is how many times faster the resumed restart is.

Also ``restart.replay_from_checkpoints`` against ``restart.replay_from_zero``: ``replay_swarm`` of both
agents (``swarmlog replay --swarm``) with ``from_checkpoints=True`` (each agent from its latest verified
checkpoint, the log read from the earliest) and without (every step of both re-run and checked), one
process each; their states are compared.

The log: two agents rallying ``CHAINS`` balls (a trivial handler: one counter, one message a
step), about one step per offset, half of them agent ``a``'s. Written as bench/snapshots.py
writes its long log: swarmlog's runtime over an in-memory log (checkpoints included, in the
transactions that hold them), then copied offset-exact into a fresh topic (and the checkpoints
into its snapshot topic); the restarts read it through Kafka.
"""

from __future__ import annotations

import threading
from time import perf_counter
from typing import Any

from swarmlog import Agent, Swarm, on, on_message
from swarmlog.replaying import replay_swarm
from swarmlog.runtime import AgentWorker
from swarmlog.schema.registry import SchemaRegistry
from swarmlog.settings import Settings

from .common import Run, copied_run, env_int, interleave, log, reps, reserve_topic, row

OFFSETS = env_int("BENCH_RESTART_OFFSETS", 2_000_000)
EVERY = env_int("BENCH_RESTART_EVERY", 10_000, scale=False)
CHAINS = 500
AGENT = "a"


class Player(Agent):
    steps = OFFSETS // 2
    """Each agent's steps: about one offset a step, two agents."""

    def initial_state(self) -> dict[str, Any]:
        return {"hits": 0}

    @on("run.started")
    def serve(self, ctx, event):
        if self.name == "a":
            for _ in range(CHAINS):
                ctx.send("b", "ball", "")

    @on_message("ball")
    def hit(self, ctx, event):
        self.state["hits"] += 1
        if self.state["hits"] <= self.steps:
            ctx.send("b" if self.name == "a" else "a", "ball", "")


swarm = Swarm(name="bench-restart", agents=lambda: [Player("a"), Player("b")], code_version="bench-restart-1")


def _make_log(s: Settings, registry: SchemaRegistry) -> tuple[Settings, int]:
    """The rally's log (and its checkpoints) in a fresh topic of the same name as the in-memory run's."""
    ts = s.model_copy(update={"topic": reserve_topic("restart"), "checkpoint_every": EVERY})
    return ts, copied_run(s, ts, registry, swarm, run_id="bench-restart", label="restart", checkpoints=True)


def _restart(ts: Settings, registry: SchemaRegistry, *, from_zero: bool) -> tuple[float, str, int]:
    """Seconds until a new worker of ``a`` is live, its state hash, and where it resumed from."""
    worker = AgentWorker(settings=ts, swarm=swarm, agent=AGENT, registry=registry, from_zero=from_zero)
    got: dict[str, Any] = {}
    t0 = perf_counter()
    thread = threading.Thread(target=lambda: got.update(result=worker.run()), name="bench-restart")
    thread.start()
    while not worker.caught_up.wait(0.005):
        if not thread.is_alive():
            raise RuntimeError("the restarted agent stopped before it was live")
    seconds = perf_counter() - t0
    worker.stop()
    thread.join()
    result = got["result"]
    return seconds, result.state_hash, result.resumed_from


def run(s: Settings, registry: SchemaRegistry) -> list[dict[str, Any]]:
    ts, end = _make_log(s, registry)
    sub = Run("restart.from_checkpoint", end)
    base = Run("restart.from_zero", end)
    hashes: dict[str, list[str]] = {sub.name: [], base.name: []}
    resumed: list[int] = []

    def measure(run_: Run, from_zero: bool):
        def go(r: int) -> None:
            seconds, state, at = _restart(ts, registry, from_zero=from_zero)
            run_.add(seconds)
            hashes[run_.name].append(state)
            if not from_zero:
                resumed.append(at)
            log(f"{run_.name} rep {r}: live after {seconds:.2f} s" + ("" if from_zero else f" (resumed at {at:,})"))
        return go

    interleave(reps(3), measure(sub, False), measure(base, True))
    if set(hashes[sub.name]) != set(hashes[base.name]) or len(set(hashes[sub.name])) != 1:
        raise RuntimeError(f"a restart from the checkpoint reached another state than from zero: {hashes}")
    if not resumed or min(resumed) <= 0:
        raise RuntimeError(f"a restart did not resume from a checkpoint: {resumed}")
    rows = [row(sub, base, headline=True, target="live again in < 5 s on >= 2M offsets (seconds)", log_offsets=end,
                every=EVERY, baseline_seconds=round(base.seconds, 3), resumed_at=resumed[-1])]
    tail = Run("restart.replay_from_checkpoints", end)
    whole = Run("restart.replay_from_zero", end)
    states: dict[str, list[dict[str, str]]] = {tail.name: [], whole.name: []}

    def replayed(run_: Run, from_checkpoints: bool):
        def go(r: int) -> None:
            t0 = perf_counter()
            result = replay_swarm(settings=ts, swarm=swarm, registry=registry, workers=1,
                                  from_checkpoints=from_checkpoints)
            run_.add(perf_counter() - t0)
            if result.divergences or (from_checkpoints and len(result.resumed_from) != 2):
                raise RuntimeError(f"{run_.name}: {result.first_divergence}, resumed from {result.resumed_from}")
            states[run_.name].append(result.agents)
            log(f"{run_.name} rep {r}: {run_.samples[-1]:.2f} s")
        return go

    interleave(max(1, reps(3) - 1), replayed(tail, True), replayed(whole, False))
    if any(s != states[whole.name][0] for s in states[tail.name] + states[whole.name]):
        raise RuntimeError("a replay from checkpoints reached other states than from zero")
    rows.append(row(tail, whole, baseline_seconds=round(whole.seconds, 3), log_offsets=end, every=EVERY))
    return rows
