"""Which checkpoint a restart takes, and what finding it reads (:meth:`swarmlog.runtime.resume.Checkpoints.latest`)."""

from __future__ import annotations

import json
from typing import Any

from swarmlog.log.memory import InMemoryLog
from swarmlog.log.protocol import H_AGENT, H_SNAPSHOT_AT, H_SNAPSHOT_CODE, snapshot_topic
from swarmlog.runtime.resume import CHECKPOINT_FIELD, Checkpoints
from swarmlog.runtime.snapshots import SNAPSHOT_FORMAT, schema_digest

TOPIC = "t"


class _Counting:
    """The in-memory log, counting the messages its readers hand out."""

    def __init__(self, inner: InMemoryLog) -> None:
        self.inner = inner
        self.read = 0

    def reader(self, topic: str, **kw: Any) -> Any:
        outer = self
        reader = self.inner.reader(topic, **kw)

        class Counted:
            def assign(self, start: int) -> None:
                reader.assign(start)

            def batches(self, **kw: Any) -> Any:
                for batch in reader.batches(**kw):
                    outer.read += len(batch)
                    yield batch

            def __enter__(self) -> Counted:
                return self

            def __exit__(self, *exc: object) -> None:
                reader.close()

        return Counted()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _write(log: InMemoryLog, registry: Any, agent: str, at: int, *, code: str = "v1", checkpoint: bool = True,
           schemas: str | None = None) -> None:
    fold: dict[str, Any] = {"format": 1, "agent": agent, "position": at}
    if checkpoint:
        fold[CHECKPOINT_FIELD] = {"step": at - 1}
    doc = {"format": SNAPSHOT_FORMAT, "topic": TOPIC, "agent": agent, "at": at, "code_version": code,
           "schemas": schemas or schema_digest(registry), "last": [at - 1, 0], "fold": fold}
    appender = log.appender(snapshot_topic(TOPIC))
    appender.send(json.dumps(doc).encode(), agent.encode(),
                  [(H_AGENT, agent.encode()), (H_SNAPSHOT_AT, str(at).encode()), (H_SNAPSHOT_CODE, code.encode())])
    appender.close()


def _checkpoints(backend: Any, registry: Any, agent: str) -> Checkpoints:
    return Checkpoints(backend=backend, topic=TOPIC, registry=registry, code_version="v1", agent=agent, every=10)


def test_a_restart_takes_the_latest_checkpoint_its_code_and_schemas_can_restore(registry):
    log = InMemoryLog()
    log.create_topic(snapshot_topic(TOPIC))
    _write(log, registry, "a", 100)
    _write(log, registry, "a", 200)
    _write(log, registry, "a", 300, code="v2")  # another code's fold
    _write(log, registry, "a", 310, schemas="elsewhere")  # read through other schemas
    _write(log, registry, "a", 320, checkpoint=False)  # a debugger's snapshot: no digest vouches for it
    _write(log, registry, "b", 400)  # another agent's
    _write(log, registry, "a", 900)  # past where the log ends
    got = _checkpoints(log, registry, "a").latest(before=500)
    assert got is not None and (got.at, got.step) == (200, 199)
    assert _checkpoints(log, registry, "c").latest(before=500) is None


def test_a_restart_finds_its_checkpoint_without_reading_every_checkpoint_ever_written(registry):
    log = InMemoryLog()
    log.create_topic(snapshot_topic(TOPIC))
    for i in range(5000):  # a long run's checkpoints of five agents
        _write(log, registry, f"a{i % 5}", 10 * (i + 1))
    counting = _Counting(log)
    got = _checkpoints(counting, registry, "a3").latest(before=10**9)
    assert got is not None and got.at == 10 * 4999
    assert counting.read <= 64  # one window from the end, not the 5,000 records


def test_no_snapshot_topic_means_no_checkpoint(registry):
    assert _checkpoints(InMemoryLog(), registry, "a").latest(before=10) is None
