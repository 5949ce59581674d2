"""A log that no longer starts at offset 0 is refused or loudly flagged, never replayed as the run (in memory).

The same on Kafka, with DeleteRecords and a finite retention.ms: tests/integration/test_retention.py.
"""

from __future__ import annotations

import pytest

from swarmlog.errors import HistoryIncomplete
from swarmlog.log.append import EventLog
from swarmlog.replaying import replay, replay_swarm
from swarmlog.replaying.causality import check_causality
from swarmlog.runtime import run_agents, start_run
from swarmlog.token import token_from

from .. import swarms


def _fill(backend, run_settings, registry, n=20) -> list[int]:
    with EventLog(settings=run_settings, registry=registry, backend=backend) as log:
        return log.append_many([("agent.message", {"kind": "k", "body": str(i)}, {"agent": f"a{i % 3}"})
                                for i in range(n)])


def test_replay_refuses_a_log_whose_first_offsets_were_deleted(backend, run_settings, registry):
    _fill(backend, run_settings, registry)
    backend.delete_records(run_settings.topic, before=5)
    with pytest.raises(HistoryIncomplete) as err:
        replay(settings=run_settings, registry=registry, backend=backend)
    assert (err.value.topic, err.value.log_start) == (run_settings.topic, 5)
    assert "--from-log-start" in str(err.value)


def test_a_replay_from_the_log_start_says_where_it_began_and_its_token_records_it(backend, run_settings, registry):
    _fill(backend, run_settings, registry)
    whole = replay(settings=run_settings, registry=registry, backend=backend)
    backend.delete_records(run_settings.topic, before=5)
    rest = replay(settings=run_settings, registry=registry, backend=backend, from_log_start=True)
    assert (whole.start_offset, rest.start_offset, rest.events) == (0, 5, 15)
    assert rest.to_json()["start_offset"] == 5 and rest.agents != whole.agents
    token = token_from(rest, topic=run_settings.topic, run=None, code_version=None, reducer="ledger")
    assert token.start_offset == 5


def test_agents_and_swarm_replay_refuse_to_rebuild_from_a_partial_log(backend, run_settings, registry):
    start_run(settings=run_settings, swarm=swarms.relay, run_id="r", seed=1, backend=backend)
    run_agents(settings=run_settings, swarm=swarms.relay, until_quiet=0.3, backend=backend)
    backend.delete_records(run_settings.topic, before=3)
    with pytest.raises(HistoryIncomplete):
        run_agents(settings=run_settings, swarm=swarms.relay, until_quiet=0.3, backend=backend)
    with pytest.raises(HistoryIncomplete):
        replay_swarm(settings=run_settings, swarm=swarms.relay, registry=registry, backend=backend)


def test_check_causality_flags_a_log_that_does_not_start_at_zero(backend, run_settings, registry):
    _fill(backend, run_settings, registry)
    backend.delete_records(run_settings.topic, before=7)
    count, violations = check_causality(settings=run_settings, registry=registry, backend=backend)
    assert count == 13 and [(v.offset, v.rule) for v in violations] == [(7, "history_incomplete")]
