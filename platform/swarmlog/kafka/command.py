"""``swarmlog topic create | describe``: the swarm's single-partition topic."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..cli import settings_of

__all__ = ["add_parser", "cmd_topic"]


def cmd_topic(args: argparse.Namespace) -> int:
    from .topic import create_topic, describe_topic

    settings = settings_of(args)
    topic = args.name or settings.topic
    if args.action == "create":
        info = create_topic(settings, topic)
        print(f"{'created' if info.created else 'exists'}: {topic} "
              f"(partitions={info.partitions}, replication={info.replication_factor})")
    else:
        info = describe_topic(settings, topic)
        print(json.dumps({"topic": topic, "partitions": info.partitions,
                          "replication_factor": info.replication_factor}))
    return 0


def add_parser(sub: Any, name: str, *, parents: list[argparse.ArgumentParser]) -> None:
    """Add ``swarmlog topic`` to ``swarmlog``'s subcommands."""
    t = sub.add_parser("topic", help="create or describe the swarm's single-partition topic", parents=parents)
    t.add_argument("action", choices=["create", "describe"],
                   help="create the topic (single partition; nothing if it exists), or describe it as JSON")
    t.add_argument("name", nargs="?", help="topic (default: $SWARMLOG_TOPIC)")
    t.set_defaults(func=cmd_topic)
