"""docs/async.md's Python blocks run as written, in order, each in a namespace of its own."""

from __future__ import annotations

import re
import sys
import types

import pytest

from ..conftest import REPO

DOC = REPO / "docs" / "async.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)


def test_the_async_guide_has_its_examples():
    assert len(BLOCKS) >= 5


@pytest.mark.parametrize("number", range(len(BLOCKS)))
def test_each_python_block_of_the_async_guide_runs(number, capsys, monkeypatch):
    # A module of its own, as a reader's file would be (swarmlog names a swarm's code by its module).
    module = types.ModuleType(f"docs_async_{number}")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(BLOCKS[number], f"{DOC}:block{number}", "exec"), module.__dict__)
    if "Simulator" in BLOCKS[number]:
        out = capsys.readouterr().out
        assert '(delivered: call #1 (effect \'ask\' ["origin"]) before call #0 (effect \'ask\' ["cache"]))' in out
