"""``swarmlog continue``: go on with a run on a new topic (docs/long-runs.md)."""

from __future__ import annotations

import argparse
import json
import logging
from typing import Any

from ..cli import settings_of
from ..terminal import printable

logger = logging.getLogger(__name__)

__all__ = ["add_parser", "cmd_continue"]


def cmd_continue(args: argparse.Namespace) -> int:
    from ..runtime import load_swarm, pin_interpreter
    from ._continue import continue_run

    settings = settings_of(args).model_copy(update={"topic": args.from_topic})  # the run's interpreter is OLD's
    swarm = load_swarm(args.swarm)
    # Its replay of the old topic runs the handlers: under the string-hash seed the run recorded.
    pin_interpreter(settings, may_reexec=getattr(args, "may_reexec", False))
    # Replaying the old topic is the long part: a bar on a terminal, as `replay` shows (nothing in logs and pipes).
    from ..replaying.command import _progress_bar

    bar = _progress_bar("continue: replaying the old topic", unit="ev")
    try:
        done = continue_run(settings=settings, swarm=swarm, from_topic=args.from_topic, to_topic=args.to_topic,
                            from_checkpoints=not args.from_zero, progress=bar.update_to if bar is not None else None)
    finally:
        if bar is not None:
            bar.close()
    if args.json:
        print(json.dumps(done.to_json(), sort_keys=True))
    elif done.created:
        print(printable(f"run continued on {done.to_topic}: it starts with the link to {done.from_topic} "
                        f"[0, {done.from_end}) and the folds of {len(done.agents)} agent(s) there"))
        print(printable(f"run the swarm on it: swarmlog run {args.swarm} --topic {done.to_topic}"))
    else:
        print(printable(f"{done.to_topic} continues {done.from_topic} [0, {done.from_end}) already: nothing written"))
    return 0


def add_parser(sub: Any, name: str, *, parents: list[argparse.ArgumentParser]) -> None:
    """Add ``swarmlog continue`` to ``swarmlog``'s subcommands."""
    c = sub.add_parser(name, parents=parents,
                       help="continue a run on a new topic, seeded with every agent's fold (long runs)",
                       description="End the run's part on --from (the swarm must be stopped there and every message "
                                   "handled) and start --to with a link to it (its end offset and replay token) and "
                                   "every agent's fold at that end, verified by replaying --from. Run the swarm on "
                                   "--to afterwards; --from can then be retired by retention. Idempotent: a retry "
                                   "after a crash writes the link exactly once. See docs/long-runs.md.")
    c.add_argument("--swarm", required=True, metavar="MODULE:SWARM", help="the swarm's code")
    c.add_argument("--from", dest="from_topic", required=True, metavar="OLD", help="the run's topic now")
    c.add_argument("--to", dest="to_topic", required=True, metavar="NEW", help="the new topic (made if missing; empty)")
    c.add_argument("--from-zero", action="store_true",
                   help="replay OLD from offset zero for the folds (default: from each agent's latest verified "
                        "checkpoint, where there is one)")
    c.add_argument("--json", action="store_true", help="print what was done as one JSON line")
    c.set_defaults(func=cmd_continue)
