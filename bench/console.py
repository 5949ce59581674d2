"""The web console (``swarmlog ui``) on a 200,000-event run, timed in headless Chromium.

A run of ``BENCH_CONSOLE_EVENTS`` (200k) events (bench/common.py's stream: ten agents, each
event a message to the next) is appended with EventLog and mirrored by the sink; ``swarmlog ui``
serves the mirror as a process of its own, and Debian's Chromium (over chromedriver, as the tests
drive it) loads each page. A page's time is the browser's own navigation timing: from the start of
the navigation to the end of its load event (request, the console's queries and templates, the
response, parsing, style and layout).

Subjects: ``console.runs_page`` (the runs list, searched for the run's topic: every run of the
mirror is aggregated, then filtered), ``console.timeline_first_page`` (the run's first 200 rows),
``console.timeline_deep_page`` (200 rows from 90% of the run: keyset paging on ``seq``, so no
slower than the first). Baseline ``console.*_static``: the same page's HTML as the console served
it, saved and loaded from a file: what the browser alone needs to draw it, the floor. Repetitions
interleaved; ``events`` is the run's size, ``seconds`` the median page time.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from swarmlog.schema.registry import SchemaRegistry
from swarmlog.settings import Settings
from swarmlog_connectors.postgres_sink import PostgresSink

from .common import RUN_ID, Run, env_int, fresh_topic, interleave, log, make_stream, populate, reps, row
from .sink import forget_topic_rows

EVENTS = env_int("BENCH_CONSOLE_EVENTS", 200_000)
PAGE = 200
REPO = Path(__file__).resolve().parents[1]

_LOAD_MS = ("const n = performance.getEntriesByType('navigation')[0];"
            "return n.loadEventEnd > 0 ? n.loadEventEnd - n.startTime : null;")


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _serve(s: Settings) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    env = {**os.environ, "SWARMLOG_DATABASE_URL": s.database_url, "SWARMLOG_BOOTSTRAP_SERVERS": s.bootstrap_servers}
    proc = subprocess.Popen([sys.executable, "-m", "swarmlog.cli", "ui", "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=2):
                return proc, url
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"swarmlog ui did not start: {proc.stderr.read() if proc.stderr else ''}") from None
            time.sleep(0.2)


def _browser(profile: str) -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                 "--disable-background-networking", "--window-size=1500,1000", f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.binary_location = "/usr/bin/chromium"
    return webdriver.Chrome(options=options, service=Service(executable_path="/usr/bin/chromedriver"))


def _load_s(driver: Any, url: str) -> float:
    driver.get(url)
    for _ in range(100):
        ms = driver.execute_script(_LOAD_MS)
        if ms is not None:
            return float(ms) / 1000
        time.sleep(0.01)
    raise RuntimeError(f"{url}: no load timing")


def run(s: Settings, registry: SchemaRegistry) -> list[dict[str, Any]]:
    topic = fresh_topic(s, "console")
    stream = make_stream(registry)
    populate(s, registry, stream, topic, EVENTS)
    stats = PostgresSink(settings=s, topic=topic, registry=registry).run(until_end=True)
    if stats.rows != EVENTS:
        raise RuntimeError(f"the sink mirrored {stats.rows} rows, expected {EVENTS}")
    log(f"console: a run of {EVENTS:,} events mirrored from {topic}")
    proc, url = _serve(s)
    pages = {"runs_page": f"{url}/?q={topic}",
             "timeline_first_page": f"{url}/runs/{topic}/{RUN_ID}?n={PAGE}",
             "timeline_deep_page": f"{url}/runs/{topic}/{RUN_ID}?n={PAGE}&at={int(EVENTS * 0.9)}"}
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        driver = _browser(str(Path(tmp) / "profile"))
        try:
            static: dict[str, str] = {}
            for name, page in pages.items():  # warm: the console's first query of each kind opens its plans
                _load_s(driver, page)
                rows = driver.execute_script("return document.querySelectorAll('tr.row, tr.run').length")
                if rows < 1:
                    raise RuntimeError(f"{page} drew no row")
                # The page as served, with its stylesheet inlined: the browser's floor for the same document.
                html = urllib.request.urlopen(page, timeout=60).read().decode()
                css = (REPO / "platform" / "swarmlog" / "ui" / "static" / "console.css").read_text()
                html = html.replace('<link rel="stylesheet" href="/static/console.css">', f"<style>{css}</style>")
                path = Path(tmp) / f"{name}.html"
                path.write_text(html)
                static[name] = path.as_uri()
            runs = {name: (Run(f"console.{name}", EVENTS), Run(f"console.{name}_static", EVENTS)) for name in pages}

            def measure(name: str) -> Any:
                def step(_: int) -> None:
                    subject, base = runs[name]
                    subject.add(_load_s(driver, pages[name]))
                    base.add(_load_s(driver, static[name]))
                return step

            interleave(reps(7), *(measure(n) for n in pages))
            for subject, base in runs.values():
                results.append(row(subject, base, page_rows=PAGE if "timeline" in subject.name else None))
                log(f"console: {subject.name} {subject.seconds * 1000:.0f} ms (static {base.seconds * 1000:.0f} ms)")
        finally:
            driver.quit()
            proc.terminate()
            proc.wait(timeout=10)
            forget_topic_rows(s, [topic])
    return results
