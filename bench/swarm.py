"""Swarm: five agents in transactional steps — steps/s and per-hop latency — beside a raw
confluent-kafka transactional relay of the same shape.

The swarm is a ring of five agents ``s0..s4``. ``s0`` starts ``CHAINS`` chains at
``run.started``; every ``hop`` message is one step of the agent it is addressed to, which
sends the chain on to the next agent until it has made ``HOPS`` hops. Every agent is its
own process (one pod per agent, as on Kubernetes), reads the whole topic, routes by
headers, and commits each batch of steps — outputs plus its consumer position — in one
Kafka transaction. ``swarm.swarmlog_one_process`` runs the same five agents as threads
of one ``swarmlog run`` process.

The baseline does the least a transactional relay can do with the same client:
``read_committed`` consumer, one transaction per consumed batch with
``send_offsets_to_transaction``, routing and the hop count in headers, a pre-encoded
200-byte value — no Avro, no state, no recorded-output checks.

Both are measured from the log itself, after the run: steps/s is the number of hop
outputs after the chains' first burst over the broker's LogAppendTime span from that
burst to the last output; a hop's latency is its output's append time minus its input's
(the input's offset travels in the ``sl.step`` header). Start-up is outside the span.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from swarmlog import Agent, Swarm, on, on_message
from swarmlog.kafka.config import admin_client
from swarmlog.kafka.groups import group_members
from swarmlog.protocol import H_STEP, H_TO, H_TYPE
from swarmlog.runtime import start_run
from swarmlog.schema.registry import SchemaRegistry
from swarmlog.settings import Settings

from .common import Run, env_int, fresh_topic, log, percentile, reps, row

AGENTS = tuple(f"s{i}" for i in range(5))
CHAINS = env_int("BENCH_SWARM_CHAINS", 1000, scale=False)
"""Chains in flight: the swarm's concurrency (each agent sees about CHAINS/5 inputs per batch)."""
HOPS = env_int("BENCH_SWARM_HOPS", 40)
TIMEOUT_S = 600.0
REPO = Path(__file__).resolve().parent.parent


def _next(name: str) -> str:
    return AGENTS[(AGENTS.index(name) + 1) % len(AGENTS)]


class Hopper(Agent):
    """One agent of the ring: counts its hops and passes each chain on."""

    def initial_state(self) -> dict[str, Any]:
        return {"hops": 0, "done": 0}

    @on("run.started")
    def start(self, ctx, event):
        if self.name == AGENTS[0]:
            for chain in range(CHAINS):
                ctx.send(AGENTS[1 + chain % 4], "hop", {"chain": chain, "ttl": HOPS})

    @on_message("hop")
    def hop(self, ctx, event):
        msg = event.json()
        self.state["hops"] += 1
        if msg["ttl"] > 0:
            ctx.send(_next(self.name), "hop", {"chain": msg["chain"], "ttl": msg["ttl"] - 1})
        else:
            self.state["done"] += 1


ring = Swarm(name="bench-ring", agents=lambda: [Hopper(n) for n in AGENTS], code_version="bench-ring")


# --- the baseline: a raw transactional relay --------------------------------------------------

RAW_VALUE = bytes(200)
H_TTL = "ttl"


def relay(settings: Settings, topic: str, me: str) -> None:
    """One baseline agent: consume a batch, produce the next hops, commit both in one transaction."""
    me_b, nxt = me.encode(), _next(me).encode()
    producer = Producer(settings.kafka_config({"transactional.id": f"bench-relay.{topic}.{me}", "linger.ms": 1,
                                               "enable.idempotence": True, "acks": "all"}))
    producer.init_transactions(30)
    consumer = Consumer(settings.kafka_config({
        "group.id": f"bench-relay.{topic}.{me}", "isolation.level": "read_committed",
        "enable.auto.commit": False, "auto.offset.reset": "earliest", "client.id": f"bench-relay-{me}"}))
    consumer.subscribe([topic])
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    msg_type = b"agent.message"
    try:
        while not stop:
            msgs = consumer.consume(500, 0.1)
            if not msgs:
                continue
            producer.begin_transaction()
            for m in msgs:
                if m.error() is not None:
                    continue
                h = dict(m.headers() or ())
                if h.get(H_TO) != me_b:
                    continue
                if h.get(H_TYPE) == b"start":
                    for chain in range(CHAINS):
                        to = AGENTS[1 + chain % 4].encode()
                        producer.produce(topic, RAW_VALUE, me_b, partition=0, headers=[
                            (H_TYPE, msg_type), (H_TO, to), (H_STEP, str(m.offset()).encode()),
                            (H_TTL, str(HOPS).encode())])
                    continue
                ttl = int(h[H_TTL])
                if ttl > 0:
                    producer.produce(topic, RAW_VALUE, me_b, partition=0, headers=[
                        (H_TYPE, msg_type), (H_TO, nxt), (H_STEP, str(m.offset()).encode()),
                        (H_TTL, str(ttl - 1).encode())])
            producer.send_offsets_to_transaction(
                [TopicPartition(topic, 0, msgs[-1].offset() + 1)], consumer.consumer_group_metadata(), 30)
            producer.commit_transaction(30)
    finally:
        consumer.close()


# --- running and measuring --------------------------------------------------------------------


def _env() -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(REPO), str(REPO / "platform"), str(REPO / "connectors")]
    env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["BENCH_SWARM_CHAINS"], env["BENCH_SWARM_HOPS"] = str(CHAINS), str(HOPS)
    return env


def _wait_for_groups(s: Settings, groups: list[str], procs: list[subprocess.Popen]) -> None:
    admin = admin_client(s)
    deadline = time.monotonic() + 120
    while True:
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError(f"an agent process exited early (rc {p.returncode}): {p.args}")
        if all(group_members(admin, g) for g in groups):
            time.sleep(1.0)  # members joined; let the assignments land
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"agents did not join their groups: {groups}")
        time.sleep(0.2)


def _collect(s: Settings, topic: str, expected: int, procs: list[subprocess.Popen]) -> dict[int, tuple[int, int]]:
    """Read the committed log until ``expected`` hop outputs are in it: offset -> (append ms, input offset)."""
    consumer = Consumer(s.kafka_config({"group.id": f"bench-swarm-reader-{topic}", "isolation.level": "read_committed",
                                        "enable.auto.commit": False, "enable.partition.eof": False}))
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: dict[int, tuple[int, int]] = {}
    times: dict[int, int] = {}
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(out) < expected:
            if time.monotonic() > deadline:
                raise RuntimeError(f"swarm did not finish: {len(out)} of {expected} hops after {TIMEOUT_S:.0f} s")
            for p in procs:
                if p.poll() is not None:
                    raise RuntimeError(f"an agent process exited early (rc {p.returncode}): {p.args}")
            for m in consumer.consume(1000, 0.5):
                if m.error() is not None:
                    if m.error().code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(m.error().str())
                    continue
                off, ts = m.offset(), m.timestamp()[1]
                times[off] = ts
                h = dict(m.headers() or ())
                if h.get(H_TYPE) == b"agent.message":
                    out[off] = (ts, int(h[H_STEP]))
    finally:
        consumer.close()
    # The input's append time, for the latency: every input precedes its output in the log.
    return {off: (ts, times[cause]) for off, (ts, cause) in out.items()}


def _exactly_once(s: Settings, topic: str, expected: int) -> None:
    """After the agents stopped: exactly the expected hops are committed, and no input was answered
    twice (each hop's ``sl.step`` names its input; only the start step sends many, one per chain)."""
    consumer = Consumer(s.kafka_config({"group.id": f"bench-swarm-check-{topic}", "isolation.level": "read_committed",
                                        "enable.auto.commit": False, "enable.partition.eof": True}))
    consumer.assign([TopicPartition(topic, 0, 0)])
    answers: Counter[int] = Counter()  # input offset -> hops it caused
    try:
        while True:
            msgs = consumer.consume(1000, 10)
            if not msgs:
                raise RuntimeError(f"{topic}: no end of partition while counting hops")
            for m in msgs:
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        _check_answers(topic, answers, expected)
                        return
                    raise RuntimeError(m.error().str())
                h = dict(m.headers() or ())
                if h.get(H_TYPE) == b"agent.message":
                    answers[int(h[H_STEP])] += 1
    finally:
        consumer.close()


def _check_answers(topic: str, answers: Counter[int], expected: int) -> None:
    hops = sum(answers.values())
    start, burst = answers.most_common(1)[0] if answers else (-1, 0)
    twice = sorted(step for step, n in answers.items() if n > 1 and step != start)
    if hops != expected or burst != CHAINS or twice:
        raise RuntimeError(f"{topic}: {hops} hops committed (expected exactly {expected}), {burst} chains "
                           f"started (expected {CHAINS}); inputs answered more than once: {twice[:10]}")


def _measure(collected: dict[int, tuple[int, int]]) -> tuple[float, int, dict[str, float]]:
    """(seconds, steps, latency stats) from the log: the span after the chains' first burst."""
    first_burst = sorted(collected.items())[:CHAINS]
    t0 = max(ts for _, (ts, _) in first_burst)
    rest = sorted(collected.items())[CHAINS:]
    t1 = max(ts for _, (ts, _) in rest)
    hops = sorted(float(ts - cause_ts) for _, (ts, cause_ts) in rest)
    seconds = max(0.001, (t1 - t0) / 1000)
    return seconds, len(rest), {"p50_ms": percentile(hops, 50), "p99_ms": percentile(hops, 99)}


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def swarmlog_swarm(s: Settings, *, processes: bool) -> tuple[float, int, dict[str, float]]:
    topic = fresh_topic(s, "swarm")
    env = {**_env(), "SWARMLOG_TOPIC": topic}
    cmd = [sys.executable, "-m", "swarmlog.cli", "run", "bench.swarm:ring"]
    if processes:
        procs = [subprocess.Popen(cmd + ["--agent", a], env=env, cwd=REPO, stdout=subprocess.DEVNULL)
                 for a in AGENTS]
    else:
        procs = [subprocess.Popen(cmd + ["--run-id", "bench", "--seed", "1"], env=env, cwd=REPO,
                                  stdout=subprocess.DEVNULL)]
    try:
        _wait_for_groups(s, [f"swarmlog.{topic}.{a}" for a in AGENTS], procs)
        if processes:
            start_run(settings=s, swarm=ring, run_id="bench", seed=1, topic=topic)
        collected = _collect(s, topic, CHAINS * (HOPS + 1), procs)
    finally:
        _stop(procs)
    _exactly_once(s, topic, CHAINS * (HOPS + 1))
    return _measure(collected)


def raw_relay(s: Settings) -> tuple[float, int, dict[str, float]]:
    topic = fresh_topic(s, "swarm-raw")
    env = _env()
    procs = [subprocess.Popen([sys.executable, "-m", "bench.swarm", "--relay", a, "--topic", topic], env=env,
                              cwd=REPO) for a in AGENTS]
    try:
        _wait_for_groups(s, [f"bench-relay.{topic}.{a}" for a in AGENTS], procs)
        p = Producer(s.kafka_config({"enable.idempotence": True, "acks": "all"}))
        p.produce(topic, RAW_VALUE, b"bench", partition=0, headers=[(H_TYPE, b"start"), (H_TO, AGENTS[0].encode())])
        p.flush(30)
        collected = _collect(s, topic, CHAINS * (HOPS + 1), procs)
    finally:
        _stop(procs)
    _exactly_once(s, topic, CHAINS * (HOPS + 1))
    return _measure(collected)


def run(s: Settings, registry: SchemaRegistry) -> list[dict[str, Any]]:
    steps = CHAINS * HOPS
    sub = Run("swarm.swarmlog", steps, extra={"agents": len(AGENTS), "chains_in_flight": CHAINS, "hops": HOPS,
                                               "processes": len(AGENTS)})
    one = Run("swarm.swarmlog_one_process", steps, extra={"agents": len(AGENTS), "chains_in_flight": CHAINS,
                                                           "hops": HOPS, "processes": 1})
    raw = Run("swarm.raw_txn_relay", steps, extra={"agents": len(AGENTS), "chains_in_flight": CHAINS,
                                                    "hops": HOPS, "processes": len(AGENTS)})
    for r in range(reps(3)):
        for run_, fn in ((sub, lambda: swarmlog_swarm(s, processes=True)), (raw, lambda: raw_relay(s)),
                         (one, lambda: swarmlog_swarm(s, processes=False))):
            seconds, n, stats = fn()
            run_.events = n
            run_.add(seconds, **stats)
            log(f"{run_.name} rep {r}: {n / seconds:,.0f} steps/s, hop p50 {stats['p50_ms']:.0f} ms, "
                f"p99 {stats['p99_ms']:.0f} ms")
    return [
        row(sub, raw, target=">= 5000 steps/s", unit="steps", headline=True),
        row(one, raw, unit="steps"),
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--relay", metavar="AGENT", required=True, help="run one baseline relay agent")
    parser.add_argument("--topic", required=True)
    args = parser.parse_args()
    relay(Settings.from_env(), args.topic, args.relay)
