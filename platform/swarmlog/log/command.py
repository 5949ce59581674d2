"""``swarmlog append``: one validated event appended to the topic's run (or, ``--no-run``, to a plain log),
its offset printed."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..cli import settings_of
from ..errors import UsageError

__all__ = ["add_parser", "cmd_append"]


def cmd_append(args: argparse.Namespace) -> int:
    """One event into the topic's run, through the client's path (swarmlog.client): held until the run
    starts, written with its run id; ``--no-run`` for a topic no swarm runs on."""
    from ..client import Client

    settings = settings_of(args)
    try:
        payload = json.loads(args.payload)
    except json.JSONDecodeError as exc:
        raise UsageError(f"payload is not JSON: {exc}") from None
    causes = [int(c) for c in args.cause]
    with Client(settings=settings, sender=args.agent) as client:
        if args.no_run:
            sent = client.append_outside_run(args.event_type, payload, to=args.to, causes=causes,
                                             run_id=args.run_id or "", timeout=args.timeout)
        else:
            sent = client.append(args.event_type, payload, to=args.to, causes=causes, run_id=args.run_id,
                                 timeout=args.timeout)
    print(sent.offset)
    return 0


def add_parser(sub: Any, name: str, *, parents: list[argparse.ArgumentParser]) -> None:
    """Add ``swarmlog append`` to ``swarmlog``'s subcommands."""
    a = sub.add_parser("append", help="append one event to the topic's run and print its offset", parents=parents)
    a.add_argument("event_type", help="its type, e.g. agent.message (a directory of schemas/ or SWARMLOG_SCHEMA_PATH)")
    a.add_argument("payload", help="the payload as JSON")
    a.add_argument("--agent", required=True, help="who writes it: a name that is not one of the run's agents")
    a.add_argument("--to", help="the agent it is for (default: every agent)")
    a.add_argument("--cause", action="append", default=[], help="offset of a cause (repeatable)")
    a.add_argument("--run-id", help="the run it is meant for: refused if the topic holds another (with --no-run: "
                                    "the run id to record)")
    a.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                   help="how long to wait for the topic's run to start and for Kafka's acknowledgement (default 60); "
                        "an input is never written ahead of its run's run.started")
    a.add_argument("--no-run", action="store_true",
                   help="the topic is a plain event log that no swarm runs on: append without a run")
    a.add_argument("--topic", help="the topic (default: $SWARMLOG_TOPIC)")
    a.set_defaults(func=cmd_append)
