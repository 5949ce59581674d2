"""The Python blocks of every page that needs no service (the README's and docs/'s), run as printed.

Pages marked ``<!-- docs-test: cluster -->`` run in tests/integration/test_docs_code.py; how a page says
what its blocks need is in tests/docs_code.py.
"""

from __future__ import annotations

import pytest

from ..docs_code import Page, forget_modules, pages, run_blocks, write_files

PAGES = [p for p in pages() if not p.needs_cluster and any(b.not_run is None for b in p.python)]


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_python_block_of_the_page_runs_as_printed(page: Page, tmp_path, monkeypatch, request) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-docs-test-never-sent")  # a client is built, never called
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-docs-test-never-sent")
    modules = write_files(page, tmp_path)
    try:
        assert run_blocks(page, request.getfixturevalue) > 0
    finally:
        forget_modules(modules)


def test_every_page_with_python_is_run_here_or_in_integration_and_every_block_not_run_says_why() -> None:
    not_run = [(b.where, b.not_run) for p in pages() for b in p.python if b.not_run is not None]
    for where, why in not_run:
        assert len(why) > 10, f"{where}: a block not run must say why"
    print("Python blocks of the docs not run, and why:", *(f"  {w}: {why}" for w, why in not_run), sep="\n")
    runnable = sum(1 for p in pages() for b in p.python if b.not_run is None)
    assert len(not_run) <= max(3, runnable // 10), f"{len(not_run)} blocks not run: few, or they are not tests"
