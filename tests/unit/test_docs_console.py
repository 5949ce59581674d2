"""docs/console.md's Python examples run as printed."""

from __future__ import annotations

import re

from tests.conftest import REPO


def test_the_console_docs_python_blocks_run() -> None:
    text = (REPO / "docs" / "console.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    assert blocks
    for block in blocks:
        exec(compile(block, "docs/console.md", "exec"), {})  # the docs' own code
