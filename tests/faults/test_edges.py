"""Issue 28's edges as faults: each input on a swarm topic with valid events before and after.

A relay swarm runs as five ``swarmlog run --agent`` processes; the input goes in while hops are
under way; the swarm must finish. Afterwards the whole topic and the whole mirror are read back:
every valid hop handled once by its recipient (lost, duplicated, out of order: ``harness.audit_steps``),
the mirror equal to the topic's valid events, and the input **named by its offset** by every reader
that meets it — the agent it was addressed to (its log), ``replay --swarm``, the sink (a dead letter),
``check`` — never handled twice, no agent wedged, the run going on.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

from swarmlog.errors import InvalidCause, SwarmlogError
from swarmlog.kafka.backend import KafkaBackend
from swarmlog.kafka.reader import LogReader, high_watermark
from swarmlog.log.append import EventLog
from swarmlog.log.protocol import agent_group
from swarmlog.replaying import replay_swarm
from swarmlog.replaying.causality import check_causality
from swarmlog.runtime import start_run
from swarmlog.schema.codec import Decoder
from swarmlog.schema.registry import SchemaRegistry

from .. import swarms
from ..conftest import newer_schemas, unchecked_event
from ..integration.conftest import LogRecord
from . import harness

AGENTS = [f"r{i}" for i in range(swarms.N_AGENTS)]
SPEC = "tests.swarms:short_slow_relay"
SWARM = swarms.short_slow_relay
HOPS_BEFORE = harness.scaled(80, 30)
"""Hops the swarm has made when the input goes in: valid events before it."""


# --- a swarm under way -------------------------------------------------------------------------


class Swarm:
    """The relay's agents as ``swarmlog run --agent`` processes, each logging to a file of its own."""

    def __init__(self, settings: Any, *, run_id: str, env: dict[str, str] | None = None,
                 args: dict[str, list[str]] | None = None) -> None:
        self.settings = settings
        self.env = env or {}
        self.args = args or {}
        """Agent -> more arguments of its ``swarmlog run`` (e.g. ``--metrics-port``), kept across restarts."""
        self.dir = Path(tempfile.mkdtemp(prefix="edges-"))
        self.procs: dict[str, subprocess.Popen[str]] = {}
        self.logs: dict[str, list[Path]] = {a: [] for a in AGENTS}
        start_run(settings=settings, swarm=SWARM, run_id=run_id, seed=28)
        for a in AGENTS:
            self.spawn(a)

    def spawn(self, agent: str, env: dict[str, str] | None = None) -> None:
        path = self.dir / f"{agent}-{len(self.logs[agent])}.log"
        self.logs[agent].append(path)
        environ = {**harness.cli_env(self.settings), **self.env, **(env or {})}
        argv = [sys.executable, "-m", "swarmlog.cli", "run", SPEC, "--agent", agent, *self.args.get(agent, [])]
        with path.open("w") as err:
            self.procs[agent] = subprocess.Popen(argv, env=environ, stdout=subprocess.PIPE, stderr=err, text=True)

    def restart(self, agent: str, env: dict[str, str] | None = None) -> None:
        p = self.procs[agent]
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=120)
        assert p.returncode == 0, f"{agent} exited {p.returncode}: {self.said(agent)[-3000:]}"
        self.spawn(agent, env)

    def said(self, agent: str) -> str:
        return "".join(p.read_text() for p in self.logs[agent])

    def alive(self) -> None:
        for a, p in self.procs.items():
            assert p.poll() is None, f"{a} exited {p.returncode}: {self.said(a)[-3000:]}"

    def wait(self, what: str, done: Any, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            self.alive()
            assert time.monotonic() < deadline, f"{what} not within {timeout} s"
            time.sleep(0.5)

    def stop(self) -> dict[str, str]:
        for p in self.procs.values():
            p.send_signal(signal.SIGTERM)
        hashes = {}
        for a, p in self.procs.items():
            out, _ = p.communicate(timeout=120)
            assert p.returncode == 0, f"{a} exited {p.returncode}: {self.said(a)[-3000:]}"
            hashes.update(json.loads(out.strip().splitlines()[-1])["agents"])
        return hashes


def events(settings: Any, registry: SchemaRegistry) -> list[LogRecord]:
    """Every readable event of the topic (what does not decode is left out: the cases name it apart)."""
    decoder = Decoder(registry)
    out = []
    with LogReader(settings=settings) as reader:
        reader.assign(0)
        for batch in reader.batches():
            for m in batch:
                try:
                    writer, rec = decoder.decode(m.value(), m.offset())
                except SwarmlogError:
                    continue
                out.append(LogRecord(m.offset(), writer.event_type, rec, m.headers() or []))
    return out


def hops(settings: Any, registry: SchemaRegistry) -> int:
    return sum(1 for r in events(settings, registry)
               if r.event_type == "agent.message" and r.record["payload"]["kind"] == "hop")


def finished(settings: Any, registry: SchemaRegistry) -> set[int]:
    return {json.loads(r.record["payload"]["body"])["chain"] for r in events(settings, registry)
            if r.event_type == "agent.message" and r.record["payload"]["kind"] == "finished"}


def mirror(settings: Any, registry: SchemaRegistry, mirror_db: str, log: list[LogRecord],
           env: dict[str, str] | None = None) -> tuple[harness.Audit, dict[int, str]]:
    """Mirror the topic with `swarmlog sink` (as users run it): the audit of the mirror against the
    topic's valid events, and the dead letters (offset -> error)."""
    done = harness.run_cli(settings, "sink", "--until-end", database_url=mirror_db, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    audit = harness.audit_mirror([(r.offset, r.record["event_id"]) for r in log],
                                 harness.read_mirror(mirror_db, settings.topic))
    with psycopg.connect(mirror_db, autocommit=True) as conn:
        dead = {int(s): e for s, e in conn.execute("SELECT seq, error FROM dead_letters WHERE topic = %s",
                                                   (settings.topic,)).fetchall()}
    return audit, dead


def without(log: list[LogRecord], offsets: set[int]) -> list[LogRecord]:
    return [r for r in log if r.offset not in offsets]


def until_hops(run: Swarm, settings: Any, registry: SchemaRegistry, n: int) -> None:
    run.wait(f"{n} hops", lambda: hops(settings, registry) >= n)


def every_agent_committed_past_the_last_message(settings: Any) -> bool:
    """Each agent's group holds a position past the log's last committed message: every agent has
    handled all of it (its position commits with its outputs, in one transaction) and committed."""
    with LogReader(settings=settings) as reader:
        reader.assign(0)
        last = max((m.offset() for batch in reader.batches() for m in batch), default=-1)
    backend = KafkaBackend(settings)
    try:
        # Asked after the read: a position past ``last`` is past every message there was then.
        return all((backend.committed(agent_group(settings.topic, a), settings.topic) or 0) > last for a in AGENTS)
    finally:
        backend.close()


def until_finished(run: Swarm, settings: Any, registry: SchemaRegistry, chains: set[int] | None = None) -> None:
    want = chains or set(range(swarms.CHAINS))
    run.wait(f"chains {sorted(want)} finished", lambda: want <= finished(settings, registry), timeout=600)
    # The last broadcasts handled and committed by every agent (a caught-up agent with nothing to write
    # still commits its position every few seconds: runtime/_worker.py _OFFSET_COMMIT_EVERY_S).
    run.wait("every agent past the last message", lambda: every_agent_committed_past_the_last_message(settings),
             timeout=120)


# --- the cases ----------------------------------------------------------------------------------


def test_a_repeated_event_id_is_named_by_every_reader_and_handled_once(settings, registry, mirror_db, dev_cluster):
    """One output of an agent, re-sent byte for byte by another producer while the swarm runs: its
    recipient does not handle it again, its writer restarts without a word of divergence, the sink
    dead-letters it naming the first, replay and check name it."""
    run = Swarm(settings, run_id="repeated")
    until_hops(run, settings, registry, HOPS_BEFORE)
    hop = next(r for r in events(settings, registry)
               if r.event_type == "agent.message" and r.record["payload"]["kind"] == "hop"
               and r.record["agent_id"] == "r1")
    with LogReader(settings=settings) as reader:
        reader.assign(hop.offset)
        original = next(m for batch in reader.batches(end=hop.offset + 1) for m in batch)
    with EventLog(settings=settings) as log:
        log.produce_raw(original.value(), key=original.key(), headers=original.headers())
        copy = log.flush()[0]
    refused = harness.run_cli(settings, "append", "agent.message", '{"kind": "hop", "body": "{}"}', "--agent",
                              "operator", "--to", hop.record["to"], "--event-id", hop.record["event_id"])
    assert refused.returncode == 70 and f"at offset {hop.offset}" in refused.stderr, refused.stderr
    run.restart("r1")  # its restart reads its own output twice
    until_finished(run, settings, registry)
    live = run.stop()
    log = events(settings, registry)
    valid = without(log, {copy})
    audit = harness.audit_steps(valid)
    handled_copy = [r.offset for r in log if r.record["causes"][:1] == [copy]]
    assert handled_copy == [], f"the copy at {copy} was handled: {handled_copy}"
    recipient = hop.record["to"]
    assert f"offset {copy}" in run.said(recipient) and "repeats the event at offset" in run.said(recipient)
    in_mirror, dead = mirror(settings, registry, mirror_db, valid)
    assert f"duplicate event id {hop.record['event_id']!r}: a second copy of the event at offset {hop.offset}" \
        in dead[copy]
    replayed = replay_swarm(settings=settings, swarm=SWARM, registry=registry)
    _, found = check_causality(settings=settings, registry=registry)
    named = {"agent": True, "sink": copy in dead,
             "replay": any(a.offset == copy and a.kind == "repeated" for a in replayed.anomalies),
             "check": any(v.offset == copy and v.rule == "duplicate_event_id" for v in found)}
    audit += in_mirror
    harness.record(harness.Row(
        "a repeated event id: one agent's output re-sent byte for byte by another producer while the swarm runs, "
        "its writer restarted", 1, audit,
        f"copy at offset {copy} of the event at {hop.offset}: handled 0 times; named by the recipient's log, "
        f"replay --swarm, the sink (a dead letter naming the first) and check; r1 restarted cleanly; replay: "
        f"{len(replayed.divergences)} divergences, live states {'equal' if replayed.agents == live else 'DIFFER'}"))
    assert all(named.values()), named
    assert audit.clean, audit
    assert replayed.divergences == [] and replayed.agents == live


def _http_get(port: int, path: str) -> tuple[int, str]:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:  # noqa: S310 - localhost
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_a_writer_upgraded_before_the_readers_parks_its_recipient_visibly_and_nothing_is_lost(
        settings, registry, mirror_db, dev_cluster, tmp_path):
    """agent.message v4 (one field with a default) written to r2 while every agent reads v3: r2 parks at
    it — its log, /readyz and swarmlog_agent_parked say so — instead of dropping it; the readers
    upgraded one by one, r2 reads it and goes on, every agent restarts; the sink on v3 dead-letters
    v4 events by name, `mirror redrive` on v4 moves them, `mirror verify` is clean."""
    v4 = newer_schemas(tmp_path)
    upgraded_env = {"SWARMLOG_SCHEMA_DIR": str(v4)}
    newer = SchemaRegistry.load([v4])
    (port,) = harness.free_ports(1)
    run = Swarm(settings, run_id="upgrade", args={"r2": ["--metrics-port", str(port)]})
    until_hops(run, settings, registry, HOPS_BEFORE)
    with EventLog(settings=settings, registry=newer, run_id="upgrade") as log:
        at = log.append("agent.message", {"kind": "hop", "body": json.dumps({"chain": 7, "ttl": 3}), "trace": "v4"},
                        agent="writer-v4", to="r2")
    run.wait("r2 parked", lambda: "parked: an input it cannot read yet" in run.said("r2"))
    status, reason = _http_get(port, "/readyz")
    assert status == 503 and f"parked at offset {at}" in reason and "a newer agent.message (v4)" in reason, reason
    metrics = _http_get(port, "/metrics")[1]
    assert 'swarmlog_agent_parked{agent="r2"} 1' in metrics, metrics
    for agent in AGENTS:  # the readers upgraded after the writer, one at a time
        run.restart(agent, upgraded_env)
    until_finished(run, settings, newer, set(range(swarms.CHAINS)) | {7})  # upgraded agents write v4 messages
    live = run.stop()
    log = events(settings, newer)
    audit = harness.audit_steps(log)
    assert any(r.record["causes"][:1] == [at] and r.record["agent_id"] == "r2" for r in log), "r2 never handled it"
    _, dead = mirror(settings, newer, mirror_db, log)  # the sink still on v3
    assert "a newer agent.message (v4) than this reader knows (up to v3)" in dead[at], dead.get(at)
    v4_letters = len(dead)
    redriven = harness.run_cli(settings, "mirror", "redrive", database_url=mirror_db, env=upgraded_env)
    assert redriven.returncode == 0, redriven.stderr
    verified = harness.run_cli(settings, "mirror", "verify", database_url=mirror_db, env=upgraded_env)
    assert verified.returncode == 0 and "the mirror matches the log" in verified.stdout, verified.stdout
    in_mirror = harness.audit_mirror([(r.offset, r.record["event_id"]) for r in log],
                                     harness.read_mirror(mirror_db, settings.topic))
    old_replay = replay_swarm(settings=settings, swarm=SWARM, registry=registry)
    assert [(a.offset, a.agent, a.kind) for a in old_replay.anomalies if a.kind == "newer_schema"][:1] == \
        [(at, "r2", "newer_schema")]
    strict = harness.run_cli(settings, "replay", "--swarm", SPEC, "--strict")  # a reader still on v3
    assert strict.returncode == 3 and "named and not handled" in strict.stdout and f"offset {at}" in strict.stdout, \
        strict.stdout + strict.stderr
    new_replay = replay_swarm(settings=settings, swarm=SWARM, registry=newer)
    audit += in_mirror
    harness.record(harness.Row(
        "a writer upgraded to agent.message v4 (one field with a default) while the readers are on v3, then the "
        "readers upgraded one by one", 1, audit,
        f"r2 parked at offset {at} (log, /readyz 503, swarmlog_agent_parked 1), went on once upgraded; every agent "
        f"restarted; the v3 sink dead-lettered {v4_letters} v4 event(s) by name, mirror redrive moved them, mirror "
        f"verify clean; replay --swarm on v3 names it ({len(old_replay.anomalies)} anomalies), on v4: "
        f"{len(new_replay.divergences)} divergences, live states {'equal' if new_replay.agents == live else 'DIFFER'}"))
    assert audit.clean, audit
    assert new_replay.divergences == [] and new_replay.agents == live


def test_trailing_bytes_in_an_input_are_named_by_every_reader_and_the_run_goes_on(settings, registry, mirror_db,
                                                                                 dev_cluster):
    """A valid hop to r3 followed by a second event in the same value: not an event. r3 names it and goes
    on; the sink dead-letters it; replay and check name it."""
    run = Swarm(settings, run_id="trailing")
    until_hops(run, settings, registry, HOPS_BEFORE)
    value, key, headers = unchecked_event(registry, "agent.message",
                                          {"kind": "hop", "body": json.dumps({"chain": 9, "ttl": 0})},
                                          agent="r0", to="r3", run_id="trailing")
    with EventLog(settings=settings) as log:
        log.produce_raw(value + value, key=key, headers=headers)
        bad = log.flush()[0]
    until_finished(run, settings, registry)
    live = run.stop()
    log = events(settings, registry)
    audit = harness.audit_steps(log)
    assert f"offset {bad}" in run.said("r3") and "follow it" in run.said("r3")
    in_mirror, dead = mirror(settings, registry, mirror_db, log)
    replayed = replay_swarm(settings=settings, swarm=SWARM, registry=registry)
    _, found = check_causality(settings=settings, registry=registry)
    named = {"r3": True, "sink": "follow it" in dead.get(bad, ""),
             "replay": any(a.offset == bad and a.kind == "unreadable" for a in replayed.anomalies),
             "check": any(v.offset == bad and v.rule == "unreadable" for v in found)}
    audit += in_mirror
    harness.record(harness.Row(
        "an input whose value holds a valid hop and then a second event (trailing bytes), to a running agent", 1,
        audit, f"offset {bad} named by r3's log, the sink (dead letter), replay --swarm and check; r3 went on; "
               f"replay: {len(replayed.divergences)} divergences, live states "
               f"{'equal' if replayed.agents == live else 'DIFFER'}"))
    assert all(named.values()), named
    assert audit.clean, audit
    assert replayed.divergences == [] and replayed.agents == live


def test_impossible_causes_are_refused_at_write_while_the_swarm_runs(settings, registry, mirror_db, dev_cluster):
    run = Swarm(settings, run_id="causes")
    until_hops(run, settings, registry, HOPS_BEFORE)
    refused = []
    for cause in ("999999999", "-5"):
        done = harness.run_cli(settings, "append", "agent.message", '{"kind": "k", "body": "x"}', "--agent",
                               "operator", "--to", "r1", "--cause", cause)
        refused.append(done.returncode == 70 and f"cause {cause}" in done.stderr)
    with EventLog(settings=settings, run_id="causes") as log:
        own = log.append("agent.message", {"kind": "note", "body": "valid"}, agent="operator", to="r4")
        try:
            log.append("agent.message", {"kind": "note", "body": "x"}, agent="operator", to="r4", causes=[own + 10])
            refused.append(False)
        except InvalidCause:
            refused.append(True)
    until_finished(run, settings, registry)
    live = run.stop()
    log = events(settings, registry)
    impossible = [r.offset for r in log if any(c < 0 or c >= r.offset for c in r.record["causes"])]
    audit = harness.audit_steps(log)
    audit += mirror(settings, registry, mirror_db, log)[0]
    replayed = replay_swarm(settings=settings, swarm=SWARM, registry=registry)
    harness.record(harness.Row(
        "impossible causes while the swarm runs: swarmlog append --cause 999999999 and --cause -5, EventLog with "
        "its own offset + 10", 3, audit,
        f"{sum(refused)} of 3 refused before anything was written; {len(impossible)} events with an impossible "
        f"cause in the log; replay: {len(replayed.divergences)} divergences"))
    assert refused == [True, True, True] and impossible == []
    assert audit.clean, audit
    assert replayed.divergences == [] and replayed.agents == live


class _Rerouted:
    """A message read from the log whose ``sl.to`` names another agent; its value untouched."""

    def __init__(self, m: Any, to: bytes) -> None:
        self._m, self._to = m, to

    def headers(self) -> list[tuple[str, bytes]]:
        return [(k, self._to if k == "sl.to" else v) for k, v in self._m.headers()]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._m, name)


def test_a_copy_whose_routing_headers_were_changed_fails_the_token_replay_refuses_it(settings, registry, mirror_db,
                                                                                     dev_cluster, tmp_path):
    from swarmlog.kafka import KafkaBackend

    from ..integration.conftest import new_topic_name

    run = Swarm(settings, run_id="rerouted")
    until_finished(run, settings, registry)
    live = run.stop()
    token = tmp_path / "t.json"
    made = harness.run_cli(settings, "token", "create", "--out", str(token), "--checkpoint-every", "50")
    assert made.returncode == 0, made.stderr
    log = events(settings, registry)
    hop = next(r for r in log[len(log) // 2:] if r.event_type == "agent.message" and r.record["to"] not in (None, "r0"))
    copy = new_topic_name("rerouted")
    with LogReader(settings=settings) as reader:
        reader.assign(0)
        msgs = [_Rerouted(m, b"r0") if m.offset() == hop.offset else m for batch in reader.batches() for m in batch]
    KafkaBackend(settings).create_copy(copy, msgs, end=high_watermark(settings, settings.topic))
    copied = settings.model_copy(update={"topic": copy})
    checked = harness.run_cli(settings, "token", "verify", str(token), "--topic", copy)
    replayed = harness.run_cli(copied, "replay", "--swarm", SPEC)
    differ = f"FIRST DIFFERENCE at offset {hop.offset}: the same value, but its headers differ"
    lies = f"message at offset {hop.offset}: header sl.to"
    caught = {"token": checked.returncode == 5 and differ in checked.stdout,
              "replay": replayed.returncode == 70 and lies in replayed.stderr}
    audit = harness.audit_steps(log) + mirror(settings, registry, mirror_db, log)[0]
    result = replay_swarm(settings=settings, swarm=SWARM, registry=registry)
    harness.record(harness.Row(
        "a copy of a finished swarm's log with one routing header changed (sl.to), values untouched, checked "
        "against the run's token", 1, audit,
        f"token verify names offset {hop.offset} (its headers differ; version 3 chains headers and keys); replay "
        f"--swarm refuses the copy there; the original: {len(result.divergences)} divergences"))
    assert all(caught.values()), (caught, checked.stdout, replayed.stderr)
    assert audit.clean, audit
    assert result.divergences == [] and result.agents == live


HOSTILE = ["esc\x1b[2J\x1b]0;owned\x07", "bob\n      9  mallory          agent.message    → r1", "rtl\u202eevil"]
RAW = set("\x1b\x07\u202e")


def test_names_outside_the_grammar_are_refused_and_what_other_producers_wrote_reaches_no_terminal_raw(
        settings, registry, mirror_db, dev_cluster):
    run = Swarm(settings, run_id="names")
    until_hops(run, settings, registry, HOPS_BEFORE)
    refused = []
    for args in (("--agent", "op\x1b[2J", "--to", "r1"), ("--agent", "operator", "--to", "r1\nforged")):
        done = harness.run_cli(settings, "append", "agent.message", '{"kind": "k", "body": "x"}', *args)
        refused.append(done.returncode != 0 and not RAW & set(done.stderr))
    hostile = []
    with EventLog(settings=settings, run_id="names") as log:
        for name in HOSTILE:  # written by a producer that checks nothing
            value, key, headers = unchecked_event(registry, "agent.message", {"kind": name, "body": name},
                                                  agent=name, to=name, run_id="names")
            log.produce_raw(value, key=key, headers=headers)
        hostile = log.flush()
    until_finished(run, settings, registry)
    live = run.stop()
    outputs = [harness.run_cli(settings, *a) for a in
               (("log",), ("show", str(hostile[1])), ("timeline",), ("replay",), ("check", "causality"))]
    clean = [not RAW & set(o.stdout + o.stderr) for o in outputs]
    log_lines = len(outputs[0].stdout.splitlines())
    log = events(settings, registry)
    audit = harness.audit_steps(log) + mirror(settings, registry, mirror_db, log)[0]
    replayed = replay_swarm(settings=settings, swarm=SWARM, registry=registry)
    harness.record(harness.Row(
        "terminal injection while the swarm runs: names with ESC, BEL, a newline and a bidi override, refused at "
        "write (swarmlog append) and written raw by another producer", 2 + len(HOSTILE), audit,
        f"{sum(refused)} of 2 refused; {sum(clean)} of 5 outputs (log, show, timeline, replay, check) with no raw "
        f"control character, `log` one line per message ({log_lines} for {len(log)} events); replay: "
        f"{len(replayed.divergences)} divergences"))
    assert all(refused) and all(clean), (refused, clean)
    assert log_lines == len(log)
    assert audit.clean, audit
    assert replayed.divergences == [] and replayed.agents == live


def test_thousands_of_unreadable_messages_are_summaries_and_the_run_goes_on(settings, registry, mirror_db,
                                                                           dev_cluster):
    n = harness.scaled(10_000, 2_000)
    run = Swarm(settings, run_id="flood")
    until_hops(run, settings, registry, HOPS_BEFORE)
    with EventLog(settings=settings) as log:
        for i in range(n):
            log.produce_raw(b"garbage %d" % i)
        log.flush()
    until_finished(run, settings, registry)
    live = run.stop()
    replayed = harness.run_cli(settings, "replay")
    checked = harness.run_cli(settings, "check", "causality")
    warnings = [line for line in replayed.stderr.splitlines() if line.startswith("warning:")]
    log = events(settings, registry)
    in_mirror, dead = mirror(settings, registry, mirror_db, log)
    audit = harness.audit_steps(log) + in_mirror
    result = replay_swarm(settings=settings, swarm=SWARM, registry=registry)
    harness.record(harness.Row(
        f"{n:,} unreadable messages between the swarm's events", 1, audit,
        f"replay: {len(warnings)} warning line(s) (a summary with offset ranges), check: "
        f"{len(checked.stdout.splitlines())} lines, unreadable apart from causality; {len(dead):,} dead letters; "
        f"replay --swarm: {len(result.divergences)} divergences"))
    assert len(warnings) == 1 and f"{n:,} ×" in warnings[0], replayed.stderr[-2000:]
    assert checked.stdout.startswith(f"unreadable messages ({n}):") and len(checked.stdout.splitlines()) == 3, \
        checked.stdout
    assert len(dead) == n
    assert audit.clean, audit
    assert result.divergences == [] and result.agents == live


def test_a_compacted_swarm_topic_is_warned_about_before_and_its_holes_named_after(base_settings, registry, mirror_db,
                                                                                 dev_cluster):
    from ..integration.test_compaction import compacted_topic, offsets, wait_for_compaction

    settings = compacted_topic(base_settings)
    run = Swarm(settings, run_id="compacted")
    until_finished(run, settings, registry)
    run.stop()
    warned = all("cleanup.policy=compact" in run.said(a) and "cleanup.policy=delete" in run.said(a) for a in AGENTS)
    # Only the newest message per key stays. The broker may have cleaned part of the log during the run
    # already (segments roll every 100 ms): wait for what is left of the older ones to go too.
    newest: dict[bytes | None, int] = {}
    with LogReader(settings=settings) as reader:
        reader.assign(0)
        for m in (m for batch in reader.batches() for m in batch):
            newest[m.key()] = m.offset()
    before = set(range(high_watermark(settings, settings.topic)))
    superseded = set(offsets(settings)) - set(newest.values())
    held = wait_for_compaction(settings, gone=superseded) if superseded else offsets(settings)
    restarted = harness.run_cli(settings, "run", SPEC, "--agent", "r1", "--until-quiet", "1")
    replayed = harness.run_cli(settings, "replay", "--swarm", SPEC)
    plain = harness.run_cli(settings, "replay")
    checked = harness.run_cli(settings, "check", "causality")
    named = {"agent": restarted.returncode == 70 and "has lost events" in restarted.stderr,
             "replay --swarm": replayed.returncode == 70 and "has lost events" in replayed.stderr,
             "replay": plain.returncode == 70 and "has lost events" in plain.stderr,
             "check": checked.returncode == 1 and ": hole: " in checked.stdout}
    harness.record(harness.Row(
        "a swarm on a topic with cleanup.policy=compact, compacted by the broker after the run", 1,
        harness.Audit(checked=len(before)),
        f"every agent warned at start (naming cleanup.policy=delete): {warned}; compaction left {len(held)} of the "
        f"{len(before)} offsets the run wrote; a restarted agent, replay --swarm, replay and check stopped or "
        f"reported naming the lost offsets: {sum(named.values())} of 4"))
    assert warned and all(named.values()), (named, restarted.stderr[-2000:], replayed.stderr[-2000:])
