"""The CLI builds the parser of the one command it runs (``cli_replay_3`` in bench/cli.py), and that
parser is the very one the whole parser holds: same options, defaults, help, and what it parses."""

from __future__ import annotations

import argparse
import gc
import subprocess
import sys

import pytest

from swarmlog import cli


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


WHOLE = _commands(cli.build_parser())


def test_the_whole_parser_has_every_command():
    assert {"replay", "run", "sink", "mirror", "token", "log", "state", "timeline", "fork", "demo"} <= set(WHOLE)


@pytest.mark.parametrize("name", sorted(WHOLE))
def test_a_commands_parser_built_alone_is_the_one_the_whole_parser_holds(name):
    alone = _commands(cli.build_parser(name))
    assert list(alone) == [name]
    assert alone[name].format_help() == WHOLE[name].format_help()
    assert alone[name]._defaults == WHOLE[name]._defaults  # the command's function
    assert [(a.dest, a.option_strings, a.default, a.nargs, a.choices) for a in alone[name]._actions] == \
           [(a.dest, a.option_strings, a.default, a.nargs, a.choices) for a in WHOLE[name]._actions]


@pytest.mark.parametrize("argv", [
    ["replay", "--json", "--to", "5", "-v"],
    ["replay", "--swarm", "m:s", "--publish", "--group", "g"],
    ["replay", "--swarm", "m:s", "--workers", "2"],
    ["token", "create", "--save", "--checkpoint-every", "7"],
    ["state", "a", "--at", "3", "--diff", "1", "2"],
    ["sink", "--until-end", "--topics-pattern", "^s\\..*"],
])
def test_a_command_line_parses_the_same_with_the_command_alone(argv):
    assert vars(cli.build_parser(argv[0]).parse_args(argv)) == vars(cli.build_parser().parse_args(argv))


def test_an_unknown_command_gets_the_whole_parser_and_its_error_lists_every_command(capsys):
    assert set(_commands(cli.build_parser("rplay"))) == set(WHOLE)
    with pytest.raises(SystemExit) as caught:
        cli.main(["rplay"])
    assert caught.value.code == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert "invalid choice: 'rplay'" in err and "replay" in err and "timeline" in err


@pytest.mark.parametrize(("argv", "says"), [
    (["replay", "--workers", "2"], "use it with --swarm"),
    (["replay", "--swarm", "m:s", "--workers", "0"], "--workers must be 1 or more"),
])
def test_workers_outside_a_swarm_replay_or_below_one_is_a_usage_error(capsys, argv, says):
    assert cli.main(argv) == cli.EXIT_USAGE
    assert says in capsys.readouterr().err


def test_the_postgres_commands_are_added_from_the_connectors_and_the_core_names_none_of_their_modules():
    # Imports run one way: swarmlog_connectors registers sink, mirror and demo (entry points), the core's
    # own table names only swarmlog's modules.
    plugins = cli.command_modules()
    assert {name for name, module in plugins.items() if module.startswith("swarmlog_connectors.")} == \
           {"sink", "mirror", "demo"}
    assert {name for name, module in cli.COMMANDS.items() if module is None} == {"sink", "mirror", "demo"}
    assert all(module.startswith("swarmlog.") for module in cli.COMMANDS.values() if module is not None)


@pytest.mark.parametrize(("command", "module"), [("replay", "swarmlog.replaying.command"),
                                                 ("log", "swarmlog.debug.command"),
                                                 ("sink", "swarmlog_connectors.command")])
def test_building_one_commands_parser_imports_its_module_and_no_other_commands(command, module):
    code = (f"import sys\nfrom swarmlog import cli\ncli.build_parser({command!r})\n"
            "print(sorted(m for m in sys.modules if m.endswith('.command') or m == 'swarmlog.schema.check'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == [repr([module])]


def test_run_and_sink_are_the_services_that_log_their_lifecycle_without_v():
    services = {name for name, parser in WHOLE.items() if parser.get_default("service")}
    assert services == {"run", "sink"}


def test_only_a_process_started_as_the_command_line_freezes_its_objects():
    # gc.freeze() (cli._freeze_what_the_imports_made) is the command line's: a caller's objects are its own.
    before = gc.get_freeze_count()
    with pytest.raises(SystemExit):
        cli.main(["replay", "--to", "ten"])
    # At most as many: a frozen object of an earlier test may be freed meanwhile (CPython 3.13 counts
    # the permanent generation as it is), but main() froze nothing of this process's.
    assert gc.get_freeze_count() <= before
    code = ("import atexit, gc, sys\nfrom swarmlog.cli import main\n"
            "atexit.register(lambda: print(gc.get_freeze_count() > 0))\n"
            "sys.argv = ['swarmlog', 'replay', '--to', 'ten']\nsys.exit(main())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == cli.EXIT_USAGE and out.stdout.strip() == "True"


def _every_parser() -> dict[str, argparse.ArgumentParser]:
    """``swarmlog ...`` -> its parser: every command of the table, the other packages' too, and the sub-commands
    of the ones that parse their own words (``dev``, ``schema``: their module's ``_parser``)."""
    import importlib

    found: dict[str, argparse.ArgumentParser] = {}

    def walk(path: str, parser: argparse.ArgumentParser) -> None:
        found[path] = parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(f"{path} {name}", sub)

    for name, module_name in cli.command_modules().items():
        module = importlib.import_module(module_name)
        walk(f"swarmlog {name}", module._parser() if callable(getattr(module, "run", None)) else WHOLE[name])
    return found


def test_every_option_and_argument_of_every_command_says_what_it_is_for_in_help():
    parsers = _every_parser()
    assert {"swarmlog run", "swarmlog dev up", "swarmlog schema check", "swarmlog sink"} <= set(parsers)
    missing = [f"{path} {action.option_strings[0] if action.option_strings else action.dest}"
               for path, parser in parsers.items() for action in parser._actions
               if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction))
               and action.help != argparse.SUPPRESS and not (action.help or "").strip()]
    assert missing == [], "give these arguments help= (then run docs/_generate.py)"


def test_run_help_describes_the_seed():
    text = WHOLE["run"].format_help()
    assert "--seed SEED" in text and "ctx.random()" in text


def test_a_closed_stdout_ends_a_command_with_sigpipes_status_and_a_caller_of_main_keeps_its_stdout(monkeypatch):
    class ClosedPipe:
        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self) -> None:
            raise BrokenPipeError(32, "Broken pipe")

    closed = ClosedPipe()
    monkeypatch.setattr(sys, "stdout", closed)
    assert cli.main(["schema", "list"]) == cli.EXIT_READER_GONE == 141
    assert sys.stdout is closed  # only the process (main() with no arguments) points its stdout at /dev/null
