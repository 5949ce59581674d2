"""docs/edges.md's Python examples run as printed."""

from __future__ import annotations

import re

from tests.conftest import REPO


def test_the_edges_docs_python_blocks_run() -> None:
    text = (REPO / "docs" / "edges.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    assert len(blocks) >= 2
    for block in blocks:
        exec(compile(block, "docs/edges.md", "exec"), {})  # the docs' own code
