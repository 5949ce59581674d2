"""Agents killed with SIGKILL mid-transaction while the swarm runs, each restarted at once.

Every hop is handled exactly once by the agent it was sent to, no output is written twice, each
agent's steps stay in offset order, replay of the code reproduces the live states, and the mirror
equals the topic. A kill counts as mid-transaction when the killed agent left aborted records.
"""

from __future__ import annotations

import json
import random
import signal
import time

from confluent_kafka import Consumer, IsolationLevel, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from swarmlog.kafka.reader import high_watermark
from swarmlog.replaying import replay_swarm
from swarmlog.replaying.causality import check_causality
from swarmlog.runtime import start_run
from swarmlog_connectors.postgres_sink import PostgresSink

from .. import swarms
from ..integration.conftest import read_log
from . import harness

AGENTS = [f"r{i}" for i in range(swarms.N_AGENTS)]


def _uncommitted(settings) -> list[tuple[int, bytes]]:
    """(offset, sl.agent) of every message, aborted ones included (read_uncommitted), up to the log end.

    Read to the high watermark, not to the first quiet poll: on a loaded machine a fetch can take
    longer than any poll timeout, and a prefix would undercount what the kills left aborted.
    """
    c = Consumer({"bootstrap.servers": settings.bootstrap_servers, "group.id": f"audit-{time.time_ns()}",
                  "isolation.level": "read_uncommitted", "enable.auto.commit": False})
    tp = TopicPartition(settings.topic, 0, 0)
    out = []
    try:
        _, end = c.get_watermark_offsets(tp, timeout=30)
        c.assign([tp])
        deadline = time.monotonic() + 300
        last, quiet = -1, 0
        while last + 1 < end:
            assert time.monotonic() < deadline, f"read_uncommitted reached offset {last} of {end}"
            m = c.poll(1.0)
            if m is None or m.error():
                quiet += 1
                # Only transaction markers (never delivered) can lie between the last message and the end.
                if c.position([tp])[0].offset >= end or (quiet >= 10 and last >= end - 10):
                    break
                continue
            last, quiet = m.offset(), 0
            out.append((last, dict(m.headers() or ()).get("sl.agent", b"")))
    finally:
        c.close()
    return out


class _OpenTransactions:
    """Who holds the oldest open transaction right now: the writer of the message at the last stable
    offset (read_uncommitted), when that offset is below the high watermark."""

    def __init__(self, settings) -> None:
        self.tp = TopicPartition(settings.topic, 0)
        self.admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers})
        self.reader = Consumer({"bootstrap.servers": settings.bootstrap_servers, "group.id": f"open-{time.time_ns()}",
                                "isolation.level": "read_uncommitted", "enable.auto.commit": False})
        self.committed = Consumer({"bootstrap.servers": settings.bootstrap_servers,
                                   "group.id": f"ended-{time.time_ns()}", "isolation.level": "read_committed",
                                   "enable.auto.commit": False})

    def _end(self, isolation: IsolationLevel) -> int:
        return self.admin.list_offsets({self.tp: OffsetSpec.latest()}, isolation_level=isolation)[self.tp].result(
            30).offset

    def holder(self) -> tuple[str | None, int]:
        """(the agent whose transaction is the oldest open one, or None; the last stable offset)."""
        stable, high = self._end(IsolationLevel.READ_COMMITTED), self._end(IsolationLevel.READ_UNCOMMITTED)
        if stable >= high:
            return None, stable
        self.reader.assign([TopicPartition(self.tp.topic, 0, stable)])
        m = self.reader.poll(2.0)
        if m is None or m.error():
            return None, stable
        return dict(m.headers() or ()).get("sl.agent", b"").decode() or None, stable

    def aborted(self, offset: int, timeout: float = 180.0) -> bool:
        """Once the transaction holding ``offset`` has ended: was it aborted (its message never visible)?

        Only an ended transaction says: a kill that landed after the step's commit request reached
        the coordinator still commits (the coordinator finishes it without the client), and on a
        loaded broker writing its markers can take seconds.
        """
        deadline = time.monotonic() + timeout
        while self._end(IsolationLevel.READ_COMMITTED) <= offset:
            assert time.monotonic() < deadline, f"the transaction at offset {offset} never ended"
            time.sleep(0.2)
        self.committed.assign([TopicPartition(self.tp.topic, 0, offset)])
        while True:
            assert time.monotonic() < deadline, f"nothing read_committed at or after offset {offset}"
            m = self.committed.poll(1.0)
            if m is not None and not m.error():
                return m.offset() != offset

    def close(self) -> None:
        self.reader.close()
        self.committed.close()


def _finished(settings, registry) -> set[int]:
    return {json.loads(r.record["payload"]["body"])["chain"] for r in read_log(settings, registry)
            if r.event_type == "agent.message" and r.record["payload"]["kind"] == "finished"}


def test_agents_killed_mid_transaction_restart_without_duplicate_or_lost_step(settings, registry, mirror_db,
                                                                              dev_cluster):
    kills, name = harness.scaled((10, "slow_relay"), (2, "short_slow_relay"))
    swarm = getattr(swarms, name)
    spec = f"tests.swarms:{name}"
    rng = random.Random(20261202)  # the pauses between kills; the victim is whoever holds a transaction
    start_run(settings=settings, swarm=swarm, run_id="kills", seed=12)
    procs = {a: harness.spawn(settings, "run", spec, "--agent", a) for a in AGENTS}
    killed: list[tuple[str, int, int]] = []  # (agent, last stable offset at the kill, high watermark after)
    confirmed = 0  # kills whose victim's open transaction ended aborted: it died inside it
    open_txns = _OpenTransactions(settings)
    try:
        while confirmed < kills:
            assert len(killed) < 4 * kills, f"only {confirmed} of {len(killed)} kills landed mid-transaction"
            time.sleep(rng.uniform(0.5, 2.0))
            assert len(_finished(settings, registry)) < swarms.CHAINS, "the swarm finished before the kills"
            agent, stable = open_txns.holder()  # an agent inside a transaction, with outputs already sent
            if agent not in procs:
                continue
            procs[agent].send_signal(signal.SIGKILL)
            procs[agent].wait()
            killed.append((agent, stable, high_watermark(settings, settings.topic)))
            procs[agent] = harness.spawn(settings, "run", spec, "--agent", agent)
            # Its next life fences the dead one's transaction: aborted if the kill landed inside it.
            confirmed += open_txns.aborted(stable)
    finally:
        open_txns.close()
    deadline = time.monotonic() + 600
    while len(_finished(settings, registry)) < swarms.CHAINS:
        assert time.monotonic() < deadline, "the swarm never finished"
        for a, p in procs.items():
            assert p.poll() is None, f"{a} exited: {p.communicate()[1][-3000:]}"
        time.sleep(1.0)
    time.sleep(3.0)
    live = {}
    for p in procs.values():
        p.send_signal(signal.SIGTERM)
    for a, p in procs.items():
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, f"{a}: {err[-3000:]}"
        live.update(json.loads(out.strip().splitlines()[-1])["agents"])

    log = read_log(settings, registry)
    committed = {r.offset for r in log}
    aborted = [(off, who) for off, who in _uncommitted(settings) if off not in committed]
    # Each aborted record belongs to the first kill of its writer whose window holds it (from the
    # stable offset the open transaction began at to the log end after the kill): no record counted
    # for two kills.
    unclaimed = set(aborted)
    mid_txn = 0
    for agent, stable, after in killed:
        mine = {(off, who) for off, who in unclaimed if who == agent.encode() and stable <= off < after}
        mid_txn += bool(mine)
        unclaimed -= mine
    result = replay_swarm(settings=settings, swarm=swarm, registry=registry)
    _, violations = check_causality(settings=settings, registry=registry)
    PostgresSink(settings=settings.model_copy(update={"database_url": mirror_db}), registry=registry).run(
        until_end=True)
    topic_rows = [(r.offset, r.record["event_id"]) for r in log]
    audit = harness.audit_steps(log)
    audit += harness.audit_mirror(topic_rows, harness.read_mirror(mirror_db, settings.topic))
    harness.record(harness.Row(
        f"agent SIGKILL mid-transaction until {kills} kills landed inside one (5 agents as processes, each "
        f"restarted)", len(killed),
        audit, f"{confirmed} of {len(killed)} kills inside an open transaction, {mid_txn} left aborted records "
        f"({len(aborted)} in all); replay: "
        f"{len(result.divergences)} divergences, live states {'equal' if result.agents == live else 'DIFFER'}; "
        f"{len(violations)} causality violations"))
    assert audit.clean, audit
    assert result.divergences == [] and result.agents == live
    assert violations == []
    assert mid_txn >= confirmed, f"{confirmed} kills inside a transaction, only {mid_txn} left aborted records"
