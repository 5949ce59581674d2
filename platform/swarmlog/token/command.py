"""``swarmlog token create | verify | show | list``, and the token half of ``swarmlog replay --verify``.

A thin layer over :mod:`swarmlog.token`: parse, call, print. The report of a check goes
to stdout (text, or JSON with ``--json``), its first line saying which topic was checked
against which token's; a warning that a signature went unchecked goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..cli import EXIT_OK, EXIT_TOKEN_MISMATCH
from ..errors import UsageError
from ..replaying.mirror import from_the_mirror
from ..settings import Settings
from ..terminal import printable
from ._chain import DEFAULT_EVERY

__all__ = ["DEFAULT_CHECKPOINTS", "add_parser", "backend_of", "cmd_token", "pinned_swarm", "registry_of",
           "say_which_topic", "verify_v1_result", "verify_v1_settings", "verify_v2"]

DEFAULT_CHECKPOINTS = DEFAULT_EVERY


def _settings(args: argparse.Namespace) -> Settings:
    return Settings.from_env(topic=getattr(args, "topic", None))


def pinned_swarm(args: argparse.Namespace, settings: Settings) -> Any:
    """``--swarm``'s code, loaded for its handlers to run over ``settings.topic``: in this process
    under the string-hash seed that topic's run recorded (re-executed if need be, see
    :func:`swarmlog.runtime.pin_interpreter`). None without ``--swarm``."""
    from ..runtime import load_swarm, pin_interpreter

    if not args.swarm:
        return None
    pin_interpreter(settings, may_reexec=getattr(args, "may_reexec", False))
    return load_swarm(args.swarm)


def backend_of(settings: Settings, topic: str | None = None) -> Any:
    """The Kafka backend; a warning if the topic a token is made of or checked against deletes events."""
    from ..kafka.backend import KafkaBackend
    from ..log.base import warn_if_history_is_finite

    backend = KafkaBackend(settings)
    warn_if_history_is_finite(backend, topic or settings.topic)  # a topic that does not exist: the command says so
    return backend


def registry_of(settings: Settings) -> Any:
    from ..schema.registry import SchemaRegistry

    return SchemaRegistry.load(settings.schema_dirs())


def verify_v1_settings(args: argparse.Namespace, expected: Any, settings: Settings) -> Settings:
    """A version 1 token replays its range of the topic named (``--topic``, else the token's own), and says which."""
    from . import check_signature

    check_signature(expected, settings.token_key_bytes(), source=args.verify,
                    allow_unchecked=args.unchecked_signature)
    topic = args.topic or expected.topic
    say_which_topic(topic, expected.topic)
    args.to = expected.end_offset if args.to is None else args.to
    if expected.reducer.startswith("swarm:") and not args.swarm:
        raise UsageError(f"this token holds the states of swarm {expected.reducer[6:]!r}: "
                         f"pass --swarm module:swarm to verify it")
    return settings.model_copy(update={"topic": topic})


def say_which_topic(topic: str, token_topic: str) -> None:
    if topic == token_topic:
        print(f"checking the token's own topic {topic}", file=sys.stderr)
    else:
        print(f"checking topic {topic} against a token of topic {token_topic}", file=sys.stderr)


def verify_v1_result(args: argparse.Namespace, expected: Any, settings: Settings, result: Any,
                     reducer: str) -> int:
    from ..runtime import find_run
    from . import mismatches, token_from

    run = find_run(settings, settings.topic, registry_of(settings))
    token = token_from(result, topic=settings.topic, run=run, code_version=run.code_version if run else None,
                       reducer=reducer)
    diff = [line for line in mismatches(expected, token) if not line.startswith("topic:")]
    if diff:
        print(f"the replay of {settings.topic} does NOT match the token {args.verify} (version 1: it holds one "
              f"stream hash, so it cannot say where the history differs):")
        for line in diff:
            print(f"  {printable(line)}")
        return EXIT_TOKEN_MISMATCH
    print(f"the replay of {settings.topic} matches the token {args.verify}: {token.events} events, offsets "
          f"[{token.start_offset}, {token.end_offset}), stream {token.stream_hash[:16]}, "
          f"{len(token.agents)} agent state(s)")
    return EXIT_OK


def verify_v2(args: argparse.Namespace, token: Any, *, source: str) -> int:
    from . import check_signature, verify_token

    settings = _settings(args)
    status = check_signature(token, settings.token_key_bytes(), source=source,
                             allow_unchecked=args.unchecked_signature)
    if status == "unchecked":
        print(f"WARNING: the token {source} is signed, but its signature was NOT checked (SWARMLOG_TOKEN_KEY is "
              f"not set): its contents are checked below, which proves nothing about who made it", file=sys.stderr)
    topic = args.topic or token.topic  # the report's first line says which was checked
    swarm = pinned_swarm(args, settings.model_copy(update={"topic": topic}))
    check = verify_token(backend=backend_of(settings, topic), token=token, topic=topic, registry=registry_of(settings),
                         signature=status, reference=getattr(args, "reference", None), swarm=swarm)
    chain: list[Any] = []
    if check.ok:  # the topic matches its token, which covers a continued run's link: follow it (docs/long-runs.md)
        from ..continuation import check_chain

        chain = check_chain(backend=backend_of(settings, topic), topic=topic, registry=registry_of(settings),
                            token_key=settings.token_key_bytes())
    if args.json:
        print(json.dumps({**check.to_json(), **({"chain": [_link_json(c) for c in chain]} if chain else {})}, indent=2,
                         default=str))
    else:
        for line in [*check.lines(), *(c.line() for c in chain)]:
            print(printable(line))  # names from the topic and the token: escaped (swarmlog.terminal)
    return EXIT_OK if check.ok and all(c.ok for c in chain) else EXIT_TOKEN_MISMATCH


def _link_json(link: Any) -> dict[str, Any]:
    return {"topic": link.topic, "from_topic": link.from_topic, "from_end": link.from_end, "status": link.status,
            "detail": link.detail}


def cmd_token(args: argparse.Namespace) -> int:
    from . import load_token

    settings = _settings(args)
    if args.action == "list" or args.saved or args.save:
        settings.check_database_url()  # tokens kept in the mirror: a bad URL is exit 2 before any work
    if args.action == "create":
        return _token_create(args, settings)
    if args.action == "list":
        saved = from_the_mirror("list_tokens")(settings, topic=args.topic)
        for t in saved:
            print(f"{printable(t.token_id)}  {printable(t.topic)}  [{t.start_offset}, {t.end_offset})  "
                  f"{t.events} events  chain {t.chain_hash[:16]}  {'signed' if t.signed else 'unsigned'}  "
                  f"saved {t.saved_at:%Y-%m-%d %H:%M:%S}")
        print(f"{len(saved)} saved token(s)", file=sys.stderr)
        return 0
    if not args.file and not args.saved:
        raise UsageError(f"token {args.action} needs a token: a FILE, or --saved ID (`swarmlog token list`)")
    token: Any
    if args.saved:
        token, source = from_the_mirror("load_token")(settings, args.saved), f"saved:{args.saved}"
    else:
        token, source = load_token(args.file), args.file
    if args.action == "show":
        return _token_show(args, token, settings)
    from . import ReplayTokenV2

    if not isinstance(token, ReplayTokenV2):
        return _token_verify_v1(args, token, source)
    return verify_v2(args, token, source=source)


def _token_create(args: argparse.Namespace, settings: Settings) -> int:
    from . import create_token

    swarm = pinned_swarm(args, settings)
    token = create_token(backend=backend_of(settings), topic=settings.topic, registry=registry_of(settings), to=args.to,
                         every=args.checkpoint_every, swarm=swarm).signed(settings.token_key_bytes())
    where = []
    if args.out:
        token.save(args.out)
        where.append(args.out)
    if args.save:
        where.append(f"saved as {from_the_mirror('save_token')(settings, token)}")
    if not where:
        print(json.dumps(token.to_json(), indent=1, sort_keys=True))
        where.append("stdout")
    print(f"token {token.token_id} of {token.topic}: offsets [{token.start_offset}, {token.end_offset}), "
          f"{token.events} events, {len(token.checkpoints)} checkpoint(s), {len(token.agents)} agent state(s) "
          f"from the {token.agents_from}, {'signed' if token.signature else 'unsigned'} -> {', '.join(where)}",
          file=sys.stderr)
    return 0


def _token_show(args: argparse.Namespace, token: Any, settings: Settings) -> int:
    from . import ReplayTokenV2, signature_status

    status = signature_status(token, settings.token_key_bytes())
    if args.json:
        print(json.dumps({**(token.to_json() if isinstance(token, ReplayTokenV2) else vars(token)),
                          "signature_status": status}, indent=2, default=str))
        return 0
    print(printable(f"replay token, version {token.version}, of topic {token.topic}"))
    print(f"  offsets      [{token.start_offset}, {token.end_offset}), {token.events} events")
    print(printable(f"  run          {token.run_id} (seed {token.seed}), code {token.code_version}"))
    if isinstance(token, ReplayTokenV2):
        print(f"  interpreter  {json.dumps(token.interpreter, sort_keys=True)}")
        print(f"  chain        {len(token.checkpoints)} checkpoint(s), one every {token.chain_every} events; "
              f"last link {token.chain_hash}")
        for name, fp in sorted(token.schemas.items()):
            print(printable(f"  schema       {name:<24} {fp}"))
        print(f"  agents       (from the {token.agents_from})")
        for agent, digest in sorted(token.agents.items()):
            print(printable(f"    {agent:<20} {digest}  as of offset {token.agent_positions.get(agent)}"))
    else:
        print(f"  stream hash  {token.stream_hash}; agents ({token.reducer}):")
        for agent, digest in sorted(token.agents.items()):
            print(printable(f"    {agent:<20} {digest}"))
    print(f"  signature    {status}" + {
        "unchecked": " (signed; SWARMLOG_TOKEN_KEY is not set, so it was NOT checked)",
        "invalid": " (does NOT match SWARMLOG_TOKEN_KEY)", "valid": " (checked with SWARMLOG_TOKEN_KEY)",
        "unsigned": ""}[status])
    return 0


def _token_verify_v1(args: argparse.Namespace, token: Any, source: str) -> int:
    """A version 1 token is verified by replaying its range, as ``replay --verify`` always did."""
    from ..replaying import replay, replay_swarm

    args.verify, args.to = source, None
    settings = verify_v1_settings(args, token, _settings(args))
    if token.reducer.startswith("swarm:"):
        swarm = pinned_swarm(args, settings)
        result: Any = replay_swarm(settings=settings, swarm=swarm, to=args.to)
        reducer = f"swarm:{swarm.name}"
    elif token.reducer == "ledger":
        result, reducer = replay(settings=settings, to=args.to), "ledger"
    else:
        raise UsageError(f"this version 1 token holds the states of {token.reducer!r}: verify it with "
                         f"`swarmlog replay --verify {source} --reducer {token.reducer.removeprefix('reducer:')}`")
    return verify_v1_result(args, token, settings, result, reducer)


def add_parser(sub: Any, name: str, *, parents: list[argparse.ArgumentParser]) -> None:
    """Add ``swarmlog token`` to ``swarmlog``'s subcommands (``parents``: the shared options, e.g. ``-v``)."""
    tk = sub.add_parser("token", help="replay tokens: create | verify | show | list", parents=parents)
    tk.add_argument("action", choices=["create", "verify", "show", "list"],
                    help="create a token of the log, verify one against a topic, show one, list the saved ones")
    tk.add_argument("file", nargs="?", help="the token file (verify, show)")
    tk.add_argument("--topic", help="create: the topic (default $SWARMLOG_TOPIC); verify: the topic to CHECK "
                                    "(a copy, a restored backup; default: the token's own); list: only its tokens")
    tk.add_argument("--to", type=int, help="create: up to this offset (exclusive; default: the log's end)")
    tk.add_argument("--checkpoint-every", type=int, default=DEFAULT_CHECKPOINTS, metavar="K",
                    help=f"create: a chain checkpoint every K events (default {DEFAULT_CHECKPOINTS})")
    tk.add_argument("--swarm", help="module:swarm — create: agents' states from a replay of this code (else from "
                                    "the digests the run recorded); verify: also replay the checked topic")
    tk.add_argument("--out", metavar="FILE", help="create: write the token here")
    tk.add_argument("--save", action="store_true", help="create: keep the token in the mirror's database")
    tk.add_argument("--saved", metavar="ID", help="verify, show: a saved token (`token list`)")
    tk.add_argument("--reference", metavar="TOPIC",
                    help="verify: a copy that still matches the token, to name the first differing event "
                         "(default: the token's own topic, when another one is checked)")
    tk.add_argument("--unchecked-signature", action="store_true",
                    help="verify: accept a signed token without SWARMLOG_TOKEN_KEY, checking its contents only")
    tk.add_argument("--json", action="store_true", help="the result as JSON")
    tk.set_defaults(func=cmd_token)
