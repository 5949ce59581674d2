"""``swarmlog append``: one validated event appended to the log, its offset printed."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..cli import settings_of
from ..errors import UsageError

__all__ = ["add_parser", "cmd_append"]


def cmd_append(args: argparse.Namespace) -> int:
    from .append import EventLog

    settings = settings_of(args)
    try:
        payload = json.loads(args.payload)
    except json.JSONDecodeError as exc:
        raise UsageError(f"payload is not JSON: {exc}") from None
    with EventLog(settings=settings, run_id=args.run_id) as log:
        offset = log.append(args.event_type, payload, agent=args.agent, to=args.to,
                            causes=[int(c) for c in args.cause])
    print(offset)
    return 0


def add_parser(sub: Any, name: str, *, parents: list[argparse.ArgumentParser]) -> None:
    """Add ``swarmlog append`` to ``swarmlog``'s subcommands."""
    a = sub.add_parser("append", help="append one event and print its offset", parents=parents)
    a.add_argument("event_type")
    a.add_argument("payload", help="the payload as JSON")
    a.add_argument("--agent", required=True)
    a.add_argument("--to")
    a.add_argument("--cause", action="append", default=[], help="offset of a cause (repeatable)")
    a.add_argument("--run-id", default="")
    a.add_argument("--topic")
    a.set_defaults(func=cmd_append)
