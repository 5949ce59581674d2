"""`swarmlog regress` on the real broker and mirror: twenty recorded runs of a swarm, a code change that
breaks some of them, and a report that names exactly those runs, grouped by where the code departs.

Which runs the change must break is not hard-coded: each run's own log says whether its seed drew
the peers that meet one of the two changes (``swarms.late_fix_triggers``), and which it meets first.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from swarmlog.cli import EXIT_FAILED
from swarmlog.log.protocol import MESSAGE
from swarmlog.runtime import run_agents, start_run

from .. import swarms
from .conftest import create_topics, read_log
from .test_runtime import _env

RUNS = 20
FIX = "RelayLateFix"


def _regress(settings, *argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "swarmlog.cli", "regress", *argv], env=env or _env(settings),
                          capture_output=True, text=True, timeout=600)


def _record(settings, topic: str, swarm: str, *, hash_seed: int) -> None:
    """A run recorded as `swarmlog run` records it: a process pinned to ``hash_seed``, live to its end."""
    env = {**_env(settings), "SWARMLOG_TOPIC": topic, "PYTHONHASHSEED": str(hash_seed)}
    env.pop("SWARMLOG_REEXEC_HASH_SEED", None)
    live = subprocess.run([sys.executable, "-m", "swarmlog.cli", "run", swarm, "--run-id", topic, "--seed", "1",
                           "--until-quiet", "1"], env=env, capture_output=True, text=True, timeout=300)
    assert live.returncode == 0, live.stderr


def record_relay_runs(base_settings, registry, n: int) -> dict[str, Any]:
    """``n`` runs of the relay (seeds 0..n-1), each on a topic of its own, live to their end; per run,
    the first offset where each of RelayLateFix's changes alters a step, read from the run's own log."""
    prefix = f"swarmlog.regress-{uuid.uuid4().hex[:8]}"
    topics = [f"{prefix}.run{i:02d}" for i in range(n)]
    create_topics(base_settings, topics)
    triggers = {}
    for seed, topic in enumerate(topics):
        settings = base_settings.model_copy(update={"topic": topic})
        start_run(settings=settings, swarm=swarms.relay, run_id=f"run-{seed}", seed=seed)
        run_agents(settings=settings, swarm=swarms.relay, until_quiet=0.5)
        messages = [(r.offset, r.record["to"], r.record["payload"]) for r in read_log(settings, registry)
                    if r.event_type == MESSAGE]
        triggers[topic] = swarms.late_fix_triggers(messages)
    return {"prefix": prefix, "topics": topics, "triggers": triggers}


@pytest.fixture(scope="module")
def recorded(base_settings, registry) -> dict[str, Any]:
    return record_relay_runs(base_settings, registry, RUNS)


def expected_groups(triggers: dict[str, dict[str, int]]) -> dict[str, set[str]]:
    """Handler -> the runs whose first altered step is that handler's."""
    groups: dict[str, set[str]] = {}
    for topic, first in triggers.items():
        if first:
            handler = min(first, key=first.__getitem__)
            groups.setdefault(f"{FIX}.{handler}", set()).add(topic)
    return groups


def test_a_regression_replay_names_exactly_the_runs_a_change_breaks_grouped_by_where_and_in_junit(
        base_settings, recorded, tmp_path):
    expected = expected_groups(recorded["triggers"])
    broken = set().union(*expected.values()) if expected else set()
    # Some runs break, some do not (live runs interleave their agents as threads do, so which ones is
    # read from the logs); in practice both changes are met first by some run, and so two groups.
    assert 0 < len(broken) < RUNS and set(expected) <= {f"{FIX}.hop", f"{FIX}.finished"}, expected

    junit = tmp_path / "regress.xml"
    pattern = re.escape(recorded["prefix"]) + r"\.run\d+"
    proc = _regress(base_settings, "--swarm", "tests.swarms:relay_late_fix", "--topics-pattern", pattern,
                    "--jobs", "2", "--json", "--junit", str(junit))
    assert proc.returncode == 4, proc.stderr
    report = json.loads(proc.stdout)
    assert report["runs"] == RUNS and report["counts"]["diverged"] == len(broken)
    assert report["counts"]["clean"] == RUNS - len(broken)
    by_topic = {o["topic"]: o for o in report["outcomes"]}
    assert {t for t, o in by_topic.items() if o["status"] == "diverged"} == broken
    assert {t for t, o in by_topic.items() if o["status"] == "clean"} == set(recorded["topics"]) - broken
    # One line per change, every run it breaks under it, and where: the step the log says it alters.
    assert {g["handler"]: set(g["runs"]) for g in report["groups"]} == expected
    for topic in broken:
        first = by_topic[topic]["first_divergence"]
        assert first["offset"] == min(recorded["triggers"][topic].values()), topic
        assert by_topic[topic]["run_id"] == f"run-{recorded['topics'].index(topic)}"

    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None and suite.get("tests") == str(RUNS) and suite.get("failures") == str(len(broken))
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert set(cases) == set(recorded["topics"])
    for topic, case in cases.items():
        failure = case.find("failure")
        assert (failure is not None) == (topic in broken), topic
        if failure is not None:  # names the run and where it departs
            offset = by_topic[topic]["first_divergence"]["offset"]
            assert f"run {by_topic[topic]['run_id']} diverged first at offset {offset}" in failure.get("message", "")
            assert by_topic[topic]["handler"] in failure.get("message", "")

    # The code that recorded them: every run clean, exit 0; the table says no run changed.
    same = _regress(base_settings, "--swarm", "tests.swarms:relay", "--topics-pattern", pattern)
    assert same.returncode == 0, same.stderr
    assert f"{RUNS} run(s) replayed" in same.stdout and "no run changed" in same.stdout


def test_the_runs_listed_in_the_mirror_by_swarm_and_time_are_the_ones_replayed(base_settings, recorded, db):
    prefix = recorded["prefix"]
    # Another swarm's run beside them: mirrored too, never listed for the relay.
    other = base_settings.model_copy(update={"topic": f"{prefix}.other"})
    create_topics(base_settings, [other.topic])
    _record(base_settings, other.topic, "tests.swarms:sets", hash_seed=7)
    sink = subprocess.run([sys.executable, "-m", "swarmlog.cli", "sink", "--topics-pattern",
                           re.escape(prefix) + r"\..*", "--group", f"{prefix}-sink", "--until-end"],
                          env=_env(base_settings), capture_output=True, text=True, timeout=300)
    assert sink.returncode == 0, sink.stderr
    mirrored = {r[0] for r in db.execute("SELECT DISTINCT topic FROM events WHERE topic LIKE %s", (prefix + ".%",))}
    assert mirrored == {*recorded["topics"], other.topic}

    proc = _regress(base_settings, "--swarm", "tests.swarms:relay", "--from-mirror", "--since", "2h", "--json")
    assert proc.returncode == 0, proc.stderr
    listed = [o["topic"] for o in json.loads(proc.stdout)["outcomes"]]
    assert set(recorded["topics"]) <= set(listed) and other.topic not in listed
    assert listed.index(recorded["topics"][0]) < listed.index(recorded["topics"][-1])  # oldest first

    sets = _regress(base_settings, "--swarm", "tests.swarms:sets", "--from-mirror", "--since", "2h", "--json")
    outcomes = {o["topic"]: o["status"] for o in json.loads(sets.stdout)["outcomes"]}
    assert outcomes[other.topic] == "clean" and not set(recorded["topics"]) & set(outcomes), sets.stderr

    future = _regress(base_settings, "--swarm", "tests.swarms:relay", "--from-mirror", "--since", "2999-01-01")
    assert future.returncode == 2 and "no recorded run matched" in future.stderr, future.stderr


def test_runs_that_cannot_be_checked_are_reported_as_such_and_another_swarms_run_is_skipped(
        base_settings, recorded):
    prefix = f"swarmlog.regress-{uuid.uuid4().hex[:8]}"
    cut, gone, other = f"{prefix}.cut", f"{prefix}.gone", f"{prefix}.other"
    create_topics(base_settings, [cut, other])
    _record(base_settings, cut, "tests.swarms:relay", hash_seed=0)
    _record(base_settings, other, "tests.swarms:sets", hash_seed=0)
    admin = AdminClient({"bootstrap.servers": base_settings.bootstrap_servers})
    admin.delete_records([TopicPartition(cut, 0, 10)])[TopicPartition(cut, 0, 10)].result(30)
    clean = recorded["topics"][0]

    proc = _regress(base_settings, "--swarm", "tests.swarms:relay", "--topic", clean, "--topic", cut, "--topic", gone,
                    "--topic", other, "--json")
    assert proc.returncode == 3, proc.stderr  # nothing diverged, but not every run could be checked
    status = {o["topic"]: (o["status"], o["detail"]) for o in json.loads(proc.stdout)["outcomes"]}
    assert status[clean] == ("clean", None)
    assert status[cut][0] == "history-incomplete" and "starts at offset 10" in status[cut][1]
    assert status[gone][0] == "unreadable" and "does not exist" in status[gone][1]
    assert status[other][0] == "skipped" and "'sets'" in status[other][1]


def test_each_run_is_replayed_under_the_string_hash_seed_it_was_recorded_with(base_settings, tmp_path):
    """Two runs of a set-iterating swarm, pinned to different seeds: both replay clean, though the
    regression replay itself runs under a third (its workers are restarted with each run's)."""
    prefix = f"swarmlog.regress-{uuid.uuid4().hex[:8]}"
    topics = [f"{prefix}.seed5", f"{prefix}.seed11"]
    create_topics(base_settings, topics)
    for topic, hash_seed in zip(topics, (5, 11), strict=True):
        _record(base_settings, topic, "tests.swarms:sets", hash_seed=hash_seed)
    env = {**_env(base_settings), "PYTHONHASHSEED": "303"}
    proc = _regress(base_settings, "--swarm", "tests.swarms:sets", "--topic", topics[0], "--topic", topics[1],
                    "--jobs", "1", "--json", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [o["status"] for o in json.loads(proc.stdout)["outcomes"]] == ["clean", "clean"]


def test_a_worker_killed_mid_run_fails_that_run_alone(base_settings, recorded, tmp_path):
    """A worker that dies (OOM-killed, say) costs only the run it was replaying; the others get their verdicts."""
    victim = recorded["topics"][1]
    # Killed from outside the handlers (the determinism guard refuses signals inside them): as the
    # worker process starts replaying that run, which it does after importing the swarm's module.
    (tmp_path / "regress_killer.py").write_text(
        "import os, signal\n"
        "import swarmlog.regression._worker as worker\n"
        "from tests.swarms import relay as swarm\n"
        "replay = worker.Replayer._replay\n"
        "def _replay(self, topic):\n"
        f"    if topic == {victim!r}:\n"
        "        os.kill(os.getpid(), signal.SIGKILL)  # as the kernel's OOM killer would\n"
        "    return replay(self, topic)\n"
        "worker.Replayer._replay = _replay\n")
    env = _env(base_settings)
    env["PYTHONPATH"] = f"{tmp_path}:{env['PYTHONPATH']}"
    proc = _regress(base_settings, "--swarm", "regress_killer:swarm", "--topic", recorded["topics"][0], "--topic",
                    victim, "--topic", recorded["topics"][2], "--jobs", "1", "--json", env=env)
    assert proc.returncode == 3, proc.stderr
    status = {o["topic"]: (o["status"], o["detail"] or "") for o in json.loads(proc.stdout)["outcomes"]}
    assert status[victim][0] == "failed" and "exit status -9" in status[victim][1], status
    assert status[recorded["topics"][0]][0] == status[recorded["topics"][2]][0] == "clean"


def test_an_unreachable_broker_stops_the_regression_with_exit_69(base_settings, recorded):
    env = {**_env(base_settings), "SWARMLOG_BOOTSTRAP_SERVERS": "127.0.0.1:1", "SWARMLOG_CONNECT_TIMEOUT": "2"}
    proc = _regress(base_settings, "--swarm", "tests.swarms:relay", "--topic", recorded["topics"][0], env=env)
    assert proc.returncode == 69 and "cannot reach Kafka" in proc.stderr, proc.stderr



def test_a_worker_that_cannot_start_stops_the_regression_with_a_typed_error_naming_it_and_the_cause(
        base_settings, recorded, tmp_path):
    """The swarm loads in the command's process but its import raises in the workers: the error the worker
    reports comes back as RegressionWorkerFailed (exit 70, as any run-time error), naming the worker and the
    worker's error type."""
    (tmp_path / "regress_no_worker.py").write_text(
        "import sys\n"
        "if sys.argv[0].endswith('_worker.py'):\n"
        "    raise RuntimeError('this swarm refuses to load in a regression worker')\n"
        "from tests.swarms import relay as swarm\n")
    env = _env(base_settings)
    env["PYTHONPATH"] = f"{tmp_path}:{env['PYTHONPATH']}"
    proc = _regress(base_settings, "--swarm", "regress_no_worker:swarm", "--topic", recorded["topics"][0], env=env)
    assert proc.returncode == EXIT_FAILED, proc.stderr
    assert re.search(r"a regression worker \(pid \d+, PYTHONHASHSEED=\d+\) failed as it started: SwarmImportFailed: "
                     r".*this swarm refuses to load in a regression worker", proc.stderr), proc.stderr
    assert "swarmlog replay --swarm" in proc.stderr


def test_the_commands_verbosity_reaches_the_worker_processes(base_settings, recorded):
    """-v (after the command or before it) is passed to each worker, which logs as the command line does
    (observe.logs): -v its progress, -vv its debug lines; without -v, neither."""
    topic = recorded["topics"][0]
    worker = "swarmlog.regression._worker: "
    quiet = _regress(base_settings, "--swarm", "tests.swarms:relay", "--topic", topic, "--jobs", "1")
    assert quiet.returncode == 0, quiet.stderr
    assert worker not in quiet.stderr, quiet.stderr
    verbose = _regress(base_settings, "--swarm", "tests.swarms:relay", "--topic", topic, "--jobs", "1", "-v")
    assert verbose.returncode == 0, verbose.stderr
    assert re.search(rf"INFO {re.escape(worker)}replaying {re.escape(topic)} \(worker pid \d+", verbose.stderr), \
        verbose.stderr
    assert f"{worker}{topic}: clean in" not in verbose.stderr  # a debug line: -vv
    debug = subprocess.run([sys.executable, "-m", "swarmlog.cli", "-vv", "regress", "--swarm", "tests.swarms:relay",
                            "--topic", topic, "--jobs", "1"], env=_env(base_settings), capture_output=True, text=True,
                           timeout=600)
    assert debug.returncode == 0, debug.stderr
    assert re.search(rf"DEBUG {re.escape(worker)}{re.escape(topic)}: clean in [\d.]+s \(\d+ events\)",
                     debug.stderr), debug.stderr


def test_the_pytest_plugin_fails_a_test_when_the_candidate_changes_a_recorded_run_naming_it_and_where(
        base_settings, recorded, tmp_path):
    """The CI recipe (docs/regression.md): a test in the user's suite, the `regress` fixture, recorded runs."""
    broken = sorted(t for t, first in recorded["triggers"].items() if first)[:2]
    clean = sorted(t for t, first in recorded["triggers"].items() if not first)[:2]
    assert broken and clean
    (tmp_path / "test_candidate.py").write_text(
        "def test_the_candidate_keeps_every_recorded_run(regress, tmp_path):\n"
        f"    regress('tests.swarms:relay_late_fix', topics={broken + clean!r}, junit=tmp_path / 'r.xml')\n"
        "\n"
        "def test_the_recorded_code_keeps_them(regress):\n"
        f"    report = regress('tests.swarms:relay', topics={broken + clean!r})\n"
        f"    assert report.counts()['clean'] == {len(broken + clean)}\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                          env=_env(base_settings), cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "1 failed, 1 passed" in proc.stdout, proc.stdout
    assert "tests.swarms:relay_late_fix changes recorded runs" in proc.stdout
    for topic in broken:  # each run named, with where it first departs
        offset = min(recorded["triggers"][topic].values())
        assert re.search(re.escape(topic) + rf"\s+offset {offset} \(agent r\d, output\)", proc.stdout), proc.stdout
    for topic in clean:  # (named in the test's own source, which pytest shows, but listed as no change)
        assert not re.search(re.escape(topic) + r"\s+offset", proc.stdout), proc.stdout


CASE_STUDY_RUNS = 200  # issue 31's Must-show: 200 recorded case-study runs, some buggy, some fixed


def test_over_case_study_runs_of_buggy_and_fixed_code_the_fix_changes_exactly_those_that_dropped_a_late_message(
        base_settings, tmp_path):
    """The case study's runs, half recorded by the buggy reviewer and half by the fixed one, under schedules
    the simulator draws (a run is exported to a topic of its own, offset for offset, as a live run writes it).
    Replayed against the fix, the runs it changes are exactly the buggy ones whose reviewer ignored a late
    task_complete, as each run's own recorded state says; all in one group, the handler the fix changed."""
    from swarmlog.examples import case_study
    from swarmlog.testing import Simulator, export

    prefix = f"swarmlog.regress-cs-{uuid.uuid4().hex[:8]}"
    effects = {"work": {"summary": "done", "took_ms": 1}}
    sims = {"buggy": Simulator(case_study.buggy, effects=effects), "fixed": Simulator(case_study.fixed,
                                                                                      effects=effects)}
    changed, recorded_by = set(), {}
    for seed in range(CASE_STUDY_RUNS):
        code = "buggy" if seed % 2 else "fixed"
        run = sims[code].run(seed)
        topic = f"{prefix}.{code}-{seed:03d}"
        export(run, settings=base_settings, topic=topic, verify=False)
        recorded_by[topic] = code
        if run.states["reviewer"]["ignored"]:
            assert code == "buggy"  # the fixed reviewer ignores nothing
            changed.add(topic)
    assert 0 < len(changed) < CASE_STUDY_RUNS // 2

    junit = tmp_path / "case-study.xml"
    proc = _regress(base_settings, "--swarm", "swarmlog.examples.case_study:fixed", "--topics-pattern",
                    re.escape(prefix) + r"\..*", "--json", "--junit", str(junit))
    assert proc.returncode == 4, proc.stderr
    report = json.loads(proc.stdout)
    assert report["runs"] == CASE_STUDY_RUNS
    assert {o["topic"] for o in report["outcomes"] if o["status"] == "diverged"} == changed
    assert {o["topic"] for o in report["outcomes"] if o["status"] == "clean"} == set(recorded_by) - changed
    (group,) = report["groups"]
    assert group["handler"] == "FixedReviewer.task_complete" and set(group["runs"]) == changed
    versions = {o["topic"]: o["code_version"] for o in report["outcomes"]}
    assert all(versions[t] == "case-study-buggy" for t in changed)
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures")) == (str(CASE_STUDY_RUNS), str(len(changed)))
    failed = {c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None}
    assert failed == changed


def test_on_a_terminal_a_progress_bar_counts_the_runs_and_their_verdicts_then_the_table(base_settings, recorded):
    import pexpect

    pattern = re.escape(recorded["prefix"]) + r"\.run\d+"
    child = pexpect.spawn(sys.executable, ["-m", "swarmlog.cli", "regress", "--swarm", "tests.swarms:relay_late_fix",
                                           "--topics-pattern", pattern, "--jobs", "2"],
                          env=_env(base_settings), encoding="utf-8", timeout=300, dimensions=(40, 160))
    try:
        # tqdm's line on stderr (the terminal): runs done of all, and the verdicts so far.
        child.expect(rf"regress:\s+\d+%.*\| *\d+/{RUNS} .*(clean|diverged)=\d+")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 4
    assert f"{RUNS} run(s) replayed against tests.swarms:relay_late_fix" in child.before
    assert "DIVERGED" in child.before


def test_ctrl_c_stops_the_regression_with_exit_130_and_leaves_no_worker_running(base_settings, recorded, tmp_path):
    import pexpect

    # Runs that take a while each (a pause before every run's replay, outside the handlers), so that
    # the interrupt lands while the workers are busy.
    (tmp_path / "regress_slow.py").write_text(
        "import time\n"
        "import swarmlog.regression._worker as worker\n"
        "from tests.swarms import relay as swarm\n"
        "replay = worker.Replayer._replay\n"
        "def _replay(self, topic):\n"
        "    time.sleep(3)\n"
        "    return replay(self, topic)\n"
        "worker.Replayer._replay = _replay\n")
    env = _env(base_settings)
    env["PYTHONPATH"] = f"{tmp_path}:{env['PYTHONPATH']}"
    child = pexpect.spawn(sys.executable, ["-m", "swarmlog.cli", "regress", "--swarm", "regress_slow:swarm",
                                           "--topics-pattern", re.escape(recorded["prefix"]) + r"\.run\d+",
                                           "--jobs", "2"],
                          env=env, encoding="utf-8", timeout=300, dimensions=(40, 160))
    try:
        child.expect(rf"\| *[1-9]\d*/{RUNS} ")  # the first verdicts are in: workers are busy with the next runs
        workers = subprocess.run(["pgrep", "-P", str(child.pid), "-f", "swarmlog.regression._worker"],
                                 capture_output=True, text=True).stdout.split()
        assert len(workers) == 2, workers
        child.sendintr()
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 130 and "Traceback" not in child.before, child.before
    for pid in workers:  # killed, not left replaying for nobody
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
