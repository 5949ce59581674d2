"""The Postgres commands: ``swarmlog sink``, ``swarmlog mirror migrate | status | verify``, ``swarmlog demo``.

Registered with ``swarmlog`` from this side (the entry-point group ``swarmlog.commands`` in
pyproject.toml), so imports run one way: the connectors import swarmlog, never the reverse. The
Postgres parts of swarmlog's own commands (``replay --publish``, ``token create --save``, ``token
list``, ``--saved``) come the same way, through the group ``swarmlog.mirror``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from swarmlog.cli import EXIT_OK, EXIT_TOKEN_MISMATCH, metrics_port_arg, settings_of
from swarmlog.errors import UsageError
from swarmlog.settings import Settings

__all__ = ["add_parser", "cmd_demo", "cmd_mirror", "cmd_sink"]


def cmd_sink(args: argparse.Namespace) -> int:
    from swarmlog.observe import Metrics, serve_process

    from .postgres_sink import PostgresCheck, PostgresSink

    if args.topics_pattern is not None:
        return _sink_pattern(args)
    if args.include_side_topics or args.metadata_refresh_ms is not None:
        raise UsageError("--include-side-topics and --metadata-refresh-ms go with --topics-pattern")
    settings = settings_of(args)  # the sink checks its mirror's URL first thing
    sink = PostgresSink(settings=settings, group=args.group, give_up_after=args.give_up_after)
    sink.install_signal_handlers()
    server = None
    if args.metrics_port is not None:
        metrics = Metrics()
        metrics.add(sink.metric_families)
        server = serve_process(port=args.metrics_port, settings=settings, metrics=metrics,
                               checks={"Postgres": PostgresCheck(settings)},
                               on_log_end=lambda end: setattr(sink, "log_end", end))
    try:
        stats = sink.run(until_end=args.until_end)
    finally:
        if server is not None:
            server.close()
    print(json.dumps({"position": stats.position, "rows": stats.rows, "dead_letters": stats.dead_letters}))
    return 0


def _sink_pattern(args: argparse.Namespace) -> int:
    from swarmlog.kafka.config import admin_client
    from swarmlog.kafka.discovery import TopicPattern, discover
    from swarmlog.observe import Health, Metrics, serve

    from .pattern_sink import PatternSink
    from .postgres_sink import PostgresCheck

    if args.topic is not None:
        raise UsageError("--topic and --topics-pattern exclude each other: one topic, or every topic matching")
    settings = Settings.from_env()  # the sink checks its mirror's URL first thing
    pattern = TopicPattern(pattern=args.topics_pattern, include_side_topics=args.include_side_topics)
    sink = PatternSink(settings=settings, pattern=pattern, group=args.group,
                       refresh_interval_ms=args.metadata_refresh_ms or 10_000)
    sink.install_signal_handlers()
    server = None
    if args.metrics_port is not None:
        metrics = Metrics()
        metrics.add(sink.metric_families)
        admin = admin_client(settings)

        def kafka() -> None:  # the broker answers a metadata request
            discover(settings, pattern, client=admin)

        health = Health(checks={"Kafka": kafka, "Postgres": PostgresCheck(settings)})
        server = serve(port=args.metrics_port, metrics=metrics, health=health)
    try:
        stats = sink.run(until_end=args.until_end)
    finally:
        if server is not None:
            server.close()
    print(json.dumps({"topics": len(stats.positions), "rows": stats.rows, "dead_letters": stats.dead_letters,
                      "handovers": stats.handovers, "fenced": stats.fenced}))
    return 0


def cmd_mirror(args: argparse.Namespace) -> int:
    if args.action == "verify":
        return _mirror_verify(args)
    from .postgres_migrations import SCHEMA_VERSION, migrate, schema_version
    from .postgres_sink import connect

    with connect(settings_of(args, postgres=True)) as conn:
        if args.action == "status":
            found = schema_version(conn)
            print(json.dumps({"schema_version": found, "sink_needs": SCHEMA_VERSION,
                              "migrated": found >= SCHEMA_VERSION}))
            return 0 if found >= SCHEMA_VERSION else 1
        applied = migrate(conn, writer_role=args.writer_role, reader_role=args.reader_role)
    for m in applied:
        print(f"applied version {m.version}: {m.name}")
    print(f"the mirror's schema is at version {SCHEMA_VERSION}; the sink needs role {args.writer_role}, "
          f"readers {args.reader_role} (GRANT {args.writer_role} TO <the sink's login role>)")
    return 0


def _mirror_verify(args: argparse.Namespace) -> int:
    from .mirror_verify import verify_mirror

    settings = settings_of(args, postgres=True)
    status = 0
    if args.token:
        from swarmlog.token import ReplayTokenV2, check_signature, load_token, verify_token
        from swarmlog.token.command import backend_of, registry_of

        token = load_token(args.token)
        if not isinstance(token, ReplayTokenV2):
            raise UsageError("mirror verify --token needs a version 2 token (`swarmlog token create`)")
        signature = check_signature(token, settings.token_key_bytes(), source=args.token,
                                    allow_unchecked=args.unchecked_signature)
        check = verify_token(backend=backend_of(settings), token=token, topic=settings.topic,
                             registry=registry_of(settings), signature=signature)
        for line in check.lines():
            print(line)
        status = EXIT_OK if check.ok else EXIT_TOKEN_MISMATCH
    mirror = verify_mirror(settings=settings)
    if args.json:
        print(json.dumps(mirror.to_json(), indent=2))
    else:
        print(f"mirror of {mirror.topic}: {mirror.rows_checked} row(s) checked against the log up to the sink's "
              f"position {mirror.position} (log offsets [{mirror.log_start}, {mirror.log_end}))")
        if mirror.position < mirror.log_end:
            print(f"  offsets from {mirror.position} on are not mirrored yet")
        for problem in mirror.problems:
            print(f"  {problem}")
        print("the mirror matches the log" if mirror.ok else
              f"the mirror does NOT match the log: {len(mirror.problems)} row(s)")
    return EXIT_TOKEN_MISMATCH if not mirror.ok else status


def cmd_demo(args: argparse.Namespace) -> int:
    from swarmlog.runtime import pin_interpreter

    from .demo import main as demo_main

    settings = settings_of(args, postgres=True)  # the demo mirrors its run
    # The demo starts its runs in this process: under the string-hash seed a new run records.
    pin_interpreter(None, may_reexec=getattr(args, "may_reexec", False), new_run=True)
    return demo_main(settings=settings, agents=args.agents, rounds=args.rounds)


# --- parsers ----------------------------------------------------------------------------------


def add_parser(sub: Any, name: str, *, parents: list[argparse.ArgumentParser]) -> None:
    """Add ``name`` (``sink``, ``mirror`` or ``demo``) to ``swarmlog``'s subcommands."""
    _PARSERS[name](sub, parents)


def _sink_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    s = sub.add_parser("sink", help="mirror the topic (or every topic matching a pattern) into Postgres, exactly once",
                       parents=parents)
    s.add_argument("--topic", help="the topic (default: $SWARMLOG_TOPIC)")
    s.add_argument("--topics-pattern", metavar="REGEX",
                   help="mirror every single-partition topic whose whole name matches REGEX (as Kafka Connect's "
                        "topics.regex), e.g. '^swarm\\..*', each with its own position; new topics are picked up")
    s.add_argument("--include-side-topics", action="store_true",
                   help="with --topics-pattern: also mirror swarmlog's side topics (<topic>.snapshots)")
    s.add_argument("--metadata-refresh-ms", type=int, metavar="MS",
                   help="with --topics-pattern: how often to look for new topics (default 10000)")
    s.add_argument("--group", help="the consumer group the sink's position is also committed to, for Kafka's "
                                   "tools (default swarmlog-sink.<topic>, or swarmlog-sink with --topics-pattern)")
    s.add_argument("--until-end", action="store_true", help="stop once caught up instead of following")
    metrics_port_arg(s)
    s.add_argument("--give-up-after", type=float, metavar="SECONDS",
                   help="exit (status 2) once Postgres has been unreachable this long (default: keep retrying)")
    s.set_defaults(func=cmd_sink, service=True)


def _mirror_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    mi = sub.add_parser("mirror", help="the Postgres mirror: migrate its schema (as the database owner) | status | "
                                       "verify it against the log", parents=parents)
    mi.add_argument("action", choices=["migrate", "status", "verify"],
                    help="migrate the schema, say whether it is migrated (status 1 if not), or verify the rows against "
                         "the log")
    mi.add_argument("--writer-role", default="swarmlog_sink", help="group role the sink runs as (created if missing)")
    mi.add_argument("--reader-role", default="swarmlog_reader", help="read-only group role (created if missing)")
    mi.add_argument("--topic", help="verify: the topic whose rows to check (default SWARMLOG_TOPIC)")
    mi.add_argument("--token", metavar="FILE", help="verify: first check the log against this token (version 2)")
    mi.add_argument("--unchecked-signature", action="store_true",
                    help="verify --token: accept a signed token without SWARMLOG_TOKEN_KEY")
    mi.add_argument("--json", action="store_true", help="verify: the result as JSON")
    mi.set_defaults(func=cmd_mirror)


def _demo_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    d = sub.add_parser("demo", help="run a small swarm, mirror it, replay it", parents=parents)
    d.add_argument("--topic", help="the demo writes to a new topic named after this one, TOPIC.demo-<id> "
                                   "(default: $SWARMLOG_TOPIC)")
    d.add_argument("--agents", type=int, default=3, help="agents in the ring (at least 3; default 3)")
    d.add_argument("--rounds", type=int, default=200,
                   help="about how many messages the agents pass around (default 200)")
    d.set_defaults(func=cmd_demo)


_PARSERS = {"sink": _sink_parser, "mirror": _mirror_parser, "demo": _demo_parser}
