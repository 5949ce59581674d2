"""Which replication of the swarm's topic can lose acknowledged events (pure: no broker needed)."""

from __future__ import annotations

import pytest

from swarmlog.kafka.topic import fragility


@pytest.mark.parametrize(("rf", "min_isr", "brokers", "risk"), [
    (1, 1, 1, None),               # the one-broker dev cluster: nothing better is possible
    (3, 2, 3, None),               # what `swarmlog dev up --brokers 3` gives every topic
    (3, 2, 6, None),
    (1, 1, 3, "1 replica on a cluster of 3 brokers"),
    (3, 1, 3, "min.insync.replicas is 1"),
    (2, 1, 2, "min.insync.replicas is 1"),
])
def test_a_topic_that_can_lose_acknowledged_events_is_named_with_what_to_set(
        rf: int, min_isr: int, brokers: int, risk: str | None) -> None:
    found = fragility(replication_factor=rf, min_insync_replicas=min_isr, brokers=brokers)
    if risk is None:
        assert found is None
    else:
        assert found is not None and risk in found and "SWARMLOG_" in found
