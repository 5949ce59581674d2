"""``swarmlog run``: a swarm's agents live, all in this process or one with ``--agent`` (one pod per agent);
``swarmlog retry`` and ``swarmlog patches``: code that changes while runs are in flight (docs/evolution.md).

A thin layer over :mod:`swarmlog.runtime`: start the run (``--start``; its ``run.started`` records
the run id, the seed and how this interpreter hashes strings), wait for it (``--agent``), run the
agents until stopped (SIGTERM, SIGINT) or quiet, serve ``/metrics`` and the probes, print the result.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..cli import metrics_port_arg, settings_of
from ..errors import RunCannotGoOn, UsageError
from ..settings import Settings
from ..terminal import printable

__all__ = ["add_parser", "cmd_patches", "cmd_retry", "cmd_run"]


def _pin(args: argparse.Namespace, settings: Settings, *, new_run: bool) -> None:
    """Before any handler runs: hash strings as the run's recorded interpreter did (``pin_interpreter``).
    Only a process started as the command line may re-execute itself."""
    from . import pin_interpreter

    pin_interpreter(settings, may_reexec=getattr(args, "may_reexec", False), new_run=new_run,
                    run_id=getattr(args, "run_id", None))


def cmd_run(args: argparse.Namespace) -> int:
    import signal
    import threading

    from ..observe import Metrics, serve_process
    from ..schema.registry import SchemaRegistry
    from . import AgentWorker, find_run, load_swarm, result_json, run_agents, start_run, wait_for_run

    settings = settings_of(args)
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
        _pin(args, settings, new_run=True)
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
            _pin(args, settings, new_run=False)  # the run is there: its string-hash seed
        if args.retry_failed:
            _retry_failed(settings)
        results = run_agents(settings=settings, swarm=swarm, agents=[args.agent] if args.agent else None,
                             until_quiet=args.until_quiet, stop=stop, on_started=workers.extend,
                             accept_versions=tuple(args.accept_version), from_zero=args.from_zero)
    finally:
        if server is not None:
            server.close()
    print(json.dumps(result_json(results)))
    failures = [f for r in results for f in r.failures]
    if failures:
        # Every failure was logged as it happened; the exit status says the run did not get to its end.
        raise RunCannotGoOn(topic=settings.topic, problems=[
            *failures, "fix the handler behind a versioned step (ctx.patched) and run `swarmlog run --retry-failed` "
                       "or `swarmlog retry` (docs/evolution.md)"])
    return 0


def _retry_failed(settings: Settings) -> None:
    """``--retry-failed``: a ``step.retried`` for each failed step not retried yet, before the agents start."""
    from ..kafka.backend import backend_for
    from ..schema.registry import SchemaRegistry
    from . import find_run
    from .failures import append_retries

    registry = SchemaRegistry.load(settings.schema_dirs())
    backend = backend_for(settings, None)
    run = find_run(settings, settings.topic, registry, backend=backend)
    if run is None:
        return
    for failure, at in append_retries(settings=settings, backend=backend, topic=settings.topic, registry=registry,
                                      run_id=run.run_id):
        print(f"retrying {failure.describe().replace('; not retried)', ')')} at offset {at}", file=sys.stderr)


def _first_reason(reasons: list[str | None]) -> str | None:
    return next((r for r in reasons if r is not None), None)


# --- retry and patches: see .failures and .patches ------------------------------------------


def cmd_retry(args: argparse.Namespace) -> int:
    from ..errors import RunNotStarted
    from ..kafka.backend import backend_for
    from ..schema.registry import SchemaRegistry
    from .failures import append_retries, recorded_failures
    from .runner import find_run
    from .scan import LogScan

    settings = settings_of(args)
    registry = SchemaRegistry.load(settings.schema_dirs())
    backend = backend_for(settings, None)
    # What the log holds that is not an event, or is a copy of one, is named and skipped, as the agents do.
    scan = LogScan(backend=backend, topic=settings.topic, registry=registry)
    full = getattr(args, "verbose", 0) > 0
    if args.list:
        failures = recorded_failures(backend=backend, topic=settings.topic, registry=registry, scan=scan)
        for f in failures:
            print(printable(f.describe()))
        if not failures:
            print(f"no step of the run in topic {settings.topic!r} failed")
        for line in scan.report(full=full):
            print(line)
        return 0
    run = find_run(settings, settings.topic, registry, backend=backend)
    if run is None:
        raise RunNotStarted(topic=settings.topic, waited_s=0.0)
    try:
        retried = append_retries(settings=settings, backend=backend, topic=settings.topic, registry=registry,
                                 run_id=run.run_id, agent=args.agent, step=args.step, reason=args.reason, scan=scan)
    finally:
        for line in scan.report(full=full):
            print(line, file=sys.stderr)
    for failure, at in retried:
        print(printable(f"{failure.describe().replace('; not retried)', ')')}: step.retried appended at offset {at}"))
    if not retried:
        print(f"nothing to retry: every failed step of the run in topic {settings.topic!r} was retried already "
              f"(`swarmlog retry --list`)", file=sys.stderr)
    return 0


def cmd_patches(args: argparse.Namespace) -> int:
    from ..kafka.backend import backend_for
    from ..schema.registry import SchemaRegistry
    from .patches import patch_verdicts, patches_in_run
    from .scan import LogScan

    settings = settings_of(args)
    registry = SchemaRegistry.load(settings.schema_dirs())
    backend = backend_for(settings, None)
    topics = list(args.topics)
    if args.topics_pattern:
        from ..kafka.config import admin_client
        from ..kafka.discovery import TopicPattern, discover

        found_topics = discover(settings, TopicPattern(pattern=args.topics_pattern), client=admin_client(settings))
        topics += sorted(found_topics.topics - set(topics))
    topics = topics or [settings.topic]
    # Each run read as the agents read it: what is not an event, or is a copy of one, is named and skipped.
    scans = {topic: LogScan(backend=backend, topic=topic, registry=registry) for topic in topics}
    found = {topic: patches_in_run(backend=backend, topic=topic, registry=registry, scan=scans[topic])
             for topic in topics}
    verdicts = patch_verdicts(found, patch_ids=args.patch or ())
    if args.patch:
        verdicts = [v for v in verdicts if v.patch_id in args.patch]
    if args.json:
        print(json.dumps({"topics": topics, "patches": [v.to_json() for v in verdicts],
                          "skipped": {topic: scan.to_json() for topic, scan in scans.items()}}, indent=2))
    else:
        for v in verdicts:
            print(printable(v.describe()))
        if not verdicts:
            print(f"no patch recorded in {len(topics)} run(s)")
        for scan in scans.values():
            for line in scan.report(full=getattr(args, "verbose", 0) > 0):
                print(line)
    # Asked about a patch: the exit status says whether its old path is still needed (for CI).
    return 1 if args.patch and any(v.stage == "keep" for v in verdicts) else 0


def _add_evolve_parser(sub: Any, name: str, *, parents: list[argparse.ArgumentParser]) -> None:
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
        r.add_argument("--topic", help="the topic (default: $SWARMLOG_TOPIC)")
        r.set_defaults(func=cmd_retry)
        return
    p = sub.add_parser("patches", parents=parents,
                       help="per versioned step (ctx.patched) the logs record: whether any run still needs its "
                            "old path (exit 1 if one named with --patch does)")
    p.add_argument("topics", nargs="*", metavar="TOPIC", help="the runs to read (default: $SWARMLOG_TOPIC)")
    p.add_argument("--topics-pattern", metavar="REGEX",
                   help="also every single-partition topic whose whole name matches REGEX (e.g. '^swarm\\..*')")
    p.add_argument("--patch", action="append", metavar="ID", help="only this patch (repeatable)")
    p.add_argument("--json", action="store_true", help="the result as JSON")
    p.set_defaults(func=cmd_patches)


def add_parser(sub: Any, name: str, *, parents: list[argparse.ArgumentParser]) -> None:
    """Add ``swarmlog run``, ``retry`` or ``patches`` (``name``) to ``swarmlog``'s subcommands."""
    if name in ("retry", "patches"):
        _add_evolve_parser(sub, name, parents=parents)
        return
    run = sub.add_parser("run", help="run a swarm's agents live (all in this process, or one with --agent)",
                         parents=parents)
    run.add_argument("swarm", help="module:swarm")
    run.add_argument("--run-id", help="recorded in run.started (a topic that holds a run goes on with its own)")
    run.add_argument("--seed", type=int, help="the run's seed, recorded in run.started: every ctx.random() and "
                                               "ctx.uuid() derives from it (a topic that holds a run goes on with "
                                               "its own)")
    run.add_argument("--agent", help="run only this agent (one pod per agent)")
    run.add_argument("--start", action="store_true", help="write run.started (if missing); alone: only that")
    run.add_argument("--until-quiet", type=float, metavar="SECONDS",
                     help="stop once the log has not grown for SECONDS and no timeout is pending")
    run.add_argument("--wait-for-run", type=float, default=300.0, metavar="SECONDS",
                     help="with --agent: wait this long for the run's run.started, saying so in the log, then fail "
                          "(default 300)")
    run.add_argument("--from-zero", action="store_true",
                     help="rebuild from offset 0, every step re-verified, whatever checkpoints there are "
                          "(SWARMLOG_CHECKPOINT_EVERY)")
    run.add_argument("--stall-timeout", type=float, default=900.0, metavar="SECONDS",
                     help="/livez fails when an agent's loop has not turned for SECONDS (default 900)")
    run.add_argument("--retry-failed", action="store_true",
                     help="first append a step.retried for each failed step not retried yet (as `swarmlog retry`): "
                          "with the fixed code, the run goes on from its failed steps")
    run.add_argument("--accept-version", action="append", default=[], metavar="VERSION",
                     help="go on with a run pinned (Swarm(pin_runs=True)) to this other code version (repeatable)")
    run.add_argument("--topic", help="the topic (default: $SWARMLOG_TOPIC)")
    metrics_port_arg(run)
    run.set_defaults(func=cmd_run, service=True)
