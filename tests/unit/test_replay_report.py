"""The replay report: what it holds, and that Postgres' jsonb can take it."""

from __future__ import annotations

import json

from swarmlog.replaying.report import MAX_DIVERGENCES, swarm_report
from swarmlog.runtime import Divergence, SwarmReplayResult
from swarmlog.token import ReplayToken
from swarmlog_connectors.replay_reports import _no_nul


def _result(divergences: int) -> SwarmReplayResult:
    return SwarmReplayResult(
        end_offset=120, events=80, agents={"b": "2" * 64, "a": "1" * 64}, stream_hash="f" * 64,
        divergences=[Divergence(offset=10 + i, agent="a", detail="output differs", recorded={"x": i},
                                replayed={"x": -i}) for i in range(divergences)],
        steps={"a": 40, "b": 39}, unverified_from={"b": 118})


def _token(result: SwarmReplayResult) -> ReplayToken:
    return ReplayToken(topic="t", run_id="r", seed=7, code_version="v1", start_offset=0,
                       end_offset=result.end_offset, events=result.events, stream_hash=result.stream_hash,
                       agents=dict(result.agents), reducer="swarm:s")


def test_the_report_holds_the_verdict_the_states_and_the_token_and_is_json():
    result = _result(3)
    doc = swarm_report(result, swarm="s", topic="t", group="swarmlog-replay.t", token=_token(result))
    assert json.loads(json.dumps(doc)) == doc
    assert doc["diverged"] is True and doc["divergences"] == 3
    assert doc["first_divergence"]["offset"] == 10 and [d["offset"] for d in doc["divergence_list"]] == [10, 11, 12]
    assert doc["agents"] == {"a": "1" * 64, "b": "2" * 64} and doc["unverified_from"] == {"b": 118}
    assert doc["token"]["stream_hash"] == doc["stream_hash"] and (doc["run_id"], doc["seed"]) == ("r", 7)


def test_the_report_lists_at_most_max_divergences_but_counts_them_all():
    result = _result(MAX_DIVERGENCES + 5)
    doc = swarm_report(result, swarm="s", topic="t", group=None, token=_token(result))
    assert len(doc["divergence_list"]) == MAX_DIVERGENCES and doc["divergences"] == MAX_DIVERGENCES + 5


def test_a_nul_character_in_a_report_is_spelled_out_because_jsonb_refuses_it():
    doc = {"first_divergence": {"recorded": {"body": "a\x00b"}, "k\x00": ["\x00"]}, "n": 1}
    clean = _no_nul(doc)
    assert "\x00" not in json.dumps(clean, ensure_ascii=False)
    assert clean == {"first_divergence": {"recorded": {"body": "a\\u0000b"}, "k\\u0000": ["\\u0000"]}, "n": 1}
