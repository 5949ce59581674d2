"""Versioned steps (``ctx.patched``), runs pinned to code, and retrying a failed step, on the in-memory log.

The same worker, engine and replayer as on Kafka (``run_agents`` / ``replay_swarm`` on ``InMemoryLog``):
these hold the fold's guarantees; ``tests/integration/test_evolution.py`` holds the issues' must-shows
against the real broker with the CLI as a process.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from swarmlog import Agent, Swarm, on_message
from swarmlog.errors import CodeVersionRefused, FailedStepChanged, PatchUnknown, UsageError
from swarmlog.log.append import EventLog
from swarmlog.log.protocol import EFFECT_RECORDED, HANDLER_FAILED, MESSAGE, PATCH_MARKER, STEP_RETRIED, parse_step
from swarmlog.replaying import replay_swarm
from swarmlog.runtime import run_agents, start_run
from swarmlog.runtime.failures import append_retries, recorded_failures

from ..contract.runtime import events


class Worker(Agent):
    """Version 1: every job is looked up through an effect and answered as "old"."""

    patch: str | None = None  # the versions below set how they treat the patch
    fail_on: str | None = None

    def initial_state(self) -> dict[str, Any]:
        return {"done": []}

    @on_message("job")
    def job(self, ctx: Any, event: Any) -> None:
        body = event.payload["body"]
        path = self.path(ctx, body)
        looked = ctx.effect("lookup", str.upper, body)  # its id must not move when the patch is added
        self.state["done"].append(f"{path}:{looked}")
        ctx.send("out", "done", f"{path}:{body}")

    def path(self, ctx: Any, body: str) -> str:
        if self.fail_on == body:
            raise ZeroDivisionError(f"cannot do job {body}")
        return "old"


class Patched(Worker):
    def path(self, ctx: Any, body: str) -> str:
        if ctx.patched("new-path"):
            assert ctx.patched("new-path")  # asked again in the step: the same answer, one marker
            return "new"
        return super().path(ctx, body)


class Deprecated(Worker):
    def path(self, ctx: Any, body: str) -> str:
        ctx.deprecate_patch("new-path")
        return "new"


class AsyncPatched(Worker):
    @on_message("job")
    async def job(self, ctx: Any, event: Any) -> None:
        body = event.payload["body"]
        path = "new" if ctx.patched("new-path") else "old"
        looked = await ctx.async_effect("lookup", str.upper, body)
        self.state["done"].append(f"{path}:{looked}")
        ctx.send("out", "done", f"{path}:{body}")


def _swarm(cls: type[Worker], *, fail_on: str | None = None, **kw: Any) -> Swarm:
    def agents() -> list[Agent]:
        w = cls("w")
        w.fail_on = fail_on
        return [w]

    return Swarm(name="evolve", agents=agents, code_version=kw.pop("code_version", "1"), **kw)


def _jobs(backend, settings, registry, *bodies: str) -> None:
    with EventLog(settings=settings, registry=registry, backend=backend, run_id="r") as log:
        for body in bodies:
            log.produce(MESSAGE, {"kind": "job", "body": body}, agent="client", to="w")
        log.flush()


def _run(backend, settings, registry, swarm: Swarm, **kw: Any) -> dict[str, Any]:
    results = run_agents(settings=settings, swarm=swarm, backend=backend, registry=registry, until_quiet=0.2, **kw)
    return {r.agent: r for r in results}


def _start(backend, settings, registry) -> None:
    start_run(settings=settings, swarm=_swarm(Worker), run_id="r", seed=1, backend=backend, registry=registry)


def _records(backend, settings, registry, event_type: str) -> list[tuple[int, dict[str, Any]]]:
    return [(off, rec) for off, t, rec in events(backend, settings.topic, registry) if t == event_type]


def test_patched_step_replays_old_steps_on_the_old_path_and_runs_new_steps_on_the_new(backend, run_settings, registry):
    _start(backend, run_settings, registry)
    _jobs(backend, run_settings, registry, "a", "b")
    assert _run(backend, run_settings, registry, _swarm(Worker))["w"].state == {"done": ["old:A", "old:B"]}
    _jobs(backend, run_settings, registry, "c")
    # The fix deployed into the run in flight: its rebuild replays a and b (no marker: the old path) and
    # checks them against the log, then c runs live on the new path.
    result = _run(backend, run_settings, registry, _swarm(Patched, code_version="2"))["w"]
    assert result.refused is None
    assert result.state == {"done": ["old:A", "old:B", "new:C"]}
    markers = _records(backend, run_settings, registry, PATCH_MARKER)
    assert [rec["payload"] for _, rec in markers] == [{"patch_id": "new-path"}]  # one, though asked twice
    c_step = parse_step(markers[0][1]["event_id"])[0]
    # The patched() call took no index of the step's numbered outputs: the effect is still #0, the message #1.
    effect_ids = [rec["event_id"] for _, rec in _records(backend, run_settings, registry, EFFECT_RECORDED)]
    assert effect_ids[-1] == f"w@{c_step}#0"
    sent = [rec for _, rec in _records(backend, run_settings, registry, MESSAGE) if rec["agent_id"] == "w"]
    assert sent[-1]["event_id"] == f"w@{c_step}#1" and sent[-1]["payload"]["body"] == "new:c"
    replay = replay_swarm(settings=run_settings, swarm=_swarm(Patched, code_version="2"), backend=backend,
                          registry=registry)
    assert replay.divergences == []
    assert replay.states["w"] == {"done": ["old:A", "old:B", "new:C"]}


def test_older_code_replaying_a_step_recorded_with_a_patch_fails_naming_the_patch(backend, run_settings, registry):
    _start(backend, run_settings, registry)
    _jobs(backend, run_settings, registry, "a")
    _run(backend, run_settings, registry, _swarm(Patched, code_version="2"))
    replay = replay_swarm(settings=run_settings, swarm=_swarm(Worker), backend=backend, registry=registry)
    first = replay.first_divergence
    assert first is not None and "'new-path'" in first.detail
    assert "older than the code that wrote the log" in first.detail


def test_an_agent_whose_code_cannot_go_on_parks_not_ready_instead_of_exiting(backend, run_settings, registry):
    _start(backend, run_settings, registry)
    _jobs(backend, run_settings, registry, "a")
    _run(backend, run_settings, registry, _swarm(Patched, code_version="2"))
    stop = threading.Event()
    started: list[Any] = []
    raised: list[BaseException] = []

    def run() -> None:
        try:
            run_agents(settings=run_settings, swarm=_swarm(Worker), backend=backend, registry=registry, stop=stop,
                       on_started=started.extend)
        except PatchUnknown as exc:
            raised.append(exc)

    runner = threading.Thread(target=run)
    runner.start()
    try:
        for _ in range(100):
            if started and started[0].refused is not None:
                break
            stop.wait(0.05)
        worker = started[0]
        assert worker.refused is not None and "'new-path'" in worker.refused
        assert worker.readiness() == worker.refused  # /readyz says why
        assert worker.liveness(stall_timeout=0.0) is None  # parked, not stalled: /livez keeps it from a restart
        families = {f.name: f for f in worker.metric_families()}
        assert families["swarmlog_agent_refused"].samples == [(("w",), 1.0)]
        assert runner.is_alive()  # parked: it waits to be stopped, it does not exit to be restarted
    finally:
        stop.set()
        runner.join(10)
    assert raised and raised[0].patch_id == "new-path"  # once stopped, the caller learns why


def test_deprecated_patch_replays_steps_recorded_with_and_without_the_marker(backend, run_settings, registry):
    _start(backend, run_settings, registry)
    _jobs(backend, run_settings, registry, "a")
    _run(backend, run_settings, registry, _swarm(Patched, code_version="2"))
    _jobs(backend, run_settings, registry, "b")
    result = _run(backend, run_settings, registry, _swarm(Deprecated, code_version="3"))["w"]
    assert result.refused is None and result.state == {"done": ["new:A", "new:B"]}
    # Code that still has patched() (a rollout in progress) replays what the deprecating code wrote.
    assert replay_swarm(settings=run_settings, swarm=_swarm(Patched, code_version="2"), backend=backend,
                        registry=registry).divergences == []
    assert len(_records(backend, run_settings, registry, PATCH_MARKER)) == 2


def test_async_steps_ask_patched_too(backend, run_settings, registry):
    _start(backend, run_settings, registry)
    _jobs(backend, run_settings, registry, "a")
    result = _run(backend, run_settings, registry, _swarm(AsyncPatched, code_version="2"))["w"]
    assert result.state == {"done": ["new:A"]}
    assert replay_swarm(settings=run_settings, swarm=_swarm(AsyncPatched, code_version="2"), backend=backend,
                        registry=registry).divergences == []


def test_a_patch_id_outside_the_grammar_is_refused(backend, run_settings, registry):
    class Bad(Worker):
        def path(self, ctx: Any, body: str) -> str:
            return "new" if ctx.patched("no spaces#here") else "old"

    _start(backend, run_settings, registry)
    _jobs(backend, run_settings, registry, "a")
    _run(backend, run_settings, registry, _swarm(Bad))
    (_, failed), = _records(backend, run_settings, registry, HANDLER_FAILED)
    assert failed["payload"]["error_type"] == "ValueError" and "patch id" in failed["payload"]["message"]


def test_a_failed_step_retried_after_a_versioned_fix_runs_again_with_the_fix(backend, run_settings, registry):
    _start(backend, run_settings, registry)
    _jobs(backend, run_settings, registry, "a", "b", "c")
    workers: list[Any] = []
    result = _run(backend, run_settings, registry, _swarm(Worker, fail_on="b"), on_started=workers.extend)["w"]
    assert result.state == {"done": ["old:A", "old:C"]}
    families = {f.name: f for f in workers[0].metric_families()}
    assert families["swarmlog_agent_failed_steps"].samples == [(("w",), 1)]
    assert len(result.failures) == 1 and "ZeroDivisionError: cannot do job b" in result.failures[0]
    (failure,) = recorded_failures(backend=backend, topic=run_settings.topic, registry=registry)
    assert failure.agent == "w" and failure.retried_at is None
    # The fix, behind a versioned step: the failed step replays as it failed; its retry takes the fix.
    fixed = _swarm(Patched, fail_on="b", code_version="2")
    (retried, at), = append_retries(settings=run_settings, backend=backend, topic=run_settings.topic,
                                    registry=registry, run_id="r")
    assert retried == failure
    result = _run(backend, run_settings, registry, fixed)["w"]
    assert result.refused is None and result.failures == ()
    assert result.state == {"done": ["old:A", "old:C", "new:B"]}
    # The failed attempt stays in the log, before the retry that ran it again.
    (failed_at, _), = _records(backend, run_settings, registry, HANDLER_FAILED)
    assert failed_at < at
    assert recorded_failures(backend=backend, topic=run_settings.topic, registry=registry)[0].retried_at == at
    replay = replay_swarm(settings=run_settings, swarm=fixed, backend=backend, registry=registry)
    assert replay.divergences == [] and replay.states["w"]["done"] == ["old:A", "old:C", "new:B"]
    # Nothing is left to retry, and asking for it names what the log holds.
    with pytest.raises(UsageError, match="retried at offset"):
        append_retries(settings=run_settings, backend=backend, topic=run_settings.topic, registry=registry,
                       run_id="r", agent="w")
    assert len(_records(backend, run_settings, registry, STEP_RETRIED)) == 1


def test_a_fix_deployed_without_a_versioned_step_is_refused_saying_how_to_deploy_it(backend, run_settings, registry):
    _start(backend, run_settings, registry)
    _jobs(backend, run_settings, registry, "a")
    _run(backend, run_settings, registry, _swarm(Worker, fail_on="a"))
    with pytest.raises(FailedStepChanged) as refused:
        _run(backend, run_settings, registry, _swarm(Worker, code_version="2"))  # fixed, not versioned
    assert "failed live (ZeroDivisionError: cannot do job a)" in str(refused.value)
    assert "ctx.patched" in str(refused.value)


def test_a_run_pinned_to_its_code_is_refused_by_another_version_unless_declared_compatible(
        backend, run_settings, registry):
    start_run(settings=run_settings, swarm=_swarm(Worker, pin_runs=True), run_id="r", seed=1, backend=backend,
              registry=registry)
    _jobs(backend, run_settings, registry, "a")
    assert _run(backend, run_settings, registry, _swarm(Worker, pin_runs=True))["w"].state == {"done": ["old:A"]}
    with pytest.raises(CodeVersionRefused) as refused:
        _run(backend, run_settings, registry, _swarm(Patched, pin_runs=True, code_version="2"))
    assert refused.value.recorded == "1" and refused.value.current == "2" and "pinned to '1'" in str(refused.value)
    _jobs(backend, run_settings, registry, "b")
    declared = _swarm(Patched, pin_runs=True, code_version="2", compatible_with=["1"])
    assert _run(backend, run_settings, registry, declared)["w"].state == {"done": ["old:A", "new:B"]}
    _jobs(backend, run_settings, registry, "c")
    overridden = _run(backend, run_settings, registry, _swarm(Patched, pin_runs=True, code_version="3"),
                      accept_versions=("1",))["w"]
    assert overridden.refused is None and overridden.state == {"done": ["old:A", "new:B", "new:C"]}


def test_a_checkpoint_keeps_the_failed_steps_a_later_retry_runs_again(backend, run_settings, registry):
    import json

    from swarmlog.runtime.checkpoint import capture, restore
    from swarmlog.runtime.engine import AgentCore
    from swarmlog.runtime.history import NoHistory
    from swarmlog.schema.codec import Decoder

    _start(backend, run_settings, registry)
    _jobs(backend, run_settings, registry, "b")
    _run(backend, run_settings, registry, _swarm(Worker, fail_on="b"))
    decoder = Decoder(registry)
    core = AgentCore(agent=_swarm(Worker, fail_on="b").agent("w"), decoder=decoder, history=NoHistory(),
                     live_sink=None, strict=False)
    with backend.reader(run_settings.topic) as reader:
        reader.assign(0)
        for batch in reader.batches():
            for m in batch:
                core.process(m, decoder.envelope_route(m))
    (failed,) = core.failures.values()
    fresh = AgentCore(agent=_swarm(Worker).agent("w"), decoder=decoder, history=NoHistory(), live_sink=None)
    restore(fresh, json.loads(json.dumps(capture(core))))
    assert fresh.failures == core.failures and fresh.failures[failed.offset].input.payload["body"] == "b"


class Misaddressing(Worker):
    @on_message("job")
    def job(self, ctx: Any, event: Any) -> None:
        ctx.send("ouput", "done", event.payload["body"])  # a misspelt recipient
        ctx.send(event.agent_id, "ack", "")  # an answer to the input's writer: a client reads the log itself


def test_messages_no_agent_handles_are_warned_about_live_and_listed(backend, run_settings, registry, caplog):
    from swarmlog.runtime.unhandled import unhandled_messages

    _start(backend, run_settings, registry)
    with EventLog(settings=run_settings, registry=registry, backend=backend, run_id="r") as log:
        log.produce(MESSAGE, {"kind": "jbo", "body": "x"}, agent="client", to="w")  # a misspelt kind
        log.produce(MESSAGE, {"kind": "job", "body": "y"}, agent="client", to="w")
        log.flush()
    with caplog.at_level("WARNING", logger="swarmlog"):
        _run(backend, run_settings, registry, _swarm(Misaddressing))
    warned = [r.getMessage() for r in caplog.records if "no agent acts on it" in r.getMessage()
              or "has no handler for that kind" in r.getMessage()]
    assert len(warned) == 2
    assert "'jbo'" in warned[0] and "'ouput'" in warned[1] and not any("'ack'" in w for w in warned)
    found = unhandled_messages(backend=backend, topic=run_settings.topic, registry=registry,
                               agents=_swarm(Misaddressing).agents())
    assert [(u.kind, u.to) for u in found] == [("jbo", "w"), ("done", "ouput")]
    assert "no handler for kind 'jbo'" in found[0].reason and "no agent of the swarm" in found[1].reason
    # Replaying (a restart's rebuild) warns of nothing again.
    caplog.clear()
    with caplog.at_level("WARNING", logger="swarmlog"):
        _run(backend, run_settings, registry, _swarm(Misaddressing))
    assert not [r for r in caplog.records if "acts on it" in r.getMessage()]


def test_patches_says_a_patch_is_needed_while_a_run_has_steps_recorded_before_it(backend, run_settings, registry):
    from swarmlog.runtime.patches import patch_verdicts, patches_in_run

    _start(backend, run_settings, registry)
    _jobs(backend, run_settings, registry, "a")
    _run(backend, run_settings, registry, _swarm(Worker))
    _jobs(backend, run_settings, registry, "b")
    _run(backend, run_settings, registry, _swarm(Patched, code_version="2"))
    old_run = patches_in_run(backend=backend, topic=run_settings.topic, registry=registry)
    assert old_run["new-path"].steps_before == 1 and old_run["new-path"].agents.keys() == {"w"}
    # A run recorded with the patched code from its first step on.
    fresh = run_settings.model_copy(update={"topic": run_settings.topic + ".fresh"})
    backend.create_topic(fresh.topic)
    start_run(settings=fresh, swarm=_swarm(Patched, code_version="2"), run_id="r", seed=1, backend=backend,
              registry=registry)
    _jobs(backend, fresh, registry, "c")
    _run(backend, fresh, registry, _swarm(Patched, code_version="2"))
    new_run = patches_in_run(backend=backend, topic=fresh.topic, registry=registry)
    assert new_run["new-path"].steps_before == 0
    (both,) = patch_verdicts({run_settings.topic: old_run, fresh.topic: new_run})
    assert both.stage == "keep" and both.runs_before == [run_settings.topic]
    (fresh_only,) = patch_verdicts({fresh.topic: new_run})
    assert fresh_only.stage == "deprecate" and "ctx.deprecate_patch('new-path')" in fresh_only.describe()
    (unknown,) = patch_verdicts({}, patch_ids=["gone"])
    assert unknown.stage == "remove"


def test_a_patch_markers_id_names_its_step_but_none_of_the_steps_numbered_outputs():
    from swarmlog.log.protocol import PATCH_INDEX, output_id, patch_marker_id, step_of

    marker = patch_marker_id("w", 42, "accept-late.v2")
    assert marker == "w@42#patch:accept-late.v2"
    assert parse_step(marker) == (42, PATCH_INDEX)
    assert step_of(marker.encode()) == b"42"  # its sl.step header checks against the envelope like any output's
    assert parse_step(output_id("w", 42, 0)) == (42, 0)
    assert parse_step("w@42#other:thing") is None and step_of(b"w@42#other:thing") is None


def test_a_second_retry_of_the_same_failed_step_runs_nothing_live_or_on_replay(backend, run_settings, registry,
                                                                               caplog):
    _start(backend, run_settings, registry)
    _jobs(backend, run_settings, registry, "b")
    _run(backend, run_settings, registry, _swarm(Worker, fail_on="b"))
    fixed = _swarm(Patched, fail_on="b", code_version="2")
    ((failure, _),) = append_retries(settings=run_settings, backend=backend, topic=run_settings.topic,
                                     registry=registry, run_id="r")
    with EventLog(settings=run_settings, registry=registry, backend=backend, run_id="r") as log:  # a second operator
        log.append(STEP_RETRIED, {"failed_step": failure.step, "error_type": "ZeroDivisionError", "reason": ""},
                   agent="swarmlog", to="w")
    with caplog.at_level("WARNING", logger="swarmlog"):
        result = _run(backend, run_settings, registry, fixed)["w"]
    assert result.state == {"done": ["new:B"]}  # run again once, not twice
    assert any("did not fail (or was retried already)" in r.getMessage() for r in caplog.records)
    assert replay_swarm(settings=run_settings, swarm=fixed, backend=backend, registry=registry).divergences == []
