"""swarmlog: a clock-free Kafka event log that gives agent swarms deterministic replay.

Every command reads its settings from the environment (see ``swarmlog.settings``);
``--topic`` overrides ``SWARMLOG_TOPIC``. Errors swarmlog raises on purpose are
printed as one line saying what to do; the exit status says which kind (``EXIT_CODES``).

The command line decides what reaches the terminal (:mod:`swarmlog.observe.logs`): swarmlog's
warnings, with ``-v`` its progress and librdkafka's own lines, with ``-vv`` everything.

The commands are a table (:data:`COMMANDS`): each command's parser and handler live beside its wing
(``replaying/command.py``, ...); :func:`main` imports only the module of the command given. Other packages
add commands through the entry-point group ``swarmlog.commands`` (the connectors' sink, mirror, demo).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from functools import cache
from types import ModuleType

from .errors import (
    ConfigurationError,
    SchemaError,
    ServiceUnavailable,
    SwarmImportFailed,
    SwarmlogError,
    TokenError,
)
from .observe.logs import VERBOSE_HELP as _VERBOSE_HELP
from .observe.logs import configure_logging
from .observe.logs import leading_verbosity as _leading_verbosity
from .settings import Settings
from .terminal import printable

__all__ = ["COMMANDS", "EXIT_CODES", "EXIT_DIVERGED", "EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK",
           "EXIT_PROBLEMS_FOUND", "EXIT_READER_GONE", "EXIT_TOKEN_MISMATCH", "EXIT_UNAVAILABLE", "EXIT_UNREADABLE",
           "EXIT_USAGE", "PLUGINS", "build_parser", "command_modules", "configure_logging", "exit_code", "main",
           "metrics_port_arg", "settings_of"]

logger = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_PROBLEMS_FOUND = 1
EXIT_USAGE = 2
EXIT_UNREADABLE = 3
EXIT_DIVERGED = 4
EXIT_TOKEN_MISMATCH = 5
EXIT_UNAVAILABLE = 69  # sysexits.h EX_UNAVAILABLE
EXIT_FAILED = 70  # sysexits.h EX_SOFTWARE
EXIT_INTERRUPTED = 130
EXIT_READER_GONE = 141  # 128 + SIGPIPE: what a shell reports of a writer its pipe's reader left

EXIT_CODES: dict[int, str] = {
    EXIT_OK: "success",
    EXIT_PROBLEMS_FOUND: "`check` or `schema check` found problems (listed on stdout)",
    EXIT_USAGE: "usage error: wrong arguments or a bad setting (SWARMLOG_*, schemas); fix the command or "
                "the environment, retrying will not help",
    EXIT_UNREADABLE: "`replay --strict`: some messages are not readable events; `regress`: some runs could not "
                     "be checked (none diverged)",
    EXIT_DIVERGED: "`replay --swarm`: the code diverges from the log; `regress`: some run diverged",
    EXIT_TOKEN_MISMATCH: "`replay --verify`: the replay does not match the token",
    EXIT_UNAVAILABLE: "Kafka or Postgres could not be reached, or a TLS/SASL handshake failed",
    EXIT_FAILED: "any other error at run time (the message says what to do); `run`: a step failed and was not "
                 "retried, or an agent's code cannot go on with the run",
    EXIT_INTERRUPTED: "interrupted (SIGINT)",
    EXIT_READER_GONE: "the reader of stdout went away (`swarmlog log | head`): the output was cut short, quietly, "
                      "as a shell reports a writer killed by SIGPIPE",
}


def exit_code(exc: SwarmlogError) -> int:
    """The exit status for an error swarmlog raised: decided by its type."""
    if isinstance(exc, (ConfigurationError, SchemaError, TokenError)):
        return EXIT_USAGE  # a token refused (a bad or unchecked signature): retrying will not help either
    if isinstance(exc, ServiceUnavailable):
        return EXIT_UNAVAILABLE
    return EXIT_FAILED


# --- the table of commands --------------------------------------------------------------

COMMANDS: dict[str, str | None] = {
    "dev": "swarmlog.dev.command",
    "schema": "swarmlog.schema.check",
    "topic": "swarmlog.kafka.command",
    "append": "swarmlog.log.command",
    "sink": None,
    "mirror": None,
    "replay": "swarmlog.replaying.command",
    "run": "swarmlog.runtime.command",
    "retry": "swarmlog.runtime.command",
    "patches": "swarmlog.runtime.command",
    "token": "swarmlog.token.command",
    "check": "swarmlog.replaying.command",
    "regress": "swarmlog.regression.command",
    "continue": "swarmlog.continuation.command",
    **dict.fromkeys(("log", "show", "state", "debug", "snapshot", "step", "timeline", "fork"),
                    "swarmlog.debug.command"),
    "ui": "swarmlog.ui.command",
    "demo": None,
}
"""Command -> the module that builds its parser and runs it, in the order ``swarmlog --help`` lists them
(None: another package's, found through :data:`PLUGINS`, listed here for its place). A command module has
``add_parser(subparsers, name, *, parents)``, which adds the command's parser (``set_defaults(func=...)``;
``service=True`` for a command that runs as a service); one that also has ``run(argv)`` parses its own
arguments: ``main`` hands it the words after the command."""

PLUGINS = "swarmlog.commands"  # the entry-point group of commands other packages add (name = module)


@cache
def _plugins() -> dict[str, str]:
    from importlib.metadata import entry_points

    return {ep.name: ep.value for ep in entry_points(group=PLUGINS) if COMMANDS.get(ep.name) is None}


def command_modules(command: str | None = None) -> dict[str, str]:
    """``command``'s row alone; every command's (in :data:`COMMANDS`' order) for None or one unknown."""
    module = COMMANDS.get(command or "") or (_plugins().get(command) if command else None)
    if command and module:
        return {command: module}
    rows = {name: module or _plugins().get(name) for name, module in COMMANDS.items()}
    return {**{name: module for name, module in rows.items() if module}, **_plugins()}


def _parses_its_own(module: ModuleType) -> bool:  # `dev`, `schema`: main hands them the words after the command
    return callable(getattr(module, "run", None))


def settings_of(args: argparse.Namespace, *, postgres: bool = False) -> Settings:
    """The settings, ``--topic`` over ``SWARMLOG_TOPIC``; ``postgres``: the command will use the mirror,
    so its URL is checked now (a bad one is exit 2 before any work), not at its first connection."""
    settings = Settings.from_env(topic=getattr(args, "topic", None))
    if postgres:
        settings.check_database_url()
    return settings


def metrics_port_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--metrics-port", type=int, metavar="PORT",
                   help="serve Prometheus /metrics and the /livez and /readyz probes on PORT")


def _epilog() -> str:
    codes = "\n".join(f"  {code:>3}  {what}" for code, what in EXIT_CODES.items())
    return ("-v shows swarmlog's progress and librdkafka's log lines, -vv debug output (put it before the\n"
            "command for `dev` and `schema`: swarmlog -v dev up).\n\nexit status:\n" + codes)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """swarmlog's argument parser; given ``command``, with that command's parser alone (building all
    twenty took a short command longer than its own work: ``cli_replay_3`` in bench/cli.py). A
    ``command`` that is none of them gets the whole parser, whose error lists them all."""
    p = argparse.ArgumentParser(prog="swarmlog", description=__doc__.splitlines()[0] if __doc__ else None,
                                epilog=_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-v", "--verbose", action="count", default=0, dest="global_verbose", help=_VERBOSE_HELP)
    verbose = argparse.ArgumentParser(add_help=False)
    verbose.add_argument("-v", "--verbose", action="count", default=0, help=_VERBOSE_HELP)
    sub = p.add_subparsers(dest="command", required=True)
    for name, module_name in command_modules(command).items():
        module = importlib.import_module(module_name)
        module.add_parser(sub, name, parents=[verbose])
        if not _parses_its_own(module) and "-v" not in sub.choices[name]._option_string_actions:
            sub.choices[name].add_argument("-v", "--verbose", action="count", default=0, help=_VERBOSE_HELP)
    return p


def _freeze_what_the_imports_made() -> None:
    """``gc.freeze()``: the collector walked a command's modules, classes and functions in every full collection,
    above all as the interpreter exits (``cli_replay_3`` in bench/cli.py); frozen, they are not. Only a process
    started as the command line (``main()`` with no arguments) does this: ``main([...])``'s caller keeps its."""
    import gc

    gc.freeze()


def main(argv: Sequence[str] | None = None) -> int:
    try:
        status = _main(argv)
        if argv is None:
            sys.stdout.flush()  # here, where a closed pipe is caught, not in the interpreter's last flush
        return status
    except BrokenPipeError:
        # stdout's reader left (`swarmlog log | head -1`). CPython ignores SIGPIPE and raises this instead;
        # a shell expects the writer to end quietly with SIGPIPE's status. What is still buffered can never
        # be written, and the interpreter's last flush would print "Exception ignored": stdout goes to
        # /dev/null first (the signal module's "Note on SIGPIPE"); only in the process, not main([...])'s caller.
        if argv is None:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_READER_GONE


def _main(argv: Sequence[str] | None) -> int:
    if argv is None:
        _freeze_what_the_imports_made()
    verbosity, args_list = _leading_verbosity(list(sys.argv[1:] if argv is None else argv))
    verbose = verbosity
    try:
        own = command_modules(args_list[0] if args_list else None)
        if len(own) == 1 and _parses_its_own(module := importlib.import_module(*own.values())):
            configure_logging(verbosity)
            return int(module.run(args_list[1:]))
        args = build_parser(args_list[0] if args_list else None).parse_args(args_list)
        verbose = verbosity + getattr(args, "verbose", 0)
        configure_logging(verbose,
                          service=getattr(args, "service", False) or bool(getattr(args, "publish", False)))
        # Only a process started as the command line may replace itself (swarmlog.runtime.interpreter).
        args.may_reexec = argv is None
        from .observe import tracing
        # OTEL_TRACES_EXPORTER / OTEL_EXPORTER_OTLP_ENDPOINT: steps as spans (unset: no OpenTelemetry import).
        tracing.configure_from_env()
        try:
            return int(args.func(args))
        finally:
            tracing.shutdown()  # what is still batched goes out before the process exits
            if argv is None:  # and what the command imported (its modules load lazily): the exit skips it too
                _freeze_what_the_imports_made()
    except SwarmlogError as exc:
        if isinstance(exc, SwarmImportFailed) and verbose:  # the swarm's own code: its traceback is the user's
            logger.error("the traceback of the swarm's module %s", exc.module, exc_info=exc.__cause__)
        else:
            logger.debug("the error's traceback", exc_info=exc)
        print(f"swarmlog: error: {printable(exc)}", file=sys.stderr)  # it may name what the log holds
        return exit_code(exc)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


if __name__ == "__main__":  # python -m swarmlog.cli: the commands import swarmlog.cli, so run that one's main
    sys.exit(importlib.import_module("swarmlog.cli").main())
