"""Restart from a verified checkpoint, on any log backend (:mod:`swarmlog.runtime.resume`).

``tests/unit/test_contract_memory.py`` runs it on the in-memory log, ``tests/integration/
test_contract_kafka.py`` on the real broker (same fixtures as :mod:`tests.contract.runtime`).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from swarmlog import Agent, Swarm, on, on_message, on_timer
from swarmlog.debug import Session
from swarmlog.errors import HistoryHoles
from swarmlog.log.append import EventLog
from swarmlog.log.hashing import state_hash
from swarmlog.log.protocol import agent_group, snapshot_topic
from swarmlog.replaying import replay_swarm
from swarmlog.runtime import run_agents, start_run
from swarmlog.runtime.checkpoint import encode_value

from .. import swarms
from ..conftest import unchecked_event
from .runtime import _Crash, _DyingBackend, assert_exactly_once, events

EVERY = 3


def checkpoint_records(backend: Any, topic: str) -> list[tuple[int, dict[str, Any]]]:
    """(offset in the snapshot topic, document) of every checkpoint a live agent wrote beside ``topic``."""
    out = []
    with backend.reader(snapshot_topic(topic)) as reader:
        reader.assign(0)
        for batch in reader.batches():
            for m in batch:
                doc = json.loads(m.value())
                if "checkpoint" in doc["fold"]:
                    out.append((m.offset(), doc))
    return out


def assert_exactly_once_ids(backend: Any, topic: str, registry: Any) -> None:
    ids = [rec["event_id"] for _, _, rec in events(backend, topic, registry)]
    assert len(ids) == len(set(ids)), "an output was written twice"


class _DyingAgent(_DyingBackend):
    """One agent's channel dies after so many commits; the others' live on."""

    def __init__(self, inner: Any, agent: str, after_commits: int) -> None:
        super().__init__(inner, after_commits)
        self._agent = agent

    def agent_channel(self, topic: str, agent: str) -> Any:
        if agent == self._agent:
            return super().agent_channel(topic, agent)
        return self._inner.agent_channel(topic, agent)


class _Clockwork(Agent):
    """A logical timer and a wall-clock timeout pending across many steps: restored from checkpoints mid-way."""

    def __init__(self, name: str, timeout_s: float) -> None:
        self._timeout_s = timeout_s
        super().__init__(name)

    def initial_state(self) -> dict[str, Any]:
        return {"seen": []}

    @on("run.started")
    def start(self, ctx, event):
        if self.name == "t":
            ctx.timer("late", after_events=50)
            ctx.timeout("soon", seconds=self._timeout_s)
            ctx.send("u", "ping", "1")

    @on_message("ping")
    def ping(self, ctx, event):
        self.state["seen"].append(["ping", event.body])
        if int(event.body) < 60:
            ctx.send("u" if self.name == "t" else "t", "ping", str(int(event.body) + 1))

    @on_timer("late")
    def late(self, ctx, event):
        self.state["seen"].append(["logical", ctx.now()])

    @on_timer("soon")
    def soon(self, ctx, event):
        self.state["seen"].append(["wall", ctx.now()])


class CheckpointContract:
    quiet: float = 1.0
    timeout_s: float = 2.0
    """A wall-clock timeout that must still be pending when its agent dies at its eighth commit, on this
    backend, and that the test then waits out."""

    def _run(self, backend, settings, swarm=swarms.relay_long, **kw: Any):
        return {r.agent: r for r in run_agents(settings=settings, swarm=swarm, until_quiet=self.quiet,
                                               backend=backend, **kw)}

    def _ran(self, backend, run_settings, run_id: str):
        settings = run_settings.model_copy(update={"checkpoint_every": EVERY})
        start_run(settings=settings, swarm=swarms.relay_long, run_id=run_id, seed=5, backend=backend)
        return settings, self._run(backend, settings)

    def test_an_agent_restarted_from_its_checkpoint_reaches_the_state_a_rebuild_from_zero_reaches(
            self, backend, run_settings, registry):
        settings, live = self._ran(backend, run_settings, "ckpt")
        assert all(r.resumed_from == 0 for r in live.values())  # the first life had none
        written = checkpoint_records(backend, settings.topic)
        assert {doc["agent"] for _, doc in written} == set(live)
        workers: list[Any] = []
        resumed = self._run(backend, settings, on_started=workers.extend)
        from_zero = self._run(backend, settings, from_zero=True)
        switched_off = self._run(backend, settings.model_copy(update={"checkpoint_every": 0}))
        latest = {doc["agent"]: doc["at"] for _, doc in written}  # each agent's last one
        assert {a: r.resumed_from for a, r in resumed.items()} == latest
        # What an operator sees: where each agent's rebuild started.
        seen = {labels[0]: value for w in workers for f in w.metric_families()
                if f.name == "swarmlog_agent_resumed_from_offset" for labels, value in f.samples}
        assert seen == latest
        assert all(r.resumed_from == 0 for r in from_zero.values())
        assert all(r.resumed_from == 0 for r in switched_off.values())  # checkpoints off: none looked for
        assert {a: r.state_hash for a, r in resumed.items()} == {a: r.state_hash for a, r in live.items()}
        assert {a: r.state_hash for a, r in from_zero.items()} == {a: r.state_hash for a, r in live.items()}
        # A resumed agent reads the log from its checkpoint only: it re-checked the digests after it, no more.
        assert sum(r.states_checked for r in resumed.values()) < sum(r.states_checked for r in from_zero.values())

    def test_a_resumed_agent_goes_on_live_exactly_as_a_fold_from_zero_says(self, backend, run_settings, registry):
        settings, live = self._ran(backend, run_settings, "ckpt-on")
        with EventLog(settings=settings, run_id="ckpt-on", backend=backend) as log:
            log.append("agent.message", {"kind": "hop", "body": json.dumps({"chain": 7, "ttl": 20})},
                       agent="operator", to="r1")
        went_on = self._run(backend, settings)
        assert all(r.resumed_from > 0 for r in went_on.values())
        assert sum(r.steps for r in went_on.values()) > 0
        assert_exactly_once(backend, settings.topic, registry)
        replayed = replay_swarm(settings=settings, swarm=swarms.relay_long, registry=registry, backend=backend)
        assert replayed.divergences == []
        assert replayed.agents == {a: r.state_hash for a, r in went_on.items()}

    def test_time_travel_starts_from_the_live_agents_checkpoints_and_agrees_with_a_fold_from_zero(
            self, backend, run_settings, registry):
        settings, live = self._ran(backend, run_settings, "ckpt-travel")
        written = sorted(doc["at"] for _, doc in checkpoint_records(backend, settings.topic) if doc["agent"] == "r3")
        session = Session(settings=settings, swarm=swarms.relay_long, registry=registry, backend=backend)
        from_zero = Session(settings=settings, swarm=swarms.relay_long, registry=registry, backend=backend,
                            snapshots=False)
        end = backend.watermarks(settings.topic)[1]
        for at in (written[0] + 1, written[len(written) // 2] + 7, end):
            got = session.state("r3", at=at)
            assert got.from_snapshot == max(w for w in written if w <= at)  # the latest checkpoint before it
            assert got.state == from_zero.state("r3", at=at).state
        assert session.state("r3", at=end).state == live["r3"].state

    def test_a_swarm_replay_from_checkpoints_re_runs_only_the_tail_and_reaches_the_same_states(
            self, backend, run_settings, registry):
        settings, live = self._ran(backend, run_settings, "ckpt-replay")
        latest = {doc["agent"]: doc["at"] for _, doc in checkpoint_records(backend, settings.topic)}
        full = replay_swarm(settings=settings, swarm=swarms.relay_long, registry=registry, backend=backend)
        tail = replay_swarm(settings=settings, swarm=swarms.relay_long, registry=registry, backend=backend,
                            from_checkpoints=True)
        assert full.resumed_from == {} and full.divergences == [] and tail.divergences == []
        assert tail.resumed_from == latest
        assert tail.agents == full.agents == {a: r.state_hash for a, r in live.items()}
        assert tail.events < full.events  # read from the earliest checkpoint on
        assert tail.end_offset == full.end_offset
        # Other code (another code version) has no checkpoint of its own: it replays from the start, and
        # finds where it departs from the log as ever.
        changed = replay_swarm(settings=settings, swarm=swarms.relay_changed_long, registry=registry,
                               backend=backend, from_checkpoints=True)
        assert changed.resumed_from == {} and changed.divergences

    def test_timers_pending_in_a_checkpoint_fire_once_where_a_fold_from_zero_fires_them(
            self, backend, run_settings, registry):
        swarm = Swarm(name="clockwork", code_version="1",
                      agents=lambda: [_Clockwork("t", self.timeout_s), _Clockwork("u", self.timeout_s)])
        settings = run_settings.model_copy(update={"checkpoint_every": 1})
        start_run(settings=settings, swarm=swarm, run_id="clockwork", seed=1, backend=backend)
        with pytest.raises(_Crash):  # t dies early, its timers pending in its checkpoints
            run_agents(settings=settings, swarm=swarm, until_quiet=self.quiet, backend=_DyingAgent(backend, "t", 8))
        finished = {r.agent: r for r in run_agents(settings=settings, swarm=swarm, until_quiet=self.quiet,
                                                   backend=backend)}
        (resumed,) = [d for _, d in checkpoint_records(backend, settings.topic)
                      if d["agent"] == "t" and d["at"] == finished["t"].resumed_from]
        assert sorted(name for name, *_ in resumed["fold"]["timers"]) == ["late", "soon"]  # both pending in it
        kinds = [k for k, *_ in finished["t"].state["seen"]]
        assert kinds.count("logical") == 1 and kinds.count("wall") == 1
        fired = [rec["payload"]["clock"] for _, t, rec in events(backend, settings.topic, registry)
                 if t == "timer.fired"]
        assert sorted(fired) == ["events", "wallclock"]
        assert_exactly_once_ids(backend, settings.topic, registry)
        replayed = replay_swarm(settings=settings, swarm=swarm, registry=registry, backend=backend)
        assert replayed.divergences == []
        assert replayed.states == {a: r.state for a, r in finished.items()}

    def test_a_forged_checkpoint_is_refused_and_the_agent_rebuilds_from_zero_with_a_warning(
            self, backend, run_settings, registry, caplog):
        settings, live = self._ran(backend, run_settings, "ckpt-forged")
        (_, doc), *_ = [(off, d) for off, d in reversed(checkpoint_records(backend, settings.topic))
                        if d["agent"] == "r1"]
        fold = doc["fold"]
        state = live["r1"].state
        state["hops"] += 1000  # the forgery: a state the log never had, consistent with itself
        fold["state"], fold["state_hash"] = encode_value(state), state_hash(state)
        appender = backend.appender(snapshot_topic(settings.topic))
        appender.send(json.dumps(doc).encode(), b"r1", [("sl.agent", b"r1"), ("sl.snap.at", str(doc["at"]).encode()),
                                                          ("sl.snap.code", doc["code_version"].encode())])
        assert not appender.flush(30.0).errors
        appender.close()
        with caplog.at_level(logging.WARNING, logger="swarmlog.runtime._worker"):
            (again,) = run_agents(settings=settings, swarm=swarms.relay_long, agents=["r1"], until_quiet=self.quiet,
                                  backend=backend)
        refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
        assert refused and "r1" in refused[0] and "rebuilding from offset 0" in refused[0]
        assert again.resumed_from == 0
        assert again.state_hash == live["r1"].state_hash  # the log's state, not the forgery's
        # A swarm replay from checkpoints refuses it too: r1 folds from the log start, the others from theirs.
        replayed = replay_swarm(settings=settings, swarm=swarms.relay_long, registry=registry, backend=backend,
                                from_checkpoints=True)
        assert "r1" not in replayed.resumed_from and len(replayed.resumed_from) == len(live) - 1
        assert replayed.divergences == [] and replayed.agents == {a: r.state_hash for a, r in live.items()}

    def test_a_cause_lost_before_a_checkpoint_stops_a_resumed_agent_and_a_replay_from_checkpoints(
            self, backend, run_settings, registry):
        # An input of r1 whose cause is an offset before every checkpoint that holds nothing (a transaction
        # marker): causes are checked when written, so the log lost that event since. A fold resumed from a
        # checkpoint knows which offsets hold messages only from there on; it asks the log about the cause.
        settings, live = self._ran(backend, run_settings, "ckpt-hole")
        first = min(doc["at"] for _, doc in checkpoint_records(backend, settings.topic))
        held = {off for off, _, _ in events(backend, settings.topic, registry)}
        gap = min(o for o in range(1, first) if o not in held)
        value, key, headers = unchecked_event(registry, "agent.message", {"kind": "finished", "body": json.dumps(
            {"chain": 0, "by": "x"})}, agent="operator", to="r1", causes=[gap], run_id="ckpt-hole")
        with EventLog(settings=settings, backend=backend) as log:
            log.produce_raw(value, key=key, headers=headers)
            (at,) = log.flush()
        with pytest.raises(HistoryHoles) as replayed:
            replay_swarm(settings=settings, swarm=swarms.relay_long, registry=registry, backend=backend,
                         from_checkpoints=True)
        assert replayed.value.holes == {gap: at}
        with pytest.raises(HistoryHoles) as restarted:
            run_agents(settings=settings, swarm=swarms.relay_long, agents=["r1"], until_quiet=self.quiet,
                       backend=backend)
        assert restarted.value.holes == {gap: at}

    @pytest.mark.parametrize("every", [1, 0], ids=["from-checkpoints", "from-zero"])
    def test_lives_killed_mid_transaction_while_the_others_restart_lose_and_duplicate_nothing(
            self, backend, run_settings, registry, every):
        """r2 dies between sending a batch (its outputs, its digests, its checkpoint) and committing it,
        three times, and each time every agent restarts at once: the others' first passes start while
        r2's transaction is still open (until r2's next life fences it), and must read past it."""
        settings = run_settings.model_copy(update={"checkpoint_every": every})
        start_run(settings=settings, swarm=swarms.relay_long, run_id="ckpt-crash", seed=9, backend=backend)
        for commits in (4, 9, 15):
            with pytest.raises(_Crash):
                self._run(_DyingAgent(backend, "r2", commits), settings)
            if every:
                # What is visible of r2's checkpoints is what committed transactions hold: none is past the
                # position its group committed (the aborted batch's checkpoint, sent, never shows).
                ats = [d["at"] for _, d in checkpoint_records(backend, settings.topic) if d["agent"] == "r2"]
                assert ats and max(ats) <= backend.committed(agent_group(settings.topic, "r2"), settings.topic)
        finished = self._run(backend, settings)
        assert_exactly_once(backend, settings.topic, registry)
        replayed = replay_swarm(settings=settings, swarm=swarms.relay_long, registry=registry, backend=backend)
        assert replayed.divergences == []
        assert replayed.agents == {a: r.state_hash for a, r in finished.items()}
        if every:
            kept = {d["at"] for _, d in checkpoint_records(backend, settings.topic) if d["agent"] == "r2"}
            assert finished["r2"].resumed_from in kept
