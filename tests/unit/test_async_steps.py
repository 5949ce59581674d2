"""Async steps (swarmlog.aio) on the in-memory log: the loop's guarantees, live and on replay.

The same worker, context, guard and replayer as on Kafka (``run_agents`` / ``replay_swarm`` on
``InMemoryLog``); real threads do the live calls, real time passes while they are in flight.
``tests/integration/test_async_agents.py`` holds the issue's must-shows on the real broker.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from typing import Any

import anyio
import anyio.to_thread
import pytest

from swarmlog import Agent, Swarm, on, on_message
from swarmlog.aio import AsyncCallDiverged, StepCancelled, StepLeftWork, StepStalled
from swarmlog.errors import ConfigurationError, EffectDiverged
from swarmlog.guard import ForbiddenCall
from swarmlog.log.protocol import EFFECT_RECORDED, HANDLER_FAILED
from swarmlog.replaying import replay_swarm
from swarmlog.runtime import run_agents, start_run
from swarmlog.testing import Schedule, Simulator

from ..contract.runtime import events


def _run(backend, settings, registry, *agents: Agent, quiet: float = 0.3) -> dict[str, Any]:
    swarm = Swarm(name="aio", agents=lambda: list(agents), code_version="1")
    start_run(settings=settings, swarm=swarm, run_id="aio", seed=1, backend=backend, registry=registry)
    results = run_agents(settings=settings, swarm=swarm, backend=backend, registry=registry, until_quiet=quiet)
    return {r.agent: r for r in results}


def _replay(backend, settings, registry, *agents: Agent):
    swarm = Swarm(name="aio", agents=lambda: list(agents), code_version="1")
    return replay_swarm(settings=settings, swarm=swarm, backend=backend, registry=registry)


def _records(backend, settings, registry, event_type: str) -> list[dict[str, Any]]:
    return [rec for _, t, rec in events(backend, settings.topic, registry) if t == event_type]


class _Gate:
    """Two live calls that each wait until both have started: they can only finish if they overlap."""

    def __init__(self) -> None:
        self.barrier = threading.Barrier(2, timeout=5)
        self.finished: list[str] = []

    def call(self, name: str, delay: float) -> str:
        self.barrier.wait()  # raises BrokenBarrierError unless the other call is in flight too
        time.sleep(delay)
        self.finished.append(name)
        return name


class Sleeper(Agent):
    def initial_state(self):
        return {"slept_to": None}

    @on("run.started")
    async def start(self, ctx, event):
        await asyncio.sleep(30)
        self.state["slept_to"] = asyncio.get_running_loop().time()


def test_asyncio_sleep_costs_no_wall_time_and_lands_at_the_same_virtual_time_live_and_on_replay(
        backend, run_settings, registry):
    began = time.monotonic()
    live = _run(backend, run_settings, registry, Sleeper("s"), quiet=0.2)
    assert time.monotonic() - began < 10
    assert live["s"].state == {"slept_to": 30.0}
    began = time.monotonic()
    replay = _replay(backend, run_settings, registry, Sleeper("s"))
    assert time.monotonic() - began < 5
    assert replay.divergences == [] and replay.states["s"] == {"slept_to": 30.0}


class Gatherer(Agent):
    """Two effects at once (the gate only opens if they overlap); records the order results came in."""

    def __init__(self, name: str, gate: _Gate | None = None, delays: tuple[float, float] = (0.3, 0.0)) -> None:
        super().__init__(name)
        self.gate, self.delays = gate, delays

    def initial_state(self):
        return {"order": [], "times": []}

    @on("run.started")
    async def start(self, ctx, event):
        gate = self.gate

        async def one(name: str, delay: float) -> None:
            result = await ctx.async_effect(name, gate.call if gate else _never, name, delay)
            self.state["order"].append(result)
            self.state["times"].append(asyncio.get_running_loop().time())

        await asyncio.gather(one("a", self.delays[0]), one("b", self.delays[1]))


def _never(*args: Any) -> Any:
    raise AssertionError("a replay called the world")


def test_concurrent_calls_overlap_live_and_replay_delivers_them_in_the_recorded_order(backend, run_settings, registry):
    gate = _Gate()
    live = _run(backend, run_settings, registry, Gatherer("g", gate))
    assert gate.finished == ["b", "a"]  # both waited at the barrier: their I/O overlapped
    assert live["g"].state["order"] == ["b", "a"]
    times = live["g"].state["times"]
    assert 0.25 <= times[1] - times[0] < 5  # virtual time advanced by the real time a was in flight after b
    records = _records(backend, run_settings, registry, EFFECT_RECORDED)
    assert [(r["payload"]["call"], r["payload"]["name"]) for r in records] == [(1, "b"), (0, "a")]
    assert [r["payload"]["delivered_at"] for r in records] == times
    replay = _replay(backend, run_settings, registry, Gatherer("g"))  # nothing live: _never would raise
    assert replay.divergences == []
    assert replay.states["g"] == live["g"].state


def test_a_recorded_completion_order_replays_whatever_the_replaying_code_would_finish_first(
        backend, run_settings, registry):
    # Live, a was quick; the replaying code is the same: the log decides, not timing.
    gate = _Gate()
    live = _run(backend, run_settings, registry, Gatherer("g", gate, delays=(0.0, 0.3)))
    assert live["g"].state["order"] == ["a", "b"]
    for _ in range(3):
        replay = _replay(backend, run_settings, registry, Gatherer("g", delays=(0.0, 0.3)))
        assert replay.divergences == [] and replay.states["g"]["order"] == ["a", "b"]


class Racer(Agent):
    """``wait_for`` racing a recorded call."""

    def __init__(self, name: str, delay: float = 0.0, timeout: float = 0.5) -> None:
        super().__init__(name)
        self.delay, self.timeout = delay, timeout

    def initial_state(self):
        return {"outcome": None, "at": None}

    @on("run.started")
    async def start(self, ctx, event):
        try:
            got = await asyncio.wait_for(ctx.async_effect("slow", _slow, self.delay), self.timeout)
            self.state["outcome"] = f"answer {got}"
        except TimeoutError:
            self.state["outcome"] = "timed out"
        self.state["at"] = asyncio.get_running_loop().time()


def _slow(delay: float) -> float:
    time.sleep(delay)
    return delay


@pytest.mark.parametrize(("delay", "outcome"), [(1.5, "timed out"), (0.0, "answer 0.0")])
def test_wait_for_racing_a_recorded_call_replays_the_same_outcome(backend, run_settings, registry, delay, outcome):
    live = _run(backend, run_settings, registry, Racer("r", delay=delay))
    assert live["r"].state["outcome"] == outcome
    if outcome == "timed out":
        assert live["r"].state["at"] == 0.5  # the timer fired at its virtual deadline
        assert _records(backend, run_settings, registry, EFFECT_RECORDED) == []  # the cancelled call: no record
    replay = _replay(backend, run_settings, registry, Racer("r", delay=delay))
    assert replay.divergences == []
    assert replay.states["r"] == live["r"].state


class Syncy(Agent):
    def initial_state(self):
        return {"got": None}

    @on("run.started")
    def start(self, ctx, event):
        async def both() -> list[Any]:
            return list(await asyncio.gather(ctx.async_effect("x", lambda: 1), ctx.async_effect("y", lambda: 2)))

        self.state["got"] = ctx.run(both())


def test_a_sync_handler_runs_a_coroutine_to_completion_with_ctx_run(backend, run_settings, registry):
    live = _run(backend, run_settings, registry, Syncy("s"))
    assert live["s"].state == {"got": [1, 2]}
    assert _replay(backend, run_settings, registry, Syncy("s")).states["s"] == {"got": [1, 2]}


def test_an_async_generator_cannot_be_a_handler():
    with pytest.raises(ConfigurationError, match="async generator"):
        class Bad(Agent):
            @on("run.started")
            async def start(self, ctx, event):
                yield 1


class Leaver(Agent):
    @on("run.started")
    async def start(self, ctx, event):
        asyncio.get_running_loop().create_task(asyncio.sleep(3), name="forgotten")


class Staller(Agent):
    @on("run.started")
    async def start(self, ctx, event):
        await asyncio.Event().wait()


class Quitter(Agent):
    @on("run.started")
    async def start(self, ctx, event):
        asyncio.current_task().cancel()  # type: ignore[union-attr]
        await asyncio.sleep(1)


@pytest.mark.parametrize(("agent", "error", "named"), [(Leaver, StepLeftWork, "task 'forgotten'"),
                                                      (Staller, StepStalled, "waits for something"),
                                                      (Quitter, StepCancelled, "was cancelled")])
def test_work_left_after_the_step_or_a_wait_nothing_can_end_fails_the_step_naming_it_and_replays_so(
        backend, run_settings, registry, agent, error, named):
    _run(backend, run_settings, registry, agent("a"))
    [failed] = _records(backend, run_settings, registry, HANDLER_FAILED)
    assert failed["payload"]["error_type"] == error.__name__
    assert named in failed["payload"]["message"] and "offset 0" in failed["payload"]["message"]
    assert _replay(backend, run_settings, registry, agent("a")).divergences == []


class Inline(Agent):
    def initial_state(self):
        return {"same_thread": None}

    @on("run.started")
    async def start(self, ctx, event):
        here = threading.get_ident()
        self.state["same_thread"] = await asyncio.to_thread(threading.get_ident) == here
        await asyncio.get_running_loop().run_in_executor(None, time.sleep, 0)


class Pooled(Agent):
    def __init__(self, name: str, pool: concurrent.futures.Executor) -> None:
        super().__init__(name)
        self.pool = pool

    @on("run.started")
    async def start(self, ctx, event):
        await asyncio.get_running_loop().run_in_executor(self.pool, print)


def test_to_thread_runs_inline_under_the_guard_and_another_executor_is_refused(backend, run_settings, registry):
    with pytest.raises(ForbiddenCall) as caught:  # time.sleep, run inline, is the handler's own call
        _run(backend, run_settings, registry, Inline("i"))
    assert caught.value.call == "time.sleep"


def test_run_in_executor_with_an_executor_of_ones_own_is_refused_saying_what_to_do(backend, run_settings, registry):
    with concurrent.futures.ThreadPoolExecutor(1) as pool, pytest.raises(ForbiddenCall) as caught:
        _run(backend, run_settings, registry, Pooled("p", pool))
    assert caught.value.call == "loop.run_in_executor" and "asyncio.to_thread" in str(caught.value)


class Threader(Agent):
    @on("run.started")
    async def start(self, ctx, event):
        await anyio.to_thread.run_sync(lambda: None)


def test_a_refusal_inside_an_async_step_names_the_step_and_the_library_and_whether_trust_applies(
        backend, run_settings, registry):
    with pytest.raises(ForbiddenCall) as caught:
        _run(backend, run_settings, registry, Threader("t"))
    error = caught.value
    assert (error.agent, error.offset, error.library) == ("t", 0, "anyio")
    assert "called by anyio, an installed library" in str(error)
    assert "trust_library does not apply" in str(error)


class Clock(Agent):
    @on("run.started")
    async def start(self, ctx, event):
        await anyio.sleep(0)
        time.time()


def test_a_refusal_from_the_handlers_own_coroutine_names_no_library(backend, run_settings, registry):
    with pytest.raises(ForbiddenCall) as caught:
        _run(backend, run_settings, registry, Clock("c"))
    assert caught.value.call == "time.time" and caught.value.library is None


class Namer(Agent):
    def initial_state(self):
        return {"names": []}

    @on("run.started")
    async def start(self, ctx, event):
        async def me() -> str:
            return asyncio.current_task().get_name()  # type: ignore[union-attr]

        self.state["names"] = list(await asyncio.gather(me(), me()))


def test_task_names_derive_from_the_step_not_from_a_process_wide_counter(backend, run_settings, registry):
    live = _run(backend, run_settings, registry, Namer("n"))
    assert live["n"].state["names"] == ["n@0/task-1", "n@0/task-2"]
    assert _replay(backend, run_settings, registry, Namer("n")).states["n"] == live["n"].state


class Changed(Gatherer):
    """The same step, asking for one effect fewer: call #1 is now another effect."""

    @on("run.started")
    async def start(self, ctx, event):
        await asyncio.gather(ctx.async_effect("a", _never, "a", 0.3), ctx.async_effect("c", _never))


def test_a_call_the_log_cannot_match_is_a_divergence_naming_the_call_and_its_place(backend, run_settings, registry):
    _run(backend, run_settings, registry, Gatherer("g", _Gate()))
    replay = _replay(backend, run_settings, registry, Changed("g"))
    first = replay.first_divergence
    assert first is not None and first.kind == "effect" and first.agent == "g" and first.offset == 0
    # The log delivers call #1 first: it was effect 'b', the step now makes effect 'c' there.
    assert "effect 'c'" in first.detail and "'b'" in str(first.recorded)


class Extra(Agent):
    @on("run.started")
    async def start(self, ctx, event):
        await asyncio.gather(ctx.async_effect("a", _never, "a", 0.3), ctx.async_effect("b", _never, "b", 0.0),
                             ctx.async_effect("new", _never))


def test_a_call_with_no_record_is_a_divergence_naming_it(backend, run_settings, registry):
    _run(backend, run_settings, registry, Gatherer("g", _Gate()))
    replay = _replay(backend, run_settings, registry, Extra("g"))
    first = replay.first_divergence
    assert first is not None and first.kind == "effect"
    assert "call #2 (effect 'new'" in first.detail and "no record" in first.detail
    assert "after 2 delivered result(s)" in first.detail


def test_the_divergence_type_is_async_call_diverged(backend, run_settings, registry):
    _run(backend, run_settings, registry, Gatherer("g", _Gate()))
    swarm = Swarm(name="aio", agents=lambda: [Extra("g")], code_version="1")
    with pytest.raises(AsyncCallDiverged) as caught:
        replay_swarm(settings=run_settings, swarm=swarm, backend=backend, registry=registry, strict=True)
    assert caught.value.call == 2 and isinstance(caught.value, EffectDiverged)


# --- the simulator chooses completion orders ----------------------------------------------------


class FirstAnswerWins(Agent):
    """Asks a cache and the origin at once and keeps the first answer: wrong when the origin wins."""

    def initial_state(self):
        return {"answer": None}

    @on("run.started")
    async def start(self, ctx, event):
        calls = [asyncio.ensure_future(ctx.async_effect("ask", _never, where)) for where in ("cache", "origin")]
        done, pending = await asyncio.wait(calls, return_when=asyncio.FIRST_COMPLETED)
        for p in pending:
            p.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        self.state["answer"] = done.pop().result()
        ctx.send("log", "answer", self.state["answer"])


class Log(Agent):
    def initial_state(self):
        return {"answers": []}

    @on_message("answer")
    def answer(self, ctx, event):
        self.state["answers"].append(event.body)


def test_the_simulator_explores_completion_orders_and_finds_the_bug_only_one_order_triggers():
    swarm = Swarm(name="race", agents=lambda: [FirstAnswerWins("asker"), Log("log")])
    sim = Simulator(swarm, effects={"ask": lambda where: f"from {where}"},
                    end_state=lambda states: states["log"]["answers"] == ["from cache"])
    assert sim.run().violations == []  # the default order: the first call made completes first
    found = sim.exhaust()
    assert found.failure is not None
    run = found.failure
    assert run.states["asker"]["answer"] == "from origin"
    text = run.describe()
    assert "(delivered: call #1 (effect 'ask' [\"origin\"]) before call #0 (effect 'ask' [\"cache\"]))" in text
    assert sim.run(run.schedule).states == run.states  # the same run again from its schedule


def test_a_schedule_may_fire_a_timer_before_a_call_in_flight():
    swarm = Swarm(name="race", agents=lambda: [Racer("r", timeout=5)])
    sim = Simulator(swarm, effects={"slow": lambda delay: delay})
    default, timer_first = sim.run(), sim.run(Schedule((1,)))
    assert default.states["r"] == {"outcome": "answer 0.0", "at": 0.0}
    assert timer_first.states["r"] == {"outcome": "timed out", "at": 5.0}
    assert "(delivered: the next timer fires before call #0 (effect 'slow' [0.0]))" in timer_first.describe()


# --- tracing and the debugger see async steps as steps ------------------------------------------


def test_concurrent_calls_are_sibling_spans_that_overlap_in_time(backend, run_settings, registry):
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from swarmlog.observe import tracing

    exporter = InMemorySpanExporter()
    tracing.configure(processor=SimpleSpanProcessor(exporter))
    try:
        _run(backend, run_settings, registry, Gatherer("g", _Gate()))
    finally:
        tracing.shutdown()
    spans = exporter.get_finished_spans()
    [step] = [s for s in spans if s.name == "g start"]
    calls = sorted((s for s in spans if s.name.startswith("effect ")), key=lambda s: s.name)
    assert [c.name for c in calls] == ["effect a", "effect b"]
    assert {c.parent.span_id for c in calls} == {step.context.span_id}  # siblings, children of the step
    a, b = calls
    assert a.start_time < b.end_time and b.start_time < a.end_time  # they overlap, as they did live
    assert a.end_time - a.start_time >= 250_000_000  # a was in flight the 0.3 s it took


class Asker(Agent):
    def initial_state(self):
        return {"got": []}

    @on("run.started")
    async def start(self, ctx, event):
        got = await asyncio.gather(ctx.async_effect("x", _slow, 0.0), ctx.async_effect("y", _slow, 0.0))
        self.state["got"] = list(got)
        ctx.send("asker", "noted", "")


def test_debug_at_an_async_step_stops_at_its_coroutines_first_line_with_the_log_served(
        backend, run_settings, registry, monkeypatch):
    import io
    import pdb
    import sys

    from swarmlog.debug import Session

    _run(backend, run_settings, registry, Asker("asker"))
    out = io.StringIO()

    def hook() -> None:
        pdb.Pdb(stdin=io.StringIO("p event.event_type\nn\nn\np self.state\nc\n"), stdout=out,
                readrc=False).set_trace(sys._getframe().f_back)

    monkeypatch.setattr(sys, "breakpointhook", hook)
    swarm = Swarm(name="aio", agents=lambda: [Asker("asker")], code_version="1")
    told = []
    result = Session(settings=run_settings, swarm=swarm, backend=backend).debug(at=0, on_stop=told.append)
    text = out.getvalue()
    assert "Asker.start" in [s.handler for s in told] and "'run.started'" in text
    assert "got = await asyncio.gather" in text  # pdb stood inside the coroutine, stepping its lines
    assert result.divergences == [] and result.states["asker"] == {"got": [0.0, 0.0]}


def test_an_http_exchange_written_before_v2_still_decodes_with_its_binary_body(registry):
    from swarmlog.schema.codec import Decoder, Encoder

    v1 = registry.get("http.exchange", 1)
    payload = v1.validate_payload({"method": "POST", "url": "http://x/upload", "request_body": b"\x80\x00\xff",
                                   "status": 200, "response_body": "ok"})
    value = Encoder(v1).encode_event("a@3#0", "run", "a", "a", [3], payload)
    writer, record = Decoder(registry).decode(value)
    assert writer is v1  # read with its own schema, then upcast (fastavro's resolution would misread the bytes)
    assert record["payload"]["request_body"] == b"\x80\x00\xff"
    assert (record["payload"]["call"], record["payload"]["delivered_at"]) == (None, None)


def test_importing_swarmlog_first_leaves_asyncios_current_task_working():
    # Importing the C module _asyncio before asyncio itself initialises it twice (its init imports
    # asyncio, whose tasks module imports it again): asyncio.current_task() then reads another dict
    # than the one tasks enter, and says None inside every task (sniffio and anyio with it).
    import subprocess
    import sys

    code = ("import swarmlog.guard, swarmlog.testing, asyncio\n"
            "async def main():\n    return asyncio.current_task() is not None\n"
            "print(asyncio.run(main()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True"


def test_the_log_view_shows_each_concurrent_calls_identity_and_delivery_time(backend, run_settings, registry):
    from swarmlog.debug import LogView

    _run(backend, run_settings, registry, Gatherer("g", _Gate()))
    lines = [e.summary() for e in LogView(settings=run_settings, backend=backend).events(types=[EFFECT_RECORDED])]
    assert len(lines) == 2
    assert lines[0].startswith("[call #1 at 0.") and lines[0].endswith(' s] b(["b",0.0]) -> "b"')
    assert lines[1].startswith("[call #0 at 0.") and lines[1].endswith(' s] a(["a",0.3]) -> "a"')


# --- the official async SDKs, unchanged, on ctx.async_http() -------------------------------------

KEY = "sk-async-test-SECRET-0123456789abcdef"


class SDKs(Agent):
    """AsyncOpenAI and AsyncAnthropic on ctx.async_http(): plain calls under gather, then streams."""

    def __init__(self, name: str, url: str = "", anthropic_url: str = "") -> None:
        super().__init__(name)
        self.url, self.anthropic_url = url, anthropic_url

    def initial_state(self):
        return {"plain": [], "streams": []}

    @on("run.started")
    async def start(self, ctx, event):
        import anthropic
        import openai

        gpt = openai.AsyncOpenAI(api_key=KEY, base_url=self.url, http_client=ctx.async_http())
        claude = anthropic.AsyncAnthropic(api_key=KEY, base_url=self.anthropic_url, http_client=ctx.async_http())
        messages = [{"role": "user", "content": "hi"}]
        a, b = await asyncio.gather(gpt.chat.completions.create(model="m", messages=messages),
                                    claude.messages.create(model="c", max_tokens=8, messages=messages))
        self.state["plain"] = [a.choices[0].message.content, b.content[0].text]
        stream = await gpt.chat.completions.create(model="m", messages=messages, stream=True)
        self.state["streams"].append([c.choices[0].delta.content async for c in stream
                                      if c.choices and c.choices[0].delta.content])
        async with claude.messages.stream(model="c", max_tokens=8, messages=messages) as s:
            self.state["streams"].append([t async for t in s.text_stream])


def test_async_openai_and_anthropic_run_unchanged_retried_inside_one_record_and_replay_with_the_server_stopped(
        backend, run_settings, registry, monkeypatch):
    import httpx2

    from swarmlog.log.protocol import HTTP_EXCHANGE
    from swarmlog.testing import StubServer

    with StubServer(lambda request: "hello there", api_key=KEY) as server:
        server.fail_next(1)  # the first request answered 503, then retried inside its recorded call
        urls = (server.base_url, server.anthropic_base_url)
        live = _run(backend, run_settings, registry, SDKs("s", *urls))
        assert server.request_count == 5
    assert live["s"].state == {"plain": ["hello there", "hello there"],
                               "streams": [["hello ", "there"], ["hello ", "there"]]}
    exchanges = _records(backend, run_settings, registry, HTTP_EXCHANGE)
    assert sorted(e["payload"]["attempts"] for e in exchanges) == [1, 1, 1, 2]
    assert sorted(e["payload"]["call"] for e in exchanges) == [0, 1, 2, 3]
    raw = b"".join(m.value() for m in backend.messages(run_settings.topic))
    assert KEY.encode() not in raw and KEY[3:].encode() not in raw and b"<redacted>" in raw
    sent = []
    monkeypatch.setattr(httpx2.HTTPTransport, "handle_request", lambda self, request: sent.append(request))
    replay = _replay(backend, run_settings, registry, SDKs("s", *urls))
    assert sent == [] and replay.divergences == [] and replay.states["s"] == live["s"].state


class LoopOfItsOwn(Agent):
    def __init__(self, name: str, how: str) -> None:
        super().__init__(name)
        self.how = how

    @on("run.started")
    async def start(self, ctx, event):
        async def nothing() -> None:
            pass

        coro = nothing()
        try:
            if self.how == "run":
                asyncio.run(coro)
            elif self.how == "new":
                asyncio.new_event_loop()
            else:
                threading.Thread(target=print).start()
        finally:
            coro.close()


@pytest.mark.parametrize(("how", "call"), [("run", "asyncio.run"), ("new", "asyncio.new_event_loop"),
                                           ("thread", "threading.Thread")])
def test_starting_a_loop_or_a_thread_of_ones_own_inside_an_async_step_stays_refused(
        backend, run_settings, registry, how, call):
    with pytest.raises(ForbiddenCall) as caught:
        _run(backend, run_settings, registry, LoopOfItsOwn("l", how))
    assert caught.value.call == call and (caught.value.agent, caught.value.offset) == ("l", 0)
    assert "async def handler" in str(caught.value)  # what to use instead


def test_an_async_initial_state_is_refused_when_the_agent_is_built():
    class Eager(Agent):
        async def initial_state(self):  # type: ignore[override]
            return {}

    with pytest.raises(ConfigurationError, match="initial_state is async"):
        Eager("e")
