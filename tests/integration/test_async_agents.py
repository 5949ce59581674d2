"""Async agents on the real broker, against a stub model and stub tool servers: issue 26's must-shows.

* The program of ``swarmlog.examples.async_research`` (AsyncOpenAI, ``asyncio.gather`` of two HTTP
  tools, a writer call), with only its entry point wrapped: its two tool requests overlap live
  (the stub's own request log says so); a replay with the stub stopped makes no request and
  reproduces every state; a changed prompt is a divergence naming the agent, the step and
  ``body.messages[0].content``.
* Twenty live runs of a handler that records which of two concurrent calls finished first, the stub
  delaying each at random: both orders occur, and each log replays to its own order, every time.
* ``asyncio.sleep(30)`` costs no wall time live or on replay, at the same virtual time;
  ``wait_for`` racing a recorded call replays the same outcome.
* SIGKILL of an agent process between two awaited model calls of one step: its next life runs the
  step again (the first model call is made again: at-least-once) and nothing is written twice.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from typing import Any

import httpx
import httpx2
import pexpect
import pytest

from swarmlog import Agent, Swarm, on
from swarmlog.examples import async_research
from swarmlog.kafka.topic import create_topic
from swarmlog.log.protocol import EFFECT_RECORDED, HTTP_EXCHANGE
from swarmlog.replaying import replay_swarm
from swarmlog.runtime import run_agents, start_run
from swarmlog.testing import StubServer, tool_call_reply

from .conftest import new_topic_name, read_log, subprocess_env

TOOL_DELAY_S = 0.4
CLI = [sys.executable, "-m", "swarmlog.cli"]
EXAMPLE = "swarmlog.examples.async_research"


def model(request: dict[str, Any]) -> str | dict[str, Any]:
    """The stub's model: the planner asks for both tools at once; the writer answers from their results."""
    tool_results = [m["content"] for m in request["messages"] if m.get("role") == "tool"]
    if tool_results:
        return "Paris today: " + " / ".join(tool_results)
    return tool_call_reply(("weather", {"city": "Paris"}), ("news", {"topic": "Paris"}))


def _weather(request: Any) -> dict[str, Any]:
    time.sleep(TOOL_DELAY_S)
    return {"city": "Paris", "sky": "clear", "celsius": 21}


def _news(request: Any) -> dict[str, Any]:
    time.sleep(TOOL_DELAY_S)
    return {"topic": "Paris", "headline": "the Seine is swimmable"}


def _research_server() -> StubServer:
    return StubServer(model, routes={"/tools/weather": _weather, "/tools/news": _news})


def _count_network(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every request that reaches either library's network transport: the one door out."""
    seen: list[str] = []
    for lib in (httpx, httpx2):
        original = lib.HTTPTransport.handle_request

        def counting(self, request, _original=original):
            seen.append(f"{request.method} {request.url}")
            return _original(self, request)

        monkeypatch.setattr(lib.HTTPTransport, "handle_request", counting)
    return seen


def test_the_async_research_program_records_overlapping_tool_calls_and_replays_them_with_the_server_stopped(
        settings, registry, monkeypatch):
    network = _count_network(monkeypatch)
    with _research_server() as server:
        urls = {"llm_url": server.base_url, "tools_url": f"http://127.0.0.1:{server.port}"}
        swarm = async_research.make_swarm(**urls)
        start_run(settings=settings, swarm=swarm, run_id="research", seed=1)
        live = {r.agent: r for r in run_agents(settings=settings, swarm=swarm, until_quiet=1.5)}
        requests = list(server.requests)
    assert [r.path.split("?")[0] for r in requests] == ["/v1/chat/completions", "/tools/weather", "/tools/news",
                                                        "/v1/chat/completions"] or \
        [r.path.split("?")[0] for r in requests] == ["/v1/chat/completions", "/tools/news", "/tools/weather",
                                                     "/v1/chat/completions"]
    tools = [r for r in requests if r.path.startswith("/tools/")]
    a, b = tools
    # They overlapped on the wire: each arrived before the other was answered.
    assert a.answered_at is not None and b.answered_at is not None
    assert a.received_at < b.answered_at and b.received_at < a.answered_at
    answer = live["desk"].state["answers"]
    assert answer and answer[0].startswith("Paris today: ") and "swimmable" in answer[0] and "clear" in answer[0]
    exchanges = [r for r in read_log(settings, registry) if r.event_type == HTTP_EXCHANGE]
    assert len(exchanges) == 4 == len(network)
    calls = [(e.record["payload"]["call"], e.record["payload"]["url"].split("?")[0].rsplit("/", 1)[-1])
             for e in exchanges]
    assert calls[0] == (0, "completions") and calls[3] == (3, "completions")
    assert sorted(calls[1:3]) == [(1, "weather"), (2, "news")]  # each by its identity, in the order delivered

    # Replay with the server stopped: no request, the same states.
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{server.port}/tools/weather", timeout=1.0)
    network.clear()
    result = replay_swarm(settings=settings, swarm=async_research.make_swarm(**urls), registry=registry)
    assert network == []
    assert result.divergences == []
    assert result.states == {name: r.state for name, r in live.items()}

    # A changed prompt: a divergence naming the agent, the step and the part of the request.
    changed = replay_swarm(settings=settings, registry=registry,
                           swarm=async_research.make_swarm(planner=async_research.CHANGED_PLANNER, **urls))
    assert network == []
    first = changed.first_divergence
    step = next(e.offset for e in read_log(settings, registry)
                if e.event_type == "agent.message" and e.record["payload"]["kind"] == "question")
    assert first is not None and (first.agent, first.offset, first.kind) == ("researcher", step, "effect")
    assert "body.messages[0].content" in first.detail
    assert "recorded 'You are a research planner." in first.detail


def test_the_commands_see_async_steps_as_steps_replay_token_debug_log_state_and_timeline(settings, registry,
                                                                                          tmp_path):
    with _research_server() as server:
        env = {**subprocess_env(settings), "RESEARCH_LLM_URL": server.base_url,
               "RESEARCH_TOOLS_URL": f"http://127.0.0.1:{server.port}"}
        start_run(settings=settings, swarm=async_research.swarm, run_id="research-cli", seed=1)
        swarm = async_research.make_swarm(llm_url=env["RESEARCH_LLM_URL"], tools_url=env["RESEARCH_TOOLS_URL"])
        live = {r.agent: r for r in run_agents(settings=settings, swarm=swarm, until_quiet=1.5)}
    step = next(e.offset for e in read_log(settings, registry)
                if e.event_type == "agent.message" and e.record["payload"]["kind"] == "question")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=300)

    # replay --swarm, as a process, with every server stopped.
    same = cli("replay", "--swarm", f"{EXAMPLE}:swarm", "--json")
    assert same.returncode == 0, same.stderr[-2000:]
    report = json.loads(same.stdout.splitlines()[-1])
    assert report["divergences"] == 0 and report["divergence_list"] == []
    changed = cli("replay", "--swarm", f"{EXAMPLE}:changed", "--json")
    assert changed.returncode == 4, changed.stderr[-2000:]
    first = json.loads(changed.stdout.splitlines()[-1])["divergence_list"][0]
    assert (first["agent"], first["offset"], first["kind"]) == ("researcher", step, "effect")
    assert "body.messages[0].content" in first["detail"]

    # A replay token of the async run, verified with the code replayed against it.
    token = cli("token", "create", "--out", str(tmp_path / "research.json"))
    assert token.returncode == 0, token.stderr[-2000:]
    verified = cli("token", "verify", str(tmp_path / "research.json"), "--swarm", f"{EXAMPLE}:swarm")
    assert verified.returncode == 0, verified.stdout[-2000:] + verified.stderr[-2000:]

    # log: each concurrent call with its identity and delivery time; state: the researcher's, rebuilt.
    log = cli("log", "--type", "http.exchange")
    assert log.returncode == 0 and log.stdout.count("[call #") == 4, log.stdout
    state = cli("state", "researcher", "--at", str(10**9), "--swarm", f"{EXAMPLE}:swarm", "--json")
    assert state.returncode == 0, state.stderr[-2000:]
    assert json.loads(state.stdout)["state"] == live["researcher"].state
    timeline = cli("timeline", "--swarm", f"{EXAMPLE}:swarm")
    assert timeline.returncode == 0 and "⇄" in timeline.stdout and "!!" not in timeline.stdout, timeline.stdout

    # debug --at the step: pdb stops at the coroutine's first line, the log serving every call.
    child = pexpect.spawn(CLI[0], [*CLI[1:], "debug", "--swarm", f"{EXAMPLE}:swarm", "--at", str(step)],
                          env=env, encoding="utf-8", timeout=120)
    try:
        child.expect(r"\(Pdb\) ")
        assert "async_research.py" in child.before and "question()" in child.before
        child.sendline("p event.body")
        child.expect(r"\(Pdb\) ")
        assert repr(async_research.QUESTION) in child.before
        # Over the awaited program (two model calls and two tools, from the log). pdb stops again on the
        # await's own line when the step's loop resumes the coroutine, then at the next line.
        for _ in range(4):
            child.sendline("n")
            child.expect(r"\(Pdb\) ")
            child.sendline("p answer[:12]")
            child.expect(r"\(Pdb\) ")
            if "'Paris today:'" in child.before:
                break
        assert "'Paris today:'" in child.before
        child.sendline("c")
        child.expect(pexpect.EOF)
        assert "no divergence" in child.before
    finally:
        child.close()
    assert child.exitstatus == 0


class FirstDone(Agent):
    """Asks two endpoints at once and records which answered first."""

    def __init__(self, name: str, url: str = "") -> None:
        super().__init__(name)
        self.url = url

    def initial_state(self):
        return {"order": []}

    @on("run.started")
    async def start(self, ctx, event):
        http = ctx.async_http()

        async def ask(which: str) -> None:
            await http.get(f"{self.url}/tools/{which}")
            self.state["order"].append(which)

        await asyncio.gather(ask("left"), ask("right"))


def _random_delay(request: Any) -> dict[str, Any]:
    time.sleep(random.uniform(0.0, 0.15))
    return {"path": request.path}


def test_twenty_live_runs_show_both_completion_orders_and_each_log_replays_its_own_every_time(
        base_settings, registry):
    runs = []
    with StubServer(routes={"/tools/left": _random_delay, "/tools/right": _random_delay}) as server:
        url = f"http://127.0.0.1:{server.port}"
        for i in range(20):
            topic = new_topic_name("async-order")
            create_topic(base_settings, topic)
            settings = base_settings.model_copy(update={"topic": topic})
            swarm = Swarm(name="order", agents=lambda: [FirstDone("racer", url)])
            start_run(settings=settings, swarm=swarm, run_id=f"order-{i}", seed=i)
            [result] = run_agents(settings=settings, swarm=swarm, until_quiet=0.5)
            runs.append((settings, result.state["order"]))
        live_requests = server.request_count
    orders = Counter(tuple(order) for _, order in runs)
    assert set(orders) == {("left", "right"), ("right", "left")}, orders  # both orders occur live
    assert live_requests == 40
    for settings, order in runs:  # the stub is stopped: every answer comes from the log
        for _ in range(3):
            swarm = Swarm(name="order", agents=lambda: [FirstDone("racer", url)])
            replayed = replay_swarm(settings=settings, swarm=swarm, registry=registry)
            assert replayed.divergences == [] and replayed.states["racer"]["order"] == order


class Patient(Agent):
    """Sleeps 30 s (virtual), then races a slow recorded call against a 0.5 s timeout, and a fast one."""

    def __init__(self, name: str, url: str = "") -> None:
        super().__init__(name)
        self.url = url

    def initial_state(self):
        return {"slept_to": None, "slow": None, "fast": None}

    @on("run.started")
    async def start(self, ctx, event):
        loop = asyncio.get_running_loop()
        await asyncio.sleep(30)
        self.state["slept_to"] = loop.time()
        http = ctx.async_http()
        for which in ("slow", "fast"):
            try:
                response = await asyncio.wait_for(http.get(f"{self.url}/tools/{which}"), timeout=0.5)
                self.state[which] = {"answer": response.json()["answer"], "at": loop.time() - 30}
            except TimeoutError:
                self.state[which] = {"answer": "timed out", "at": loop.time() - 30}


def test_sleep_is_free_and_wait_for_racing_a_recorded_call_replays_the_same_outcome(settings, registry):
    slow_started = threading.Event()

    def slow(request: Any) -> dict[str, Any]:
        slow_started.set()
        time.sleep(2.0)
        return {"answer": "slow"}

    with StubServer(routes={"/tools/slow": slow, "/tools/fast": lambda r: {"answer": "fast"}}) as server:
        url = f"http://127.0.0.1:{server.port}"
        swarm = Swarm(name="patient", agents=lambda: [Patient("p", url)])
        start_run(settings=settings, swarm=swarm, run_id="patient", seed=1)
        began = time.monotonic()
        [live] = run_agents(settings=settings, swarm=swarm, until_quiet=1.0)
        wall = time.monotonic() - began
    assert slow_started.is_set()
    assert wall < 25  # thirty seconds of sleep cost none of it
    assert live.state["slept_to"] == 30.0
    assert live.state["slow"] == {"answer": "timed out", "at": 0.5}  # the timer won, at its virtual deadline
    assert live.state["fast"]["answer"] == "fast" and 0.5 <= live.state["fast"]["at"] < 1.5
    began = time.monotonic()
    replayed = replay_swarm(settings=settings, swarm=swarm, registry=registry)
    assert time.monotonic() - began < 10
    assert replayed.divergences == [] and replayed.states["p"] == live.state


def test_sigkill_between_two_awaited_model_calls_reruns_the_step_and_writes_nothing_twice(settings, registry):
    release = threading.Event()
    planner_calls = []

    def blocking_tool(request: Any) -> dict[str, Any]:
        release.wait(60)  # the step waits here, its planner call answered, until the agent is killed
        return {"ok": True, "path": request.path}

    def counting_model(request: dict[str, Any]) -> str | dict[str, Any]:
        if not any(m.get("role") == "tool" for m in request["messages"]):
            planner_calls.append(request)
        return model(request)

    with StubServer(counting_model, routes={"/tools/weather": blocking_tool, "/tools/news": blocking_tool}) as server:
        env = subprocess_env(settings)
        env.update(RESEARCH_LLM_URL=server.base_url, RESEARCH_TOOLS_URL=f"http://127.0.0.1:{server.port}")
        cmd = [sys.executable, "-m", "swarmlog.cli", "run", "swarmlog.examples.async_research:swarm",
               "--until-quiet", "2"]
        start_run(settings=settings, swarm=async_research.swarm, run_id="killed", seed=1)  # as this process hashes
        first = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while sum(r.path.startswith("/tools/") for r in server.requests) < 2:
            assert first.poll() is None and time.monotonic() < deadline, "the first life never reached its tools"
            time.sleep(0.05)
        os.kill(first.pid, signal.SIGKILL)  # between the planner call and the writer call of one step
        first.wait(10)
        release.set()
        assert len(planner_calls) == 1
        second = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        assert second.returncode == 0, second.stderr[-3000:]
    assert len(planner_calls) == 2  # the step ran again: its first model call was made again (at-least-once)
    log = read_log(settings, registry)
    ids = Counter(e.record["event_id"] for e in log)
    assert [i for i, n in ids.items() if n > 1] == []  # nothing written twice
    answers = [e for e in log if e.event_type == "agent.message" and e.record["payload"]["kind"] == "answer"]
    assert len(answers) == 1 and answers[0].record["payload"]["body"].startswith("Paris today: ")
    exchanges = [e for e in log if e.event_type == HTTP_EXCHANGE]
    assert len(exchanges) == 4  # the aborted life's exchanges are not in the committed log
    urls = {"llm_url": server.base_url, "tools_url": f"http://127.0.0.1:{server.port}"}
    replayed = replay_swarm(settings=settings, swarm=async_research.make_swarm(**urls), registry=registry)
    assert replayed.divergences == []
    assert replayed.states["desk"]["answers"] == [answers[0].record["payload"]["body"]]
    assert json.loads(json.dumps(replayed.states))  # plain data


def test_async_effects_record_their_identity_and_delivery_time(settings, registry):
    class TwoEffects(Agent):
        def initial_state(self):
            return {"got": []}

        @on("run.started")
        async def start(self, ctx, event):
            self.state["got"] = list(await asyncio.gather(ctx.async_effect("one", lambda: 1),
                                                          ctx.async_effect("two", lambda: 2)))

    swarm = Swarm(name="effects", agents=lambda: [TwoEffects("e")])
    start_run(settings=settings, swarm=swarm, run_id="effects", seed=1)
    [live] = run_agents(settings=settings, swarm=swarm, until_quiet=0.5)
    records = [e.record["payload"] for e in read_log(settings, registry) if e.event_type == EFFECT_RECORDED]
    assert sorted(r["call"] for r in records) == [0, 1]
    assert all(isinstance(r["delivered_at"], float) for r in records)
    assert replay_swarm(settings=settings, swarm=swarm, registry=registry).states["e"] == live.state == {"got": [1, 2]}
