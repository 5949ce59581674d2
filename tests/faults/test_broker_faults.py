"""The dev broker killed with SIGKILL under `append_many`, down for less and for more than the flush
timeout, and frozen with SIGSTOP for longer than it.

Must show (issue 11): broker down 90 s under append_many with a 60 s flush timeout — no event has
an unknown fate, no offset is paired with the wrong event, no duplicate after the caller's retry.
The caller here is what the AppendIncomplete error tells a caller to do: append the same events
again with the same event ids until the call returns their offsets.
"""

from __future__ import annotations

import threading
import time

import pytest

from swarmlog.errors import AppendIncomplete
from swarmlog.log.append import EventLog
from swarmlog_connectors.postgres_sink import PostgresSink

from . import harness

BATCHES = 60
PER_BATCH = 100


def _producer(settings, timeout: float, results: dict) -> None:
    """append_many in batches, each retried with the same ids until it returns; records every claim."""
    claims: dict[str, int] = {}  # event id -> offset, from every return and every "written" fate
    fates_seen: list[str] = []
    produced: list[str] = []
    incomplete = 0
    try:
        with EventLog(settings=settings) as log:
            for b in range(BATCHES):
                events = [("agent.message", {"kind": "k", "body": f"{b}/{i}"},
                           {"agent": "producer", "event_id": f"b{b:03d}-{i:03d}"}) for i in range(PER_BATCH)]
                produced += [kw["event_id"] for _, _, kw in events]
                while True:
                    try:
                        offsets = log.append_many(events, timeout=timeout)
                        break
                    except AppendIncomplete as exc:
                        incomplete += 1
                        fates_seen += [f.state for f in exc.fates]
                        claims.update(exc.offsets)
                results.setdefault("first_batch_done", time.monotonic())
                claims.update(zip([kw["event_id"] for _, _, kw in events], offsets, strict=True))
                time.sleep(0.1)  # spread the batches over the outage
    except BaseException as exc:  # surfaced by the test
        results["error"] = exc
    results.update(claims=claims, fates=fates_seen, produced=produced, incomplete=incomplete)


# (signal, seconds down, flush timeout): SIGKILL'd, the broker is away for `down` plus its restart
# (a minute or more on a busy machine), hence the long timeout of the shorter case.
CASES = {
    "shorter": harness.scaled(("SIGKILL", 5.0, 180.0), None),
    "longer": harness.scaled(("SIGKILL", 90.0, 60.0), ("SIGKILL", 25.0, 10.0)),
    "frozen": harness.scaled(("SIGSTOP", 90.0, 60.0), ("SIGSTOP", 20.0, 10.0)),
}


@pytest.mark.parametrize("case", [c for c, how in CASES.items() if how is not None])
def test_appends_through_a_broker_outage_keep_every_event_once_in_order_at_its_offset(
        case, settings, registry, mirror_db, dev_cluster):
    how, down, timeout = CASES[case]
    results: dict = {}
    producer = threading.Thread(target=_producer, args=(settings, timeout, results), daemon=True)
    producer.start()
    deadline = time.monotonic() + 120
    while "first_batch_done" not in results and "error" not in results:
        assert time.monotonic() < deadline, "the producer never got going"
        time.sleep(0.1)
    time.sleep(1.0)
    killed_at = time.monotonic()
    if how == "SIGKILL":
        dev_cluster.kill_broker()
        time.sleep(down)
        restart_took = dev_cluster.restart()
    else:
        dev_cluster.freeze_broker()
        time.sleep(down)
        dev_cluster.thaw()  # SIGCONT
        restart_took = 0.0
    unavailable = time.monotonic() - killed_at
    producer.join(timeout=600)
    assert not producer.is_alive(), "the producer is still stuck"
    assert "error" not in results, repr(results.get("error"))

    topic_rows = harness.read_topic(settings, registry)
    by_offset = dict(topic_rows)
    audit = harness.audit_order(results["produced"], topic_rows)
    wrong_pairs = sum(1 for eid, off in results["claims"].items() if by_offset.get(off) != eid)
    unknown_fates = sum(1 for state in results["fates"] if state not in ("written", "pending", "failed"))
    PostgresSink(settings=settings.model_copy(update={"database_url": mirror_db}), registry=registry).run(
        until_end=True)
    audit += harness.audit_mirror(topic_rows, harness.read_mirror(mirror_db, settings.topic))

    away = f"down {down:.0f} s + {restart_took:.0f} s restart" if how == "SIGKILL" else f"stopped {down:.0f} s"
    harness.record(harness.Row(
        f"broker {how}, {away} {'<' if case == 'shorter' else '>'} flush timeout {timeout:.0f} s, under "
        f"append_many", 1, audit,
        f"{results['incomplete']} append_many call(s) incomplete, retried with the same ids; "
        f"{len(results['claims'])} offsets returned, {wrong_pairs} paired with the wrong event; "
        f"{unknown_fates} unknown fates; broker away {unavailable:.0f} s"))
    assert audit.clean, audit
    assert wrong_pairs == 0 and unknown_fates == 0
    assert len(results["claims"]) == BATCHES * PER_BATCH
    if case != "shorter":
        assert results["incomplete"] > 0, "the outage never outlasted a flush: the case proved nothing"
    else:
        assert unavailable < timeout, "the broker was away longer than the flush timeout: not the shorter case"
