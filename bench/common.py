"""What every benchmark shares: the cluster, fresh topics, the event stream, timing and results.

A benchmark measures a *subject* (swarmlog's own path) and one or more
*baselines* in the same process, in the same run, with their repetitions
interleaved (subject, baseline, subject, baseline, ...), so that noise from
other work on the machine lands on both. Results quote the median of the
repetitions and the ratio subject / baseline; the raw samples are kept in the
JSON. Nothing here passes or fails on timing.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from swarmlog.kafka.config import admin_client
from swarmlog.kafka.topic import create_topic
from swarmlog.log.append import EventLog
from swarmlog.schema.codec import Encoder
from swarmlog.schema.registry import SchemaRegistry
from swarmlog.settings import Settings

EVENT_TYPE = "agent.message"
AGENTS = tuple(f"agent-{i:02d}" for i in range(10))
RUN_ID = "bench"
VALUE_SIZE = 200
"""Target size in bytes of one encoded ``agent.message`` value (framing included)."""
TOPIC_PREFIX = "swarmlog.bench-"


# --- configuration ----------------------------------------------------------------------------


def env_int(name: str, default: int, *, scale: bool = True) -> int:
    """An integer knob from the environment; a size is scaled down by ``BENCH_QUICK=1`` (smoke runs)."""
    raw = os.environ.get(name)
    value = int(raw.replace("_", "")) if raw else default
    if raw is None and scale and quick():
        value = max(1, value // 10)
    return value


def quick() -> bool:
    return os.environ.get("BENCH_QUICK", "") not in ("", "0")


def reps(default: int) -> int:
    """Repetitions per measurement (``BENCH_REPS`` overrides every default)."""
    raw = os.environ.get("BENCH_REPS")
    if raw:
        return max(1, int(raw))
    return max(1, default - 2) if quick() else default


def log(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


def settings() -> Settings:
    """Settings for the cluster to benchmark against.

    ``SWARMLOG_BOOTSTRAP_SERVERS`` and ``SWARMLOG_DATABASE_URL`` set: that cluster.
    Otherwise the local dev cluster, reused if it runs (``swarmlog.dev.cluster.up``
    is idempotent). The variables are then exported so that subprocesses (the
    sink, the RSS probes) reach the same cluster.
    """
    if not (os.environ.get("SWARMLOG_BOOTSTRAP_SERVERS") and os.environ.get("SWARMLOG_DATABASE_URL")):
        from swarmlog.dev import cluster

        info = cluster.up(progress=log)
        os.environ["SWARMLOG_BOOTSTRAP_SERVERS"] = info.bootstrap_servers
        os.environ["SWARMLOG_DATABASE_URL"] = info.database_url
    return Settings.from_env()


# --- topics -----------------------------------------------------------------------------------

_created: list[str] = []


def fresh_topic(s: Settings, label: str) -> str:
    """Create a new single-partition topic ``swarmlog.bench-<label>-<uuid>`` for one measurement."""
    name = f"{TOPIC_PREFIX}{label}-{uuid.uuid4().hex[:12]}"
    create_topic(s, name)
    _created.append(name)
    return name


def reserve_topic(label: str) -> str:
    """A new topic name ``swarmlog.bench-<label>-<uuid>`` for something that creates the topic itself
    (an offset-exact copy, a snapshot topic); deleted with the run's other topics."""
    return track_topic(f"{TOPIC_PREFIX}{label}-{uuid.uuid4().hex[:12]}")


def track_topic(name: str) -> str:
    """Delete ``name`` with the run's other topics (a topic made by the code a benchmark measures)."""
    _created.append(name)
    return name


def delete_topics(s: Settings, names: Sequence[str] | None = None) -> None:
    """Delete the topics this process created (``BENCH_KEEP_TOPICS=1`` keeps them)."""
    names = list(_created if names is None else names)
    if not names or os.environ.get("BENCH_KEEP_TOPICS", "") not in ("", "0"):
        return
    admin = admin_client(s)  # must outlive the futures
    futures = admin.delete_topics(names, operation_timeout=30, request_timeout=30)
    for name, fut in futures.items():
        try:
            fut.result(timeout=60)
        except Exception as exc:  # a cleanup failure must not hide the results
            log(f"could not delete topic {name}: {exc}")
        if name in _created:
            _created.remove(name)


# --- the event stream -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Stream:
    """A deterministic stream of ~``VALUE_SIZE``-byte ``agent.message`` events over ten agents.

    Event ``i`` is sent by ``AGENTS[i % 10]`` to the next agent, with payload
    ``payloads[i % len(payloads)]``: every event has ``to`` set, so the ledger
    touches exactly two agents per event.
    """

    payloads: tuple[dict[str, str], ...]
    body_len: int

    def event(self, i: int) -> tuple[dict[str, str], str, str]:
        return self.payloads[i % len(self.payloads)], AGENTS[i % 10], AGENTS[(i + 1) % 10]


def make_stream(registry: SchemaRegistry, *, distinct: int = 1024, value_size: int = VALUE_SIZE) -> Stream:
    """Payloads ``{"kind", "body"}`` sized so that an encoded event is ``value_size`` bytes."""
    enc = Encoder(registry.latest(EVENT_TYPE))

    def size(body_len: int) -> int:
        # A typical event id: 16 hex digits, "-", a 6-digit counter (what EventLog generates).
        payload = enc.schema.validate_payload({"kind": "note", "body": "x" * body_len})
        return len(enc.encode(_record(enc, "0123456789abcdef-123456", AGENTS[3], AGENTS[4], payload)))

    body_len = max(1, value_size - size(0))
    while body_len > 1 and size(body_len) > value_size:
        body_len -= 1
    kinds = ("note", "plan", "reply", "ask")
    words = "the swarm appends and replays events in one total order without any clock "
    payloads = []
    for i in range(distinct):
        head = f"{i:06d} "
        text = (head + words * (body_len // len(words) + 2))[:body_len]
        payloads.append({"kind": kinds[i % len(kinds)], "body": text})
    return Stream(payloads=tuple(payloads), body_len=body_len)


def _record(enc: Encoder, event_id: str, agent: str, to: str | None, payload: dict[str, Any]) -> dict[str, Any]:
    # The envelope as swarmlog.log.EventLog.produce builds it.
    return {
        "event_id": event_id, "run_id": RUN_ID, "agent_id": agent, "event_type": enc.schema.event_type,
        "schema_version": enc.schema.version, "to": to, "causes": (), "payload": payload,
    }


def encode_stream(registry: SchemaRegistry, stream: Stream, n: int,
                  ) -> list[tuple[bytes, bytes, list[tuple[str, bytes]]]]:
    """``(value, key, headers)`` of events ``0..n-1`` exactly as EventLog would send them."""
    enc = Encoder(registry.latest(EVENT_TYPE))
    prefix = uuid.uuid4().hex[:16] + "-"
    out = []
    for i in range(n):
        payload, agent, to = stream.event(i)
        valid = enc.schema.validate_payload(payload)
        value = enc.encode(_record(enc, f"{prefix}{i + 1}", agent, to, valid))
        key = agent.encode()
        out.append((value, key, enc.headers(key, to.encode())))
    return out


def populate(s: Settings, registry: SchemaRegistry, stream: Stream, topic: str, n: int, *, start: int = 0) -> float:
    """Append events ``start..start+n-1`` of the stream with EventLog; return the seconds it took."""
    t0 = time.perf_counter()
    with EventLog(settings=s, registry=registry, topic=topic, run_id=RUN_ID) as el:
        produce, event = el.produce, stream.event
        for i in range(start, start + n):
            payload, agent, to = event(i)
            produce(EVENT_TYPE, payload, agent=agent, to=to)
            if (i + 1 - start) % 200_000 == 0:
                el.flush()
        el.flush()
    return time.perf_counter() - t0


def copied_run(s: Settings, ts: Settings, registry: SchemaRegistry, swarm: Any, *, run_id: str, label: str,
               checkpoints: bool = False) -> int:
    """A long log, fast: ``swarm``'s run to quiet over an in-memory log of topic ``ts.topic``, copied
    offset-exact (:meth:`~swarmlog.kafka.KafkaBackend.create_copy`) into a new topic of that name on the
    cluster of ``s``, and with ``checkpoints`` its snapshot topic too; the log's end (it fails unless
    the copy ends there). The runtime writes it as it would on Kafka (the transactions, the markers'
    offsets, the checkpoints in the transactions that hold them), at a fraction of the cost.
    """
    # Imported here: most benchmarks never write a log this way, and the in-memory log brings the guard.
    from swarmlog.kafka.backend import KafkaBackend
    from swarmlog.kafka.reader import watermarks
    from swarmlog.log.memory import InMemoryLog
    from swarmlog.log.protocol import snapshot_topic
    from swarmlog.runtime import run_agents, start_run

    mem = InMemoryLog()
    mem.create_topic(ts.topic)
    t0 = time.perf_counter()
    start_run(settings=ts, swarm=swarm, run_id=run_id, seed=1, registry=registry, backend=mem)
    run_agents(settings=ts, swarm=swarm, registry=registry, until_quiet=1.0, backend=mem)
    end = mem.watermarks(ts.topic)[1]
    log(f"{label}: the run wrote {end:,} offsets in memory in {time.perf_counter() - t0:.0f} s; copying them")
    backend = KafkaBackend(s)
    try:
        if backend.create_copy(ts.topic, mem.messages(ts.topic), end=end) != end:
            raise RuntimeError(f"{label}: the copy of the run does not end where the run did")
        if checkpoints:
            side = track_topic(snapshot_topic(ts.topic))
            backend.create_topic(side)
            appender = backend.appender(side)
            for m in mem.messages(side):
                appender.send(m.value(), m.key(), m.headers())
            delivered = appender.flush(60.0)
            appender.close()
            if delivered.errors or delivered.pending:
                raise RuntimeError(f"{label}: the checkpoints were not all copied: {delivered}")
    finally:
        backend.close()
    if watermarks(ts, ts.topic)[1] != end:
        raise RuntimeError(f"{label}: the copied topic does not end where the run did")
    return end


# --- timing and results -----------------------------------------------------------------------


@dataclass(slots=True)
class Run:
    """The repetitions of one measured thing: ``events`` per repetition, seconds per repetition."""

    name: str
    events: int
    samples: list[float] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    extra_samples: dict[str, list[float]] = field(default_factory=dict)
    """Per-repetition values of extra metrics (latencies, RSS); their median is reported."""

    def add(self, seconds: float, **extra: float) -> None:
        self.samples.append(seconds)
        for k, v in extra.items():
            self.extra_samples.setdefault(k, []).append(v)

    @property
    def seconds(self) -> float:
        return statistics.median(self.samples)

    @property
    def events_per_s(self) -> float:
        return self.events / self.seconds

    def medians(self) -> dict[str, float]:
        return {k: round(statistics.median(v), 3) for k, v in self.extra_samples.items()}


def row(subject: Run, baseline: Run | None = None, **extra: Any) -> dict[str, Any]:
    """One result object: the subject's median beside its baseline's, and the ratio of rates."""
    out: dict[str, Any] = {
        "name": subject.name,
        "events": subject.events,
        "seconds": round(subject.seconds, 4),
        "events_per_s": round(subject.events_per_s, 1),
        "baseline": baseline.name if baseline else None,
        "baseline_events_per_s": round(baseline.events_per_s, 1) if baseline else None,
        "ratio": round(subject.events_per_s / baseline.events_per_s, 3) if baseline else None,
    }
    out.update(subject.medians())
    if baseline is not None:
        out.update({f"baseline_{k}": v for k, v in baseline.medians().items()})
    out.update(subject.extra)
    out["reps"] = len(subject.samples)
    out["samples_s"] = [round(x, 4) for x in subject.samples]
    if baseline is not None:
        out["baseline_samples_s"] = [round(x, 4) for x in baseline.samples]
    out.update(extra)
    return out


def interleave(reps_: int, *steps: Callable[[int], None]) -> None:
    """Run ``steps`` in turn, ``reps_`` times: A B C, A B C, ... (noise hits all of them alike)."""
    for r in range(reps_):
        for step in steps:
            step(r)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values (q in 0..100)."""
    if not sorted_values:
        return float("nan")
    k = max(0, min(len(sorted_values) - 1, int(round(q / 100 * len(sorted_values) + 0.5)) - 1))
    return sorted_values[k]


def chunks(items: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]
