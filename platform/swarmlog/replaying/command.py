"""``swarmlog replay`` and ``swarmlog check``: the replay wing's commands.

A thin layer over :mod:`swarmlog.replaying`: parse, call, print. A plain replay prints each agent's
state hash and the stream hash; a swarm replay (``--swarm``) its report, and exits 4 if the code
diverges; ``--verify`` and ``--token-out`` are the token's side (:mod:`swarmlog.token.command`).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..cli import (
    EXIT_DIVERGED,
    EXIT_OK,
    EXIT_PROBLEMS_FOUND,
    EXIT_UNREADABLE,
    settings_of,
)
from ..errors import UsageError
from ..settings import Settings
from ..terminal import bounded, printable
from .mirror import from_the_mirror

__all__ = ["add_parser", "cmd_check", "cmd_replay"]


def _load_object(spec: str) -> Any:
    """``module:attr`` -> the attribute (a class is instantiated without arguments)."""
    import importlib

    module_name, _, attr = spec.partition(":")
    if not attr:
        raise UsageError(f"expected module:object, got {spec!r}")
    obj = getattr(importlib.import_module(module_name), attr)
    return obj() if isinstance(obj, type) else obj


def cmd_replay(args: argparse.Namespace) -> int:
    from . import replay

    expected = None
    if args.verify:
        from ..token import ReplayTokenV2, load_token
        from ..token.command import verify_v1_settings, verify_v2

        token = load_token(args.verify)
        if isinstance(token, ReplayTokenV2):
            return verify_v2(args, token, source=args.verify)
        expected = token
    settings = settings_of(args, postgres=args.publish)  # --publish: the report goes into the mirror
    if expected is not None:
        settings = verify_v1_settings(args, expected, settings)
    if args.from_checkpoints and not args.swarm:
        raise UsageError("--from-checkpoints starts a swarm replay's agents from their checkpoints: use it with "
                         "--swarm module:swarm")
    if args.from_checkpoints and (args.token_out or args.verify or args.publish):
        raise UsageError("a replay from checkpoints re-runs only the log's tail: it makes no replay token and "
                         "publishes no report (--token-out, --verify, --publish need the whole log replayed)")
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
                            reducer=reducer_obj, progress=bar.update_to if bar is not None else None,
                            from_log_start=args.from_log_start)
        finally:
            if bar is not None:
                bar.close()
        # Bounded: past swarmlog.terminal.CAP, a summary by kind with offset ranges (every one with
        # --json or -v), never a line per message of a log with ten thousand bad ones.
        unreadable = [(u.offset, f"not readable events ({u.kind})",
                       f"offset {u.offset} is not a readable event and was not replayed: {u.error}")
                      for u in result.undecodable]
        for line in bounded(unreadable, full=args.json or args.verbose > 0):
            print(f"warning: {line}", file=sys.stderr)
        holes = [(h.offset, "offsets that hold no event any more", f"offset {h.offset} holds no event, though the "
                  f"event at {h.named_by} names it as a cause: the log lost it") for h in result.holes]
        for line in bounded(holes, full=args.json or args.verbose > 0):
            print(f"warning: {line}", file=sys.stderr)
        if result.start_offset:
            print(f"warning: the log starts at offset {result.start_offset}, not 0: this is not the whole run "
                  f"(its token records start_offset {result.start_offset})", file=sys.stderr)
        if args.json:
            print(json.dumps(result.to_json(), indent=2))
        else:
            print(f"replayed {result.events} events from offset {result.start_offset} up to offset "
                  f"{result.end_offset} (exclusive)")
            for agent, h in sorted(result.agents.items()):
                print(f"  {printable(agent):<20} {h}")
            print(f"stream hash {result.stream_hash}")
        status = EXIT_UNREADABLE if (args.strict and result.undecodable) else EXIT_OK
    if expected is not None:
        from ..token.command import verify_v1_result

        return verify_v1_result(args, expected, settings, result, reducer) or status
    if args.token_out:
        from ..token import create_token
        from ..token.command import backend_of, registry_of

        token2 = create_token(backend=backend_of(settings), topic=settings.topic, registry=registry_of(settings),
                              to=result.end_offset, every=args.checkpoint_every,
                              replayed=result if args.swarm else None)
        token2.signed(settings.token_key_bytes()).save(args.token_out)
        print(f"replay token (version {token2.version}) written to {args.token_out}", file=sys.stderr)
    return status


def _token(settings: Settings, result: Any, reducer: str) -> Any:
    """The replay token of ``result``, signed when SWARMLOG_TOKEN_KEY is set."""
    from ..runtime import find_run
    from ..schema.registry import SchemaRegistry
    from ..token import token_from

    run = find_run(settings, settings.topic, SchemaRegistry.load(settings.schema_dirs()))
    token = token_from(result, topic=settings.topic, run=run, code_version=run.code_version if run else None,
                       reducer=reducer)
    return token.signed(settings.token_key_bytes())


def _replay_swarm(args: argparse.Namespace, settings: Settings) -> tuple[int, Any]:
    """Re-run the swarm's code against the log; print (and with --publish, store) its report."""
    from ..runtime import load_swarm, pin_interpreter
    from . import replay_swarm
    from .report import swarm_report

    swarm = load_swarm(args.swarm)
    pin_interpreter(settings, may_reexec=getattr(args, "may_reexec", False))
    bar = _progress_bar("replay", unit="ev")
    try:
        result = replay_swarm(settings=settings, swarm=swarm, to=args.to, group=args.group, reset=not args.no_reset,
                              progress=bar.update_to if bar is not None else None, workers=args.workers,
                              from_checkpoints=args.from_checkpoints, follow_link=not args.no_follow_link)
    finally:
        if bar is not None:
            bar.close()
    # A replay from checkpoints attests only to the tail it re-ran: no token says more than that.
    token = None if result.resumed_from else _token(settings, result, f"swarm:{swarm.name}")
    report = swarm_report(result, swarm=swarm.name, topic=settings.topic, group=args.group, token=token)
    if args.publish:
        report["report_id"] = from_the_mirror("publish_report")(settings, report)
    if args.json:
        # One line: a log collector (kubectl logs, Loki, CloudWatch) keeps it as one record.
        print(json.dumps(report, default=str, sort_keys=True))
    else:
        print(f"replayed {result.events} events of {args.swarm} up to offset {result.end_offset} (exclusive)")
        for agent, h in sorted(result.agents.items()):
            print(f"  {printable(agent):<20} {h}  ({result.steps.get(agent, 0)} steps)")
        print(f"stream hash {result.stream_hash}")
        for agent, offset in sorted(result.resumed_from.items()):
            print(f"  {agent}: from its checkpoint at offset {offset} (the steps before it were not re-run)")
        for agent, offset in sorted(result.unverified_from.items()):
            print(f"  {printable(agent)}: unverified from offset {offset} (what it wrote there lies past the cut, "
                  f"it never got there live, or it parked there)")
        # What the agents named instead of handling (a repeated id, an input they cannot read): at
        # most 20 of a kind one a line, then a summary by kind with offset ranges (every one with -v).
        named = [(a.offset, f"{a.kind} inputs", str(a)) for a in result.anomalies]
        if named:
            print(f"named and not handled ({len(named) + result.anomalies_omitted}):")
        for line in bounded(named, full=args.verbose > 0):
            print(f"  {line}")
        if result.anomalies_omitted:
            from ..runtime.anomalies import KEPT_ANOMALIES

            print(f"  and {result.anomalies_omitted:,} more, counted and not kept one by one (each agent keeps the "
                  f"first of each kind and its latest {KEPT_ANOMALIES:,}; metric swarmlog_agent_anomalies)")
        checked, recorded = sum(result.states_checked.values()), sum(result.states_recorded.values())
        print(f"state digests: {checked} step(s) checked of {recorded} recorded"
              + ("" if recorded else " (the log records none: state-only divergences cannot be seen)"))
        first = result.first_divergence
        if first is None:
            print("no divergence: the code does exactly what the log recorded")
        else:
            print(printable(f"DIVERGED first at offset {first.offset} (agent {first.agent}, {first.kind}): "
                            f"{first.detail}"))
            print(f"  recorded: {json.dumps(first.recorded, default=str)}")  # ASCII: JSON escapes the rest
            print(f"  now:      {json.dumps(first.replayed, default=str)}")
            if len(result.divergences) > 1:
                print(f"  ({len(result.divergences) - 1} more divergence(s) after it)")
        if result.link is not None:  # a continued topic: the part of the run on the topic it continues
            for line in result.link.lines():
                print(printable(line))
        if args.publish:
            print(f"report {report['report_id']} published to Postgres (table replay_reports)")
    unreadable = any(a.kind != "repeated" for a in result.anomalies)
    diverged = result.divergences or (result.link is not None and result.link.diverged)
    status = EXIT_DIVERGED if diverged else EXIT_UNREADABLE if args.strict and unreadable else EXIT_OK
    return status, result


def cmd_check(args: argparse.Namespace) -> int:
    if args.what == "unhandled":
        return _check_unhandled(args)
    from .causality import SECTIONS, check_causality

    count, violations = check_causality(settings=settings_of(args))
    if args.json:
        print(json.dumps({"events": count, "ok": not violations,
                          "counts": {section: sum(v.section == section for v in violations) for section, _ in SECTIONS},
                          "findings": [v.to_json() for v in violations]}, indent=2))
        return EXIT_PROBLEMS_FOUND if violations else EXIT_OK
    # One section each: an unreadable message is not a causality violation, and ten thousand of either
    # are a summary with offset ranges (swarmlog.terminal.bounded), every one with --json or -v.
    counts = []
    for section, title in SECTIONS:
        found = [v for v in violations if v.section == section]
        counts.append(f"{len(found)} {title}")
        if found:
            print(f"{title} ({len(found)}):")
            for line in bounded([(v.offset, v.rule, str(v)) for v in found], full=args.verbose > 0):
                print(f"  {line}")
    causality = sum(v.section == "causality" for v in violations)
    print(f"checked {count} events: {causality} causality violation(s); " + ", ".join(counts[:-1]))
    return EXIT_PROBLEMS_FOUND if violations else EXIT_OK


def _check_unhandled(args: argparse.Namespace) -> int:
    from ..errors import UsageError
    from ..kafka.backend import backend_for
    from ..runtime import load_swarm
    from ..runtime.scan import LogScan
    from ..runtime.unhandled import unhandled_messages
    from ..schema.registry import SchemaRegistry

    if not args.swarm:
        raise UsageError("`check unhandled` needs --swarm module:swarm: which messages are handled is the code's")
    settings = settings_of(args)
    swarm = load_swarm(args.swarm)
    backend = backend_for(settings, None)
    registry = SchemaRegistry.load(settings.schema_dirs())
    # What is not an event, or is a copy of one, is named and skipped, as the agents do.
    scan = LogScan(backend=backend, topic=settings.topic, registry=registry)
    found = unhandled_messages(backend=backend, topic=settings.topic, registry=registry, agents=swarm.agents(),
                               scan=scan)
    for u in found:
        print(printable(u.describe()))
    for line in scan.report(full=args.verbose > 0):
        print(line)
    print(f"{len(found)} message(s) no agent of {swarm.name} handles")
    return EXIT_PROBLEMS_FOUND if found else EXIT_OK


def _progress_bar(desc: str, unit: str) -> Any:
    """A tqdm bar on a terminal; None in logs and pipes. Test it with ``is not None``: a tqdm bar with no
    total yet refuses ``bool()`` (TypeError)."""
    if not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    class Bar(tqdm):
        def update_to(self, done: int, total: int) -> None:
            self.total = total
            self.update(done - self.n)

    return Bar(desc=desc, unit=unit, unit_scale=True, leave=False)


# --- parsers ----------------------------------------------------------------------------------


def add_parser(sub: Any, name: str, *, parents: list[argparse.ArgumentParser]) -> None:
    """Add ``swarmlog replay`` or ``swarmlog check`` (``name``) to ``swarmlog``'s subcommands."""
    if name == "check":
        c = sub.add_parser("check", help="check a whole log", parents=parents)
        c.add_argument("what", choices=["causality", "unhandled"],
                       help="causality: every event's causes precede it; unhandled: messages no agent of --swarm "
                            "acts on (an unknown kind or recipient)")
        c.add_argument("--swarm", help="module:swarm (for unhandled)")
        c.add_argument("--topic", help="the topic (default: $SWARMLOG_TOPIC)")
        c.add_argument("--json", action="store_true", help="causality: every finding as JSON (the text lists at most "
                                                          "20 of a kind one a line, then a summary; -v lists them all)")
        c.set_defaults(func=cmd_check)
        return
    from ..token import DEFAULT_EVERY as DEFAULT_CHECKPOINTS

    r = sub.add_parser("replay", help="rebuild every agent's state from offset zero", parents=parents)
    r.add_argument("--topic", help="the topic (default: $SWARMLOG_TOPIC)")
    r.add_argument("--to", type=int, help="stop before this offset (exclusive)")
    r.add_argument("--group", help="reset this consumer group to the log start and replay as it (with --swarm: "
                                    "the replay's own group, never an agent's)")
    r.add_argument("--no-reset", action="store_true",
                   help="with --group: do not reset; the group must already be at the log start")
    r.add_argument("--reducer", help="module:object folding events into agent state (default: the ledger)")
    r.add_argument("--json", action="store_true", help="the result as JSON (with --swarm: on one line)")
    r.add_argument("--strict", action="store_true", help="exit 3 if any message could not be read (with --swarm: "
                                                           "any input addressed to an agent)")
    r.add_argument("--from-log-start", action="store_true",
                   help="replay what is left of a log whose first offsets were deleted (refused otherwise)")
    r.add_argument("--token-out", metavar="FILE", help="write a replay token (version 3, as `token create`)")
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
    r.add_argument("--from-checkpoints", action="store_true",
                   help="with --swarm: start each agent from its latest checkpoint the log vouches for "
                        "(SWARMLOG_CHECKPOINT_EVERY): only the tail is re-run and checked; no token")
    r.add_argument("--workers", type=int, metavar="N",
                   help="with --swarm: fold the agents in N processes, each some of them over the whole log "
                        "(default: one per CPU this process may use, at most one per agent; 1: one process)")
    r.add_argument("--no-follow-link", action="store_true",
                   help="with --swarm, on a continued topic (`swarmlog continue`): verify it from its seeds only, "
                        "not the topic it continues (docs/long-runs.md)")
    r.set_defaults(func=cmd_replay)
