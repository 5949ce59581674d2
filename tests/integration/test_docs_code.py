"""The Python blocks of every page that needs the cluster (``<!-- docs-test: cluster -->``), run as printed
against the dev cluster, each page on a fresh topic, with the commands the page has the reader start
in another terminal running beside them (tests/docs_code.py says how a page marks what it needs)."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from swarmlog.settings import Settings

from ..docs_code import Page, forget_modules, pages, run_blocks, write_files
from .conftest import subprocess_env

PAGES = [p for p in pages() if p.needs_cluster]


def deadlocked_case_study(settings: Settings) -> str:
    """The case study run live until a run deadlocks, as `swarmlog demo` does: the topic of that run."""
    from swarmlog.examples import case_study

    run, _ = case_study.find_deadlock(settings)
    return run.settings.topic


SETUPS: dict[str, Callable[[Settings], str]] = {"deadlocked-case-study": deadlocked_case_study}


def _env(settings: Settings, workdir: Path) -> dict[str, str]:
    env = subprocess_env(settings)
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"  # `swarmlog` is the venv's
    env["PYTHONPATH"] = f"{workdir}:{env['PYTHONPATH']}"
    return env


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_python_block_of_the_page_runs_as_printed_against_the_cluster(page: Page, settings: Settings,
                                                                              tmp_path, monkeypatch, request) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONBREAKPOINT", "0")  # a page's `debug` stops at no prompt here: the handler just runs
    for key, value in _env(settings, tmp_path).items():
        if key.startswith("SWARMLOG_"):
            monkeypatch.setenv(key, value)
    modules = write_files(page, tmp_path)
    for name in page.page_marks("setup"):  # what the page assumes happened: its run's topic
        monkeypatch.setenv("SWARMLOG_TOPIC", SETUPS[name](settings))
    env = {**_env(settings, tmp_path), "SWARMLOG_TOPIC": os.environ["SWARMLOG_TOPIC"]}
    background = [subprocess.Popen(shlex.split(command), cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, start_new_session=True)
                  for command in page.page_marks("background")]
    try:
        assert run_blocks(page, request.getfixturevalue) > 0
    finally:
        forget_modules(modules)
        for proc in background:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
            out, _ = proc.communicate(timeout=60)
            assert proc.returncode in (0, -signal.SIGTERM), f"{page.name}: background command failed:\n{out[-3000:]}"

