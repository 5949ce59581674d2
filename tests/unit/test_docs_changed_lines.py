"""How much of a framework's program running it on swarmlog changes: counted from each integration page's own
"before" and "after" blocks, and held to what the page says (issue 27: "at most ~10 changed lines of the program
plus the wrapper").

A page marks its blocks ``<!-- docs-test: before NAME -->`` and ``<!-- docs-test: file NAME -->`` (or
``<!-- docs-test: after NAME -->``). The two are split, top-level statement by statement:

* **the wrapper** (after only): the swarmlog agents — classes deriving from ``swarmlog.Agent`` — and the
  functions that build the ``Swarm``: what takes the place of the program's entry point;
* **the entry point** (before only): ``main``, which the wrapper replaces;
* **the program**: everything else, imports included.

The program's changed lines are those of a line diff of the two programs ignoring indentation (``git diff -w``:
a graph moved into a function that takes its model is that function's line, not every line of the graph), blank
lines and comments left out: a replaced run of lines counts its longer side, an added or a removed line one each.
The wrapper is counted whole (its non-blank, non-comment lines).
"""

from __future__ import annotations

import ast
import difflib
import re

import pytest

from ..conftest import REPO
from ..docs_code import Block, parse

PAGES = ["docs/integrations/openai-agents.md", "docs/integrations/pydantic-ai.md", "docs/integrations/langgraph.md"]
MOST = 10
"""The issue's bound on the program's changed lines ("~10")."""


def _block(blocks: list[Block], *marks: str) -> Block:
    found = [b for b in blocks for m in marks if b.mark(m) is not None]
    assert len(found) == 1, f"expected one block marked {' or '.join(marks)}, found {len(found)}"
    return found[0]


def _lines(code: str, nodes: list[ast.stmt]) -> list[str]:
    source = code.splitlines()
    out = []
    for node in nodes:
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
        assert node.end_lineno is not None
        for line in source[first - 1:node.end_lineno]:
            text = line.split("  #")[0].strip() if not line.strip().startswith("#") else ""
            if text:
                out.append(text)
    return out


def _split(code: str) -> tuple[list[str], list[str], list[str]]:
    """``code``'s program, wrapper and entry point, as their non-blank lines (see the module)."""
    tree = ast.parse(code)
    swarm_agent = {a.asname or a.name for node in tree.body if isinstance(node, ast.ImportFrom)
                   and node.module == "swarmlog" for a in node.names if a.name == "Agent"}
    program: list[ast.stmt] = []
    wrapper: list[ast.stmt] = []
    entry: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and any(isinstance(b, ast.Name) and b.id in swarm_agent for b in node.bases):
            wrapper.append(node)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and any(
                isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "Swarm"
                for n in ast.walk(node)):
            wrapper.append(node)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == "main":
            entry.append(node)
        else:
            program.append(node)
    return _lines(code, program), _lines(code, wrapper), _lines(code, entry)


def changed(before: list[str], after: list[str]) -> int:
    n = 0
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, before, after, autojunk=False).get_opcodes():
        if op != "equal":
            n += max(i2 - i1, j2 - j1)
    return n


def counts(page: str) -> tuple[int, int]:
    """(changed lines of the program, lines of the wrapper) of an integration page."""
    blocks = parse(REPO / page).python
    before = _block(blocks, "before")
    name = before.mark("before")
    after = next(b for b in blocks if b.mark("file") == name or b.mark("after") == name)
    program_before, wrapper_before, entry = _split(before.code)
    program_after, wrapper, entry_after = _split(after.code)
    assert wrapper_before == [] and entry, f"{page}: the before is the framework's program, with its main()"
    assert entry_after == [] and wrapper, f"{page}: the after runs the program from a swarmlog agent"
    return changed(program_before, program_after), len(wrapper)


@pytest.mark.parametrize("page", PAGES)
def test_each_framework_page_says_how_many_lines_of_the_program_changed_and_it_is_at_most_ten(page):
    program, wrapper = counts(page)
    text = (REPO / page).read_text()
    said = re.search(r"(\d+)\s+changed\s+lines?\s+of\s+the\s+program.*?a\s+wrapper\s+of\s+(\d+)\s+lines", text,
                     flags=re.S)
    assert said is not None, f"{page} does not say how many lines changed"
    assert (int(said.group(1)), int(said.group(2))) == (program, wrapper), \
        f"{page} says {said.group(1)} changed lines and a wrapper of {said.group(2)}; its blocks: {program}, {wrapper}"
    assert program <= MOST


def test_the_count_is_of_lines_ignoring_indentation_and_comments():
    before = "import a\n\nx = 1\ny = f(x)\n\n\ndef main():\n    print(y)\n"
    after = ("import a\nfrom swarmlog import Agent as S, Swarm  # swarmlog\n\n\ndef make(x):  # swarmlog\n"
             "    y = f(x)\n    return y\n\n\nclass W(S):\n    def go(self):\n        pass\n\n\n"
             "def swarm():\n    return Swarm(name='w', agents=list)\n")
    program_before, _, entry = _split(before)
    program_after, wrapper, _ = _split(after)
    assert entry == ["def main():", "print(y)"]
    assert wrapper == ["class W(S):", "def go(self):", "pass", "def swarm():", "return Swarm(name='w', agents=list)"]
    # the import added, x = 1 replaced by the def, y = f(x) the same, the return added: 3
    assert changed(program_before, program_after) == 3
