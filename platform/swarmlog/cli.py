"""swarmlog: a clock-free Kafka event log that gives agent swarms deterministic replay.

Every command reads its settings from the environment (see ``swarmlog.settings``);
``--topic`` overrides ``SWARMLOG_TOPIC``. Errors swarmlog raises on purpose are
printed as one line saying what to do; the exit status says which kind (``EXIT_CODES``).

The command line decides what reaches the terminal: swarmlog's warnings, and with
``-v`` its progress (INFO) and librdkafka's own log lines, with ``-vv`` everything
(DEBUG). Without ``-v`` no librdkafka line is shown: what matters of them comes back
as swarmlog's errors.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from typing import Any

from .errors import ConfigurationError, InvalidToken, SchemaError, ServiceUnavailable, SwarmlogError, UsageError
from .settings import Settings

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

EXIT_CODES: dict[int, str] = {
    EXIT_OK: "success",
    EXIT_PROBLEMS_FOUND: "`check` or `schema check` found problems (listed on stdout)",
    EXIT_USAGE: "usage error: wrong arguments or a bad setting (SWARMLOG_*, schemas); fix the command or "
                "the environment, retrying will not help",
    EXIT_UNREADABLE: "`replay --strict`: some messages are not readable events",
    EXIT_DIVERGED: "`replay --swarm`: the code diverges from the log",
    EXIT_TOKEN_MISMATCH: "`replay --verify`: the replay does not match the token",
    EXIT_UNAVAILABLE: "Kafka or Postgres could not be reached, or a TLS/SASL handshake failed",
    EXIT_FAILED: "any other error at run time (the message says what to do)",
    EXIT_INTERRUPTED: "interrupted (SIGINT)",
}


def exit_code(exc: SwarmlogError) -> int:
    """The exit status for an error swarmlog raised: decided by its type."""
    if isinstance(exc, (ConfigurationError, SchemaError, InvalidToken)):
        return EXIT_USAGE  # a token refused (a bad or unchecked signature): retrying will not help either
    if isinstance(exc, ServiceUnavailable):
        return EXIT_UNAVAILABLE
    return EXIT_FAILED


def _settings(args: argparse.Namespace, *, postgres: bool = False) -> Settings:
    """The settings, ``--topic`` over ``SWARMLOG_TOPIC``; ``postgres``: the command will use the mirror,
    so its URL is checked now (a bad one is exit 2 before any work), not at its first connection."""
    settings = Settings.from_env(topic=getattr(args, "topic", None))
    if postgres:
        settings.check_database_url()
    return settings


def _load_object(spec: str) -> Any:
    """``module:attr`` -> the attribute (a class is instantiated without arguments)."""
    import importlib

    module_name, _, attr = spec.partition(":")
    if not attr:
        raise UsageError(f"expected module:object, got {spec!r}")
    obj = getattr(importlib.import_module(module_name), attr)
    return obj() if isinstance(obj, type) else obj


# --- commands ---------------------------------------------------------------------------


def cmd_topic(args: argparse.Namespace) -> int:
    from .kafka.topic import create_topic, describe_topic

    settings = _settings(args)
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


def cmd_append(args: argparse.Namespace) -> int:
    """One event into the topic's run, through the client's path (swarmlog.client): held until the run
    starts, written with its run id; ``--no-run`` for a topic no swarm runs on."""
    from .client import Client

    settings = _settings(args)
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


def cmd_sink(args: argparse.Namespace) -> int:
    from swarmlog_connectors.postgres_sink import PostgresCheck, PostgresSink

    from .observe import Metrics, serve_process

    if args.topics_pattern is not None:
        return _sink_pattern(args)
    if args.include_side_topics or args.metadata_refresh_ms is not None:
        raise UsageError("--include-side-topics and --metadata-refresh-ms go with --topics-pattern")
    settings = _settings(args)  # the sink checks its mirror's URL first thing
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
    from swarmlog_connectors.pattern_sink import PatternSink
    from swarmlog_connectors.postgres_sink import PostgresCheck

    from .kafka.config import admin_client
    from .kafka.discovery import TopicPattern, discover
    from .observe import Health, Metrics, serve

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
    from swarmlog_connectors.postgres_migrations import SCHEMA_VERSION, migrate, schema_version
    from swarmlog_connectors.postgres_sink import connect

    with connect(_settings(args, postgres=True)) as conn:
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


def cmd_replay(args: argparse.Namespace) -> int:
    from .replaying import replay

    expected = None
    if args.verify:
        from .token import ReplayTokenV2, load_token
        from .token.command import verify_v1_settings, verify_v2

        token = load_token(args.verify)
        if isinstance(token, ReplayTokenV2):
            return verify_v2(args, token, source=args.verify)
        expected = token
    settings = _settings(args, postgres=args.publish)  # --publish: the report goes into the mirror
    if expected is not None:
        settings = verify_v1_settings(args, expected, settings)
    if args.publish and not args.swarm:
        raise UsageError("--publish writes a swarm replay's report: use it with --swarm module:swarm")
    if args.workers is not None and not args.swarm:
        raise UsageError("--workers splits a swarm replay's agents across processes: use it with --swarm module:swarm")
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers must be 1 or more, not {args.workers}")
    result: Any
    if args.swarm:
        status, result = _replay_swarm(args, settings)
        reducer = f"swarm:{result.swarm}"
    else:
        reducer_obj = _load_object(args.reducer) if args.reducer else None
        reducer = f"reducer:{args.reducer}" if args.reducer else "ledger"
        bar = _progress_bar("replay", unit="ev")
        try:
            result = replay(settings=settings, to=args.to, group=args.group, reset=not args.no_reset,
                            reducer=reducer_obj, progress=bar.update_to if bar else None,
                            from_log_start=args.from_log_start)
        finally:
            if bar:
                bar.close()
        for u in result.undecodable:
            print(f"warning: offset {u.offset} is not a readable event and was not replayed: {u.error}",
                  file=sys.stderr)
        if result.start_offset:
            print(f"warning: the log starts at offset {result.start_offset}, not 0: this is not the whole run "
                  f"(its token records start_offset {result.start_offset})", file=sys.stderr)
        if args.json:
            print(json.dumps(result.to_json(), indent=2))
        else:
            print(f"replayed {result.events} events from offset {result.start_offset} up to offset "
                  f"{result.end_offset} (exclusive)")
            for agent, h in sorted(result.agents.items()):
                print(f"  {agent:<20} {h}")
            print(f"stream hash {result.stream_hash}")
        status = EXIT_UNREADABLE if (args.strict and result.undecodable) else EXIT_OK
    if expected is not None:
        from .token.command import verify_v1_result

        return verify_v1_result(args, expected, settings, result, reducer) or status
    if args.token_out:
        from .token import create_token
        from .token.command import backend_of, registry_of

        token2 = create_token(backend=backend_of(settings), topic=settings.topic, registry=registry_of(settings),
                              to=result.end_offset, every=args.checkpoint_every,
                              replayed=result if args.swarm else None)
        token2.signed(settings.token_key_bytes()).save(args.token_out)
        print(f"replay token (version 2) written to {args.token_out}", file=sys.stderr)
    return status


def _token(settings: Settings, result: Any, reducer: str) -> Any:
    """The replay token of ``result``, signed when SWARMLOG_TOKEN_KEY is set."""
    from .runtime import find_run
    from .schema.registry import SchemaRegistry
    from .token import token_from

    run = find_run(settings, settings.topic, SchemaRegistry.load(settings.schema_dirs()))
    token = token_from(result, topic=settings.topic, run=run, code_version=run.code_version if run else None,
                       reducer=reducer)
    return token.signed(settings.token_key_bytes())


def _pin_interpreter(args: argparse.Namespace, settings: Settings | None, *, new_run: bool) -> None:
    """Before any handler runs: hash strings as the run's recorded interpreter did (see
    :func:`swarmlog.runtime.pin_interpreter`). Only a process started as the command line
    (``main()`` with no arguments) may re-execute itself."""
    from .runtime import pin_interpreter

    pin_interpreter(settings, may_reexec=getattr(args, "may_reexec", False), new_run=new_run,
                    run_id=getattr(args, "run_id", None))


def _replay_swarm(args: argparse.Namespace, settings: Settings) -> tuple[int, Any]:
    """Re-run the swarm's code against the log; print (and with --publish, store) its report."""
    from .replaying import replay_swarm
    from .replaying.report import swarm_report
    from .runtime import load_swarm

    swarm = load_swarm(args.swarm)
    _pin_interpreter(args, settings, new_run=False)
    bar = _progress_bar("replay", unit="ev")
    try:
        result = replay_swarm(settings=settings, swarm=swarm, to=args.to, group=args.group, reset=not args.no_reset,
                              progress=bar.update_to if bar else None, workers=args.workers)
    finally:
        if bar:
            bar.close()
    token = _token(settings, result, f"swarm:{swarm.name}")
    report = swarm_report(result, swarm=swarm.name, topic=settings.topic, group=args.group, token=token)
    if args.publish:
        from swarmlog_connectors.replay_reports import publish_report

        report["report_id"] = publish_report(settings, report)
    if args.json:
        # One line: a log collector (kubectl logs, Loki, CloudWatch) keeps it as one record.
        print(json.dumps(report, default=str, sort_keys=True))
    else:
        print(f"replayed {result.events} events of {args.swarm} up to offset {result.end_offset} (exclusive)")
        for agent, h in sorted(result.agents.items()):
            print(f"  {agent:<20} {h}  ({result.steps.get(agent, 0)} steps)")
        print(f"stream hash {result.stream_hash}")
        for agent, offset in sorted(result.unverified_from.items()):
            print(f"  {agent}: unverified from offset {offset} (what it wrote there lies past the cut, "
                  f"or it never got there live)")
        checked, recorded = sum(result.states_checked.values()), sum(result.states_recorded.values())
        print(f"state digests: {checked} step(s) checked of {recorded} recorded"
              + ("" if recorded else " (the log records none: state-only divergences cannot be seen)"))
        first = result.first_divergence
        if first is None:
            print("no divergence: the code does exactly what the log recorded")
        else:
            print(f"DIVERGED first at offset {first.offset} (agent {first.agent}, {first.kind}): {first.detail}")
            print(f"  recorded: {json.dumps(first.recorded, default=str)}")
            print(f"  now:      {json.dumps(first.replayed, default=str)}")
            if len(result.divergences) > 1:
                print(f"  ({len(result.divergences) - 1} more divergence(s) after it)")
        if args.publish:
            print(f"report {report['report_id']} published to Postgres (table replay_reports)")
    return (EXIT_DIVERGED if result.divergences else EXIT_OK), result


def _mirror_verify(args: argparse.Namespace) -> int:
    from swarmlog_connectors.mirror_verify import verify_mirror

    settings = _settings(args, postgres=True)
    status = 0
    if args.token:
        from .token import ReplayTokenV2, check_signature, load_token, verify_token
        from .token.command import backend_of, registry_of

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


def cmd_run(args: argparse.Namespace) -> int:
    import signal
    import threading

    from .observe import Metrics, serve_process
    from .runtime import AgentWorker, find_run, load_swarm, result_json, run_agents, start_run, wait_for_run
    from .schema.registry import SchemaRegistry

    settings = _settings(args)
    swarm = load_swarm(args.swarm)
    starts = args.agent is None or args.start
    if starts:
        if args.run_id is None and args.seed is None:
            # A topic that already holds a run (a restart, a fork) goes on with it.
            existing = find_run(settings, settings.topic, SchemaRegistry.load(settings.schema_dirs()))
            if existing is not None:
                args.run_id, args.seed = existing.run_id, existing.seed
        if args.run_id is None or args.seed is None:
            raise UsageError("starting a run needs --run-id and --seed (they are recorded in run.started); a topic "
                             "that already holds a run goes on with it without them")
    if starts:
        _pin_interpreter(args, settings, new_run=True)
        info = start_run(settings=settings, swarm=swarm, run_id=args.run_id, seed=args.seed)
        print(f"run {info.run_id} {'started' if info.created else 'already started'} at offset {info.offset}",
              file=sys.stderr)
        if args.start and args.agent is None:
            return 0
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    workers: list[AgentWorker] = []
    server = None
    if args.metrics_port is not None:
        metrics = Metrics()
        metrics.add(lambda: [f for w in workers for f in w.metric_families()])
        server = serve_process(port=args.metrics_port, settings=settings, metrics=metrics,
                               ready=lambda: _first_reason([w.readiness() for w in workers]) if workers
                               else "waiting for the run to start (no run.started in the topic yet)",
                               live=lambda: _first_reason([w.liveness(args.stall_timeout) for w in workers]))
    try:
        if args.agent is not None and not args.start:
            if wait_for_run(settings=settings, timeout=args.wait_for_run, run_id=args.run_id, seed=args.seed,
                            stop=stop) is None:
                return 0  # asked to stop while waiting
            _pin_interpreter(args, settings, new_run=False)  # the run is there: its string-hash seed
        results = run_agents(settings=settings, swarm=swarm, agents=[args.agent] if args.agent else None,
                             until_quiet=args.until_quiet, stop=stop, on_started=workers.extend)
    finally:
        if server is not None:
            server.close()
    print(json.dumps(result_json(results)))
    return 0


def _first_reason(reasons: list[str | None]) -> str | None:
    return next((r for r in reasons if r is not None), None)


def cmd_check(args: argparse.Namespace) -> int:
    from .replaying.causality import check_causality

    count, violations = check_causality(settings=_settings(args))
    for v in violations:
        print(v)
    print(f"checked {count} events: {len(violations)} causality violation(s)")
    return EXIT_PROBLEMS_FOUND if violations else EXIT_OK


def cmd_dev(argv: list[str]) -> int:
    from .dev.command import run

    return run(argv)


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import main as demo_main

    settings = _settings(args, postgres=True)  # the demo mirrors its run
    _pin_interpreter(args, None, new_run=True)  # the demo starts its runs in this process
    return demo_main(settings=settings, agents=args.agents, rounds=args.rounds)


def _progress_bar(desc: str, unit: str) -> Any:
    """A tqdm bar on a terminal; nothing in logs and pipes."""
    if not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    class Bar(tqdm):
        def update_to(self, done: int, total: int) -> None:
            self.total = total
            self.update(done - self.n)

    return Bar(desc=desc, unit=unit, unit_scale=True, leave=False)


# --- parser -----------------------------------------------------------------------------


def _metrics_port_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--metrics-port", type=int, metavar="PORT",
                   help="serve Prometheus /metrics and the /livez and /readyz probes on PORT")


# --- the terminal: logging and verbosity ----------------------------------------------------

_VERBOSE_FLAGS = {"-v": 1, "--verbose": 1, "-vv": 2, "-vvv": 3}
_handler: logging.Handler | None = None


def _leading_verbosity(argv: list[str]) -> tuple[int, list[str]]:
    """``-v``/``-vv``/``--verbose`` before the command (``swarmlog -v dev up``), and the rest."""
    n = 0
    while argv and argv[0] in _VERBOSE_FLAGS:
        n += _VERBOSE_FLAGS[argv[0]]
        argv = argv[1:]
    return n, argv


_SERVICES = frozenset({"run", "sink"})
"""Commands that run as services (an agent's or the sink's pod; and ``replay --publish``, the replay
Job): their lifecycle — rebuild started, caught up, live, progress, aborted transactions — is what an
operator reads in their log, so they log swarmlog's INFO lines without -v. Every other command is
quiet: warnings and errors only."""


def configure_logging(verbosity: int, *, service: bool = False) -> None:
    """What reaches stderr: warnings (a service's INFO too); ``-v`` INFO and librdkafka's lines; ``-vv`` DEBUG.

    Embedded in a program that configured logging itself (tests, a host program), its
    configuration wins: nothing is changed.
    """
    from .kafka.config import LIBRDKAFKA_LOGGER

    global _handler
    root = logging.getLogger()
    if any(h is not _handler for h in root.handlers):
        return
    if _handler is None:
        _handler = logging.StreamHandler(sys.stderr)
        _handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(_handler)
    quiet = logging.INFO if service else logging.WARNING
    level = quiet if verbosity <= 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    root.setLevel(logging.WARNING if verbosity <= 0 else level)
    for name in ("swarmlog", "swarmlog_connectors"):
        logging.getLogger(name).setLevel(level)
    # librdkafka's own lines (connection attempts, retries) are for debugging swarmlog's
    # Kafka side; what an operator must know of them comes back as a typed error.
    logging.getLogger(LIBRDKAFKA_LOGGER).setLevel(logging.CRITICAL + 1 if verbosity <= 0 else level)


def _epilog() -> str:
    codes = "\n".join(f"  {code:>3}  {what}" for code, what in EXIT_CODES.items())
    return ("-v shows swarmlog's progress and librdkafka's log lines, -vv debug output (put it before the\n"
            "command for `dev` and `schema`: swarmlog -v dev up).\n\nexit status:\n" + codes)


class _Unbuilt:
    """The parser of a command that is not the one being parsed: what is added to it is dropped."""

    def add_argument(self, *args: Any, **kwargs: Any) -> None:
        pass

    def set_defaults(self, **kwargs: Any) -> None:
        pass


class _OneCommand:
    """argparse's subcommands, building only ``command``'s parser (see :func:`build_parser`)."""

    def __init__(self, sub: Any, command: str) -> None:
        self._sub = sub
        self._command = command
        self.choices = sub.choices

    def add_parser(self, name: str, **kwargs: Any) -> Any:
        return self._sub.add_parser(name, **kwargs) if name == self._command else _Unbuilt()


_TOKEN_COMMANDS = frozenset({"token"})
_DEBUG_COMMANDS = frozenset({"log", "show", "state", "debug", "snapshot", "step", "timeline", "fork"})
_UI_COMMANDS = frozenset({"ui"})
"""The commands whose parsers ``swarmlog.token.command``, ``swarmlog.debug.command`` and ``swarmlog.ui.command`` add
(test_cli_parser.py holds these to what they add): those modules are imported to build the
parser of one of their commands, or the whole parser, and not for another command's (a replay's
start, bench/cli.py). A command missing here would still be found, by the whole parser."""


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """swarmlog's argument parser; given ``command``, with that command's parser alone.

    :func:`main` parses one command: building the parsers of all twenty (a hundred options)
    took a short command longer than its own work before the first fetch (``cli_replay_3`` in
    bench/cli.py). A ``command`` that is none of them gets the whole parser, whose error lists
    them all; ``swarmlog --help`` and no command at all get it too.
    """
    from .token import DEFAULT_EVERY as DEFAULT_CHECKPOINTS

    p = argparse.ArgumentParser(prog="swarmlog", description=__doc__.splitlines()[0] if __doc__ else None,
                                epilog=_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-v", "--verbose", action="count", default=0, dest="global_verbose",
                   help="-v: progress and librdkafka's log lines on stderr; -vv: debug")
    verbose = argparse.ArgumentParser(add_help=False)
    verbose.add_argument("-v", "--verbose", action="count", default=0,
                         help="-v: progress and librdkafka's log lines on stderr; -vv: debug")
    subcommands = p.add_subparsers(dest="command", required=True)
    sub: Any = subcommands if command is None else _OneCommand(subcommands, command)

    sub.add_parser("dev", help="local Kafka (1 or 3 brokers) + Postgres: up | down | status | env", add_help=False)
    sub.add_parser("schema", help="check | list the event schemas (compatibility across versions)", add_help=False)

    t = sub.add_parser("topic", help="create or describe the swarm's single-partition topic", parents=[verbose])
    t.add_argument("action", choices=["create", "describe"])
    t.add_argument("name", nargs="?", help="topic (default: $SWARMLOG_TOPIC)")
    t.set_defaults(func=cmd_topic)

    a = sub.add_parser("append", help="append one event to the topic's run and print its offset", parents=[verbose])
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
    a.add_argument("--topic")
    a.set_defaults(func=cmd_append)

    s = sub.add_parser("sink", help="mirror the topic (or every topic matching a pattern) into Postgres, exactly once",
                       parents=[verbose])
    s.add_argument("--topic")
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
    _metrics_port_arg(s)
    s.add_argument("--give-up-after", type=float, metavar="SECONDS",
                   help="exit (status 2) once Postgres has been unreachable this long (default: keep retrying)")
    s.set_defaults(func=cmd_sink)

    mi = sub.add_parser("mirror", help="the Postgres mirror: migrate its schema (as the database owner) | status | "
                                       "verify it against the log", parents=[verbose])
    mi.add_argument("action", choices=["migrate", "status", "verify"])
    mi.add_argument("--writer-role", default="swarmlog_sink", help="group role the sink runs as (created if missing)")
    mi.add_argument("--reader-role", default="swarmlog_reader", help="read-only group role (created if missing)")
    mi.add_argument("--topic", help="verify: the topic whose rows to check (default SWARMLOG_TOPIC)")
    mi.add_argument("--token", metavar="FILE", help="verify: first check the log against this token (version 2)")
    mi.add_argument("--unchecked-signature", action="store_true",
                    help="verify --token: accept a signed token without SWARMLOG_TOKEN_KEY")
    mi.add_argument("--json", action="store_true", help="verify: the result as JSON")
    mi.set_defaults(func=cmd_mirror)

    r = sub.add_parser("replay", help="rebuild every agent's state from offset zero", parents=[verbose])
    r.add_argument("--topic")
    r.add_argument("--to", type=int, help="stop before this offset (exclusive)")
    r.add_argument("--group", help="reset this consumer group to the log start and replay as it (with --swarm: "
                                    "the replay's own group, never an agent's)")
    r.add_argument("--no-reset", action="store_true",
                   help="with --group: do not reset; the group must already be at the log start")
    r.add_argument("--reducer", help="module:object folding events into agent state (default: the ledger)")
    r.add_argument("--json", action="store_true")
    r.add_argument("--strict", action="store_true", help="exit 3 if any message could not be read")
    r.add_argument("--from-log-start", action="store_true",
                   help="replay what is left of a log whose first offsets were deleted (refused otherwise)")
    r.add_argument("--token-out", metavar="FILE", help="write a replay token (version 2, as `token create`)")
    r.add_argument("--checkpoint-every", type=int, default=DEFAULT_CHECKPOINTS, metavar="K",
                   help=f"with --token-out: a chain checkpoint every K events (default {DEFAULT_CHECKPOINTS})")
    r.add_argument("--verify", metavar="FILE", help="check the token against --topic (default: its own topic) "
                                                    "(exit 5 if it does not match)")
    r.add_argument("--unchecked-signature", action="store_true",
                   help="with --verify: accept a signed token without SWARMLOG_TOKEN_KEY, checking its contents only")
    r.add_argument("--swarm", help="module:swarm — re-run this code against the log and report divergences "
                                    "(exit 4 if it diverges)")
    r.add_argument("--publish", action="store_true",
                   help="with --swarm: also write the report into Postgres (table replay_reports)")
    r.add_argument("--workers", type=int, metavar="N",
                   help="with --swarm: fold the agents in N processes, each some of them over the whole log "
                        "(default: one per CPU this process may use, at most one per agent; 1: one process)")
    r.set_defaults(func=cmd_replay)

    run = sub.add_parser("run", help="run a swarm's agents live (all in this process, or one with --agent)",
                         parents=[verbose])
    run.add_argument("swarm", help="module:swarm")
    run.add_argument("--run-id", help="recorded in run.started (a topic that holds a run goes on with its own)")
    run.add_argument("--seed", type=int)
    run.add_argument("--agent", help="run only this agent (one pod per agent)")
    run.add_argument("--start", action="store_true", help="write run.started (if missing); alone: only that")
    run.add_argument("--until-quiet", type=float, metavar="SECONDS",
                     help="stop once the log has not grown for SECONDS and no timeout is pending")
    run.add_argument("--wait-for-run", type=float, default=300.0, metavar="SECONDS",
                     help="with --agent: wait this long for the run's run.started, saying so in the log, then fail "
                          "(default 300)")
    run.add_argument("--stall-timeout", type=float, default=900.0, metavar="SECONDS",
                     help="/livez fails when an agent's loop has not turned for SECONDS (default 900)")
    run.add_argument("--topic")
    _metrics_port_arg(run)
    run.set_defaults(func=cmd_run)

    if command is None or command in _TOKEN_COMMANDS:
        from .token.command import add_parsers as add_token_parsers

        add_token_parsers(sub, parents=[verbose])  # token create | verify | show | list

    c = sub.add_parser("check", help="check a whole log", parents=[verbose])
    c.add_argument("what", choices=["causality"])
    c.add_argument("--topic")
    c.set_defaults(func=cmd_check)

    if command is None or command in _DEBUG_COMMANDS:
        from .debug.command import add_parsers as add_debug_parsers

        add_debug_parsers(sub)  # log, show, state, debug, snapshot, step, timeline, fork
    if command is None or command in _UI_COMMANDS:
        from .ui.command import add_parsers as add_ui_parsers

        add_ui_parsers(sub)  # ui
    if command is None or command == "regress":
        from .regression.command import add_parser as add_regress_parser

        add_regress_parser(sub, "regress", parents=[verbose])
    for name, subparser in sub.choices.items():
        if name not in ("dev", "schema") and "-v" not in subparser._option_string_actions:
            subparser.add_argument("-v", "--verbose", action="count", default=0,
                                 help="-v: progress and librdkafka's log lines on stderr; -vv: debug")

    d = sub.add_parser("demo", help="run a small swarm, mirror it, replay it", parents=[verbose])
    d.add_argument("--topic")
    d.add_argument("--agents", type=int, default=3)
    d.add_argument("--rounds", type=int, default=200)
    d.set_defaults(func=cmd_demo)
    if command is not None and command not in subcommands.choices:
        return build_parser()
    return p


def _freeze_what_the_imports_made() -> None:
    """Move every object the imports made into the collector's permanent generation (``gc.freeze``).

    A command's process keeps its modules, classes and functions until it exits, and the
    collector walked all of them again in every full collection: above all in the collections
    the interpreter makes as it exits, about 20 ms of CPU and of wall time of a 3-event
    ``swarmlog replay`` — a fifth of what swarmlog added to the start of Python and
    confluent-kafka (``cli_replay_3`` in bench/cli.py, bench/README.md "Start-up"). Frozen, they
    are not walked again; what is unreachable among them already (a few cycles the imports
    left) stays in memory instead of being collected. Only a process started as the command line
    does this (``main()`` with no arguments): a program or a test calling ``main([...])`` keeps
    its objects as they are.
    """
    import gc

    gc.freeze()


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None:
        _freeze_what_the_imports_made()
    verbosity, args_list = _leading_verbosity(list(sys.argv[1:] if argv is None else argv))
    try:
        if args_list and args_list[0] in ("dev", "schema"):
            configure_logging(verbosity)
            if args_list[0] == "dev":
                return cmd_dev(args_list[1:])
            from .schema.check import run as schema_run

            return schema_run(args_list[1:])
        args = build_parser(args_list[0] if args_list else None).parse_args(args_list)
        configure_logging(verbosity + getattr(args, "verbose", 0),
                          service=args.command in _SERVICES or bool(getattr(args, "publish", False)))
        # Only a process started as the command line may replace itself (swarmlog.runtime.interpreter).
        args.may_reexec = argv is None
        from .observe import tracing

        # OTEL_TRACES_EXPORTER / OTEL_EXPORTER_OTLP_ENDPOINT: a run's steps, a replay's, as spans.
        # Unset, nothing of OpenTelemetry is imported.
        tracing.configure_from_env()
        try:
            return int(args.func(args))
        finally:
            tracing.shutdown()  # what is still batched goes out before the process exits
    except SwarmlogError as exc:
        logger.debug("the error's traceback", exc_info=exc)
        print(f"swarmlog: error: {exc}", file=sys.stderr)
        return exit_code(exc)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
