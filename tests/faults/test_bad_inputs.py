"""Every bad input, between good events: nothing good is lost, nothing bad stops anything or goes unnamed.

The sink (as `swarmlog sink` runs) mirrors every good event and dead-letters every bad message with
its bytes, key and headers exactly as they were; replay reports what it cannot read; `check
causality` names every unreadable message and every lying header; the runtime refuses to route
by a header that lies; an oversize append is refused with a typed error and appending goes on.
"""

from __future__ import annotations

import random

import psycopg
import pytest

from swarmlog import Agent, Swarm, on_message
from swarmlog.errors import KafkaOperationFailed, RoutingHeaderMismatch
from swarmlog.log.append import EventLog
from swarmlog.log.protocol import H_AGENT, H_STEP, H_TO, H_TYPE, H_VERSION
from swarmlog.replaying import replay, replay_swarm
from swarmlog.replaying.causality import check_causality
from swarmlog.schema.codec import Encoder

from . import harness


class _Listener(Agent):
    @on_message("k")
    def k(self, ctx, event):
        pass


_swarm = Swarm(name="bad-inputs", agents=lambda: [_Listener("bob"), _Listener("carol")], code_version="1")


def _bad_inputs(registry) -> list[tuple[str, bytes | None, bytes | None, list[tuple[str, bytes | None]], str]]:
    """(kind, value, key, headers, what must happen): readable ones must be refused by their headers."""
    rng = random.Random(20261201)
    enc = Encoder(registry.latest("agent.message"))
    good = enc.encode_event("op-1", "", "alice", "bob", [], {"kind": "k", "body": "to bob"})
    step_id = enc.encode_event("alice@3#0", "", "alice", "bob", [], {"kind": "k", "body": "step 3"})
    honest = enc.headers(b"alice", b"bob")
    unknown_fp = b"\xc3\x01" + bytes(rng.randrange(256) for _ in range(8)) + good[10:]
    return [
        ("NUL in a header value, 200 duplicate keys, non-UTF-8", b"not avro \x00 at all", b"k\x00",
         [("sl.type", b"agent.message"), ("nul", b"a\x00b"), ("bytes", b"\xff\xfe"), ("none", None),
          *[("dup", str(i).encode()) for i in range(200)]], "unreadable"),
        ("sl.to names another agent than the body", good, b"alice", enc.headers(b"alice", b"carol"), "lie"),
        ("sl.agent names another writer", good, b"alice", enc.headers(b"mallory", b"bob"), "lie"),
        ("sl.type names another type", good, b"alice",
         [(H_TYPE, b"timer.fired"), (H_VERSION, b"3"), (H_AGENT, b"alice"), (H_TO, b"bob")], "lie"),
        ("sl.step names another step", step_id, b"alice", [*honest, (H_STEP, b"9")], "lie"),
        ("sl.to missing on a message to bob", good, b"alice",
         [(H_TYPE, b"agent.message"), (H_VERSION, b"3"), (H_AGENT, b"alice")], "lie"),
        ("random bytes", rng.randbytes(300), None, [], "unreadable"),
        ("a truncated single-object header", b"\xc3\x01\x12\x34", None, list(honest), "unreadable"),
        ("an unknown fingerprint", unknown_fp, None, list(honest), "unreadable"),
        ("a truncated body", good[: len(good) // 2], None, list(honest), "unreadable"),
        ("a tombstone (null value)", None, b"alice", [], "unreadable"),
    ]


def test_bad_inputs_are_dead_lettered_whole_named_everywhere_and_stop_nothing(settings, registry, mirror_db,
                                                                              dev_cluster):
    bad = _bad_inputs(registry)
    produced: list[str] = []  # good event ids, in the order they were appended
    bad_at: dict[int, tuple] = {}
    big = "x" * 900_000  # under the broker's limit: an ordinary (large) event
    with EventLog(settings=settings) as log:
        for i, item in enumerate(bad):
            for j in range(50):
                eid = f"good-{i}-{j}"
                log.produce("agent.message", {"kind": "k", "body": str(j)}, agent="alice", to="bob", event_id=eid)
                produced.append(eid)
            _, value, key, headers, _ = item
            log.produce_raw(value, key=key, headers=headers or None)
            offsets = log.flush()
            bad_at[offsets[-1]] = item
        log.append("agent.message", {"kind": "k", "body": big}, agent="alice", event_id="big")
        produced.append("big")
        with pytest.raises(KafkaOperationFailed) as refused:  # over message.max.bytes: refused before the log
            log.append("agent.message", {"kind": "k", "body": big * 3}, agent="alice", event_id="oversize")
        assert refused.value.name == "MSG_SIZE_TOO_LARGE"
        log.append("agent.message", {"kind": "k", "body": "after"}, agent="alice", event_id="after")
        produced.append("after")

    # The mirror, as users run it: every good event once, every bad message whole.
    done = harness.run_cli(settings, "sink", "--until-end", database_url=mirror_db)
    assert done.returncode == 0, done.stderr
    topic_rows = harness.read_topic(settings, registry)
    lies = {off for off, item in bad_at.items() if item[4] == "lie"}
    unreadable = set(bad_at) - lies
    in_topic = harness.audit_order(produced, [(o, e) for o, e in topic_rows if o not in lies])
    good_rows = [(o, e) for o, e in topic_rows if o not in lies]
    in_mirror = harness.audit_mirror(good_rows, harness.read_mirror(mirror_db, settings.topic))
    with psycopg.connect(mirror_db, autocommit=True) as conn:
        dead = {int(r[0]): r[1:] for r in conn.execute(
            "SELECT seq, error, raw, key, header_keys, header_values FROM dead_letters WHERE topic = %s",
            (settings.topic,)).fetchall()}
    kept_whole = 0
    for off, (kind, value, key, headers, _) in bad_at.items():
        error, raw, got_key, keys, values = dead[off]
        assert (None if raw is None else bytes(raw)) == value, kind
        assert (None if got_key is None else bytes(got_key)) == key, kind
        assert [(k.decode(), None if v is None else bytes(v)) for k, v in zip(keys, values, strict=True)] == \
            list(headers), kind
        kept_whole += 1
    assert set(dead) == set(bad_at)
    dead_audit = harness.Audit(checked=len(bad_at), lost=len(bad_at) - kept_whole)

    # Replay reports what it cannot read; the causality check names all of it.
    replayed = replay(settings=settings, registry=registry)
    assert {u.offset for u in replayed.undecodable} == unreadable
    _, violations = check_causality(settings=settings, registry=registry)
    assert {v.offset for v in violations if v.rule == "unreadable"} == unreadable
    assert {v.offset for v in violations if v.rule == "header_mismatch"} == lies
    # The runtime will not route by a header that lies: it stops at the first one.
    with pytest.raises(RoutingHeaderMismatch) as err:
        replay_swarm(settings=settings, swarm=_swarm, registry=registry)
    assert err.value.offset == min(lies)

    audit = in_topic + in_mirror + dead_audit
    harness.record(harness.Row(
        "bad inputs between good events: NUL header (+200 duplicate keys, non-UTF-8), 5 lying routing headers, "
        "random bytes, truncated header, unknown fingerprint, truncated body, tombstone, a 900 KB event, an "
        "oversize append", len(bad) + 2, audit,
        f"each bad message dead-lettered with its bytes and headers intact, named by replay and check causality, "
        f"refused by the runtime; the oversize append refused ({refused.value.name}) before the log; "
        f"{len(produced)} good events mirrored"))
    assert audit.clean, audit
