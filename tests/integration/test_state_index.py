"""A kept session's index over a real Kafka log: ``state --at N`` from it equals the fold from zero."""

from __future__ import annotations

import random

from swarmlog.debug import Session
from swarmlog.runtime import run_agents, start_run
from swarmlog.settings import Settings

from .. import swarms


def test_an_indexed_session_on_kafka_answers_random_offsets_as_the_fold_from_zero(settings: Settings):
    start_run(settings=settings, swarm=swarms.relay_long, run_id="indexed", seed=5)
    run_agents(settings=settings, swarm=swarms.relay_long, until_quiet=1.0)
    session = Session(settings=settings, swarm=swarms.relay_long)
    index = session.index("r2", every=16)
    end = index.end
    assert end > 500 and index.memory.captures >= end // 16 - 5
    offsets = random.Random(9).sample(range(end + 1), 60)
    from_zero = Session(settings=settings, swarm=swarms.relay_long, snapshots=False)
    for n in offsets:
        kept, zero = session.state("r2", at=n), from_zero.state("r2", at=n)
        assert (kept.state, kept.steps) == (zero.state, zero.steps), n
        assert kept.from_snapshot is None or n - kept.from_snapshot <= 2 * 16
