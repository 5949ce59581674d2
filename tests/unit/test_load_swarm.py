"""`swarmlog run hello:swarm` beside hello.py: a swarm module is found in the current directory when it is nowhere
else, as `uvicorn main:app` finds its app; nothing that imported before changes, and an import that fails inside
the module is reported as that failure: one line naming the module, the exception and the line it raised at."""

from __future__ import annotations

import sys

import pytest

from swarmlog.errors import ConfigurationError, SwarmImportFailed
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
    for name in ("beside_mod", "broken_mod", "helper_mod"):
        sys.modules.pop(name, None)


def test_a_swarm_module_in_the_current_directory_is_found(here) -> None:
    (here / "beside_mod.py").write_text(SWARM)
    assert load_swarm("beside_mod:swarm").agent_names == ["solo"]


def test_a_module_missing_inside_the_swarm_module_is_named_not_hidden(here) -> None:
    (here / "broken_mod.py").write_text("import a_package_nobody_installed\n" + SWARM)
    with pytest.raises(SwarmImportFailed, match="a_package_nobody_installed") as caught:
        load_swarm("broken_mod:swarm")
    assert caught.value.where == "broken_mod.py:1"


@pytest.mark.parametrize(("source", "error", "line"), [
    (SWARM + "\nratio = 1 / 0\n", "ZeroDivisionError: division by zero", 9),
    ("import json\n\nconfig = json.loads('{')\n" + SWARM, "JSONDecodeError: Expecting property name", 3),
    (SWARM + "\ndef broken(:\n    pass\n", "SyntaxError: invalid syntax", 9),
    ("from helper_mod import settle\n" + SWARM, "KeyError: 'PORT'", 2),
], ids=["raise-in-module", "raise-in-a-library-it-calls", "syntax-error", "raise-in-a-module-it-imports"])
def test_a_swarm_module_that_raises_at_import_is_one_line_naming_the_module_the_error_and_its_line(
        here, source, error, line) -> None:
    (here / "helper_mod.py").write_text("settle = 1\nPORT = {}['PORT']\n")
    (here / "broken_mod.py").write_text(source)
    with pytest.raises(SwarmImportFailed) as caught:
        load_swarm("broken_mod:swarm")
    err = caught.value
    assert isinstance(err, ConfigurationError)  # exit 2: the code must change, retrying will not help
    assert err.module == "broken_mod" and err.spec == "broken_mod:swarm" and err.error.startswith(error)
    # The line in the user's code nearest the raise: a library's own frames are passed over.
    file = "helper_mod.py" if "helper_mod" in source else "broken_mod.py"
    assert err.where == f"{file}:{line}"
    message = str(err)
    assert "\n" not in message and "'broken_mod'" in message and error in message and f"{file}:{line}" in message
    assert isinstance(err.__cause__, Exception)  # the traceback `-v` prints
    assert err.__cause__.__context__ is None  # and nothing of how the module was looked for before


def test_a_swarm_module_nowhere_is_a_configuration_error_naming_it(here) -> None:
    with pytest.raises(ConfigurationError, match="no_such_swarm_module"):
        load_swarm("no_such_swarm_module:swarm")


def test_an_installed_swarm_package_that_raises_at_import_names_its_own_line_not_the_librarys(
        here, monkeypatch) -> None:
    import sysconfig

    package = here / "installed_swarm"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "app.py").write_text("import json\n\nCONFIG = json.loads('{')\n" + SWARM)
    paths = {**sysconfig.get_paths(), "purelib": str(here), "platlib": str(here)}
    monkeypatch.setattr(sysconfig, "get_paths", lambda: paths)  # as if pip had put it among the libraries
    try:
        with pytest.raises(SwarmImportFailed) as caught:
            load_swarm("installed_swarm.app:swarm")
    finally:
        for name in ("installed_swarm", "installed_swarm.app"):
            sys.modules.pop(name, None)
    assert caught.value.where == "installed_swarm/app.py:3"
    assert caught.value.error.startswith("JSONDecodeError")
