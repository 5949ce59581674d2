"""A three-broker cluster losing its partition leader (SIGKILL) under load, then getting it back.

On a cluster of the case's own (``swarmlog dev up --brokers 3``: replication 3,
``min.insync.replicas`` 2; free ports, purged afterwards), beside the suite's one-broker
cluster: five producer processes appending through ``EventLog`` (idempotent, ``acks=all``),
and then a swarm of five transactional agent processes, each run through a leader change.
Afterwards the whole topic is read back: every acknowledged event is there exactly once, at
the offset its producer was told, in its producer's order; the swarm wrote no output twice,
lost no step, and replays to the states the live agents reported; and the mirror (the sink run
afterwards into a clean database of the suite's Postgres) equals the topic.

Must show (issue 11): leader SIGKILL on the three-broker cluster: 0 lost, 0 duplicated.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from swarmlog.kafka.reader import high_watermark
from swarmlog.kafka.topic import TOPIC_CONFIG, create_topic, topic_config, wait_until_known
from swarmlog.log.protocol import agent_group
from swarmlog.replaying import replay_swarm
from swarmlog.replaying.causality import check_causality
from swarmlog.runtime import start_run
from swarmlog.schema.registry import SchemaRegistry
from swarmlog.settings import Settings
from swarmlog_connectors.postgres_sink import PostgresSink

from .. import swarms
from ..integration.conftest import REPO, new_topic_name, read_log
from ..integration.dev_clusters import SpareCluster, spare_cluster
from ..integration.test_runtime import AGENTS, _stop, _wait_finished
from ..integration.test_runtime import _env as _agent_env
from . import harness

PRODUCERS = 5
ACKED_BEFORE_KILL = harness.scaled(400, 200)
"""Acknowledged events each producer must have before the kill, and again after each phase."""


@pytest.fixture(scope="module")
def three() -> Iterator[SpareCluster]:
    """Three KRaft brokers of the case's own (never the suite's one-broker cluster, never yours)."""
    with spare_cluster(brokers=3) as spare:
        yield spare


@pytest.fixture(scope="module")
def three_settings(three: SpareCluster) -> Settings:
    return Settings.from_env(three.plaintext_env())


@pytest.fixture(scope="module")
def three_registry(three_settings: Settings) -> SchemaRegistry:
    return SchemaRegistry.load(three_settings.schema_dirs())


def _fresh_topic(settings: Settings, prefix: str) -> Settings:
    topic = new_topic_name(prefix)
    info = create_topic(settings, topic)
    assert info.replication_factor == 3
    assert topic_config(settings, topic)["min.insync.replicas"] == "2"
    return settings.model_copy(update={"topic": topic})


_QUIET = logging.getLogger("tests.faults.leader.metadata")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False  # "connection refused" from the dead broker, on every poll: expected

_ADMINS: dict[str, AdminClient] = {}


def _partition(settings: Settings) -> tuple[int, list[int]]:
    """(leader, in-sync replicas) of the topic's partition, as the cluster's metadata says now."""
    # One client per cluster, polled many times: not thousands of short-lived ones.
    admin = _ADMINS.get(settings.bootstrap_servers)
    if admin is None:
        admin = _ADMINS[settings.bootstrap_servers] = AdminClient(settings.kafka_config({"logger": _QUIET}))
    md = admin.list_topics(topic=settings.topic, timeout=10)
    p = md.topics[settings.topic].partitions[0]
    return p.leader, sorted(p.isrs)


def _kill_leader(three: SpareCluster, settings: Settings) -> tuple[int, float]:
    leader, isr = _partition(settings)
    assert leader > 0 and isr == [1, 2, 3], (leader, isr)
    pid = three.status().brokers[leader - 1].pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    return leader, time.monotonic()


def _wait_new_leader(settings: Settings, old: int, limit: float = 60.0) -> int:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            leader, isr = _partition(settings)
        except Exception:  # noqa: BLE001 - a metadata request to the dead broker: ask again
            leader, isr = -1, []
        if leader > 0 and leader != old and old not in isr:
            return leader
        time.sleep(0.2)
    raise AssertionError(f"no new leader within {limit} s of killing broker {old}")


def _restart_and_wait_in_sync(three: SpareCluster, settings: Settings, limit: float = 120.0) -> float:
    """``swarmlog dev up`` (it restarts only the dead node), then wait for the ISR; seconds it all took."""
    t0 = time.monotonic()
    result = three.cli("up", timeout=180)
    assert result.returncode == 0, result.stderr
    deadline = time.monotonic() + limit
    while _partition(settings)[1] != [1, 2, 3]:
        assert time.monotonic() < deadline, f"the restarted broker did not rejoin the ISR within {limit} s"
        time.sleep(0.2)
    return time.monotonic() - t0


def _mirror(settings: Settings, registry: SchemaRegistry, database_url: str,
            topic_rows: list[tuple[int, str]]) -> harness.Audit:
    """The sink run over the whole topic into a clean database: every event once, at its offset."""
    PostgresSink(settings=settings.model_copy(update={"database_url": database_url}), registry=registry).run(
        until_end=True)
    return harness.audit_mirror(topic_rows, harness.read_mirror(database_url, settings.topic))


# --- five producers -----------------------------------------------------------------------------


def _acked(path: Path) -> tuple[dict[int, tuple[int, float]], set[int]]:
    """seq -> (offset, ack time) of what the producer was told was acknowledged; the unknown seqs."""
    acked, unknown = {}, set()
    for line in path.read_text().splitlines():
        parts = line.split()
        if parts[0] == "?":
            unknown.add(int(parts[1]))
        elif len(parts) == 3:
            acked[int(parts[0])] = (int(parts[1]), float(parts[2]))
    return acked, unknown


def _wait_acked(paths: list[Path], at_least: list[int], limit: float) -> None:
    deadline = time.monotonic() + limit
    while True:
        counts = [len(_acked(p)[0]) if p.exists() else 0 for p in paths]
        if all(c >= n for c, n in zip(counts, at_least, strict=True)):
            return
        assert time.monotonic() < deadline, f"producers acknowledged {counts}, wanted {at_least}"
        time.sleep(0.2)


def test_leader_sigkill_under_five_producers_loses_and_duplicates_no_acknowledged_event(
        three: SpareCluster, three_settings: Settings, three_registry: SchemaRegistry, mirror_db: str,
        tmp_path: Path) -> None:
    settings = _fresh_topic(three_settings, "failover-producers")
    env = {**three.plaintext_env(), "SWARMLOG_TOPIC": settings.topic,
           "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "platform"), str(REPO / "connectors")])}
    files = [tmp_path / f"p{i}.acked" for i in range(PRODUCERS)]
    procs = [subprocess.Popen([sys.executable, "-m", "tests.faults.fault_producer", "--producer", str(i),
                               "--acked", str(files[i])], env=env, cwd=REPO,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for i in range(PRODUCERS)]
    try:
        _wait_acked(files, [ACKED_BEFORE_KILL] * PRODUCERS, limit=120)
        old, killed_at = _kill_leader(three, settings)
        at_kill = [len(_acked(f)[0]) for f in files]
        new = _wait_new_leader(settings, old)
        elected_s = time.monotonic() - killed_at
        # Every producer gets on with its work under the new leader...
        _wait_acked(files, [n + ACKED_BEFORE_KILL for n in at_kill], limit=120)
        back_s = _restart_and_wait_in_sync(three, settings)
        # ... and once the old leader is back as a follower.
        after_restart = [len(_acked(f)[0]) for f in files]
        _wait_acked(files, [n + ACKED_BEFORE_KILL // 2 for n in after_restart], limit=120)
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * PRODUCERS, errors

    # The whole topic, read back (read_committed, from offset 0).
    topic_rows = harness.read_topic(settings, three_registry)
    in_log: dict[str, list[tuple[int, int]]] = defaultdict(list)  # producer -> [(offset, seq)] in log order
    for off, eid in topic_rows:
        name, _, seq = eid.partition("-")
        in_log[name].append((off, int(seq)))
    audit = harness.Audit()
    wrong_offset = unknown_landed = unknown_total = blocked_through_failover = 0
    for i, path in enumerate(files):
        acked, unknown = _acked(path)
        rows = in_log[f"p{i}"]
        seqs = [seq for _, seq in rows]
        where = {seq: off for off, seq in rows}
        unknown_total += len(unknown)
        audit += harness.Audit(checked=len(acked), lost=sum(1 for seq in acked if seq not in where),
                               duplicated=len(seqs) - len(set(seqs)),
                               out_of_order=sum(1 for a, b in zip(seqs, seqs[1:], strict=False) if b <= a))
        wrong_offset += sum(1 for seq, (off, _) in acked.items() if seq in where and where[seq] != off)
        unknown_landed += sum(1 for seq in unknown if seq in where)
        # Every event a producer sent it recorded as acknowledged or of unknown fate, so
        # anything else in the log would be an event nobody sent.
        assert set(seqs) <= set(acked) | unknown, f"p{i}: events in the log that p{i} never sent"
        times = sorted(t for _, t in acked.values())
        before = [t for t in times if t < killed_at]
        after = [t for t in times if t >= killed_at]
        if before and after and after[0] - before[-1] > 1.0:
            blocked_through_failover += 1
    acknowledged = audit.checked
    audit += _mirror(settings, three_registry, mirror_db, topic_rows)
    harness.record(harness.Row(
        "leader SIGKILL on 3 brokers (replication 3, min.insync.replicas 2) under 5 producers, then restarted",
        1, audit,
        f"leader {old} -> {new} in {elected_s:.1f} s, back in the ISR {back_s:.0f} s later; {acknowledged:,} "
        f"acknowledged events, {wrong_offset} at another offset than acknowledged; {unknown_total} of unknown "
        f"fate ({unknown_landed} of them in the log); {blocked_through_failover} of 5 producers waited through "
        f"the failover"))
    assert audit.clean, audit
    assert wrong_offset == 0
    assert acknowledged >= PRODUCERS * ACKED_BEFORE_KILL * 2
    # The kill landed under load: producers had batches waiting on the dead leader.
    assert blocked_through_failover >= 1


# --- a swarm of transactional agents ---------------------------------------------------------------


def _group_coordinators(settings: Settings, groups: list[str]) -> list[int]:
    """The broker that will coordinate each consumer group, by Kafka's own rule: the leader of
    ``__consumer_offsets`` partition ``Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions``.

    Computed, not asked: on a new cluster ``describe_consumer_groups`` answers
    NOT_COORDINATOR while the offsets topic loads, and retrying it tripped an assertion
    in librdkafka's admin client (rd_kafka_enq_once_del_source_return) that killed pytest.
    """
    # Any group lookup makes the broker create the offsets topic.
    probe = Consumer(settings.kafka_config({"group.id": "swarmlog-test-coordinators", "logger": _QUIET}))
    try:
        probe.committed([TopicPartition("__consumer_offsets", 0)], timeout=30)
    except KafkaException:
        pass  # created or not, the metadata below says
    finally:
        probe.close()
    admin = AdminClient(settings.kafka_config({"logger": _QUIET}))
    deadline = time.monotonic() + 60
    while True:
        topic = admin.list_topics(topic="__consumer_offsets", timeout=10).topics["__consumer_offsets"]
        leaders = {p.id: p.leader for p in topic.partitions.values()}
        if leaders and all(leader > 0 for leader in leaders.values()):
            break
        assert time.monotonic() < deadline, "__consumer_offsets has no leaders after 60 s"
        time.sleep(0.2)

    def java_hash(text: str) -> int:
        h = 0
        units = text.encode("utf-16-be")
        for i in range(0, len(units), 2):
            h = (31 * h + int.from_bytes(units[i:i + 2], "big")) & 0xFFFFFFFF
        return h - (1 << 32) if h >= 1 << 31 else h

    return [leaders[(0 if java_hash(g) == -(1 << 31) else abs(java_hash(g))) % len(leaders)] for g in groups]


def _topic_led_by(settings: Settings, topic: str, broker: int) -> Settings:
    """A swarm topic (swarmlog's topic settings) whose preferred leader is ``broker``."""
    admin = AdminClient(settings.kafka_config())
    replicas = [broker, *(b for b in (1, 2, 3) if b != broker)]
    # num_partitions=1, not the documented -1: confluent-kafka 2.16 refuses -1 with an assignment.
    new = NewTopic(topic, num_partitions=1, replica_assignment=[replicas],
                   config=dict(TOPIC_CONFIG))
    admin.create_topics([new], operation_timeout=30)[topic].result()
    wait_until_known(settings, topic)
    settings = settings.model_copy(update={"topic": topic})
    assert _partition(settings) == (broker, [1, 2, 3])
    return settings


def _spawn(settings: Settings, agent: str, log: Path) -> subprocess.Popen[str]:
    # stderr to a file, not a pipe: librdkafka logs every refused connection to the dead broker,
    # and an agent blocked on a full pipe would look like one stuck in Kafka.
    env = {**_agent_env(settings), "PYTHONFAULTHANDLER": "1"}
    with log.open("w") as err:
        return subprocess.Popen([sys.executable, "-m", "swarmlog.cli", "run", "tests.swarms:relay_long",
                                 "--agent", agent], env=env, stdout=subprocess.PIPE, stderr=err, text=True)


def _tail(path: Path, chars: int = 1500) -> str:
    return "\n".join(line for line in path.read_text(errors="replace").splitlines()
                     if not line.startswith("%"))[-chars:]  # librdkafka's connection chatter aside


def test_agent_swarm_runs_through_a_leader_sigkill_without_duplicate_or_lost_step(
        three: SpareCluster, three_settings: Settings, three_registry: SchemaRegistry, mirror_db: str,
        tmp_path: Path) -> None:
    registry = three_registry
    # The topic led by the broker that is also the group coordinator of the most agents: its
    # death then moves both the partition and those agents' coordinators (the hard case).
    topic = new_topic_name("failover-swarm")
    coordinators = _group_coordinators(three_settings, [agent_group(topic, a) for a in AGENTS])
    doomed = max((1, 2, 3), key=lambda b: sum(c == b for c in coordinators))
    settings = _topic_led_by(three_settings, topic, doomed)
    start_run(settings=settings, swarm=swarms.relay_long, run_id="failover", seed=17)
    logs = {a: tmp_path / f"{a}.stderr" for a in AGENTS}
    procs = {a: _spawn(settings, a, logs[a]) for a in AGENTS}
    began = time.monotonic()
    phases: dict[str, float] = {}
    try:
        deadline = time.monotonic() + 120
        while high_watermark(settings, settings.topic) < 200:
            assert time.monotonic() < deadline, "the swarm did not get going"
            time.sleep(0.1)
        old, _ = _kill_leader(three, settings)
        phases["killed"] = time.monotonic() - began
        assert old == doomed
        at_kill = high_watermark(settings, settings.topic)
        new = _wait_new_leader(settings, old)
        phases["new leader"] = time.monotonic() - began
        _restart_and_wait_in_sync(three, settings)
        phases["back in sync"] = time.monotonic() - began
        _wait_finished(settings, registry)
        phases["finished"] = time.monotonic() - began
        end = high_watermark(settings, settings.topic)
        crashed = {a: (p.returncode, _tail(logs[a])) for a, p in procs.items() if p.poll() is not None}
        assert crashed == {}, f"agents exited during the leader change: {crashed}"
        live = _stop(procs)
    except BaseException:
        for a, p in procs.items():
            if p.poll() is None:
                p.send_signal(signal.SIGABRT)  # PYTHONFAULTHANDLER: its threads' stacks, on stderr
                p.wait(timeout=30)
                print(f"\n--- {a} was still running; its stacks:\n{_tail(logs[a], 6000)}")
        raise
    rode_through = sorted({line.split(": ", 2)[-1][:100] for a in AGENTS for line in logs[a].read_text().splitlines()
                           if "trying again" in line or "new life" in line})
    orphaned = [a for a, c in zip(AGENTS, coordinators, strict=True) if c == old]
    print(f"\nleader {old} -> {new} at log end {at_kill}, also the group coordinator of {orphaned}; the swarm "
          f"finished at {end}; seconds from the start: {phases}; what the agents rode through: {rode_through}")
    log = read_log(settings, registry)
    audit = harness.audit_steps(log)
    result = replay_swarm(settings=settings, swarm=swarms.relay_long, registry=registry)
    count, violations = check_causality(settings=settings, registry=registry)
    audit += _mirror(settings, registry, mirror_db, [(r.offset, r.record["event_id"]) for r in log])
    harness.record(harness.Row(
        "leader SIGKILL on 3 brokers under a swarm (5 transactional agents as processes; the leader also "
        "coordinated the most agents' groups), then restarted", 1, audit,
        f"leader {old} -> {new} at offset {at_kill:,} of {end:,}, also the group coordinator of "
        f"{len(orphaned)} agents; no agent process exited or was restarted; replay: {len(result.divergences)} "
        f"divergences, live states {'equal' if result.agents == live else 'DIFFER'}; {len(violations)} "
        f"causality violations"))
    assert end > at_kill, "the kill did not land mid-run"
    assert audit.clean, audit
    assert result.divergences == []
    assert result.agents == live
    assert count > 0 and violations == []
