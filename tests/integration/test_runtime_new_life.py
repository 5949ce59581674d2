"""An agent whose transaction Kafka aborts starts a new life in its process: on a channel of its
own, fenced, rebuilt from offset 0, and the swarm ends as if nothing had happened.

On three brokers this follows a broker's death (tests/faults/test_leader_faults.py shows it, when the dead
broker coordinated an agent's group); here the abort is made to happen at a chosen commit, on
the session's broker, so the mechanism is exercised every time.
"""

from __future__ import annotations

import logging

import pytest

from swarmlog.errors import TransactionAborted
from swarmlog.replaying import replay_swarm
from swarmlog.runtime import _worker, run_agents, start_run

from .. import swarms
from .test_runtime import _assert_no_duplicate_and_no_lost_step


def test_an_aborted_transaction_starts_a_new_life_that_neither_duplicates_nor_loses_a_step(
        settings, registry, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    start_run(settings=settings, swarm=swarms.relay, run_id="new-life", seed=23)
    real_commit = _worker.AgentWorker._commit
    aborted: list[int] = []

    def commit(self, channel, sink, position):  # noqa: ANN001 - the worker's own signature
        # r2's second commit: Kafka aborts it, as it does when the group has forgotten the member.
        if self.agent.name == "r2" and self.transactions == 1 and not aborted:
            aborted.append(position)
            channel.abort()
            sink.in_txn = False
            raise TransactionAborted(agent="r2", detail="Broker: Unknown member (injected)")
        return real_commit(self, channel, sink, position)

    monkeypatch.setattr(_worker.AgentWorker, "_commit", commit)
    with caplog.at_level(logging.WARNING, logger="swarmlog.runtime._worker"):
        live = {r.agent: r.state_hash for r in run_agents(settings=settings, swarm=swarms.relay, until_quiet=1.0)}
    assert aborted, "the abort was never injected"
    assert any("starting a new life" in r.getMessage() and "r2" in r.getMessage() for r in caplog.records)
    _assert_no_duplicate_and_no_lost_step(settings, registry)
    result = replay_swarm(settings=settings, swarm=swarms.relay, registry=registry)
    assert result.divergences == []
    assert result.agents == live
