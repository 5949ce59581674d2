"""Swarm: five agents in transactional steps — steps/s and per-hop latency — beside a raw
confluent-kafka transactional relay of the same shape.

The swarm is a ring of five agents ``s0..s4``. ``s0`` starts ``CHAINS`` chains at
``run.started``; every ``hop`` message is one step of the agent it is addressed to, which
sends the chain on to the next agent until it has made ``HOPS`` hops. Every agent is its
own process (one pod per agent, as on Kubernetes), reads the whole topic, routes by
headers, and commits each batch of steps — outputs plus its consumer position — in one
Kafka transaction. ``swarm.swarmlog_one_process`` runs the same five agents as threads
of one ``swarmlog run`` process; ``swarm.swarmlog_no_state_digests`` the five processes
with ``SWARMLOG_STATE_DIGEST_EVERY=0``: what recording each step's state digest costs.

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
import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from swarmlog import Agent, Swarm, on, on_message
from swarmlog.errors import KafkaOperationFailed
from swarmlog.kafka.config import admin_client
from swarmlog.kafka.groups import group_members
from swarmlog.log.protocol import H_STEP, H_TO, H_TYPE
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


@dataclass(frozen=True, slots=True)
class Shape:
    """How many chains are in flight and how many hops each makes (the agents get it from the env)."""

    chains: int
    hops: int

    @property
    def outputs(self) -> int:
        return self.chains * (self.hops + 1)


RING = Shape(chains=CHAINS, hops=HOPS)


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


@dataclass(frozen=True, slots=True)
class RelayConfig:
    """How a baseline relay agent is configured: librdkafka settings and its poll loop.

    ``poll="consume"`` is ``consume(batch, wait)``: librdkafka returns a short batch only
    when ``wait`` expires, so a lone message waits out the rest of the timeout.
    ``poll="drain"`` is ``poll(wait)`` for the first message, then ``consume(batch - 1, 0)``
    for whatever else is already fetched: a batch as big as the backlog, never a wait
    once a message is there. ``transactional=False`` is the at-least-once floor: an
    idempotent ``acks=all`` producer and nothing else.
    """

    producer: dict[str, Any] = field(default_factory=lambda: {"linger.ms": 1})
    consumer: dict[str, Any] = field(default_factory=dict)
    poll: str = "consume"
    wait_s: float = 0.1
    batch: int = 500
    transactional: bool = True
    commit_idle: bool = True
    """Commit a transaction (offsets only) also for a batch with nothing addressed to this
    agent; ``False`` commits only batches that produced, as swarmlog's worker does."""
    flush_first: bool = False
    """Flush the outputs before ``send_offsets_to_transaction``: only to time the steps apart."""

    def to_json(self) -> str:
        return json.dumps({"producer": self.producer, "consumer": self.consumer, "poll": self.poll,
                           "wait_s": self.wait_s, "batch": self.batch, "transactional": self.transactional,
                           "commit_idle": self.commit_idle, "flush_first": self.flush_first})

    @classmethod
    def from_json(cls, text: str) -> RelayConfig:
        return cls(**json.loads(text))


def relay(settings: Settings, topic: str, me: str, config: RelayConfig = RelayConfig(),
          trace: str | None = None) -> None:
    """One baseline agent: consume a batch, produce the next hops, commit both in one transaction.

    ``trace``: a file to write, at exit, one JSON line per batch with wall-clock stamps
    (``time.time()``, comparable with the broker's LogAppendTime on one machine):
    consumed, outputs handed over, outputs acknowledged (with ``flush_first``), offsets
    sent, committed; and the input offsets of the batch.
    """
    me_b, nxt = me.encode(), _next(me).encode()
    txn = config.transactional
    pconf: dict[str, Any] = {"enable.idempotence": True, "acks": "all", **config.producer}
    if txn:
        pconf["transactional.id"] = f"bench-relay.{topic}.{me}"
    producer = Producer(settings.kafka_config(pconf))
    if txn:
        producer.init_transactions(30)
    consumer = Consumer(settings.kafka_config({
        "group.id": f"bench-relay.{topic}.{me}", "isolation.level": "read_committed",
        "enable.auto.commit": False, "auto.offset.reset": "earliest", "client.id": f"bench-relay-{me}",
        **config.consumer}))
    consumer.subscribe([topic])
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    msg_type = b"agent.message"
    drain, wait, batch = config.poll == "drain", config.wait_s, config.batch
    stamps: list[list[Any]] | None = [] if trace else None
    now = time.time
    try:
        while not stop:
            if drain:
                first = consumer.poll(wait)
                if first is None:
                    continue
                msgs = [first, *consumer.consume(batch - 1, 0)]
            else:
                msgs = consumer.consume(batch, wait)
                if not msgs:
                    continue
            t_recv = now()
            inputs = []
            for m in msgs:
                if m.error() is not None:
                    continue
                h = dict(m.headers() or ())
                if h.get(H_TO) != me_b:
                    continue
                if txn and not inputs:
                    producer.begin_transaction()
                inputs.append(m.offset())
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
            if not inputs:
                if not (txn and config.commit_idle):
                    continue
                producer.begin_transaction()
            t_prod = now()
            t_acked = t_prod
            if config.flush_first or not txn:
                producer.flush(30) if config.flush_first else producer.poll(0)
                t_acked = now()
            if txn:
                producer.send_offsets_to_transaction(
                    [TopicPartition(topic, 0, msgs[-1].offset() + 1)], consumer.consumer_group_metadata(), 30)
                t_offs = now()
                producer.commit_transaction(30)
            else:
                t_offs = t_acked
            if stamps is not None and inputs:
                stamps.append([t_recv, t_prod, t_acked, t_offs, now(), inputs])
    finally:
        consumer.close()
        if not txn:
            producer.flush(30)
        if trace and stamps is not None:
            with open(trace, "w") as f:
                for st in stamps:
                    f.write(json.dumps(st) + "\n")


# --- running and measuring --------------------------------------------------------------------


def _env(shape: Shape) -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(REPO), str(REPO / "platform"), str(REPO / "connectors")]
    env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["BENCH_SWARM_CHAINS"], env["BENCH_SWARM_HOPS"] = str(shape.chains), str(shape.hops)
    return env


def _wait_for_groups(s: Settings, groups: list[str], procs: list[subprocess.Popen]) -> None:
    admin = admin_client(s)
    deadline = time.monotonic() + 120
    while True:
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError(f"an agent process exited early (rc {p.returncode}): {p.args}")
        try:
            joined = all(group_members(admin, g) for g in groups)
        except KafkaOperationFailed as exc:  # a fresh cluster still creating __consumer_offsets, past
            if not exc.retriable:           # what group_members waits out for a moving coordinator
                raise
            joined = False
        if joined:
            time.sleep(1.0)  # members joined; let the assignments land
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"agents did not join their groups: {groups}")
        time.sleep(0.2)


def _collect(s: Settings, topic: str, expected: int, procs: list[subprocess.Popen],
             ) -> dict[int, tuple[int, int, int]]:
    """Read the committed log until ``expected`` hop outputs are in it:
    offset -> (append ms, the input's append ms, the input's offset)."""
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
    return {off: (ts, times[cause], cause) for off, (ts, cause) in out.items()}


def _exactly_once(s: Settings, topic: str, shape: Shape) -> None:
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
                        _check_answers(topic, answers, shape)
                        return
                    raise RuntimeError(m.error().str())
                h = dict(m.headers() or ())
                if h.get(H_TYPE) == b"agent.message":
                    answers[int(h[H_STEP])] += 1
    finally:
        consumer.close()


def _check_answers(topic: str, answers: Counter[int], shape: Shape) -> None:
    hops, expected = sum(answers.values()), shape.outputs
    start = min(answers) if answers else -1  # the first output answers the start
    twice = sorted(step for step, n in answers.items() if n > 1 and step != start)
    burst = answers.get(start, 0)
    if hops != expected or burst != shape.chains or twice:
        raise RuntimeError(f"{topic}: {hops} hops committed (expected exactly {expected}), {burst} chains "
                           f"started (expected {shape.chains}); inputs answered more than once: {twice[:10]}")


def _measure(collected: dict[int, tuple[int, int, int]], shape: Shape) -> tuple[float, int, dict[str, float]]:
    """(seconds, steps, latency stats) from the log: the span after the chains' first burst."""
    first_burst = sorted(collected.items())[:shape.chains]
    t0 = max(ts for _, (ts, _, _) in first_burst)
    rest = sorted(collected.items())[shape.chains:]
    t1 = max(ts for _, (ts, _, _) in rest)
    hops = sorted(float(ts - cause_ts) for _, (ts, cause_ts, _) in rest)
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


def swarmlog_swarm(s: Settings, *, processes: bool, shape: Shape = RING,
                   env_extra: dict[str, str] | None = None,
                   topic: str | None = None) -> tuple[float, int, dict[str, float]]:
    """Run the ring on a fresh topic (or ``topic``, fresh and empty); steps/s and hop latency from its log."""
    topic = topic or fresh_topic(s, "swarm")
    env = {**_env(shape), "SWARMLOG_TOPIC": topic, **(env_extra or {})}
    cmd = [sys.executable, "-m", "swarmlog.cli", "run", "bench.swarm:ring"]
    cpu_before = _children_cpu_s()
    procs: list[subprocess.Popen] = []
    try:
        if processes:
            # An agent process joins its group only once the topic holds run.started (it waits for
            # the run, as a pod started before the chart's run-start Job does). So the run is
            # started first, the four agents that only answer join, and s0 — whose answer to
            # run.started is the chains' first burst, where the measured span begins — comes last:
            # nobody's start-up is inside the span.
            start_run(settings=s, swarm=ring, run_id="bench", seed=1, topic=topic)
            first, rest = AGENTS[0], AGENTS[1:]
            procs = [subprocess.Popen(cmd + ["--agent", a], env=env, cwd=REPO, stdout=subprocess.DEVNULL)
                     for a in rest]
            _wait_for_groups(s, [f"swarmlog.{topic}.{a}" for a in rest], procs)
            procs.append(subprocess.Popen(cmd + ["--agent", first], env=env, cwd=REPO, stdout=subprocess.DEVNULL))
        else:
            procs = [subprocess.Popen(cmd + ["--run-id", "bench", "--seed", "1"], env=env, cwd=REPO,
                                      stdout=subprocess.DEVNULL)]
            _wait_for_groups(s, [f"swarmlog.{topic}.{a}" for a in AGENTS], procs)
        collected = _collect(s, topic, shape.outputs, procs)
    finally:
        _stop(procs)
    # CPU the agent processes used, whole lives included (start-up, rebuild): on a shared machine
    # a steadier measure of what a step costs than steps/s, which waits on everyone else's work too.
    cpu_us_per_step = (_children_cpu_s() - cpu_before) * 1e6 / shape.outputs
    _exactly_once(s, topic, shape)
    seconds, steps, stats = _measure(collected, shape)
    return seconds, steps, {**stats, "cpu_us_per_step": cpu_us_per_step}


def _children_cpu_s() -> float:
    """User + system CPU seconds of this process's children that have been waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def raw_relay(s: Settings, *, shape: Shape = RING, config: RelayConfig = RelayConfig(),
              trace_dir: Path | None = None) -> tuple[float, int, dict[str, float]]:
    """The baseline relay, five processes; ``trace_dir``: each writes ``<agent>.jsonl`` there (see relay)."""
    topic = fresh_topic(s, "swarm-raw")
    env = _env(shape)
    cmd = [sys.executable, "-m", "bench.swarm", "--topic", topic, "--config", config.to_json()]
    procs = [subprocess.Popen(cmd + ["--relay", a] + (["--trace", str(trace_dir / f"{a}.jsonl")] if trace_dir else []),
                              env=env, cwd=REPO) for a in AGENTS]
    try:
        _wait_for_groups(s, [f"bench-relay.{topic}.{a}" for a in AGENTS], procs)
        p = Producer(s.kafka_config({"enable.idempotence": True, "acks": "all"}))
        p.produce(topic, RAW_VALUE, b"bench", partition=0, headers=[(H_TYPE, b"start"), (H_TO, AGENTS[0].encode())])
        p.flush(30)
        collected = _collect(s, topic, shape.outputs, procs)
    finally:
        _stop(procs)
    if config.transactional:  # the at-least-once floor makes no such promise
        _exactly_once(s, topic, shape)
    if trace_dir is not None:
        (trace_dir / "log.json").write_text(json.dumps(sorted(collected.items())))
    return _measure(collected, shape)


# --- what a step costs the agent's own process, without Kafka ------------------------------------

STEP_MESSAGES = env_int("BENCH_STEP_MESSAGES", 20_000)
STEP_TXN = 200
"""Steps per transaction in :func:`agent_steps_cpu`: about what a ring agent commits at once."""


class _NoChannel:
    """An agent channel that takes everything and sends nothing: the step's own work only."""

    def begin(self) -> None: ...

    def send(self, value: bytes, key: bytes | None, headers: Any) -> None: ...

    def send_located(self, value: bytes, key: bytes | None, headers: Any) -> int:
        return -1


def agent_steps_cpu(registry: SchemaRegistry, *, digests: bool) -> float:
    """CPU seconds one ring agent's fold takes for ``STEP_MESSAGES`` live hops, in this process.

    The live path as it runs, Kafka aside: routing, decoding, the handler under the guard,
    validating and encoding its output, and (``digests``) each step's state digest and one
    ``state.digest`` record every ``STEP_TXN`` steps. Steadier than the swarm's steps/s on a
    shared machine, which waits on the broker and on everyone else's work.
    """
    import json as _json

    from swarmlog.log.memory import MemoryMessage
    from swarmlog.log.protocol import MESSAGE, route
    from swarmlog.runtime.engine import AgentCore
    from swarmlog.runtime.history import NoHistory
    from swarmlog.runtime.sink import LiveSink
    from swarmlog.schema.codec import Decoder, Encoder

    enc = Encoder(registry.latest(MESSAGE))
    msgs = []
    for i in range(STEP_MESSAGES):
        value = enc.encode_event(f"s0@{i}#0", "bench", "s0", "s1", [i],
                                 {"kind": "hop", "body": _json.dumps({"chain": i, "ttl": 5}), "urgency": "normal"})
        msgs.append(MemoryMessage(i, value, b"s0", enc.headers(b"s0", b"s1"), 0))
    sink = LiveSink(channel=_NoChannel(), registry=registry, agent="s1")  # type: ignore[arg-type]
    core = AgentCore(agent=Hopper("s1"), decoder=Decoder(registry), history=NoHistory(), live_sink=sink,
                     digest_every=1 if digests else 0)
    sink.core = core
    core.ctx.set_run(run_id="bench", seed=1)
    t0 = time.process_time()
    for j, m in enumerate(msgs):
        core.process(m, route(m.headers()))
        if j % STEP_TXN == STEP_TXN - 1:
            record = core.digest_record(position=j + 1, final=False)
            if record is not None:
                sink.write_digests(record)
    return time.process_time() - t0


def run(s: Settings, registry: SchemaRegistry) -> list[dict[str, Any]]:
    steps = CHAINS * HOPS
    sub = Run("swarm.swarmlog", steps, extra={"agents": len(AGENTS), "chains_in_flight": CHAINS, "hops": HOPS,
                                               "processes": len(AGENTS)})
    one = Run("swarm.swarmlog_one_process", steps, extra={"agents": len(AGENTS), "chains_in_flight": CHAINS,
                                                           "hops": HOPS, "processes": 1})
    raw = Run("swarm.raw_txn_relay", steps, extra={"agents": len(AGENTS), "chains_in_flight": CHAINS,
                                                    "hops": HOPS, "processes": len(AGENTS)})
    bare = Run("swarm.swarmlog_no_state_digests", steps, extra={"agents": len(AGENTS), "chains_in_flight": CHAINS,
                                                                "hops": HOPS, "processes": len(AGENTS)})
    no_digests = {"SWARMLOG_STATE_DIGEST_EVERY": "0"}
    variants: list[tuple[Run, Callable[[], tuple[float, int, dict[str, Any]]]]] = [
        (sub, lambda: swarmlog_swarm(s, processes=True)), (raw, lambda: raw_relay(s)),
        (bare, lambda: swarmlog_swarm(s, processes=True, env_extra=no_digests)),
        (one, lambda: swarmlog_swarm(s, processes=False))]
    # Five repetitions, each starting one variant later: a ring run's throughput swings by a third
    # from one run to the next on this machine (the relay's 12.0k-18.6k in one run of three), and
    # with a fixed order a variant would always follow the same one.
    for r in range(reps(5)):
        for run_, fn in variants[r % len(variants):] + variants[:r % len(variants)]:
            seconds, n, stats = fn()
            run_.events = n
            run_.add(seconds, **stats)
            cpu = f", {stats['cpu_us_per_step']:.0f} CPU-µs/step" if "cpu_us_per_step" in stats else ""
            log(f"{run_.name} rep {r}: {n / seconds:,.0f} steps/s, hop p50 {stats['p50_ms']:.0f} ms, "
                f"p99 {stats['p99_ms']:.0f} ms{cpu}")
    digest_cost = row(sub, bare, unit="steps")
    digest_cost["name"] = "swarm.swarmlog (state digests on, the default)"
    step_on = Run("swarm.agent_step_cpu", STEP_MESSAGES, extra={"state_digests": True})
    step_off = Run("swarm.agent_step_cpu_no_state_digests", STEP_MESSAGES, extra={"state_digests": False})
    for r in range(reps(5)):
        for run_, with_digests in ((step_on, True), (step_off, False)):
            cpu = agent_steps_cpu(registry, digests=with_digests)
            run_.add(cpu)
            log(f"{run_.name} rep {r}: {cpu / STEP_MESSAGES * 1e6:.1f} CPU-µs/step")
    return [
        row(sub, raw, target=">= 5000 steps/s", unit="steps", headline=True),
        row(one, raw, unit="steps"),
        row(bare, raw, unit="steps"),
        digest_cost,
        row(step_on, step_off, unit="steps"),
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--relay", metavar="AGENT", required=True, help="run one baseline relay agent")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--config", help="a RelayConfig as JSON (default: the ring's baseline)")
    parser.add_argument("--trace", help="write per-batch timestamps to this file at exit")
    args = parser.parse_args()
    relay(Settings.from_env(), args.topic, args.relay,
          RelayConfig.from_json(args.config) if args.config else RelayConfig(), args.trace)
