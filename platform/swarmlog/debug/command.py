"""The debugging commands: ``swarmlog log | show | state | debug | step | snapshot | fork | timeline``.

Each is a thin layer over :mod:`swarmlog.debug`: parse, call the Python API, print. What
the engine logs (a snapshot not used, and why) reaches the terminal as a ``note:`` line on
stderr; results go to stdout, as text or, with ``--json``, as JSON.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable
from typing import Any

from ..errors import MissingDependency, UsageError
from ..settings import Settings

__all__ = ["add_parser", "cmd_debug", "cmd_fork", "cmd_log", "cmd_show", "cmd_snapshot", "cmd_state", "cmd_step",
           "cmd_timeline"]


def _settings(args: argparse.Namespace) -> Settings:
    return Settings.from_env(topic=getattr(args, "topic", None))


def _swarm(args: argparse.Namespace, settings: Settings) -> Any:
    """The swarm's code, in a process that hashes strings as the run's did: every command that runs it
    (``state``, ``debug``, ``step``, ``snapshot``, ``timeline --swarm``) comes through here."""
    from ..runtime import load_swarm, pin_interpreter

    spec = args.swarm or settings.swarm
    if not spec:
        raise UsageError(f"`swarmlog {args.command}` runs the swarm's code: give --swarm module:swarm "
                         f"(or set SWARMLOG_SWARM)")
    swarm = load_swarm(spec)
    # The swarm's handlers run here: under the run's string-hash seed (swarmlog.runtime.interpreter).
    pin_interpreter(settings, may_reexec=getattr(args, "may_reexec", False))
    return swarm


def _session(args: argparse.Namespace) -> Any:
    from . import Session

    _notes()
    settings = _settings(args)
    return Session(settings=settings, swarm=_swarm(args, settings), snapshots=not args.no_snapshots)


def _notes() -> None:
    """What the debugging engine warns about (a snapshot skipped, and why) reaches the terminal."""
    log = logging.getLogger("swarmlog.debug")
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("note: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.WARNING)


def _dump(doc: Any) -> str:
    return json.dumps(doc, indent=2, default=str, ensure_ascii=False)


# --- commands ---------------------------------------------------------------------------------


def cmd_log(args: argparse.Namespace) -> int:
    from . import LogView

    view = LogView(settings=_settings(args))
    out = sys.stdout
    for e in view.events(start=args.start, end=args.end, agents=args.agent, types=args.type, run=args.run,
                         follow=args.follow):
        out.write((json.dumps(e.to_json(), default=str, ensure_ascii=False) if args.json else e.line()) + "\n")
        if args.follow:
            out.flush()
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from . import LogView

    view = LogView(settings=_settings(args))
    x = view.explain(args.offset, within=args.within)
    if args.json:
        print(_dump(x.to_json()))
        return 0
    e = x.event
    ev = e.event
    if ev is None:
        print(f"offset {e.offset}: not a readable event: {e.error}")
        return 0
    print(f"offset {e.offset}: {ev.event_type} v{ev.version}, event id {ev.event_id}, run {ev.run_id!r}")
    print(f"  from {ev.agent_id} to {ev.to if ev.to is not None else 'every other agent (broadcast)'}, "
          f"log time {ev.timestamp_ms} ms")
    convo = e.conversation
    if convo is not None:
        print("conversation:")
        for line in convo.lines():
            print(f"  {line}")
    if convo is None or args.raw:
        print("payload:" if args.raw or "request_headers" not in ev.payload else "payload (request headers folded; "
              "--raw prints them):")
        print("  " + _dump(ev.payload if args.raw else _fold_headers(ev.payload)).replace("\n", "\n  "))
    else:
        print(f"raw request and response: swarmlog show {e.offset} --raw (or --json)")
    print("headers:")
    for k, v in e.headers:
        print(f"  {k} = {v.decode(errors='replace')}")
    print(f"caused by ({len(x.causes)}):")
    for c in x.causes:
        print(f"  {c.line()}" if not isinstance(c, int) else f"  {c:>7}  (no readable event)")
    bound = "" if args.within is None else f", searched to offset {x.scanned_to}"
    print(f"caused ({len(x.caused)}{bound}):")
    for c in x.caused:
        print(f"  {c.line()}")
    return 0


def _fold_headers(payload: dict[str, Any]) -> dict[str, Any]:
    """An HTTP exchange's request headers as one line of names: as recorded they fill a screen."""
    headers = payload.get("request_headers")
    if not isinstance(headers, list) or not headers:
        return payload
    names = ", ".join(str(h.get("name")) for h in headers if isinstance(h, dict))
    return {**payload, "request_headers": f"<{len(headers)} headers: {names}>"}


def cmd_state(args: argparse.Namespace) -> int:
    if (args.at is None) == (args.diff is None):
        raise UsageError("give --at OFFSET, or --diff A B")
    session = _session(args)
    if args.at is not None:
        st = session.state(args.agent, at=args.at)
        if args.json:
            print(_dump(st.to_json()))
        else:
            origin = f"snapshot at {st.from_snapshot}" if st.from_snapshot is not None else "offset 0"
            print(f"{st.agent} just before offset {st.at} ({st.steps} handler run(s); code {session.code_version}, "
                  f"rebuilt from {origin}):")
            print(_dump(st.state))
        return 0
    a, b = args.diff
    d = session.diff(args.agent, a, b)
    if args.json:
        print(_dump(d.to_json()))
        return 0
    print(f"{d.agent} from just before offset {a} to just before offset {b} ({d.steps} handler run(s) in between):")
    if not d.changes:
        print("  no change")
    for c in d.changes:
        if c.kind == "changed":
            print(f"  ~ {c.path_text()}: {json.dumps(c.before, default=str)} -> {json.dumps(c.after, default=str)}")
        elif c.kind == "added":
            print(f"  + {c.path_text()}: {json.dumps(c.after, default=str)}")
        else:
            print(f"  - {c.path_text()}: {json.dumps(c.before, default=str)}")
    return 0


def cmd_debug(args: argparse.Namespace) -> int:
    session = _session(args)

    def on_stop(stop: Any) -> None:
        e = stop.event
        what = f"{e.event_type} {e.kind!r}" if e.kind is not None else e.event_type
        print(f"swarmlog debug: offset {stop.offset}: {stop.agent} runs {stop.handler} (its handler run "
              f"#{stop.number}) on {what} from {e.agent_id}; everything before is rebuilt. Leave the debugger "
              f"(continue, or quit) and the replay carries on.", file=sys.stderr, flush=True)

    result = session.debug(at=args.at, agent=args.agent, step=args.step, divergence=args.divergence, to=args.to,
                           on_stop=on_stop)
    if not result.stops:
        target = f"offset {args.at}" if args.at is not None else f"{args.agent}'s handler run #{args.step}"
        raise UsageError(f"no handler ran at {target}"
                         + (f" for agent {args.agent!r}" if args.agent and args.at is not None else "")
                         + "; `swarmlog log` shows what the log holds there, `swarmlog show OFFSET` who it is for")
    for stop in result.stops:
        state = result.states[stop.agent]
        print(f"carried on to offset {result.end}: {stop.agent} now {json.dumps(state, default=str)}")
        if not stop.attached:
            print("note: no debugger attached (PYTHONBREAKPOINT=0?); the handler ran undebugged", file=sys.stderr)
    first = result.first_divergence
    if first is None:
        print("no divergence: the code does exactly what the log recorded")
        return 0
    print(f"DIVERGED first at offset {first.offset} (agent {first.agent}, {first.kind}): {first.detail}")
    return 4


def cmd_snapshot(args: argparse.Namespace) -> int:
    session = _session(args)
    if args.list:
        for info in session.store.kept():
            mark = "" if info.code_version == session.code_version else "  (another code version)"
            print(f"{info.agent:<16} at {info.at:>10}  code {info.code_version}{mark}")
        return 0
    taken = session.snapshot(every=args.every, to=args.to)
    origin = f"the snapshot at {taken.from_snapshot}" if taken.from_snapshot is not None else "offset 0"
    print(f"folded from {origin} to {taken.end}: {taken.records} snapshot record(s) at "
          f"{len(taken.offsets)} offset(s) {taken.offsets[:5]}{' ...' if len(taken.offsets) > 5 else ''} "
          f"in {session.store.snapshot_topic} (code {session.code_version})")
    for agent, why in taken.skipped.items():
        print(f"note: some snapshots of {agent} were not written: {why}", file=sys.stderr)
    return 0


def cmd_fork(args: argparse.Namespace) -> int:
    from . import fork

    forked = fork(settings=_settings(args), at=args.at, to_topic=args.to_topic)
    if args.json:
        print(_dump(forked.to_json()))
    else:
        print(f"forked {forked.source} before offset {forked.at} into {forked.topic}: {forked.events} events at "
              f"their own offsets, run.forked at {forked.forked_offset}; go on with "
              f"`swarmlog run MODULE:SWARM --topic {forked.topic}`")
    return 0


def cmd_timeline(args: argparse.Namespace) -> int:
    from . import LogView, Session
    from .timeline import build_timeline, write_html
    from .timeline.html import page_doc
    from .timeline.text import write

    _notes()
    settings = _settings(args)
    view = LogView(settings=settings)
    session = None
    if args.swarm or settings.swarm:  # the code, to find and mark where it first departs from the log
        session = Session(settings=settings, swarm=_swarm(args, settings), snapshots=not args.no_snapshots)
    timeline = build_timeline(view=view, start=args.start, end=args.end, session=session, agents=args.agent)
    if args.html:
        path = write_html(timeline, args.html)
        print(f"wrote {path} ({len(timeline.rows)} events, {len(timeline.lanes)} agents): open it in a browser; "
              f"it loads nothing from the network", file=sys.stderr)
        return 0
    if args.json:
        print(json.dumps(page_doc(timeline), default=str, ensure_ascii=False))
        return 0
    write(timeline, sys.stdout, color=args.color)
    return 0


def cmd_step(args: argparse.Namespace) -> int:
    from .breakpoints import Breakpoint

    breakpoints = [Breakpoint.agent(a) for a in args.break_agent] + \
        [Breakpoint.event_type(t) for t in args.break_type] + [Breakpoint.predicate(x) for x in args.break_if]
    try:
        from .stepview import StepApp
    except ImportError as exc:  # Textual is an optional extra
        raise MissingDependency(program="Textual (the view of `swarmlog step`)",
                                install_hint="Install the extra: pip install 'swarmlog[tui]' (`make` does).") from exc
    session = _session(args)
    app = StepApp(session=session, at=args.at, breakpoints=breakpoints, divergence=args.divergence)
    app.run()
    return 0


# --- parsers ----------------------------------------------------------------------------------


def add_parser(sub: Any, name: str, *, parents: list[argparse.ArgumentParser]) -> None:
    """Add the debugging command ``name`` to ``swarmlog``'s subcommands (``-v`` is added after their own
    options: ``parents`` are not used)."""
    _PARSERS[name](sub)


def _log_parser(sub: Any) -> None:
    lg = sub.add_parser("log", help="print the log's events decoded, one a line")
    lg.add_argument("--from", dest="start", type=int, default=0, metavar="OFFSET", help="first offset")
    lg.add_argument("--to", dest="end", type=int, metavar="OFFSET", help="stop before this offset")
    lg.add_argument("--agent", action="append", default=[],
                    help="events this agent wrote or was sent (repeatable)")
    lg.add_argument("--type", action="append", default=[],
                    help="event type, or type:kind for messages, e.g. agent.message:approved (repeatable)")
    lg.add_argument("--run", help="events of this run id")
    lg.add_argument("--follow", action="store_true", help="keep printing events as they are appended")
    lg.add_argument("--json", action="store_true", help="JSON lines: every field of every event")
    lg.add_argument("--topic", help="the topic (default: $SWARMLOG_TOPIC)")
    lg.set_defaults(func=cmd_log)


def _show_parser(sub: Any) -> None:
    sh = sub.add_parser("show", help="one event whole: envelope, payload, headers, its causes both ways")
    sh.add_argument("offset", type=int, help="the event's offset (`swarmlog log` lists them)")
    sh.add_argument("--within", type=int, metavar="N", help="look for what it caused only N offsets on")
    sh.add_argument("--json", action="store_true", help="the event and its causes as JSON")
    sh.add_argument("--raw", action="store_true",
                    help="the payload exactly as recorded (a model call's JSON, every request header)")
    sh.add_argument("--topic", help="the topic (default: $SWARMLOG_TOPIC)")
    sh.set_defaults(func=cmd_show)


def _state_parser(sub: Any) -> None:
    st = sub.add_parser("state", help="an agent's state just before an offset, as the swarm's code rebuilds it")
    st.add_argument("agent", help="the agent whose state to rebuild")
    st.add_argument("--at", type=int, metavar="OFFSET", help="the state just before this offset")
    st.add_argument("--diff", type=int, nargs=2, metavar=("A", "B"), help="what changed from A to B")
    _code_args(st)
    st.add_argument("--json", action="store_true", help="the state (or the changes) as JSON")
    st.set_defaults(func=cmd_state)


def _debug_parser(sub: Any) -> None:
    db = sub.add_parser("debug", help="rebuild everything before a step and run its handler under the debugger")
    db.add_argument("--at", type=int, metavar="OFFSET", help="the step(s) handling this offset")
    db.add_argument("--agent", help="only this agent's step (with --at), or whose step (with --step)")
    db.add_argument("--step", type=int, metavar="K", help="the agent's K-th handler run (1 = its first)")
    db.add_argument("--divergence", action="store_true", help="the step where the code first diverges")
    db.add_argument("--to", type=int, metavar="OFFSET", help="carry on the replay up to here (default: the end)")
    _code_args(db)
    db.set_defaults(func=cmd_debug)


def _snapshot_parser(sub: Any) -> None:
    sn = sub.add_parser("snapshot", help="keep per-agent state snapshots, so travel in time starts near")
    sn.add_argument("--every", type=int, default=10_000, metavar="N", help="offsets between snapshots")
    sn.add_argument("--to", type=int, metavar="OFFSET", help="fold up to here (default: the end of the log)")
    sn.add_argument("--list", action="store_true", help="list the snapshots kept")
    _code_args(sn)
    sn.set_defaults(func=cmd_snapshot)


def _step_parser(sub: Any) -> None:
    sp = sub.add_parser("step", help="step through a run in an interactive terminal view (needs swarmlog[tui])")
    sp.add_argument("--at", type=int, default=0, metavar="OFFSET", help="start just before this offset")
    sp.add_argument("--divergence", action="store_true", help="start at the step where the code first diverges")
    sp.add_argument("--break-agent", action="append", default=[], metavar="AGENT",
                    help="stop at this agent's steps (repeatable)")
    sp.add_argument("--break-type", action="append", default=[], metavar="TYPE",
                    help="stop at steps handling this event type, or type:kind (repeatable)")
    sp.add_argument("--break-if", action="append", default=[], metavar="EXPR",
                    help="stop where this Python expression is true, e.g. \"after['phase'] == 'timed_out'\" "
                         "(names: step, event, agent, handler, offset, type, kind, before, after, outputs)")
    _code_args(sp)
    sp.set_defaults(func=cmd_step)


def _timeline_parser(sub: Any) -> None:
    tl = sub.add_parser("timeline", help="a range of the log as a sequence diagram (terminal, or --html FILE)")
    tl.add_argument("--from", dest="start", type=int, default=0, metavar="OFFSET", help="first offset")
    tl.add_argument("--to", dest="end", type=int, metavar="OFFSET", help="stop before this offset")
    tl.add_argument("--agent", action="append", default=[], help="only events this agent wrote or was sent")
    tl.add_argument("--html", metavar="FILE", help="write one self-contained HTML page instead")
    tl.add_argument("--json", action="store_true", help="print what the page draws, as JSON")
    tl.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                    help="colour the diagram (auto: on a terminal)")
    _code_args(tl)
    tl.set_defaults(func=cmd_timeline)


def _fork_parser(sub: Any) -> None:
    fk = sub.add_parser("fork", help="copy the log before an offset into a new topic, to go on with new code")
    fk.add_argument("--at", type=int, required=True, metavar="OFFSET", help="copy the offsets before this one")
    fk.add_argument("--to-topic", required=True, metavar="TOPIC", help="the new topic")
    fk.add_argument("--topic", help="the source (default: $SWARMLOG_TOPIC)")
    fk.add_argument("--json", action="store_true", help="what was copied, as JSON")
    fk.set_defaults(func=cmd_fork)


_PARSERS: dict[str, Callable[[Any], None]] = {
    "log": _log_parser,
    "show": _show_parser,
    "state": _state_parser,
    "debug": _debug_parser,
    "snapshot": _snapshot_parser,
    "step": _step_parser,
    "timeline": _timeline_parser,
    "fork": _fork_parser,
}


def _code_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--swarm", help="module:swarm, the code (default: $SWARMLOG_SWARM)")
    p.add_argument("--no-snapshots", action="store_true", help="fold from offset zero, ignoring snapshots")
    p.add_argument("--topic", help="the topic (default: $SWARMLOG_TOPIC)")
