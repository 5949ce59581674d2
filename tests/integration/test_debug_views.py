"""Issue 12's views on the real broker: the timeline (terminal, and the HTML page in headless Chromium)
and ``swarmlog step`` (through Textual's own pilot, and as a process in tmux), on the case study's
deadlocked run.

The run deadlocks by construction, not by timing: the worker's job (its recorded effect) waits
until the reviewer's timeout has fired in the log, so its ``task_complete`` is appended after
the firing however late any agent starts on a loaded machine."""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from swarmlog import EventLog
from swarmlog.debug import LogView, Session
from swarmlog.examples import case_study
from swarmlog.kafka.topic import create_topic
from swarmlog.log.protocol import MESSAGE, STATE_DIGEST, TIMER_FIRED
from swarmlog.runtime import run_agents, start_run
from swarmlog.settings import Settings

from .browser import ARTIFACTS, chromium, console_errors
from .conftest import REPO, new_topic_name, subprocess_env
from .test_debug_case_study import BUGGY, CLI, FIXED, events, offsets_of, swarmlog

AGENTS = ["coordinator", "worker", "reviewer", "supervisor", "auditor"]


def drawn_events(run: Settings) -> list[dict[str, Any]]:
    """Every event a timeline draws: the log's, but for the state digests (the record of a step)."""
    return [e for e in events(run) if e["event_type"] != STATE_DIGEST]


@pytest.fixture(scope="module")
def run(base_settings: Settings) -> Settings:
    """One deadlocked live run of the buggy swarm on a topic of its own."""
    topic = new_topic_name("case12-views")
    create_topic(base_settings, topic)
    settings = base_settings.model_copy(update={"topic": topic})
    view = LogView(settings=settings)

    def after_the_timeout(task: str) -> dict[str, Any]:
        deadline = time.monotonic() + 120
        while not any(True for _ in view.events(types=[TIMER_FIRED])):
            assert time.monotonic() < deadline, "the reviewer's timeout never fired"
            time.sleep(0.1)
        return {"summary": task.upper(), "took_ms": 2000}

    real, case_study.do_work = case_study.do_work, after_the_timeout
    try:
        start_run(settings=settings, swarm=case_study.buggy, run_id="case12", seed=5)
        results = run_agents(settings=settings, swarm=case_study.buggy, until_quiet=1.0)
    finally:
        case_study.do_work = real
    assert case_study.deadlocked({r.agent: r.state for r in results})
    return settings


# --- the timeline in the terminal ----------------------------------------------------------------


def test_the_terminal_timeline_shows_every_agent_as_a_column_and_the_timeout_before_task_complete(run):
    _, fired, late = offsets_of(run)
    out = swarmlog(run, "timeline", "--color", "never").stdout
    lines = out.splitlines()
    assert lines[0].startswith(f"timeline of {run.topic}") and "5 agents, 1 timeout" in lines[0]
    assert lines[1].split() == ["offset", *AGENTS]
    rows = [line for line in lines[2:] if re.match(r"\s*\d+", line)]
    assert [int(line.split()[0].rstrip("!")) for line in rows] == [e["offset"] for e in drawn_events(run)]
    timeout = next(i for i, line in enumerate(rows) if "TIMEOUT deadline" in line)
    complete = next(i for i, line in enumerate(rows) if "task_complete" in line)
    assert int(rows[timeout].split()[0]) == fired and int(rows[complete].split()[0]) == late
    assert timeout < complete  # the deadlock, as a picture: the timeout fired first
    column = lines[1].index("reviewer") + len("reviewer") // 2
    assert rows[timeout][column] == "◉" and rows[complete][column] == "▶"  # both on the reviewer's line

    diverged = swarmlog(run, "timeline", "--swarm", FIXED, "--color", "never").stdout
    marked = [line for line in diverged.splitlines() if re.match(r"\s*\d+!!", line)]
    assert len(marked) == 1 and marked[0].split()[0] == f"{late}!!"
    assert f"DIVERGED first at offset {late} (agent reviewer, code case-study-fixed" in diverged
    assert "no divergence: code case-study-buggy" in swarmlog(run, "timeline", "--swarm", BUGGY).stdout


# --- the timeline as a page, in Chromium ----------------------------------------------------------


def _load(driver: Any, page: Path) -> None:
    driver.get(page.as_uri())
    WebDriverWait(driver, 30).until(lambda d: d.execute_script("return document.body.dataset.ready") == "1")


def _drawn(driver: Any) -> list[dict[str, Any]]:
    """Every event the page drew: its data and where it is on screen, in the order of the document."""
    return driver.execute_script("""
        return [...document.querySelectorAll('#diagram g.event')].map(g => ({
            offset: Number(g.dataset.offset), type: g.dataset.type, kind: g.dataset.kind, agent: g.dataset.agent,
            label: g.dataset.label, to: g.dataset.to || null, classes: [...g.classList],
            top: g.querySelector('.hit').getBoundingClientRect().top}));""")


def test_the_html_timeline_of_the_case_study_shows_all_five_agents_and_the_timeout_firing_before_task_complete(
        run, tmp_path):
    timer_set, fired, late = offsets_of(run)
    escalate = next(e["offset"] for e in events(run) if e["event_type"] == MESSAGE
                    and e["payload"]["kind"] == "escalate")
    page = tmp_path / "case-study.html"
    cp = swarmlog(run, "timeline", "--swarm", BUGGY, "--html", str(page))
    assert "loads nothing from the network" in cp.stderr and page.stat().st_size > 0
    with chromium(tmp_path / "profile") as driver:
        _load(driver, page)
        assert console_errors(driver) == []
        # All five agents: a named lane each, left to right in the swarm's order, each with its lifeline.
        lanes = driver.execute_script("""
            return [...document.querySelectorAll('#header-svg g.lane')].map(g => ({
                agent: g.dataset.agent, x: g.querySelector('text').getBoundingClientRect().left}));""")
        assert [x["agent"] for x in lanes] == AGENTS
        assert [x["x"] for x in lanes] == sorted(x["x"] for x in lanes)
        lifelines = driver.execute_script(
            "return [...document.querySelectorAll('#diagram line.lifeline')].map(l => l.dataset.agent)")
        assert lifelines == AGENTS
        # Every event of the log, in offset order, top to bottom.
        drawn = _drawn(driver)
        assert [d["offset"] for d in drawn] == [e["offset"] for e in drawn_events(run)]
        assert [d["top"] for d in drawn] == sorted(d["top"] for d in drawn)
        # The timeout, on the reviewer's lane, drawn before (above) the late task_complete.
        timeouts = [d for d in drawn if "timeout" in d["classes"]]
        assert [(d["offset"], d["agent"], d["type"]) for d in timeouts] == [(fired, "reviewer", "timer.fired")]
        complete = next(d for d in drawn if d["label"] == "task_complete")
        assert (complete["offset"], complete["agent"], complete["to"]) == (late, "worker", "reviewer")
        assert timeouts[0]["top"] < complete["top"]
        # Messages are arrows from sender to recipient; causal arrows join causes to what they caused.
        arrows = driver.execute_script("""
            return [...document.querySelectorAll('#diagram line.arrow.message')].map(l =>
                [Number(l.closest('g.event').dataset.offset), l.dataset.from, l.dataset.to]);""")
        assert [late, "worker", "reviewer"] in arrows
        assert len(arrows) == len([e for e in events(run) if e["event_type"] == MESSAGE])
        causal = driver.execute_script("""
            return [...document.querySelectorAll('#diagram path.causal')].map(p =>
                [Number(p.dataset.from), Number(p.dataset.to)]);""")
        assert [timer_set, fired] in causal and [fired, escalate] in causal  # set -> fired -> escalate
        # Click the timeout: its payload, and its causes both ways, highlighted.
        driver.find_element(By.CSS_SELECTOR, f'#diagram g.event[data-offset="{fired}"] .mark').click()
        assert driver.find_element(By.ID, "details-title").text == f"offset {fired}: timer.fired"
        payload = json.loads(driver.find_element(By.ID, "payload").text)
        assert payload == {"name": "deadline", "set_offset": timer_set, "clock": "wallclock"}
        assert [a.get_attribute("data-offset") for a in driver.find_elements(By.CSS_SELECTOR, "#causes a")] == \
            [str(timer_set)]
        assert [a.get_attribute("data-offset") for a in driver.find_elements(By.CSS_SELECTOR, "#caused a")] == \
            [str(escalate)]
        lit = driver.execute_script(
            "return [...document.querySelectorAll('path.causal.hl')].map(p => [+p.dataset.from, +p.dataset.to])")
        assert sorted(lit) == [[timer_set, fired], [fired, escalate]]
        # Following a cause selects it.
        driver.find_element(By.CSS_SELECTOR, "#causes a").click()
        assert driver.find_element(By.ID, "details-title").text == f"offset {timer_set}: timer.set"
        # Self-contained: the page fetched nothing at all.
        assert driver.execute_script("return performance.getEntriesByType('resource').length") == 0
        driver.find_element(By.CSS_SELECTOR, f'#diagram g.event[data-offset="{fired}"] .mark').click()
        driver.execute_script("document.getElementById('scroller').scrollLeft = 0")
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shot = ARTIFACTS / "timeline-case-study.png"
        driver.set_window_size(1500, 560)
        assert driver.save_screenshot(str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


def test_the_page_marks_the_first_divergence_of_the_fixed_code_and_jumps_to_it(run, tmp_path):
    _, _, late = offsets_of(run)
    page = tmp_path / "fixed.html"
    swarmlog(run, "timeline", "--swarm", FIXED, "--html", str(page))
    with chromium(tmp_path / "profile") as driver:
        _load(driver, page)
        diverged = [d for d in _drawn(driver) if "divergence" in d["classes"]]
        assert [d["offset"] for d in diverged] == [late]
        driver.find_element(By.ID, "jump-divergence").click()
        assert driver.find_element(By.ID, "details-title").text == f"offset {late}: agent.message"
        text = driver.find_element(By.ID, "details-divergence").text
        assert "reviewer diverges handling this" in text and "does not have" in text
        assert driver.execute_script("return location.hash") == f"#offset={late}"
        assert console_errors(driver) == []


def test_thousands_of_events_stay_usable_one_page_at_a_time_with_zoom(base_settings: Settings, tmp_path):
    topic = new_topic_name("timeline-big")
    create_topic(base_settings, topic)
    settings = base_settings.model_copy(update={"topic": topic})
    agents = [f"a{i}" for i in range(6)]
    n = 3000
    with EventLog(settings=settings, run_id="big") as log:
        offsets: list[int] = []
        for i in range(n):
            causes = [offsets[-1]] if offsets and i % 3 else []
            log.produce(MESSAGE, {"kind": f"k{i % 7}", "body": f"event {i}"}, agent=agents[i % 6],
                        to=agents[(i + 1) % 6] if i % 10 else None, causes=causes)
            if i % 500 == 499:
                offsets.extend(log.flush())
        offsets.extend(log.flush())
    page = tmp_path / "big.html"
    swarmlog(settings, "timeline", "--html", str(page))
    with chromium(tmp_path / "profile") as driver:
        _load(driver, page)
        assert console_errors(driver) == []
        assert driver.find_element(By.ID, "page-info").text == f"events 1–250 of {n} (page 1/12)"
        drawn = _drawn(driver)
        assert [d["offset"] for d in drawn] == offsets[:250]  # only one page is in the document
        driver.find_element(By.ID, "next-page").click()
        assert [d["offset"] for d in _drawn(driver)] == offsets[250:500]
        Select(driver.find_element(By.ID, "page-size")).select_by_visible_text("1000")
        assert [d["offset"] for d in _drawn(driver)] == offsets[:1000]
        height = driver.execute_script("return document.getElementById('diagram').getBoundingClientRect().height")
        for _ in range(6):
            driver.find_element(By.ID, "zoom-out").click()
        dense = driver.execute_script("return document.getElementById('diagram').getBoundingClientRect().height")
        assert dense < height / 3 and "dense" in driver.find_element(By.ID, "diagram").get_attribute("class")
        # Go to an event on a page not drawn: its page is drawn, it is selected, its payload shown.
        target = offsets[2345]
        box = driver.find_element(By.ID, "goto")
        box.send_keys(str(target))
        driver.find_element(By.ID, "goto-button").click()
        assert driver.find_element(By.ID, "details-title").text == f"offset {target}: agent.message"
        assert json.loads(driver.find_element(By.ID, "payload").text)["body"] == "event 2345"
        assert target in [d["offset"] for d in _drawn(driver)]
        assert driver.find_element(By.ID, "page-info").text == f"events 2001–3000 of {n} (page 3/3)"
        # A cause on an earlier page is a stub that leads to it.
        first = driver.execute_script("""
            const t = document.querySelector('#diagram text.offpage'); return t && [+t.dataset.from, +t.dataset.to];""")
        assert first is not None and first[0] < offsets[2000] <= first[1]


# --- swarmlog step: Textual's pilot, then a real terminal -------------------------------------------


def _text(app: Any, selector: str) -> str:
    from textual.widgets import Static

    return str(app.query_one(selector, Static).content)


async def _settle(app: Any, pilot: Any) -> None:
    await pilot.pause()
    await app.workers.wait_for_complete()
    await pilot.pause()


async def _press(app: Any, pilot: Any, *keys: str) -> None:
    for key in keys:
        await pilot.press(key)
        await _settle(app, pilot)


def test_step_goes_forward_and_back_with_states_before_and_after_and_stops_at_breakpoints(run):
    from swarmlog.debug.stepview import StepApp

    timer_set, fired, late = offsets_of(run)

    async def drive() -> None:
        app = StepApp(session=Session(settings=run, swarm=case_study.buggy))
        async with app.run_test(size=(180, 50)) as pilot:
            await _settle(app, pilot)
            assert app.stepper is not None and app.stepper.position == 0
            assert "nothing folded yet" in _text(app, "#step")
            await _press(app, pilot, "right")
            step = _text(app, "#step")
            assert app.stepper.current.offset == 0
            assert "coordinator runs Coordinator.start (its handler run #1)" in step
            assert '~ phase: "starting" -> "waiting"' in step and "wrote agent.message expect → reviewer" in step
            # A breakpoint typed in: the timer's firing. Continue stops there, with the reviewer's change.
            await _press(app, pilot, "b")
            await pilot.press(*"type timer.fired", "enter")
            await _settle(app, pilot)
            assert [str(b) for b in app.breakpoints] == ["type timer.fired"]
            await _press(app, pilot, "c")
            assert app.stepper.current.offset == fired
            step = _text(app, "#step")
            assert "reviewer runs Reviewer.deadline" in step
            assert '"phase": "waiting"' in step and '~ phase: "waiting" -> "timed_out"' in step
            assert "wrote agent.message escalate → supervisor" in step
            assert "breakpoint (type timer.fired)" in _text(app, "#status")
            # Back one event, and forward again: the same states.
            await _press(app, pilot, "left")
            assert app.stepper.current.offset == timer_set
            assert "no agent's handler ran on this event" in _text(app, "#step")
            assert app.stepper.states()["reviewer"]["phase"] == "waiting"
            await _press(app, pilot, "right")
            assert app.stepper.current.offset == fired and app.stepper.states()["reviewer"]["phase"] == "timed_out"
            # A breakpoint on the current step's agent, then a predicate: the late message, ignored.
            await _press(app, pilot, "a")
            await _press(app, pilot, "c")
            assert app.stepper.current.offset == late and "Reviewer.task_complete" in _text(app, "#step")
            assert "~ ignored: 0 -> 1" in _text(app, "#step")
            await _press(app, pilot, "x", "b")
            await pilot.press(*"if after.get('ignored') == 1", "enter")
            await _settle(app, pilot)
            await _press(app, pilot, "g")
            await pilot.press("0", "enter")
            await _settle(app, pilot)
            assert app.stepper.current.offset == 0
            await _press(app, pilot, "c")
            assert app.stepper.current.offset == late
            # Reverse continue with a breakpoint on the reviewer: back to its timeout.
            await _press(app, pilot, "x", "g")
            await pilot.press(*str(fired), "enter")
            await _settle(app, pilot)
            await _press(app, pilot, "a", "g")
            await pilot.press(*str(late), "enter")
            await _settle(app, pilot)
            await _press(app, pilot, "r")
            assert app.stepper.current.offset == fired
            # Every agent's state, on s.
            await _press(app, pilot, "s")
            states = _text(app, "#step")
            assert all(a in states for a in AGENTS) and '"phase": "timed_out"' in states
            await pilot.press("q")

    asyncio.run(drive())


def test_step_jumps_to_the_first_divergence_of_the_fixed_code(run):
    from swarmlog.debug.stepview import StepApp

    _, _, late = offsets_of(run)

    async def drive() -> None:
        app = StepApp(session=Session(settings=run, swarm=case_study.fixed))
        async with app.run_test(size=(180, 50)) as pilot:
            await _settle(app, pilot)
            await _press(app, pilot, "d")
            assert app.stepper is not None and app.stepper.current.offset == late
            step = _text(app, "#step")
            assert "reviewer runs FixedReviewer.task_complete" in step
            assert "!! the code first diverges here (reviewer): the step now writes an event the log does not have" \
                in step
            assert '"kind": "approved"' in step  # what the fixed code writes now
            from textual.widgets import DataTable

            table = app.query_one("#events", DataTable)
            assert table.get_row_at(table.cursor_row)[1] == str(late)  # the list points at it
            await pilot.press("q")

    asyncio.run(drive())


def _tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], check=True, capture_output=True, text=True, timeout=30).stdout


def _screen_until(session: str, pattern: str, timeout: float = 120.0) -> str:
    deadline = time.monotonic() + timeout
    screen = ""
    while time.monotonic() < deadline:
        screen = _tmux("capture-pane", "-p", "-t", session)
        if re.search(pattern, screen):
            return screen
        time.sleep(0.3)
    raise AssertionError(f"{pattern!r} never showed; the screen:\n{screen}")


def test_swarmlog_step_in_a_real_terminal_stops_at_the_timeout_and_quits(run, tmp_path):
    _, fired, _ = offsets_of(run)
    env = subprocess_env(run)
    exports = " ".join(f"{k}={shlex.quote(env[k])}" for k in ("SWARMLOG_BOOTSTRAP_SERVERS", "SWARMLOG_DATABASE_URL",
                                                                "SWARMLOG_TOPIC", "SWARMLOG_SCHEMA_DIR", "PYTHONPATH"))
    status = tmp_path / "status"
    # COLUMNS and LINES would override the terminal's own size (Textual reads them): the pane decides.
    command = (f"cd {shlex.quote(str(REPO))} && env -u COLUMNS -u LINES {exports} TERM=xterm-256color "
               f"{shlex.join(CLI)} step "
               f"--swarm {BUGGY} --break-type timer.fired; echo $? > {shlex.quote(str(status))}")
    session = f"swarmlog-step-{tmp_path.name}"[:60]
    _tmux("new-session", "-d", "-s", session, "-x", "170", "-y", "45", command)
    try:
        # Ready once the opening fold has said where it stands: a key pressed while it still runs
        # is refused (the view says "busy"), and the status line shows the breakpoints before that.
        _screen_until(session, r"breakpoints: type timer\.fired\s*\n.*just before offset 0")
        _tmux("send-keys", "-t", session, "c")
        screen = _screen_until(session, r"breakpoint \(type timer\.fired\)")
        assert f"offset {fired}" in screen and "reviewer runs Reviewer.deadline" in screen, screen
        assert '~ phase: "waiting" -> "timed_out"' in screen, screen
        _tmux("send-keys", "-t", session, "q")
        deadline = time.monotonic() + 30
        while not status.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert status.read_text().strip() == "0"
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


def test_step_without_textual_says_which_extra_to_install(run, tmp_path):
    # The view is an optional extra: without it the command says so, and how to get it.
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(
        "import sys\nclass _Block:\n    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'textual' or name.startswith('textual.'):\n"
        "            raise ImportError('blocked for the test')\n"
        "sys.meta_path.insert(0, _Block())\n")
    env = subprocess_env(run)
    env["PYTHONPATH"] = f"{shim}:{env['PYTHONPATH']}"
    cp = subprocess.run([*CLI, "step", "--swarm", BUGGY], env=env, cwd=REPO, capture_output=True, text=True,
                        timeout=120)
    assert cp.returncode != 0 and "pip install 'swarmlog[tui]'" in cp.stderr
