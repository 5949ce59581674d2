"""The code in docs/folds.md runs, and says what it shows (its assertions are the page's claims)."""

from __future__ import annotations

import re

from ..conftest import REPO


def test_the_probe_in_docs_folds_md_runs_and_every_tool_agrees():
    text = (REPO / "docs" / "folds.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks
    for block in blocks:
        exec(compile(block, "docs/folds.md", "exec"), {"__name__": "docs_folds"})
