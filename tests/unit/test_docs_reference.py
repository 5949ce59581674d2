"""The pages the code writes (docs/_generate.py) say what the code says now, and the hand-written exit-status
table names exactly the statuses the CLI returns: a new option, command, guard row or exit status without its
page regenerated fails here, in `make test`."""

from __future__ import annotations

import importlib.util
import re

from swarmlog.cli import EXIT_CODES
from swarmlog.guard import COVERAGE

from ..conftest import REPO

_spec = importlib.util.spec_from_file_location("docs_generate", REPO / "docs" / "_generate.py")
assert _spec is not None and _spec.loader is not None
generate = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(generate)


def test_the_generated_pages_are_what_the_code_gives_now() -> None:
    assert generate.stale() == [], "run `.venv/bin/python docs/_generate.py` and commit the pages it writes"


def test_the_cli_reference_lists_every_command_and_option_the_parser_has() -> None:
    page = (REPO / "docs" / "reference" / "cli.md").read_text()
    for path, _, parser in generate._commands():
        assert f"\n## {path}\n" in page or f"\n### {path}\n" in page, path
        for action in generate._arguments(parser):
            for option in action.option_strings:
                assert f"`{option}`" in page, f"{path} {option}"
    assert "`--no-run`" in page and "`--timeout` `SECONDS`" in page  # `swarmlog append`'s, for one


def test_the_guard_page_has_every_row_of_the_table() -> None:
    page = (REPO / "docs" / "reference" / "guard.md").read_text()
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    assert len(rows) == len(COVERAGE)
    assert f"{sum(r.refused for r in COVERAGE)} refused" in page


def test_the_exit_status_page_names_exactly_the_statuses_the_cli_returns() -> None:
    page = (REPO / "docs" / "exit-codes.md").read_text()
    listed = {int(code) for code in re.findall(r"^\| `(\d+)` \|", page, flags=re.M)}
    assert listed == set(EXIT_CODES)


def test_every_extra_the_readme_and_the_docs_install_exists() -> None:
    import tomllib

    extras = set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    for page in pages:
        for names in re.findall(r"swarmlog\[([\w,]+)\]", page.read_text()):
            assert set(names.split(",")) <= extras, f"{page.name}: swarmlog[{names}]"
