"""EventLog's pairing of acknowledgements with events when the broker does not answer in time.

Pure logic: an appender over the in-memory log that holds its messages back while "the broker is
away", as librdkafka's producer does (never timing a message out), and reports them in send order
when it is back. The same guarantee on the real broker, stopped with SIGKILL for longer than the
flush timeout, is tests/faults/test_broker_faults.py.
"""

from __future__ import annotations

from collections import Counter

import pytest

from swarmlog.errors import AppendIncomplete
from swarmlog.log.append import EventLog
from swarmlog.log.base import Delivered
from swarmlog.log.memory import InMemoryLog
from swarmlog.schema.codec import Decoder


class _HeldAppender:
    """Sends to the in-memory log only while ``up``; refuses the values in ``refuse``."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.up = True
        self.refuse: set[bytes] = set()
        self.queue: list[tuple] = []
        self.report = Delivered()
        self.sends = 0

    def send(self, value, key, headers) -> None:
        self.sends += 1
        self.queue.append((value, key, headers))

    def _deliver(self) -> None:
        while self.up and self.queue:
            value, key, headers = self.queue.pop(0)
            if any(r in value for r in self.refuse):
                self.report.errors[len(self.report.offsets)] = "MSG_SIZE_TOO_LARGE: refused"
                self.report.offsets.append(-1)
                continue
            self.inner.send(value, key, headers)
            self.report.offsets += self.inner.flush(0).offsets

    def flush(self, timeout: float) -> Delivered:
        self._deliver()
        report, self.report = self.report, Delivered()
        report.pending = len(self.queue)
        return report

    def close(self, timeout: float = 30.0) -> int:
        self._deliver()
        return len(self.queue)


class _Backend(InMemoryLog):
    held: _HeldAppender

    def appender(self, topic: str) -> _HeldAppender:  # type: ignore[override]
        self.held = _HeldAppender(super().appender(topic))
        return self.held


@pytest.fixture
def held(run_settings, registry):
    backend = _Backend()
    backend.create_topic(run_settings.topic)
    return EventLog(settings=run_settings, registry=registry, backend=backend), backend


def _events(n: int, prefix: str) -> list[tuple[str, dict, dict]]:
    return [("agent.message", {"kind": "k", "body": f"{prefix}{i}"}, {"agent": "a", "event_id": f"{prefix}{i}"})
            for i in range(n)]


def _in_log(backend: InMemoryLog, topic: str, registry) -> list[tuple[int, str]]:
    decoder = Decoder(registry)
    return [(m.offset(), decoder.decode(m.value(), m.offset())[1]["event_id"]) for m in backend.messages(topic)]


def test_a_flush_that_times_out_says_of_each_event_whether_it_is_written_or_still_queued(held, run_settings):
    log, backend = held
    first = log.append_many(_events(3, "w"))
    backend.held.up = False
    with pytest.raises(AppendIncomplete) as err:
        log.append_many(_events(5, "q"))
    assert [f.state for f in err.value.fates] == ["pending"] * 5
    assert err.value.pending == [f"q{i}" for i in range(5)] and err.value.offsets == {}
    assert "append them again with the same event ids" in str(err.value)
    assert first == [0, 1, 2]


def test_a_retry_with_the_same_event_ids_writes_each_event_once_and_pairs_each_offset_with_its_event(
        held, run_settings, registry):
    log, backend = held
    events = _events(20, "e")
    backend.held.up = False
    for _ in range(3):  # the broker stays away through several retries
        with pytest.raises(AppendIncomplete) as err:
            log.append_many(events)
        assert len(err.value.pending) == 20
    assert backend.held.sends == 20  # the retries sent nothing again
    backend.held.up = True
    offsets = log.append_many(events)
    in_log = _in_log(backend, run_settings.topic, registry)
    assert Counter(eid for _, eid in in_log) == Counter(f"e{i}" for i in range(20))  # each once
    assert dict(in_log) == dict(zip(offsets, [f"e{i}" for i in range(20)], strict=True))  # each offset is its event's
    assert offsets == sorted(offsets)  # in the order they were appended


def test_late_acknowledgements_are_never_paired_with_a_later_calls_events(held, run_settings, registry):
    """The reported bug: the next call returned 40 offsets for its 20 events."""
    log, backend = held
    backend.held.up = False
    with pytest.raises(AppendIncomplete):
        log.append_many(_events(20, "late"))
    backend.held.up = True
    second = log.append_many(_events(20, "next"))
    by_offset = dict(_in_log(backend, run_settings.topic, registry))
    assert [by_offset[o] for o in second] == [f"next{i}" for i in range(20)]
    # The first call's events were written meanwhile, once; their retry only learns the offsets.
    sends = backend.held.sends
    first = log.append_many(_events(20, "late"))
    assert backend.held.sends == sends
    assert [by_offset[o] for o in first] == [f"late{i}" for i in range(20)]


def test_part_written_part_queued_and_a_refused_event_sent_again_on_retry(held, run_settings, registry):
    log, backend = held
    backend.held.refuse = {b"poison"}
    log.produce("agent.message", {"kind": "k", "body": "ok"}, agent="a", event_id="ok")
    log.produce("agent.message", {"kind": "k", "body": "poison"}, agent="a", event_id="bad")
    with pytest.raises(AppendIncomplete) as err:
        log.flush()
    assert [f.state for f in err.value.fates] == ["written", "failed"]
    assert err.value.failed == {"bad": "MSG_SIZE_TOO_LARGE: refused"}
    backend.held.refuse = set()
    log.produce("agent.message", {"kind": "k", "body": "ok"}, agent="a", event_id="ok")
    log.produce("agent.message", {"kind": "k", "body": "poison"}, agent="a", event_id="bad")
    offsets = log.flush()
    assert [eid for _, eid in _in_log(backend, run_settings.topic, registry)] == ["ok", "bad"]
    assert offsets == [0, 1]


def test_closing_with_events_still_queued_says_their_fate_is_unknown(held):
    from swarmlog.errors import AppendFailed

    log, backend = held
    backend.held.up = False
    log.produce("agent.message", {"kind": "k", "body": "x"}, agent="a")
    with pytest.raises(AppendFailed, match="may or may not be in the log"):
        log.close()
