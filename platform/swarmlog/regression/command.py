"""``swarmlog regress``: replay many recorded runs against candidate code; say which it changes.

A thin layer over :mod:`swarmlog.regression`: choose the runs (``--topics-pattern``, ``--topic``,
``--from-mirror`` with ``--since``/``--swarm-name``), keep this pod's shard of them
(``--shards``, ``JOB_COMPLETION_INDEX``), replay them (``--jobs``), print the report (a table with
a progress bar on a terminal, or ``--json``), write it (``--report``, ``--junit``). ``--merge``
joins the reports of an Indexed Job's pods into one, replaying nothing.

Exit status: 0 every run replayed clean; 4 (as ``replay --swarm``) some run diverged; 3 none
diverged but some could not be checked (unreadable, history incomplete, failed).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from ..cli import EXIT_DIVERGED, EXIT_OK, EXIT_UNREADABLE
from ..errors import UsageError

__all__ = ["add_parser", "cmd_regress", "exit_status"]

COMPLETION_INDEX_ENV = "JOB_COMPLETION_INDEX"
"""Set by Kubernetes in each pod of an Indexed Job: the pod's shard."""


def exit_status(report: Any) -> int:
    """4 if any run diverged; 3 if none did but some could not be checked; 0 otherwise."""
    if report.diverged:
        return EXIT_DIVERGED
    return EXIT_UNREADABLE if report.unchecked else EXIT_OK


def _settings(args: argparse.Namespace) -> Any:
    from ..settings import Settings

    settings = Settings.from_env()
    if args.from_mirror:
        settings.check_database_url()
    return settings


def _topics(args: argparse.Namespace, settings: Any, swarm_name: str) -> list[str]:
    from .runs import parse_since, runs_in_mirror, topics_matching

    chosen = sum(bool(x) for x in (args.topics_pattern, args.topic, args.from_mirror))
    if chosen != 1:
        raise UsageError("choose the runs one way: --topics-pattern REGEX, --topic TOPIC (repeatable), or "
                         "--from-mirror (with --since, --swarm-name)")
    if (args.since or args.swarm_name) and not args.from_mirror:
        raise UsageError("--since and --swarm-name choose runs from the mirror: use them with --from-mirror")
    if args.topics_pattern:
        return topics_matching(settings, args.topics_pattern)
    if args.topic:
        return list(dict.fromkeys(args.topic))
    since = parse_since(args.since) if args.since else None
    return runs_in_mirror(settings, swarm=args.swarm_name or swarm_name, since=since)


def _shard(args: argparse.Namespace, topics: list[str]) -> tuple[list[str], tuple[int, int] | None]:
    from .runs import shard

    if args.shards is None:
        if args.shard_index is not None:
            raise UsageError("--shard-index needs --shards N")
        return topics, None
    index = args.shard_index
    if index is None:
        raw = os.environ.get(COMPLETION_INDEX_ENV)
        if raw is None or not raw.isdigit():
            raise UsageError(f"--shards {args.shards}: give --shard-index, or run in an Indexed Job "
                             f"({COMPLETION_INDEX_ENV} is not set)")
        index = int(raw)
    return shard(topics, index=index, count=args.shards), (index, args.shards)


def _progress(total: int) -> tuple[Any, Any]:
    """A tqdm bar of runs on a terminal (with the verdicts so far); nothing in logs and pipes."""
    if not sys.stderr.isatty() or total == 0:
        return None, None
    import threading

    from tqdm import tqdm

    bar = tqdm(total=total, desc="regress", unit="run", leave=False)
    counts: dict[str, int] = {}
    lock = threading.Lock()

    def update(outcome: Any) -> None:
        with lock:
            counts[outcome.status] = counts.get(outcome.status, 0) + 1
            bar.set_postfix(counts, refresh=False)
            bar.update(1)

    return bar, update


def _reports_in(paths: list[str]) -> list[dict[str, Any]]:
    """The regression reports in ``paths``: a ``--report`` file, or a pod's log (``kubectl logs``), whose
    report is the one line that is a JSON document of kind ``swarmlog.regression-report``."""
    found = []
    for path in paths:
        text = Path(path).read_text()
        docs = [text] if text.lstrip().startswith("{") and "\n{" not in text.strip() else text.splitlines()
        mine = []
        for doc in docs:
            try:
                parsed = json.loads(doc) if doc.lstrip().startswith("{") else None
            except json.JSONDecodeError:
                parsed = None
            if isinstance(parsed, dict) and parsed.get("kind") == "swarmlog.regression-report":
                mine.append(parsed)
        if not mine:
            raise UsageError(f"{path} holds no regression report (a `swarmlog regress --json` line or --report file)")
        found.extend(mine)
    return found


def _write(path: str, text: str) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


def cmd_regress(args: argparse.Namespace) -> int:
    from ..runtime import load_swarm
    from . import RegressionReport, regress

    if args.merge:
        if args.swarm or args.topics_pattern or args.topic or args.from_mirror:
            raise UsageError("--merge joins reports already made: give it the report files alone")
        report = RegressionReport.merged(_reports_in(args.merge))
    else:
        if not args.swarm:
            raise UsageError("--swarm module:swarm is required: the candidate code to replay the runs against")
        settings = _settings(args)
        swarm_name = load_swarm(args.swarm).name
        topics, shard = _shard(args, _topics(args, settings, swarm_name))
        if not topics and shard is None:
            raise UsageError("no recorded run matched: check --topics-pattern (a whole topic name), --topic, or the "
                             "mirror's runs (--from-mirror lists only what the sink mirrored)")
        bar, update = _progress(len(topics))
        try:
            report = regress(settings=settings, swarm=args.swarm, topics=topics, jobs=args.jobs, progress=update)
        finally:
            if bar is not None:
                bar.close()
        report.shard = shard
    if args.report:
        _write(args.report, json.dumps(report.to_json(), default=str, sort_keys=True, indent=1))
    if args.junit:
        _write(args.junit, report.junit())
    if args.json:
        # One line: a log collector (kubectl logs, Loki) keeps it as one record.
        print(json.dumps(report.to_json(), default=str, sort_keys=True))
    else:
        print(report.table())
    return exit_status(report)


def add_parser(sub: Any, name: str, *, parents: list[argparse.ArgumentParser]) -> None:
    """Add ``swarmlog regress`` to ``swarmlog``'s subcommands."""
    r = sub.add_parser(name, parents=parents,
                       help="replay many recorded runs against candidate code; report which it changes (exit 4)",
                       description="Replay every chosen run against the code of --swarm, in parallel processes, "
                                   "and report per run: clean, diverged (with its first divergence), unreadable, "
                                   "history incomplete; diverged runs grouped by where the code first departs. "
                                   "Exit 0: no run changed; 4: some run diverged; 3: some could not be checked.")
    r.add_argument("--swarm", metavar="MODULE:SWARM", help="the candidate code")
    which = r.add_argument_group("which runs (one of)")
    which.add_argument("--topics-pattern", metavar="REGEX", help="every topic whose whole name matches REGEX")
    which.add_argument("--topic", action="append", metavar="TOPIC", help="this topic's run (repeatable)")
    which.add_argument("--from-mirror", action="store_true",
                       help="the runs the Postgres mirror lists (SWARMLOG_DATABASE_URL), of the candidate's swarm")
    which.add_argument("--swarm-name", metavar="NAME", help="with --from-mirror: the runs of this swarm instead")
    which.add_argument("--since", metavar="WHEN",
                       help="with --from-mirror: runs started since WHEN (7d, 36h, 90m, or an ISO 8601 time)")
    r.add_argument("--jobs", type=int, metavar="N",
                   help="runs replayed at once, each in its own process (default: one per CPU this process may use)")
    r.add_argument("--shards", type=int, metavar="N",
                   help="split the runs into N shards and replay one (an Indexed Job with N completions)")
    r.add_argument("--shard-index", type=int, metavar="I",
                   help=f"with --shards: the shard to replay (default: ${COMPLETION_INDEX_ENV})")
    r.add_argument("--json", action="store_true", help="print the report as one JSON line instead of a table")
    r.add_argument("--report", metavar="FILE", help="also write the report as JSON to FILE (for --merge)")
    r.add_argument("--junit", metavar="FILE", help="also write the report as JUnit XML to FILE")
    r.add_argument("--merge", nargs="+", metavar="FILE",
                   help="join the JSON reports of a sharded replay into one (replays nothing)")
    r.set_defaults(func=cmd_regress)
