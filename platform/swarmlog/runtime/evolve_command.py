"""``swarmlog retry`` and ``swarmlog patches``: code that changes while runs are in flight (docs/evolution.md).

``retry`` appends a ``step.retried`` for each failed step of the topic's run not retried yet
(:mod:`.failures`): the agents, running the fixed code, run those steps again from there.
``patches`` says, for each versioned step the logs record, whether any recorded run still needs its
old path (:mod:`.patches`).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["add_parser", "cmd_patches", "cmd_retry"]


def cmd_retry(args: argparse.Namespace) -> int:
    from ..errors import RunNotStarted
    from ..kafka.backend import backend_for
    from ..schema.registry import SchemaRegistry
    from ..settings import Settings
    from .failures import append_retries, recorded_failures
    from .runner import find_run

    settings = Settings.from_env(topic=args.topic)
    registry = SchemaRegistry.load(settings.schema_dirs())
    backend = backend_for(settings, None)
    if args.list:
        failures = recorded_failures(backend=backend, topic=settings.topic, registry=registry)
        for f in failures:
            print(f.describe())
        if not failures:
            print(f"no step of the run in topic {settings.topic!r} failed")
        return 0
    run = find_run(settings, settings.topic, registry, backend=backend)
    if run is None:
        raise RunNotStarted(topic=settings.topic, waited_s=0.0)
    retried = append_retries(settings=settings, backend=backend, topic=settings.topic, registry=registry,
                             run_id=run.run_id, agent=args.agent, step=args.step, reason=args.reason)
    for failure, at in retried:
        print(f"{failure.describe().replace('; not retried)', ')')}: step.retried appended at offset {at}")
    if not retried:
        print(f"nothing to retry: every failed step of the run in topic {settings.topic!r} was retried already "
              f"(`swarmlog retry --list`)", file=sys.stderr)
    return 0


def cmd_patches(args: argparse.Namespace) -> int:
    from ..kafka.backend import backend_for
    from ..schema.registry import SchemaRegistry
    from ..settings import Settings
    from .patches import patch_verdicts, patches_in_run

    settings = Settings.from_env(topic=None)
    registry = SchemaRegistry.load(settings.schema_dirs())
    backend = backend_for(settings, None)
    topics = args.topics or [settings.topic]
    found = {topic: patches_in_run(backend=backend, topic=topic, registry=registry) for topic in topics}
    verdicts = patch_verdicts(found, patch_ids=args.patch or ())
    if args.patch:
        verdicts = [v for v in verdicts if v.patch_id in args.patch]
    if args.json:
        print(json.dumps({"topics": topics, "patches": [v.to_json() for v in verdicts]}, indent=2))
    else:
        for v in verdicts:
            print(v.describe())
        if not verdicts:
            print(f"no patch recorded in {len(topics)} run(s)")
    # Asked about a patch: the exit status says whether its old path is still needed (for CI).
    return 1 if args.patch and any(v.stage == "keep" for v in verdicts) else 0


def add_parser(sub: Any, name: str, *, parents: list[argparse.ArgumentParser]) -> None:
    """Add ``swarmlog retry`` or ``swarmlog patches`` (``name``) to ``swarmlog``'s subcommands."""
    if name == "retry":
        r = sub.add_parser("retry", parents=parents,
                           help="run the topic's failed steps again with the code the agents run now (after a fix "
                                "behind ctx.patched): appends a step.retried for each; the failures stay in the log")
        r.add_argument("--agent", help="only this agent's failed steps")
        r.add_argument("--step", type=int, metavar="OFFSET", help="only the step that failed at this offset")
        r.add_argument("--reason", default="", help="recorded in the step.retried (e.g. the fix's version)")
        r.add_argument("--list", action="store_true", help="list the run's failed steps and their retries; append "
                                                           "nothing")
        r.add_argument("--topic")
        r.set_defaults(func=cmd_retry)
        return
    p = sub.add_parser("patches", parents=parents,
                       help="per versioned step (ctx.patched) the logs record: whether any run still needs its "
                            "old path (exit 1 if one named with --patch does)")
    p.add_argument("topics", nargs="*", metavar="TOPIC", help="the runs to read (default: $SWARMLOG_TOPIC)")
    p.add_argument("--patch", action="append", metavar="ID", help="only this patch (repeatable)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_patches)
