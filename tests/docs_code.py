"""Every Python block of the README and the docs, run as a reader would paste it.

A page's Python blocks run in order, in one namespace, in a directory of their own that is on
``sys.path`` (the page's files are written there); a function a block defines whose name starts with
``test_`` is then called, with the pytest fixtures it names (the ``simulate`` fixture, ``tmp_path``).
HTML comments on the line before a block, or anywhere in the page, say how (invisible on the site,
read here):

* ``<!-- docs-test: file NAME -->`` (before a block): the block is the file NAME, written into the
  page's directory for the blocks and commands that import it; it is not run by itself.
* ``<!-- docs-test: cluster -->`` (the page): the page needs Kafka (and Postgres): it runs in
  ``tests/integration`` against the dev cluster, with a fresh topic as ``SWARMLOG_TOPIC``; every other
  page runs in ``tests/unit``, where any attempt to reach a service fails.
* ``<!-- docs-test: background COMMAND -->`` (the page): a shell command started in the page's directory
  before its blocks run and stopped (SIGTERM) after them, as the reader runs it in another terminal.
* ``<!-- docs-test: setup NAME -->`` (the page): what the page assumes already happened, done by the
  function NAME of :mod:`tests.integration.test_docs_code` before its blocks run.
* ``<!-- docs-test: raises NAME: TEXT -->`` (before a block): the block (or a test it defines) must
  raise the exception class NAME with TEXT in its message — the page says it fails, and how.
* ``<!-- not run: REASON -->`` (before a block): not run, for the reason given (it waits at a
  debugger's prompt, it needs a key to a paid API); the list is printed by the tests, and short.

A ``print(...)  # text`` line promises what it prints: the text must be a line of what the block
printed, unless it holds ``...`` (an abridged or described output).
"""

from __future__ import annotations

import contextlib
import inspect
import io
import re
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .conftest import REPO

PAGES = [REPO / "README.md", *sorted(p for p in (REPO / "docs").rglob("*.md") if p.name != "index.md")]
"""docs/index.md is the README (docs/_generate.py): its blocks run once, as the README's."""
_FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)\s*$")
_MARK = re.compile(r"<!--\s*(docs-test:|not run:)\s*(.*?)\s*-->")


@dataclass
class Block:
    page: Path
    line: int
    lang: str
    code: str
    marks: list[tuple[str, str]] = field(default_factory=list)
    """The ``docs-test:`` and ``not run:`` comments on the lines just before it: (``docs-test``/``not run``, text)."""

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"

    def mark(self, name: str) -> str | None:
        for kind, text in self.marks:
            if kind == "docs-test" and (text == name or text.startswith(name + " ")):
                return text[len(name):].strip()
        return None

    @property
    def not_run(self) -> str | None:
        return next((text for kind, text in self.marks if kind == "not run"), None)


@dataclass
class Page:
    path: Path
    blocks: list[Block]
    marks: list[tuple[str, str]]
    """Every ``docs-test:`` comment of the page."""

    @property
    def name(self) -> str:
        return str(self.path.relative_to(REPO))

    def page_marks(self, name: str) -> list[str]:
        return [text[len(name):].strip() for kind, text in self.marks
                if kind == "docs-test" and (text == name or text.startswith(name + " "))]

    @property
    def needs_cluster(self) -> bool:
        return bool(self.page_marks("cluster"))

    @property
    def python(self) -> list[Block]:
        return [b for b in self.blocks if b.lang == "python"]


def parse(path: Path) -> Page:
    lines = path.read_text().splitlines()
    blocks: list[Block] = []
    marks: list[tuple[str, str]] = []
    pending: list[tuple[str, str]] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        found = _MARK.findall(line)
        if found:
            for kind, text in found:
                mark = (kind.rstrip(":"), text)
                marks.append(mark)
                pending.append(mark)
            i += 1
            continue
        fence = _FENCE.match(line)
        if fence:
            indent = len(fence.group("indent"))
            body: list[str] = []
            i += 1
            while i < len(lines) and not re.match(r"^ *```\s*$", lines[i]):
                body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
                i += 1
            blocks.append(Block(path, i - len(body), fence.group("lang"), "\n".join(body) + "\n", pending))
            pending = []
        elif line.strip():
            pending = []
        i += 1
    return Page(path, blocks, marks)


def pages() -> list[Page]:
    return [parse(p) for p in PAGES]


def write_files(page: Page, workdir: Path) -> list[str]:
    """Write the page's file blocks into ``workdir``; the module names they make importable."""
    names = []
    for block in page.python:
        name = block.mark("file")
        if name:
            (workdir / name).write_text(block.code)
            names.append(Path(name).stem)
    return names


def run_blocks(page: Page, fixture: Callable[[str], Any]) -> int:
    """Run the page's Python blocks in order, in one namespace (the caller has made the page's directory the
    working directory and put it on ``sys.path``); return how many ran."""
    # A module of its own, as a pasted script's __main__ is: code that looks its classes' module up finds it.
    module = types.ModuleType("__docs__")
    sys.modules["__docs__"] = module
    namespace: dict[str, Any] = module.__dict__
    try:
        return _run(page, namespace, fixture)
    finally:
        del sys.modules["__docs__"]


def _run(page: Page, namespace: dict[str, Any], fixture: Callable[[str], Any]) -> int:
    ran = 0
    for block in page.python:
        if block.not_run is not None or block.mark("file") is not None:
            continue
        raises = block.mark("raises")
        before = set(namespace)
        printed = _Tee(sys.stdout)
        try:
            with contextlib.redirect_stdout(printed):
                exec(compile(block.code, block.where, "exec"), namespace)  # noqa: S102 - the docs' own code
                for name in [n for n in namespace if n not in before and n.startswith("test_")]:
                    test = namespace[name]
                    test(**{arg: fixture(arg) for arg in inspect.signature(test).parameters})
        except Exception as exc:
            if raises is None:
                raise AssertionError(f"{block.where}: the block raised {type(exc).__name__}: {exc}") from exc
            expected, _, text = raises.partition(":")
            assert type(exc).__name__ == expected.strip() and text.strip() in str(exc), \
                f"{block.where}: expected {raises!r}, got {type(exc).__name__}: {exc}"
        else:
            assert raises is None, f"{block.where}: the page says this raises {raises!r}; it did not"
            lines = printed.getvalue().splitlines()
            for expected in _PRINTS.findall(block.code):
                if "..." not in expected:  # "..." marks an abridged or described output
                    assert expected.strip() in lines, \
                        f"{block.where}: the page says a print shows {expected.strip()!r}; it printed {lines}"
        ran += 1
    return ran


_PRINTS = re.compile(r"^\s*print\(.*\)\s+# (.+)$", flags=re.M)
"""``print(...)  # what it prints``: a page's promise, held to what the block printed (a line of it)."""


class _Tee(io.StringIO):
    """Keeps what a block prints, and lets it through."""

    def __init__(self, through: Any) -> None:
        super().__init__()
        self._through = through

    def write(self, text: str) -> int:
        self._through.write(text)
        return super().write(text)


def forget_modules(names: list[str]) -> None:
    for name in names:
        sys.modules.pop(name, None)
