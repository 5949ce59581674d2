"""Replay tokens, version 2, on the real broker and through the CLI: a token made from the log alone,
checked against the topic named (a copy, a backup), naming the first offset whose bytes differ;
signatures never silently accepted; tokens kept beside the log and listed."""

from __future__ import annotations

import json
import subprocess
import sys

from confluent_kafka import Producer

from swarmlog.kafka.reader import LogReader
from swarmlog.kafka.topic import create_topic
from swarmlog.log.append import EventLog
from swarmlog.log.protocol import output_id, parse_step
from swarmlog.runtime import interpreter, run_agents, start_run

from .. import swarms
from .conftest import new_topic_name, read_log
from .test_runtime import _env

EVERY = 8


def _cli(settings, *argv, env=None, topic=None):
    env = dict(env or _env(settings))
    if topic:
        env["SWARMLOG_TOPIC"] = topic
    return subprocess.run([sys.executable, "-m", "swarmlog.cli", *argv], env=env, capture_output=True, text=True,
                          timeout=300)


def _appended_log(settings, n: int = 40) -> list[int]:
    """run.started, then ``n`` appended events. Event 23's id says it is output #0 of r1's step at offset 5."""
    start_run(settings=settings, swarm=swarms.relay, run_id="tok2", seed=21)
    with EventLog(settings=settings, run_id="tok2") as log:
        for i in range(n):
            log.produce("agent.message", {"kind": "k", "body": f"message {i}"}, agent=f"r{i % 3}",
                        to=f"r{(i + 1) % 3}", event_id=output_id("r1", 5, 0) if i == 22 else None)
        return log.flush()


class _Flipped:
    """A message read from the log, with the last byte of its value flipped (a character of a body)."""

    def __init__(self, m):
        self._m = m

    def value(self):
        v = bytearray(self._m.value())
        v[-1] ^= 0x01
        return bytes(v)

    def __getattr__(self, name):
        return getattr(self._m, name)


def _copy(settings, source: str, *, flip: int | None = None) -> str:
    """A copy of ``source`` with every event at its own offset (the backend's copy: what `swarmlog fork`
    and a restored backup give), the last byte of the value at offset ``flip`` flipped."""
    from swarmlog.kafka import KafkaBackend
    from swarmlog.kafka.reader import watermarks

    copy = new_topic_name("copy")
    with LogReader(settings=settings, topic=source) as reader:
        reader.assign(0)
        msgs = [_Flipped(m) if m.offset() == flip else m for batch in reader.batches() for m in batch]
    KafkaBackend(settings).create_copy(copy, msgs, end=watermarks(settings, source)[1])
    return copy


def _reproduced(settings, source: str) -> str:
    """A copy of ``source`` made by producing its messages again, in order: its transaction markers are
    gone, so the same bytes sit at other offsets."""
    copy = new_topic_name("copy")
    create_topic(settings, copy)
    producer = Producer(settings.kafka_config({"enable.idempotence": True, "acks": "all"}))
    with LogReader(settings=settings, topic=source) as reader:
        reader.assign(0)
        for batch in reader.batches():
            for m in batch:
                producer.produce(copy, m.value(), m.key(), partition=0, headers=m.headers())
    assert producer.flush(30) == 0
    return copy


def test_one_flipped_byte_at_offset_k_in_a_copy_is_named_by_token_verify(settings, tmp_path):
    offsets = _appended_log(settings)
    k = offsets[22]
    token = tmp_path / "t.json"
    made = _cli(settings, "token", "create", "--out", str(token), "--checkpoint-every", str(EVERY))
    assert made.returncode == 0, made.stderr
    doc = json.loads(token.read_text())
    assert doc["version"] == 2 and doc["start_offset"] == 0 and doc["events"] == 41
    assert len(doc["checkpoints"]) == 6 and doc["chain_every"] == EVERY
    assert doc["schemas"] == {"agent.message/v3": _fingerprint(doc, "agent.message/v3"),
                              "run.started/v2": _fingerprint(doc, "run.started/v2")}
    assert doc["run_id"] == "tok2" and doc["seed"] == 21
    seed = interpreter.current().seed  # start_run ran here: the run is pinned to this process's seed, if any
    assert doc["interpreter"] == {"hash_seed": "unpinned" if seed is None else str(seed),
                                  "hash_algorithm": interpreter.hash_algorithm()}

    own = _cli(settings, "token", "verify", str(token))
    assert own.returncode == 0, own.stdout + own.stderr
    assert f"checking the token's own topic {settings.topic}" in own.stdout
    assert "the topic matches the token" in own.stdout

    intact = _copy(settings, settings.topic)
    assert _cli(settings, "token", "verify", str(token), "--topic", intact).returncode == 0

    copy = _copy(settings, settings.topic, flip=k)
    bad = _cli(settings, "token", "verify", str(token), "--topic", copy)
    assert bad.returncode == 5, bad.stdout + bad.stderr
    assert f"checking topic {copy} against a token of topic {settings.topic}" in bad.stdout
    assert f"FIRST DIFFERENCE at offset {k}: its bytes differ" in bad.stdout
    assert "it is output #0 (agent.message) of agent r1's step at offset 5" in bad.stdout
    assert "1 of 6 segment(s) differ" in bad.stdout
    report = json.loads(_cli(settings, "token", "verify", str(token), "--topic", copy, "--json").stdout)
    assert report["ok"] is False and report["own_topic"] is False
    assert report["first_difference"]["offset"] == k and report["first_difference"]["what"] == "bytes"
    (seg,) = report["bad_segments"]
    assert seg["start_offset"] <= k < seg["end_offset"]

    # With no intact copy to compare the segment with, it names the segment and says why no more.
    alone = _cli(settings, "token", "verify", str(token), "--topic", copy, "--reference", copy)
    assert alone.returncode == 5
    assert f"the first holds offsets [{seg['start_offset']}, {seg['end_offset']})" in alone.stdout
    assert "FIRST DIFFERENCE" not in alone.stdout and "does not match the token in this segment" in alone.stdout


def _fingerprint(doc, name):
    assert name in doc["schemas"], doc["schemas"]
    return doc["schemas"][name]


def test_a_flipped_byte_in_an_offset_true_copy_of_a_swarms_log_is_named_with_its_step(settings, registry, tmp_path):
    # A swarm's log has gaps (transaction markers); the backend's copy keeps every event at its own
    # offset (what `swarmlog fork` and a restore do), so the copy is the same history, byte for byte.
    start_run(settings=settings, swarm=swarms.relay, run_id="flip", seed=6)
    run_agents(settings=settings, swarm=swarms.relay, until_quiet=1.0)
    token = tmp_path / "t.json"
    assert _cli(settings, "token", "create", "--out", str(token), "--checkpoint-every", "50").returncode == 0
    log = [(r.offset, r.event_type, r.record) for r in read_log(settings, registry)]
    k, writer, step = next((off, rec["agent_id"], parse_step(rec["event_id"])) for off, t, rec in log
                           if t == "agent.message" and rec["agent_id"] == "r3")
    assert step is not None
    copy = _copy(settings, settings.topic, flip=k)
    bad = _cli(settings, "token", "verify", str(token), "--topic", copy)
    assert bad.returncode == 5, bad.stdout + bad.stderr
    assert f"FIRST DIFFERENCE at offset {k}: its bytes differ" in bad.stdout
    assert (f"it is output #{step[1]} (agent.message) of agent {writer}'s step at offset {step[0]}: the first step "
            f"whose outputs differ") in bad.stdout
    # The code replayed against the copy finds the same step from the other side: what it writes
    # there is not what the copy says it wrote.
    replayed = _cli(settings, "token", "verify", str(token), "--topic", copy, "--swarm", "tests.swarms:relay",
                    "--json")
    first = json.loads(replayed.stdout)["replay"]["first_divergence"]
    assert (first["offset"], first["agent"], first["kind"]) == (step[0], writer, "output")


def test_a_re_produced_copy_of_a_transactional_log_is_named_as_renumbered(settings, tmp_path):
    # A swarm's log has gaps (transaction markers); producing its events again closes them, so the copy
    # holds the same bytes at other offsets: not the same history for a replay (offsets are its clock).
    start_run(settings=settings, swarm=swarms.relay, run_id="renum", seed=2)
    run_agents(settings=settings, swarm=swarms.relay, until_quiet=1.0)
    token = tmp_path / "t.json"
    assert _cli(settings, "token", "create", "--out", str(token)).returncode == 0
    copy = _reproduced(settings, settings.topic)
    report = json.loads(_cli(settings, "token", "verify", str(token), "--topic", copy, "--json").stdout)
    assert report["ok"] is False
    first = report["first_difference"]
    assert first["what"] == "offset" and first["token"]["offset"] > first["offset"]


def test_a_finished_run_is_tokened_from_the_log_alone_and_verified_with_its_code(settings, tmp_path):
    start_run(settings=settings, swarm=swarms.relay, run_id="fin", seed=9)
    live = {r.agent: r.state_hash for r in run_agents(settings=settings, swarm=swarms.relay, until_quiet=1.0)}
    token = tmp_path / "t.json"
    assert _cli(settings, "token", "create", "--out", str(token)).returncode == 0  # no code needed
    doc = json.loads(token.read_text())
    assert doc["agents_from"] == "log" and doc["agents"] == live
    checked = _cli(settings, "token", "verify", str(token), "--swarm", "tests.swarms:relay")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "no step's outputs or state differ" in checked.stdout
    from_code = tmp_path / "c.json"
    assert _cli(settings, "token", "create", "--swarm", "tests.swarms:relay", "--out", str(from_code)).returncode == 0
    assert json.loads(from_code.read_text())["agents"] == live


def test_a_signed_token_with_a_stale_signature_and_no_key_is_refused_never_silently_accepted(settings, tmp_path):
    _appended_log(settings, n=10)
    keyed = dict(_env(settings), SWARMLOG_TOKEN_KEY="s3cret")
    token = tmp_path / "t.json"
    assert _cli(settings, "token", "create", "--out", str(token), env=keyed).returncode == 0
    doc = json.loads(token.read_text())
    assert doc["signature"]
    assert _cli(settings, "token", "verify", str(token), env=keyed).returncode == 0
    doc["seed"] = 22  # edited; the signature left as it was
    token.write_text(json.dumps(doc))

    refused = _cli(settings, "token", "verify", str(token))  # no key
    assert refused.returncode == 2
    assert "it is signed, but SWARMLOG_TOKEN_KEY is not set, so its signature cannot be checked" in refused.stderr
    refused_v = _cli(settings, "replay", "--verify", str(token))
    assert refused_v.returncode == 2 and "cannot be checked" in refused_v.stderr

    # Asked to check the contents alone: loudly, and the edit is found.
    contents = _cli(settings, "token", "verify", str(token), "--unchecked-signature")
    assert "signature was NOT checked" in contents.stderr
    assert contents.returncode == 5 and "the token has seed 22, the topic's run.started 21" in contents.stdout

    wrong = _cli(settings, "token", "verify", str(token), env=keyed)
    assert wrong.returncode == 2 and "signature does not match" in wrong.stderr
    shown = _cli(settings, "token", "show", str(token))
    assert shown.returncode == 0 and "signature    unchecked" in shown.stdout


def test_tokens_saved_beside_the_log_are_listed_and_verified_by_id(settings, tmp_path):
    _appended_log(settings, n=5)
    made = _cli(settings, "token", "create", "--save")
    assert made.returncode == 0, made.stderr
    token_id = made.stderr.split("saved as ")[1].split()[0]
    end = made.stderr.split("offsets [0, ")[1].split(")")[0]
    listed = _cli(settings, "token", "list", "--topic", settings.topic)
    assert listed.returncode == 0 and token_id in listed.stdout and f"[0, {end})" in listed.stdout
    assert _cli(settings, "token", "verify", "--saved", token_id[:8]).returncode == 0
    shown = _cli(settings, "token", "show", "--saved", token_id)
    assert shown.returncode == 0 and f"of topic {settings.topic}" in shown.stdout
