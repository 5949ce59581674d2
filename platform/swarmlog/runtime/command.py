"""``swarmlog run``: a swarm's agents live, all in this process or one with ``--agent`` (one pod per agent).

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
from ..errors import UsageError
from ..settings import Settings

__all__ = ["add_parser", "cmd_run"]


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
        results = run_agents(settings=settings, swarm=swarm, agents=[args.agent] if args.agent else None,
                             until_quiet=args.until_quiet, stop=stop, on_started=workers.extend)
    finally:
        if server is not None:
            server.close()
    print(json.dumps(result_json(results)))
    return 0


def _first_reason(reasons: list[str | None]) -> str | None:
    return next((r for r in reasons if r is not None), None)


def add_parser(sub: Any, name: str, *, parents: list[argparse.ArgumentParser]) -> None:
    """Add ``swarmlog run`` to ``swarmlog``'s subcommands."""
    run = sub.add_parser("run", help="run a swarm's agents live (all in this process, or one with --agent)",
                         parents=parents)
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
    metrics_port_arg(run)
    run.set_defaults(func=cmd_run, service=True)
