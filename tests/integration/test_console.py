"""Issue 30's must-shows: ``swarmlog ui`` (the CLI as a process) over the real mirror, read in Chromium.

The mirror holds, on topics of this module's own: the case study's deadlocked run (the worker made
late beyond doubt) with the fixed code's replay report (diverged), a finished run with a report that
reproduced it (verified), and a framework-like swarm whose agents call an OpenAI-style model through
the official SDK on ``ctx.http()``, streamed, with a tool call, from the local stub server, and whose
changed prompt diverges at the HTTP exchange (a published report). Every page is asserted in the
browser; screenshots go to ``docs/console/`` (what docs/console.md shows).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import openai
import psycopg
import pytest
import yaml
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from swarmlog import Agent, Swarm, on, on_message
from swarmlog.debug import LogView
from swarmlog.examples import case_study
from swarmlog.kafka.topic import create_topic
from swarmlog.log.protocol import TIMER_FIRED
from swarmlog.replaying import replay_swarm
from swarmlog.replaying.report import swarm_report
from swarmlog.runtime import run_agents, start_run
from swarmlog.settings import Settings
from swarmlog.testing import StubServer, tool_call_reply
from swarmlog.token import token_from
from swarmlog.ui import MirrorReader
from swarmlog_connectors.postgres_sink import PostgresSink
from swarmlog_connectors.replay_reports import publish_report

from .browser import ARTIFACTS, chromium, console_errors
from .conftest import REPO, new_topic_name, subprocess_env
from .dev_clusters import free_ports
from .release import workloads
from .test_helm_chart import CHART, DOCKERFILE, render

BUGGY = "swarmlog.examples.case_study:buggy"
FIXED = "swarmlog.examples.case_study:fixed"
CLI = [sys.executable, "-m", "swarmlog.cli"]
SHOTS = REPO / "docs" / "console"

SEARCH_TOOL = {"type": "function", "function": {
    "name": "search", "description": "search the docs",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}


# --- a framework-like swarm: the official OpenAI SDK on ctx.http(), streamed, with a tool ------------


def model(request: dict) -> str | dict:
    """The stub's model: asks for the search tool first, then answers from its result."""
    last = request["messages"][-1]
    if last.get("role") == "tool":
        return f"Kafka orders events by offset ({last['content']})."
    if request.get("tools"):
        return tool_call_reply(("search", {"q": "kafka ordering"}))
    return f"summary: {last['content']}"


def search(q: str) -> str:
    return f"3 pages about {q}"


class Researcher(Agent):
    def __init__(self, name: str, *, base_url: str, prompt: str) -> None:
        super().__init__(name)
        self.base_url, self.prompt = base_url, prompt

    def initial_state(self) -> dict[str, Any]:
        return {"answers": []}

    @on("run.started")
    def start(self, ctx, event):
        client = openai.OpenAI(api_key="sk-console-test", base_url=self.base_url, http_client=ctx.http(httpx2))
        messages = [{"role": "system", "content": self.prompt},
                    {"role": "user", "content": "How does Kafka order events?"}]
        stream = client.chat.completions.create(model="gpt-stub", messages=messages, tools=[SEARCH_TOOL],
                                                stream=True, stream_options={"include_usage": True})
        calls: dict[int, dict[str, str]] = {}
        for chunk in stream:
            for tc in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
                slot = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                slot["id"] = tc.id or slot["id"]
                slot["name"] += tc.function.name or ""
                slot["arguments"] += tc.function.arguments or ""
        call = calls[0]
        result = ctx.effect("search", search, json.loads(call["arguments"])["q"])
        asked = {"id": call["id"], "type": "function",
                 "function": {"name": call["name"], "arguments": call["arguments"]}}
        messages += [{"role": "assistant", "content": None, "tool_calls": [asked]},
                     {"role": "tool", "tool_call_id": call["id"], "content": result}]
        answer = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
            model="gpt-stub", messages=messages, tools=[SEARCH_TOOL], stream=True) if c.choices)
        self.state["answers"].append(answer)
        ctx.send("writer", "findings", answer)


class Writer(Agent):
    def __init__(self, name: str, *, base_url: str) -> None:
        super().__init__(name)
        self.base_url = base_url

    def initial_state(self) -> dict[str, Any]:
        return {"drafts": 0}

    @on_message("findings")
    def findings(self, ctx, event):
        client = openai.OpenAI(api_key="sk-console-test", base_url=self.base_url, http_client=ctx.http(httpx2))
        client.chat.completions.create(model="gpt-stub", messages=[{"role": "user", "content": event.body}])
        self.state["drafts"] += 1


def research_swarm(base_url: str, prompt: str = "You are a careful researcher.") -> Swarm:
    return Swarm(name="research", code_version="research-1" if prompt.startswith("You") else "research-2",
                 agents=lambda: [Researcher("researcher", base_url=base_url, prompt=prompt),
                                 Writer("writer", base_url=base_url)])


# --- the mirror ----------------------------------------------------------------------------------------


@dataclass
class Mirror:
    prefix: str
    deadlocked: Settings
    finished: Settings
    research: Settings
    url: str
    """The console's address."""


def _topic(base: Settings, prefix: str, what: str) -> Settings:
    topic = f"{prefix}.{what}"
    create_topic(base, topic)
    return base.model_copy(update={"topic": topic})


def _case_run(settings: Settings, run_id: str, *, late: bool, swarm: Swarm = case_study.buggy) -> dict[str, dict]:
    view = LogView(settings=settings)

    def work(task: str) -> dict[str, Any]:
        if late:  # the worker's job ends only once the reviewer's timeout is in the log
            deadline = time.monotonic() + 120
            while not any(True for _ in view.events(types=[TIMER_FIRED])):
                assert time.monotonic() < deadline, "the reviewer's timeout never fired"
                time.sleep(0.1)
        return {"summary": task.upper(), "took_ms": 2000 if late else 10}

    real, case_study.do_work = case_study.do_work, work
    try:
        start_run(settings=settings, swarm=swarm, run_id=run_id, seed=5)
        results = run_agents(settings=settings, swarm=swarm, until_quiet=1.0)
    finally:
        case_study.do_work = real
    return {r.agent: r.state for r in results}


def _replay_cli(settings: Settings, spec: str) -> dict[str, Any]:
    done = subprocess.run([*CLI, "replay", "--swarm", spec, "--publish", "--json"], env=subprocess_env(settings),
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode in (0, 4), done.stderr  # 4: diverged, which a what-if replay of the fix does
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def mirror(base_settings: Settings) -> Iterator[Mirror]:
    prefix = new_topic_name("console")
    deadlocked = _topic(base_settings, prefix, "deadlocked")
    states = _case_run(deadlocked, "incident-7", late=True)
    assert case_study.deadlocked(states)
    finished = _topic(base_settings, prefix, "finished")
    # The fixed code: it finishes whichever of the worker and the timeout comes first.
    assert case_study.finished(_case_run(finished, "routine-3", late=False, swarm=case_study.fixed))

    research = _topic(base_settings, prefix, "research")
    with StubServer(model) as server:
        swarm = research_swarm(server.base_url)
        start_run(settings=research, swarm=swarm, run_id="research-1", seed=2)
        live = {r.agent: r.state for r in run_agents(settings=research, swarm=swarm, until_quiet=1.0)}
        base_url = server.base_url
    assert live["researcher"]["answers"] == ["Kafka orders events by offset (3 pages about kafka ordering)."]
    # The changed prompt against the recorded run: it departs at the researcher's first HTTP exchange.
    changed = replay_swarm(settings=research, swarm=research_swarm(base_url, prompt="Answer in one line."))
    assert changed.first_divergence is not None
    token = token_from(changed, topic=research.topic, run=None, code_version="research-2", reducer="swarm:research")
    publish_report(research, swarm_report(changed, swarm="research", topic=research.topic, group=None, token=token))

    for s in (deadlocked, finished, research):
        PostgresSink(settings=s).run(until_end=True)
    # Replay reports as the chart's Job publishes them: the fix against the deadlock (it diverges), and
    # the code that made the finished run against it (it reproduces it).
    assert _replay_cli(deadlocked, FIXED)["diverged"] is True
    assert _replay_cli(finished, FIXED)["diverged"] is False

    port = free_ports(1)[0]
    env = subprocess_env(base_settings)
    proc = subprocess.Popen([*CLI, "ui", "--port", str(port), "--swarm", BUGGY, "--quiet-after", "0"], env=env,
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        assert _get_when_up(f"{url}/healthz", proc) == "ok\n"
        yield Mirror(prefix=prefix, deadlocked=deadlocked, finished=finished, research=research, url=url)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    with chromium(tmp_path / "profile", width=1500, height=1000) as driver:
        yield driver
        assert console_errors(driver) == []


def _shot(driver: Any, name: str) -> None:
    for folder in (SHOTS, ARTIFACTS):
        folder.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(folder / f"{name}.png"))


def _run_url(m: Mirror, settings: Settings, run_id: str) -> str:
    return f"{m.url}/runs/{settings.topic}/{run_id}"


def _hash(driver: Any) -> str:
    """The fragment a jump landed on (the server redirects to the page, the fragment names the row)."""
    found: str = WebDriverWait(driver, 10).until(lambda d: d.execute_script("return location.hash"))
    return found


def _follow(driver: Any, element: Any) -> None:
    """Click a link or a form's button and wait for the page it loads. A click returns once the browser took
    it, not once the next page is there: on a loaded machine (the state page runs `swarmlog state` in a
    child) the old page's elements were read as the new one's (a stale element, a missing ``#state``)."""
    # The old document is marked; the next one is known by not carrying the mark. (Waiting for the old <html>
    # to go stale asked Chromium about a node of a document being replaced: it answered "unknown error: Node
    # with given id does not belong to the document" instead of a stale element, once in CI.)
    driver.execute_script("window.__swarmlogLeaving = true")
    element.click()
    WebDriverWait(driver, 120).until(lambda d: d.execute_script(
        "return window.__swarmlogLeaving !== true && document.readyState === 'complete'"))


def _text(driver: Any, css: str) -> str:
    return str(driver.find_element(By.CSS_SELECTOR, css).text)


# --- the tests ------------------------------------------------------------------------------------------


def test_the_runs_page_lists_every_run_with_its_status(mirror: Mirror, browser: Any) -> None:
    browser.get(f"{mirror.url}/?q={mirror.prefix}")
    rows = browser.find_elements(By.CSS_SELECTOR, "#runs tr.run")
    statuses = {(r.get_attribute("data-topic"), r.get_attribute("data-run")): r.get_attribute("data-status")
                for r in rows}
    assert statuses == {(mirror.deadlocked.topic, "incident-7"): "diverged",
                        (mirror.finished.topic, "routine-3"): "verified",
                        (mirror.research.topic, "research-1"): "diverged"}
    first = next(r for r in rows if r.get_attribute("data-run") == "incident-7")
    cells = [c.text for c in first.find_elements(By.TAG_NAME, "td")]
    assert cells[1] == "case-study" and cells[4] == "5" and cells[5] == "case-study-buggy"
    assert cells[6] == "coordinator, worker, reviewer, supervisor, auditor"
    _shot(browser, "runs")
    # The filter and the search narrow the list, in the page.
    Select(browser.find_element(By.ID, "status-filter")).select_by_value("verified")
    _follow(browser, browser.find_element(By.ID, "filter-button"))
    assert [r.get_attribute("data-run") for r in browser.find_elements(By.CSS_SELECTOR, "#runs tr.run")] == [
        "routine-3"]
    search = browser.find_element(By.ID, "search")
    search.clear()
    search.send_keys(mirror.research.topic)
    Select(browser.find_element(By.ID, "status-filter")).select_by_value("")
    _follow(browser, browser.find_element(By.ID, "filter-button"))
    assert [r.get_attribute("data-run") for r in browser.find_elements(By.CSS_SELECTOR, "#runs tr.run")] == [
        "research-1"]


def test_the_deadlocked_run_shows_the_timeout_before_task_complete_and_the_fix_diverging(
        mirror: Mirror, browser: Any) -> None:
    browser.get(f"{mirror.url}/?q={mirror.prefix}")
    _follow(browser, browser.find_element(By.LINK_TEXT, "incident-7"))
    rows = browser.find_elements(By.CSS_SELECTOR, "#timeline tr.row")
    kinds = [r.get_attribute("data-kind") for r in rows]
    notes = [r.find_element(By.CSS_SELECTOR, "td.note").text for r in rows]
    timeout = kinds.index("timeout")
    complete = next(i for i, n in enumerate(notes) if n.startswith("task_complete"))
    assert timeout < complete, "the reviewer's timeout fires before the worker's task_complete"
    assert notes[timeout].startswith("TIMEOUT deadline")
    # The fix's replay report: the reviewer diverges handling the late task_complete; both sides shown.
    diverged = [r for r in rows if "diverged" in r.get_attribute("class").split()]
    assert [int(r.get_attribute("data-offset")) for r in diverged] == [int(rows[complete].get_attribute("data-offset"))]
    assert "!!" in diverged[0].text and "reviewer diverges handling this" in diverged[0].text
    assert json.loads(_text(browser, "#recorded")) is None  # the buggy run wrote nothing there...
    replayed = json.loads(_text(browser, "#replayed"))  # ...where the fixed reviewer approves
    assert replayed["payload"]["kind"] == "approved" and replayed["to"] == "coordinator"
    _shot(browser, "timeline-deadlock")

    # The reviewer's state before and after the timeout, as `swarmlog state --diff` computes it.
    at = int(rows[timeout].get_attribute("data-offset"))
    _follow(browser, rows[timeout].find_element(By.CSS_SELECTOR, "td.num a"))
    assert _text(browser, "#event-title").startswith(f"offset {at}: timer.fired")
    _follow(browser, browser.find_element(By.ID, "state-diff"))
    assert json.loads(_text(browser, "#before"))["phase"] == "waiting"
    assert json.loads(_text(browser, "#after"))["phase"] == "timed_out"
    assert _text(browser, "#changes") == '~ phase: "waiting" → "timed_out"'
    _shot(browser, "state-diff")
    expected = subprocess.run([*CLI, "state", "reviewer", "--diff", str(at), str(at + 1), "--swarm", BUGGY, "--json"],
                              env=subprocess_env(mirror.deadlocked), capture_output=True, text=True, timeout=120)
    assert json.loads(expected.stdout)["after"] == json.loads(_text(browser, "#after"))
    # And one state at an offset.
    browser.find_element(By.ID, "at").send_keys(str(at))
    _follow(browser, browser.find_element(By.ID, "state-button"))
    assert json.loads(_text(browser, "#state")) == {"phase": "waiting", "ignored": 0}


def test_the_timeline_pages_and_jumps(mirror: Mirror, browser: Any) -> None:
    base = _run_url(mirror, mirror.deadlocked, "incident-7")
    browser.get(f"{base}?n=4")
    first = [int(r.get_attribute("data-offset")) for r in browser.find_elements(By.CSS_SELECTOR, "#timeline tr.row")]
    assert len(first) == 4
    _follow(browser, browser.find_element(By.ID, "next-page"))
    second = [int(r.get_attribute("data-offset")) for r in browser.find_elements(By.CSS_SELECTOR, "#timeline tr.row")]
    assert second and second[0] > first[-1]
    assert _text(browser, "#page-info").startswith(f"offsets {second[0]}–{second[-1]}")
    _follow(browser, browser.find_element(By.ID, "prev-page"))
    assert [int(r.get_attribute("data-offset"))
            for r in browser.find_elements(By.CSS_SELECTOR, "#timeline tr.row")] == first
    # The next event of the supervisor: the escalation it got is the one it acts on.
    Select(browser.find_element(By.ID, "next-agent")).select_by_visible_text("supervisor")
    _follow(browser, browser.find_element(By.ID, "next-button"))
    target = _hash(browser)
    row = browser.find_element(By.CSS_SELECTOR, target)
    assert "supervisor" in browser.find_element(By.CSS_SELECTOR, "#timeline thead").text
    assert row.find_element(By.CSS_SELECTOR, "td.note").text.startswith("note")
    # To the first divergence, from any page.
    browser.get(f"{base}?n=4")
    _follow(browser, browser.find_element(By.ID, "jump-divergence"))
    marked = browser.find_element(By.CSS_SELECTOR, _hash(browser))
    assert "diverged" in marked.get_attribute("class")


def test_a_streamed_model_call_reads_as_a_conversation_and_the_divergence_marks_the_exchange(
        mirror: Mirror, browser: Any) -> None:
    base = _run_url(mirror, mirror.research, "research-1")
    browser.get(base)
    rows = browser.find_elements(By.CSS_SELECTOR, "#timeline tr.row")
    http = [r for r in rows if r.get_attribute("data-kind") == "http"]
    assert len(http) == 3
    # The changed prompt departs at the researcher's first exchange: marked there, and on its step's input.
    marked = [r for r in rows if "diverged" in r.get_attribute("class").split()]
    assert [r.get_attribute("data-kind") for r in marked] == ["run", "http"]
    assert "body.messages[0].content" in marked[1].text
    assert json.loads(_text(browser, "#recorded"))["value"] == "You are a careful researcher."
    assert json.loads(_text(browser, "#replayed"))["value"] == "Answer in one line."
    _shot(browser, "timeline-research")

    second_call = int(http[1].get_attribute("data-offset"))
    _follow(browser, http[0].find_element(By.CSS_SELECTOR, "td.num a"))
    convo = _text(browser, "#conversation")
    assert "model gpt-stub" in convo and "streamed" in convo and "1 in + 1 out tokens" in convo
    assert "You are a careful researcher." in convo and "How does Kafka order events?" in convo
    assert '→ search({\n  "q": "kafka ordering"\n})' in convo  # the streamed tool call, assembled
    assert "\\\"" not in convo
    assert _text(browser, "#recorded")  # this exchange is the diverging record: both sides here too
    _shot(browser, "model-call")
    # The raw payload is one click away, and is what the log recorded.
    assert not browser.find_element(By.ID, "payload").is_displayed()
    browser.find_element(By.CSS_SELECTOR, "#raw summary").click()
    assert '"response_body": "data: ' in _text(browser, "#payload")

    browser.get(f"{base}/events/{second_call}")
    convo = _text(browser, "#conversation")
    assert "tool (result of call_" in convo and "3 pages about kafka ordering" in convo
    assert "Kafka orders events by offset (3 pages about kafka ordering)." in convo
    # The model calls page, from the mirror's llm_calls view.
    browser.get(f"{base}/calls")
    cells = [[c.text for c in r.find_elements(By.TAG_NAME, "td")]
             for r in browser.find_elements(By.CSS_SELECTOR, "#calls tbody tr")]
    assert [c[2] for c in cells] == ["http.exchange (streamed)", "http.exchange (streamed)", "http.exchange"]
    assert {c[4] for c in cells} == {"gpt-stub"} and all(c[6] and c[7] for c in cells[:1])


def test_the_replay_reports_page_shows_both_values(mirror: Mirror, browser: Any) -> None:
    browser.get(f"{_run_url(mirror, mirror.deadlocked, 'incident-7')}/reports")
    _follow(browser, browser.find_element(By.CSS_SELECTOR, "#reports tbody a"))
    assert "diverged" in _text(browser, "h1 + p")
    assert json.loads(_text(browser, "#replayed"))["payload"]["kind"] == "approved"
    assert _text(browser, "#recorded") == "null"


def test_the_consoles_connection_cannot_write(mirror: Mirror, base_settings: Settings) -> None:
    reader = MirrorReader(conninfo=base_settings.database_conninfo(), address="test")
    conn = reader.connection()
    row = ("x", 1, "e", "r", "a", "t", 1, None, [], "{}")
    sql = ("INSERT INTO events (topic, seq, event_id, run_id, agent_id, event_type, schema_version, recipient, "
           "causes, payload) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)")
    with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
        conn.execute(sql, row)
    # Not only read-only by a setting the session could change: the role itself may not insert.
    conn.execute("SET default_transaction_read_only = off")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute(sql, row)
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("DELETE FROM replay_reports")
    assert conn.execute("SELECT current_user").fetchone() == {"current_user": "swarmlog_reader"}
    reader.close()


def test_the_charts_console_command_serves_the_mirror(mirror: Mirror, base_settings: Settings, helm: list[str],
                                                      helm_env: dict[str, str], tmp_path: Path) -> None:
    """The chart's console Deployment, its rendered command and environment run as a process (the release
    tests' way): it reads this mirror and lists these runs. Only its address is local (port, loopback)."""
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({
        "swarm": {"app": BUGGY, "agents": ["coordinator"]},
        "kafka": {"bootstrapServers": base_settings.bootstrap_servers, "topic": mirror.deadlocked.topic},
        "database": {"url": base_settings.database_url},
        "console": {"enabled": True}}))
    manifests = render(helm, helm_env, "template", "console", str(CHART), "-f", str(values))
    home = tmp_path / "home"
    home.mkdir()
    (console,) = [w for w in workloads(manifests, dockerfile=DOCKERFILE, venv=Path(sys.prefix), home=home)
                  if w.component == "console"]
    argv = list(console.argv)
    port = free_ports(1)[0]
    argv[argv.index("--port") + 1] = str(port)
    argv[argv.index("--host") + 1] = "127.0.0.1"
    env = {**console.env, "PYTHONPATH": os.pathsep.join([str(REPO / "platform"), str(REPO / "connectors")])}
    proc = subprocess.Popen(argv, env=env, cwd=home, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        page = _get_when_up(f"http://127.0.0.1:{port}/?q={mirror.prefix}", proc)
        assert "incident-7" in page and "routine-3" in page and "research-1" in page
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _get_when_up(url: str, proc: subprocess.Popen[str], timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return str(r.read().decode())
        except OSError:
            assert proc.poll() is None, f"the console exited: {proc.communicate()[1][-3000:]}"
            assert time.monotonic() < deadline, f"the console did not answer in {timeout} s"
            time.sleep(0.2)


def test_show_log_and_the_text_timeline_print_a_streamed_call_as_a_conversation(mirror: Mirror) -> None:
    env = subprocess_env(mirror.research)

    def cli(*args: str) -> str:
        done = subprocess.run([*CLI, *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    lines = [ln for ln in cli("log", "--type", "http.exchange").splitlines() if ln.strip()]
    assert len(lines) == 3 and all("gpt-stub [" in ln for ln in lines)
    first = int(lines[0].split()[0])
    shown = cli("show", str(first))
    assert "conversation:" in shown and "[system]\n    You are a careful researcher." in shown
    assert '→ calls search({"q":"kafka ordering"})' in shown  # assembled from the stream's pieces
    assert "data: " not in shown and "authorization" not in shown  # no raw stream, no header dump
    raw = cli("show", str(first), "--raw")
    assert "data: " in raw and '"name": "authorization"' in raw  # the bytes, one flag away
    timeline = cli("timeline", "--color", "never")
    assert "http gpt-stub [2 msg, streamed" in timeline


def test_the_html_timeline_shows_a_model_call_as_a_conversation(mirror: Mirror, browser: Any, tmp_path: Path) -> None:
    page = tmp_path / "research.html"
    done = subprocess.run([*CLI, "timeline", "--html", str(page)], env=subprocess_env(mirror.research), cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    calls = [int(ln.split()[0]) for ln in subprocess.run(
        [*CLI, "log", "--type", "http.exchange"], env=subprocess_env(mirror.research), cwd=REPO, capture_output=True,
        text=True, timeout=120).stdout.splitlines() if ln.strip()]
    browser.get(page.as_uri())
    browser.find_element(By.CSS_SELECTOR, f'#diagram g.event[data-offset="{calls[1]}"] .mark').click()
    convo = _text(browser, "#conversation")
    assert "model gpt-stub" in convo and "streamed" in convo
    assert "3 pages about kafka ordering" in convo and "Kafka orders events by offset" in convo
    assert not browser.find_element(By.ID, "payload").is_displayed()  # the raw payload: one click away
