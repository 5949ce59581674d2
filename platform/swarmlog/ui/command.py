"""``swarmlog ui``: serve the console (uvicorn) on 127.0.0.1 unless told otherwise."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from ..errors import MissingDependency
from ..settings import Settings

__all__ = ["DEFAULT_PORT", "add_parser", "cmd_ui"]

logger = logging.getLogger(__name__)

DEFAULT_PORT = 8765


def cmd_ui(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from .app import create_app
    except ImportError as exc:  # Starlette, uvicorn and Jinja2 are the optional extra swarmlog[ui]
        raise MissingDependency(program=f"the console's web framework ({exc.name})",
                                install_hint="Install the extra: pip install 'swarmlog[ui]' (`make` does).") from exc
    from ._mirror import MirrorReader
    from ._states import States

    settings = Settings.from_env()
    mirror = MirrorReader(conninfo=settings.database_conninfo(), address=settings.database_url.rpartition("@")[2],
                          role=args.role, quiet_after=args.quiet_after)
    mirror.connection()  # fail now, with what to do, rather than on the first page
    states = States.from_specs(settings=settings, specs=args.swarm) if args.swarm else None
    app = create_app(mirror=mirror, states=states)
    where = f"http://{args.host if ':' not in args.host else f'[{args.host}]'}:{args.port}/"
    print(f"swarmlog ui: {where} (the mirror at {settings.database_url}, read as {args.role}; "
          f"states {'from the code of ' + ', '.join(states.swarms) if states else 'off: give --swarm'})",
          file=sys.stderr, flush=True)
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level="warning", access_log=args.access_log,
                            server_header=False)
    uvicorn.Server(config).run()
    return 0


def add_parser(sub: Any, name: str, *, parents: list[argparse.ArgumentParser]) -> None:
    """Add ``ui`` to ``swarmlog``'s subcommands (``-v`` is added after its own options)."""
    p = sub.add_parser("ui", help="a web console over the Postgres mirror: runs, timelines, model calls, states "
                                  "(needs swarmlog[ui])")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only; 0.0.0.0 in a pod)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}")
    p.add_argument("--swarm", action="append", default=[], metavar="MODULE:SWARM",
                   help="the code of a swarm whose runs' states to show (repeatable; matched by the swarm's name)")
    p.add_argument("--role", default="swarmlog_reader",
                   help="the read-only role the console reads the mirror as (SET ROLE; default swarmlog_reader)")
    p.add_argument("--quiet-after", type=float, default=60.0, metavar="SECONDS",
                   help="a run with an event appended within SECONDS is shown running (default 60)")
    p.add_argument("--access-log", action="store_true", help="log every request")
    p.set_defaults(func=cmd_ui)
