"""`swarmlog run hello:swarm` beside hello.py: a swarm module is found in the current directory when it is nowhere
else, as `uvicorn main:app` finds its app; nothing that imported before changes, and an import that fails inside
the module is reported as that failure."""

from __future__ import annotations

import sys

import pytest

from swarmlog.errors import ConfigurationError
from swarmlog.runtime import load_swarm

SWARM = """
from swarmlog import Agent, Swarm

class Solo(Agent):
    pass

swarm = Swarm(name="beside", agents=lambda: [Solo("solo")])
"""


@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    yield tmp_path
    for name in ("beside_mod", "broken_mod"):
        sys.modules.pop(name, None)


def test_a_swarm_module_in_the_current_directory_is_found(here) -> None:
    (here / "beside_mod.py").write_text(SWARM)
    assert load_swarm("beside_mod:swarm").agent_names == ["solo"]


def test_a_module_missing_inside_the_swarm_module_is_named_not_hidden(here) -> None:
    (here / "broken_mod.py").write_text("import a_package_nobody_installed\n" + SWARM)
    with pytest.raises(ConfigurationError, match="a_package_nobody_installed"):
        load_swarm("broken_mod:swarm")


def test_a_swarm_module_nowhere_is_a_configuration_error_naming_it(here) -> None:
    with pytest.raises(ConfigurationError, match="no_such_swarm_module"):
        load_swarm("no_such_swarm_module:swarm")
