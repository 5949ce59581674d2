"""The regression replay's report and run selection, pure: grouping, JUnit, shards, --since."""

from __future__ import annotations

import datetime as dt
import xml.etree.ElementTree as ET

import pytest

from swarmlog.errors import UsageError
from swarmlog.regression import RegressionReport, RunOutcome, parse_since, shard
from swarmlog.regression.command import exit_status


def _diverged(topic: str, *, handler: str, offset: int, agent: str, detail: str, kind: str = "output") -> RunOutcome:
    return RunOutcome(topic=topic, status="diverged", run_id=f"id-{topic}", handler=handler, divergences=1,
                      first_divergence={"offset": offset, "agent": agent, "kind": kind, "detail": detail,
                                        "recorded": {"payload": {"x": "\x00"}}, "replayed": None})


def _report() -> RegressionReport:
    return RegressionReport(swarm="app:swarm", seconds=2.0, outcomes=[
        RunOutcome(topic="t0", status="clean", events=10),
        _diverged("t1", handler="Relay.hop", offset=6, agent="r4", detail="output r4@6#0 differs from the log"),
        _diverged("t2", handler="Relay.hop", offset=18, agent="r2", detail="output r2@18#1 differs from the log"),
        _diverged("t3", handler="Relay.hop", offset=40, agent="r1", detail="the step now writes an event the log "
                                                                           "does not have"),
        _diverged("t4", handler="Relay.finished", offset=200, agent="r3", detail="output r3@200#0 differs"),
        _diverged("t5", handler="Relay.hop", offset=9, agent="r1", detail="state differs", kind="state"),
        RunOutcome(topic="t6", status="history-incomplete", detail="starts at offset 10"),
        RunOutcome(topic="t8", status="failed", detail="a handler's error: bad byte \x01 in 'x'"),
        RunOutcome(topic="t7", status="skipped", detail="a run of swarm 'sets'"),
    ])


def test_runs_that_depart_in_the_same_handler_and_way_are_one_group_whatever_their_agents_and_offsets():
    groups = {g.key: g for g in _report().groups()}
    assert [r.topic for r in groups["Relay.hop · output"].runs] == ["t1", "t2", "t3"]
    assert groups["Relay.hop · output"].details() == {"output … differs from the log": 2,
                                                     "the step now writes an event the log does not have": 1}
    assert [r.topic for r in groups["Relay.finished · output"].runs] == ["t4"]
    assert [r.topic for r in groups["Relay.hop · state"].runs] == ["t5"]
    assert list(groups)[0] == "Relay.hop · output"  # the largest group first


def test_the_table_shows_each_group_once_with_its_runs_and_what_could_not_be_checked():
    table = _report().table()
    assert table.count("DIVERGED ") == 3 and "DIVERGED  3 run(s)  in Relay.hop (output)" in table
    assert "t1" in table and "offset 6 (agent r4, output)" in table
    assert "HISTORY-INCOMPLETE t6: starts at offset 10" in table.replace("  ", " ")
    assert "9 run(s) replayed against app:swarm" in table and "1 clean, 5 diverged" in table


def test_junit_is_valid_xml_with_a_failure_per_diverged_run_and_an_error_per_run_not_checked():
    root = ET.fromstring(_report().junit())
    (suite,) = root.findall("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == ("9", "5", "2",
                                                                                                       "1")
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    failure = cases["t1"].find("failure")
    assert failure is not None and "run id-t1 diverged first at offset 6 (agent r4, output) in Relay.hop" in (
        failure.get("message") or "")
    assert cases["t0"].find("failure") is None and cases["t6"].find("error") is not None
    assert cases["t7"].find("skipped") is not None
    assert "bad byte \\x01" in (cases["t8"].find("error").get("message") or "")  # XML 1.0 cannot hold \x01


def test_the_exit_status_says_whether_any_run_changed():
    report = _report()
    assert exit_status(report) == 4
    report.outcomes = [o for o in report.outcomes if o.status != "diverged"]
    assert exit_status(report) == 3
    report.outcomes = [o for o in report.outcomes if o.status in ("clean", "skipped")]
    assert exit_status(report) == 0


def test_shards_cover_every_run_once_and_do_not_depend_on_the_other_topics_listed():
    topics = [f"swarm.run{i}" for i in range(200)]
    shards = [shard(topics, index=i, count=7) for i in range(7)]
    assert sorted(t for s in shards for t in s) == sorted(topics)
    assert all(shards)  # 200 runs over 7 pods: none idle
    # A pod that lists one more topic (created between two pods' listings) puts the others where the rest do.
    assert shard([*topics, "swarm.new"], index=3, count=7)[:len(shards[3])] == shards[3]
    with pytest.raises(UsageError, match="JOB_COMPLETION_INDEX"):
        shard(topics, index=7, count=7)


def test_since_takes_a_duration_before_now_or_an_iso_time():
    now = dt.datetime(2026, 12, 6, 12, 0, tzinfo=dt.UTC)
    assert parse_since("7d", now=now) == now - dt.timedelta(days=7)
    assert parse_since("90m", now=now) == now - dt.timedelta(minutes=90)
    assert parse_since("2026-12-01T00:00:00", now=now) == dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
    with pytest.raises(UsageError, match="7d, 36h, 90m"):
        parse_since("last week", now=now)


def test_the_shards_reports_merge_into_the_report_of_all_runs():
    whole = _report()
    a = RegressionReport(swarm=whole.swarm, outcomes=whole.outcomes[:4], seconds=1.0, shard=(0, 2))
    b = RegressionReport(swarm=whole.swarm, outcomes=whole.outcomes[4:], seconds=1.5, shard=(1, 2))
    merged = RegressionReport.merged([a.to_json(), b.to_json()])
    assert merged.to_json()["groups"] == whole.to_json()["groups"]
    assert merged.counts() == whole.counts() and merged.seconds == 1.5
    with pytest.raises(UsageError, match="different swarms"):
        RegressionReport.merged([a.to_json(), {**b.to_json(), "swarm": "other:swarm"}])


def test_the_command_refuses_runs_chosen_no_way_or_two_ways_and_a_shard_without_its_index(capsys, monkeypatch):
    from swarmlog.cli import main

    monkeypatch.delenv("JOB_COMPLETION_INDEX", raising=False)
    assert main(["regress", "--swarm", "tests.swarms:relay"]) == 2
    assert "choose the runs one way" in capsys.readouterr().err
    assert main(["regress", "--swarm", "tests.swarms:relay", "--topic", "a", "--topics-pattern", "b"]) == 2
    assert "choose the runs one way" in capsys.readouterr().err
    assert main(["regress", "--swarm", "tests.swarms:relay", "--topic", "a", "--since", "7d"]) == 2
    assert "with --from-mirror" in capsys.readouterr().err
    assert main(["regress", "--swarm", "tests.swarms:relay", "--topic", "a", "--shards", "4"]) == 2
    assert "JOB_COMPLETION_INDEX" in capsys.readouterr().err


def test_merge_joins_the_pods_logs_into_one_report_and_its_exit_status(tmp_path, capsys):
    from swarmlog.cli import main

    whole = _report()
    a = RegressionReport(swarm=whole.swarm, outcomes=whole.outcomes[:1], shard=(0, 2))
    b = RegressionReport(swarm=whole.swarm, outcomes=whole.outcomes[1:], shard=(1, 2))
    import json

    # A pod's log as `kubectl logs` gives it: warnings, then the report's one JSON line.
    (tmp_path / "pod-0.log").write_text("2026-12-07 WARNING swarmlog: something\n" + json.dumps(a.to_json()) + "\n")
    (tmp_path / "pod-1.json").write_text(json.dumps(b.to_json(), indent=1))
    assert main(["regress", "--merge", str(tmp_path / "pod-0.log"), str(tmp_path / "pod-1.json"), "--json",
                 "--junit", str(tmp_path / "all.xml")]) == 4
    merged = json.loads(capsys.readouterr().out)
    assert merged["runs"] == len(whole.outcomes) and merged["counts"] == whole.counts()
    assert ET.parse(tmp_path / "all.xml").getroot().find("testsuite").get("tests") == str(len(whole.outcomes))
    (tmp_path / "empty.log").write_text("nothing here\n")
    assert main(["regress", "--merge", str(tmp_path / "empty.log")]) == 2
    assert "holds no regression report" in capsys.readouterr().err
