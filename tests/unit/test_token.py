"""Replay tokens as pure logic and on the in-memory log: the chain, the signature policy, versions,
and locating a difference (the CLI on the real broker is tests/integration/test_token.py)."""

from __future__ import annotations

import json

import pytest

from swarmlog.errors import InvalidToken, SignatureUnchecked
from swarmlog.log.append import EventLog
from swarmlog.log.memory import MemoryMessage
from swarmlog.runtime import run_agents, start_run
from swarmlog.token import (
    ReplayToken,
    ReplayTokenV2,
    check_signature,
    create_token,
    load_token,
    parse_token,
    signature_status,
    verify_token,
)
from swarmlog.token._chain import ChainBuilder, ChainChecker

from .. import swarms


def _msgs(values: dict[int, bytes]) -> list[MemoryMessage]:
    return [MemoryMessage(off, v, None, None, 0) for off, v in sorted(values.items())]


def _log(n: int = 25, gap_every: int = 4) -> dict[int, bytes]:
    """``n`` messages at offsets with gaps (as transaction markers leave)."""
    out, off = {}, 3
    for i in range(n):
        out[off] = f"event {i}".encode()
        off += 2 if i % gap_every == 0 else 1
    return out


def _chain(values: dict[int, bytes], every: int, start: int = 3, end: int | None = None):
    b = ChainBuilder(start_offset=start, every=every)
    b.update_batch(_msgs(values))
    return b.finish(end if end is not None else max(values) + 1)


def _check(values: dict[int, bytes], checkpoints, start: int = 3):
    c = ChainChecker(start_offset=start, checkpoints=checkpoints)
    c.update_batch(_msgs(values))
    return [r.ok for r in c.finish()]


def test_the_chain_checks_every_segment_on_its_own():
    log = _log()
    cps = _chain(log, every=5)
    assert [c.events for c in cps] == [5, 10, 15, 20, 25]
    assert _check(log, cps) == [True] * 5
    changed = dict(log)
    k = sorted(log)[12]
    changed[k] = b"event X"
    assert _check(changed, cps) == [True, True, False, True, True]  # only the segment that holds it
    missing = dict(log)
    del missing[k]
    assert _check(missing, cps) == [True, True, False, True, True]
    moved = {off + 1: v for off, v in log.items()}  # the same bytes one offset later: another history
    assert not all(_check(moved, cps, start=3))


def test_checkpoints_tile_the_range_up_to_its_end_past_the_last_event():
    log = _log(n=10)
    cps = _chain(log, every=5, end=max(log) + 4)  # transaction markers after the last event
    assert cps[-1].end_offset == max(log) + 4 and cps[-1].events == 10
    assert _chain({}, every=5, start=7, end=7)[0].events == 0


def test_a_signature_is_checked_and_a_signed_token_without_a_key_is_never_silently_accepted():
    token = ReplayToken(topic="t", run_id="r", seed=1, code_version="c", start_offset=0, end_offset=3, events=2,
                        stream_hash="0" * 64, agents={}, reducer="ledger")
    signed = token.signed(b"k")
    assert signature_status(signed, b"k") == "valid" and signature_status(token, None) == "unsigned"
    stale = ReplayToken(**{**vars(signed), "seed": 2})
    assert signature_status(stale, b"k") == "invalid"
    with pytest.raises(InvalidToken, match="does not match"):
        check_signature(stale, b"k", source="x")
    with pytest.raises(SignatureUnchecked) as refused:
        check_signature(stale, None, source="x")
    assert refused.value.source == "x" and "SWARMLOG_TOKEN_KEY is not set" in str(refused.value)
    assert check_signature(stale, None, source="x", allow_unchecked=True) == "unchecked"
    with pytest.raises(InvalidToken, match="not signed"):
        check_signature(token, b"k", source="x")


def test_both_versions_read_and_unknown_ones_are_refused(tmp_path):
    v1 = {"topic": "t", "run_id": None, "seed": None, "code_version": None, "start_offset": 0, "end_offset": 1,
          "events": 1, "stream_hash": "a" * 64, "agents": {}, "reducer": "ledger", "version": 1, "signature": None}
    assert isinstance(parse_token(v1, source="s"), ReplayToken)
    with pytest.raises(InvalidToken, match="version 4"):
        parse_token({**v1, "version": 4}, source="s")
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    with pytest.raises(InvalidToken, match="cannot read"):
        load_token(path)


def _appended(backend, settings, n=30) -> list[int]:
    start_run(settings=settings, swarm=swarms.relay, run_id="t", seed=5, backend=backend)
    with EventLog(settings=settings, run_id="t", backend=backend) as log:
        for i in range(n):
            log.produce("agent.message", {"kind": "k", "body": f"b{i}"}, agent="a", to="b")
        return log.flush()


def _copy(backend, source: str, target: str, *, flip: int | None = None) -> None:
    """An offset-true copy of ``source`` (the backend's copy), the last byte at offset ``flip`` flipped."""
    msgs = []
    with backend.reader(source) as reader:
        reader.assign(0)
        for batch in reader.batches():
            for m in batch:
                value = bytearray(m.value())
                if m.offset() == flip:
                    value[-1] ^= 1
                msgs.append(MemoryMessage(m.offset(), bytes(value), m.key(), m.headers(), m.timestamp()[1]))
    backend.create_copy(target, msgs, end=backend.watermarks(source)[1])


def test_a_token_made_and_checked_round_trips_through_its_file(backend, run_settings, registry, tmp_path):
    _appended(backend, run_settings)
    token = create_token(backend=backend, topic=run_settings.topic, registry=registry, every=7).signed(b"k")
    path = tmp_path / "t.json"
    token.save(path)
    again = load_token(path)
    assert isinstance(again, ReplayTokenV2) and again == token and again.signature == token.signature
    assert signature_status(again, b"k") == "valid"
    assert json.loads(path.read_text())["checkpoints"][0][0] == 7


def test_a_flipped_byte_is_named_at_its_offset_against_an_intact_copy(backend, run_settings, registry):
    offsets = _appended(backend, run_settings)
    token = create_token(backend=backend, topic=run_settings.topic, registry=registry, every=7)
    k = offsets[17]
    _copy(backend, run_settings.topic, "copy", flip=k)
    check = verify_token(backend=backend, token=token, topic="copy", registry=registry, signature="unsigned")
    assert not check.ok and [s.index for s in check.bad_segments] == [2]
    d = check.first_difference
    assert d is not None and (d.offset, d.what) == (k, "bytes")
    assert d.token_side is not None and d.token_side.size - 1 == d.first_byte  # the last byte
    own = verify_token(backend=backend, token=token, topic=run_settings.topic, registry=registry,
                       signature="unsigned")
    assert own.ok and own.own_topic


def test_a_finished_runs_token_holds_the_final_state_digests_it_recorded(backend, run_settings, registry):
    start_run(settings=run_settings, swarm=swarms.relay, run_id="f", seed=5, backend=backend)
    live = {r.agent: r.state_hash for r in run_agents(settings=run_settings, swarm=swarms.relay, until_quiet=0.3,
                                                       backend=backend)}
    token = create_token(backend=backend, topic=run_settings.topic, registry=registry)
    assert token.agents == live and token.agents_from == "log"
    from_code = create_token(backend=backend, topic=run_settings.topic, registry=registry, swarm=swarms.relay)
    assert from_code.agents == live and from_code.agents_from == "replay:relay"
    check = verify_token(backend=backend, token=token, topic=run_settings.topic, registry=registry,
                         signature="unsigned", swarm=swarms.relay)
    assert check.ok and check.replay is not None and check.replay["first_divergence"] is None


def test_token_commands_exit_with_the_clis_token_mismatch_code():
    from swarmlog import cli
    from swarmlog.token import command

    assert (command.EXIT_OK, command.EXIT_TOKEN_MISMATCH) == (cli.EXIT_OK, cli.EXIT_TOKEN_MISMATCH)


def test_a_refused_token_exits_as_a_usage_error():
    from swarmlog import cli
    from swarmlog.errors import InvalidToken, SignatureUnchecked

    assert cli.exit_code(SignatureUnchecked(source="t.json")) == cli.EXIT_USAGE
    assert cli.exit_code(InvalidToken(source="t.json", problem="bad signature")) == cli.EXIT_USAGE


def test_a_version_3_chain_covers_the_key_every_header_and_a_tombstone_and_version_2_does_not():
    """Tokens cover what readers route by (issue 28, item 6): a message's key, its headers in order
    (one without a value apart from an empty one) and its value (a tombstone apart from empty bytes)."""
    from swarmlog.token._chain import VALUES, WHOLE, value_frame, whole_frame

    base = MemoryMessage(7, b"v", b"alice", [("sl.type", b"agent.message"), ("sl.to", b"bob")], 0)
    variants = [MemoryMessage(7, b"v", b"mallory", base.headers(), 0),
                MemoryMessage(7, b"v", None, base.headers(), 0),
                MemoryMessage(7, b"v", b"alice", [("sl.type", b"agent.message"), ("sl.to", b"carol")], 0),
                MemoryMessage(7, b"v", b"alice", [("sl.to", b"bob"), ("sl.type", b"agent.message")], 0),
                MemoryMessage(7, b"v", b"alice", [*base.headers(), ("x", None)], 0),
                MemoryMessage(7, b"v", b"alice", [*base.headers(), ("x", b"")], 0),
                MemoryMessage(7, b"v", b"alice", None, 0)]
    frames = {whole_frame(m) for m in [base, *variants]}
    assert len(frames) == len(variants) + 1  # each one a different frame
    assert {value_frame(m) for m in [base, *variants]} == {value_frame(base)}  # version 2 sees none of it
    assert whole_frame(MemoryMessage(7, None, None, None, 0)) != whole_frame(MemoryMessage(7, b"", None, None, 0))
    for covers, caught in ((WHOLE, False), (VALUES, True)):
        builder = ChainBuilder(start_offset=7, every=1, covers=covers)
        builder.update_batch([base])
        checker = ChainChecker(start_offset=7, checkpoints=builder.finish(8), covers=covers)
        checker.update_batch([variants[2]])  # sl.to names another agent
        assert [r.ok for r in checker.finish()] == [caught]


def test_a_version_2_token_still_verifies_as_before_and_says_what_it_does_not_cover(backend, run_settings, registry):
    from dataclasses import replace

    from swarmlog.token._chain import VALUES

    _appended(backend, run_settings, n=12)
    v3 = create_token(backend=backend, topic=run_settings.topic, registry=registry, every=5)
    assert v3.version == 3 and v3.uncovered is None
    builder = ChainBuilder(start_offset=v3.start_offset, every=5, covers=VALUES)  # the chain version 2 made
    with backend.reader(run_settings.topic) as reader:
        reader.assign(0)
        for batch in reader.batches():
            builder.update_batch(batch)
    v2 = replace(v3, version=2, checkpoints=builder.finish(v3.end_offset))
    assert parse_token(json.loads(json.dumps(v2.to_json())), source="s") == v2
    check = verify_token(backend=backend, token=v2, topic=run_settings.topic, registry=registry, signature="unsigned")
    assert check.ok and check.to_json()["covers"] == "offsets and values"
    assert any("NOTE: a version 2 token" in line and "not its key or its headers" in line for line in check.lines())
