"""The whole-log scans of ``swarmlog retry``, ``check unhandled`` and ``patches`` (runtime/scan.py) read a
log as the engine reads it, on the in-memory log: a message that is not an event is named and skipped,
not the end of the answer; a copy of an event counts for nothing, so ``retry`` and the agents agree on
which failures are open. The same commands as processes on Kafka: tests/integration/test_evolution.py.
"""

from __future__ import annotations

from typing import Any

from swarmlog.log.append import EventLog
from swarmlog.log.protocol import HANDLER_FAILED, MESSAGE, PATCH_MARKER
from swarmlog.runtime.failures import append_retries, recorded_failures
from swarmlog.runtime.patches import patches_in_run
from swarmlog.runtime.scan import LogScan
from swarmlog.runtime.unhandled import unhandled_messages

from .test_versioned_steps import Patched, Worker, _jobs, _records, _run, _start, _swarm


def _answers(backend: Any, settings: Any, registry: Any) -> tuple[dict[str, Any], dict[str, LogScan]]:
    topic = settings.topic
    scans = {name: LogScan(backend=backend, topic=topic, registry=registry)
             for name in ("retry", "unhandled", "patches")}
    answers = {
        "retry": recorded_failures(backend=backend, topic=topic, registry=registry, scan=scans["retry"]),
        "unhandled": unhandled_messages(backend=backend, topic=topic, registry=registry,
                                        agents=_swarm(Patched).agents(), scan=scans["unhandled"]),
        "patches": {p: u.to_json() for p, u in patches_in_run(backend=backend, topic=topic, registry=registry,
                                                              scan=scans["patches"]).items()},
    }
    return answers, scans


def _resend(backend: Any, settings: Any, offset: int, *, value: bytes | None = None) -> int:
    """Another producer re-sends the message at ``offset`` (byte for byte, or ``value`` under its headers)."""
    m = next(m for m in backend.messages(settings.topic) if m.offset() == offset)
    with EventLog(settings=settings, backend=backend) as log:
        log.produce_raw(m.value() if value is None else value, key=m.key(), headers=m.headers())
        return log.flush()[0]


def test_the_whole_log_scans_name_and_skip_garbage_and_copies_and_answer_as_on_the_clean_log(
        backend, run_settings, registry):
    _start(backend, run_settings, registry)
    _jobs(backend, run_settings, registry, "a", "b")
    with EventLog(settings=run_settings, registry=registry, backend=backend, run_id="r") as log:
        log.append(MESSAGE, {"kind": "jbo", "body": "x"}, agent="client", to="w")  # a misspelt kind
    _run(backend, run_settings, registry, _swarm(Worker, fail_on="b"))
    append_retries(settings=run_settings, backend=backend, topic=run_settings.topic, registry=registry, run_id="r")
    _run(backend, run_settings, registry, _swarm(Patched, fail_on="b", code_version="2"))
    _jobs(backend, run_settings, registry, "c")
    _run(backend, run_settings, registry, _swarm(Patched, fail_on="b", code_version="2"))
    clean, _ = _answers(backend, run_settings, registry)
    (failure,) = clean["retry"]
    assert failure.retried_at is not None
    assert [u.kind for u in clean["unhandled"]] == ["jbo", "done", "done", "done"]  # and the answers to "out"
    assert clean["patches"]["new-path"]["markers"] == 2 and clean["patches"]["new-path"]["steps_before"] == 2

    # What another producer may put in the log: bytes that are not an event under a handler.failed's
    # headers, a message to `w` with bytes after the event, and copies of a failure (after its retry),
    # of the misspelt message and of a patch marker.
    (failed_at, _), = _records(backend, run_settings, registry, HANDLER_FAILED)
    unhandled_at = clean["unhandled"][0].offset
    marker_at = _records(backend, run_settings, registry, PATCH_MARKER)[0][0]
    message = next(m for m in backend.messages(run_settings.topic) if m.offset() == unhandled_at)
    garbage = _resend(backend, run_settings, failed_at, value=b"not an event at all")
    trailing = _resend(backend, run_settings, unhandled_at, value=message.value() + b"\x00trailing")
    copies = [_resend(backend, run_settings, at) for at in (failed_at, unhandled_at, marker_at)]

    dirty, scans = _answers(backend, run_settings, registry)
    assert dirty == clean
    for scan in scans.values():
        assert [(u.offset, u.kind) for u in scan.unreadable] == [(garbage, "UndecodableMessage"),
                                                                 (trailing, "TrailingBytesInValue")]
        assert [(a.offset, a.first) for a in scan.repeated] == list(zip(copies, (failed_at, unhandled_at, marker_at),
                                                                         strict=True))
        report = "\n".join(scan.report())
        assert f"offset {garbage}: not a readable event (UndecodableMessage)" in report
        assert f"offset {trailing}: not a readable event (TrailingBytesInValue)" in report
        assert all(f"offset {c}: event id" in report for c in copies)
    # The failure's copy is not a second failure: nothing is open, as the agent itself says.
    assert append_retries(settings=run_settings, backend=backend, topic=run_settings.topic, registry=registry,
                          run_id="r") == []


def test_a_scan_keeps_of_ten_thousand_messages_only_what_it_reports(backend, run_settings, registry):
    import tracemalloc

    _start(backend, run_settings, registry)
    with EventLog(settings=run_settings, registry=registry, backend=backend, run_id="r") as log:
        for i in range(10_000):
            log.produce(MESSAGE, {"kind": "job", "body": "x" * 200}, agent="client", to="w",
                        event_id=f"m-{i}")
        log.produce(MESSAGE, {"kind": "jbo", "body": "x"}, agent="client", to="w")
        log.flush()
    tracemalloc.start()
    try:
        found = unhandled_messages(backend=backend, topic=run_settings.topic, registry=registry,
                                   agents=_swarm(Worker).agents())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [u.kind for u in found] == ["jbo"]
    # Every message's Event kept would be well over 2 MB (10,000 payloads of 200 characters and more).
    assert peak < 2_000_000, peak
