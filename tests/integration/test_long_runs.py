"""Long runs on the real broker (``swarmlog continue``, docs/long-runs.md): a run continued on a second topic,
its agents and the command run as processes. The continued run reaches the states the run reaches on one
topic, a replay of the new topic verifies across both, a changed handler that departs in the old part is
named through the link, a SIGKILL of ``continue`` loses and duplicates nothing, and with the old topic
deleted the new one still runs and replays from its seeds, saying so."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from swarmlog.client import Client
from swarmlog.kafka.config import admin_client
from swarmlog.log.protocol import RUN_CONTINUED, RUN_SEEDED
from swarmlog.runtime import start_run
from swarmlog.settings import Settings

from ..conftest import new_topic_name
from .conftest import read_log
from .test_runtime import _env

SWARM = "tests.swarms_continued:rally"
CHANGED = "tests.swarms_continued:rally_changed"


def _cli(settings: Settings, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "swarmlog.cli", *args], env=_env(settings), capture_output=True,
                          text=True, timeout=timeout)


def _play(settings: Settings, serves: int) -> dict[str, str]:
    """``serves`` rallies, each served from outside and played out by the swarm as a process until quiet:
    every agent's state hash (the last process's)."""
    hashes: dict[str, str] = {}
    for _ in range(serves):
        Client(settings=settings, sender="umpire").send("a", "serve", "")
        done = _cli(settings, "run", SWARM, "--until-quiet", "1")
        assert done.returncode == 0, done.stderr[-3000:]
        hashes = json.loads(done.stdout.strip().splitlines()[-1])["agents"]
    return hashes


def _started(base_settings: Settings, run_id: str) -> Settings:
    from tests import swarms_continued

    settings = base_settings.model_copy(update={"topic": new_topic_name("long")})
    from swarmlog.kafka.topic import create_topic

    create_topic(settings, settings.topic)
    start_run(settings=settings, swarm=swarms_continued.rally, run_id=run_id, seed=11)
    return settings


@pytest.fixture(scope="module")
def continued(base_settings: Settings) -> dict:
    """A run of two rallies on its first topic, continued on a second one where a third is played; and the
    same three rallies on one topic."""
    old = _started(base_settings, "long")
    one = _started(base_settings, "long")
    new = old.model_copy(update={"topic": new_topic_name("long-new")})
    _play(old, 2)
    done = _cli(old, "continue", "--swarm", SWARM, "--from", old.topic, "--to", new.topic)
    assert done.returncode == 0, done.stderr[-3000:]
    return {"old": old, "new": new, "one": one, "continue_out": done.stdout, "continued": _play(new, 1),
            "uninterrupted": _play(one, 3)}


def test_a_run_continued_on_a_second_topic_replays_and_verifies_across_both(continued, registry, tmp_path):
    old, new = continued["old"], continued["new"]
    assert f"run continued on {new.topic}" in continued["continue_out"]
    # The same states as the run on one topic: the timer set in the second rally fired on the new topic.
    assert continued["continued"] == continued["uninterrupted"]
    records = read_log(new, registry)
    assert [r.event_type for r in records[:3]] == [RUN_CONTINUED, RUN_SEEDED, RUN_SEEDED]
    link = records[0].record["payload"]
    assert link["from_topic"] == old.topic and json.loads(link["from_token"])["topic"] == old.topic
    done = _cli(new, "replay", "--swarm", SWARM, "--json")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert not report["diverged"] and report["agents"] == continued["continued"]
    assert report["continues"]["status"] == "verified" and report["continues"]["from_topic"] == old.topic
    assert report["continues"]["seeds"] == {"a": "same", "b": "same"}
    assert report["continues"]["events"] > 0
    text = _cli(new, "replay", "--swarm", SWARM, "--token-out", str(tmp_path / "new.json"))
    assert text.returncode == 0 and f"continues topic {old.topic} [0, {link['from_end']}): VERIFIED" in text.stdout
    # The new topic's token covers the link, and the link the old topic's token: `replay --verify` checks both.
    verified = _cli(new, "replay", "--verify", str(tmp_path / "new.json"))
    assert verified.returncode == 0, verified.stdout[-3000:] + verified.stderr[-3000:]
    assert f"link: {new.topic} continues {old.topic} [0, {link['from_end']}): MATCHES" in verified.stdout


def test_a_changed_handler_diverging_in_the_old_part_is_named_through_the_link(continued):
    old, new = continued["old"], continued["new"]
    done = _cli(new, "replay", "--swarm", CHANGED, "--json")
    assert done.returncode == 4, done.stdout[-3000:] + done.stderr[-3000:]
    link = json.loads(done.stdout)["continues"]
    assert link["status"] == "diverged" and link["first_divergence"]["agent"] == "b"
    assert link["first_divergence"]["offset"] < link["from_end"]
    text = _cli(new, "replay", "--swarm", CHANGED)
    assert text.returncode == 4 and f"DIVERGED in {old.topic} first at offset " in text.stdout


def test_the_mirror_lists_each_part_of_a_continued_run_for_a_regression_replay(continued, db):
    import datetime as dt
    import re

    from swarmlog_connectors.recorded_runs import recorded_runs

    old, new = continued["old"], continued["new"]
    sink = _cli(old, "sink", "--topics-pattern", f"{re.escape(old.topic)}|{re.escape(new.topic)}", "--group",
                f"{new.topic}-sink", "--until-end")
    assert sink.returncode == 0, sink.stderr[-3000:]
    since = dt.datetime.now(dt.UTC) - dt.timedelta(hours=2)
    runs = {r.topic: r for r in recorded_runs(old, swarm="rally", since=since) if r.topic in (old.topic, new.topic)}
    assert set(runs) == {old.topic, new.topic}  # the part on the new topic is no less a recorded run
    assert runs[new.topic].run_id == runs[old.topic].run_id == "long"


def test_continue_sigkilled_mid_way_then_retried_writes_the_link_and_seeds_exactly_once(base_settings, registry):
    old = _started(base_settings, "long-kill")
    new = old.model_copy(update={"topic": new_topic_name("long-kill-new")})
    hashes = _play(old, 2)
    # Killed at varied points of its work (starting, replaying the old part, writing the transaction):
    # whatever a killed attempt left open, the next one fences and aborts.
    started = time.monotonic()
    for delay in (0.6, 1.0, 1.4, 1.8, 2.2, 2.6):
        proc = subprocess.Popen([sys.executable, "-m", "swarmlog.cli", "continue", "--swarm", SWARM, "--from",
                                 old.topic, "--to", new.topic, "--json"], env=_env(old), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
    retried = _cli(old, "continue", "--swarm", SWARM, "--from", old.topic, "--to", new.topic, "--json")
    assert retried.returncode == 0, retried.stderr[-3000:]
    again = _cli(old, "continue", "--swarm", SWARM, "--from", old.topic, "--to", new.topic, "--json")
    assert json.loads(again.stdout)["created"] is False
    assert time.monotonic() - started < 240
    records = read_log(new, registry)
    kinds = Counter(r.event_type for r in records)
    assert kinds == Counter({RUN_CONTINUED: 1, RUN_SEEDED: 2}), kinds
    ids = [r.record["event_id"] for r in records]
    assert len(ids) == len(set(ids))
    # Nothing lost either: the new topic goes on from the old one's states, and replays clean across both.
    more = _play(new, 1)
    assert set(more) == set(hashes) and more != hashes
    done = _cli(new, "replay", "--swarm", SWARM, "--json")
    assert done.returncode == 0, done.stdout[-3000:]
    assert json.loads(done.stdout)["continues"]["status"] == "verified"


def test_continue_sigkilled_inside_its_transaction_leaves_nothing_visible_and_the_retry_writes_once(
        base_settings, registry):
    from swarmlog.kafka.reader import high_watermark, watermark_consumer
    from swarmlog.kafka.topic import create_topic

    old = _started(base_settings, "long-txn")
    _play(old, 1)
    consumer = watermark_consumer(old)
    try:
        for _ in range(6):  # a kill that lands after the commit proves nothing here: try again on another topic
            new = old.model_copy(update={"topic": new_topic_name("long-txn-new")})
            create_topic(new, new.topic)
            proc = subprocess.Popen([sys.executable, "-m", "swarmlog.cli", "continue", "--swarm", SWARM, "--from",
                                     old.topic, "--to", new.topic, "--json"], env=_env(old),
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            # The link is acknowledged before the seeds are sent and the transaction commits: killed as soon as
            # the topic's end moves, the process dies with its transaction open.
            while proc.poll() is None and high_watermark(new, new.topic, consumer=consumer) == 0:
                time.sleep(0.001)
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=60)
            written = high_watermark(new, new.topic, consumer=consumer)
            retried = _cli(old, "continue", "--swarm", SWARM, "--from", old.topic, "--to", new.topic, "--json")
            assert retried.returncode == 0, retried.stderr[-3000:]
            if json.loads(retried.stdout)["created"]:
                break  # nothing the killed attempt sent was committed: the retry wrote the link
        else:
            pytest.fail("no kill landed inside the transaction in 6 tries")
    finally:
        consumer.close()
    assert written > 0  # the killed attempt had sent records: aborted by the retry's fence, never visible
    records = read_log(new, registry)
    assert Counter(r.event_type for r in records) == Counter({RUN_CONTINUED: 1, RUN_SEEDED: 2})
    assert records[0].offset >= written  # the committed link comes after what the killed attempt left


def test_an_agent_left_on_the_old_topic_stops_at_its_end_not_ready_and_says_where_the_run_went(continued):
    import urllib.error
    import urllib.request

    from swarmlog.kafka.reader import high_watermark

    from .dev_clusters import free_ports

    old, new = continued["old"], continued["new"]
    end = high_watermark(old, old.topic)
    port = free_ports(1)[0]
    proc = subprocess.Popen([sys.executable, "-m", "swarmlog.cli", "run", SWARM, "--agent", "a", "--metrics-port",
                             str(port)], env=_env(old), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline, ready = time.monotonic() + 60, (0, "")
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                    ready = (r.status, r.read().decode())
            except urllib.error.HTTPError as exc:
                ready = (exc.code, exc.read().decode())
            except OSError:
                pass
            if ready[0] == 503 and new.topic in ready[1]:
                break
            time.sleep(0.3)
        assert ready[0] == 503 and f"goes on on topic {new.topic!r}" in ready[1], ready
        assert proc.poll() is None  # parked, not exited: no crash loop
        assert high_watermark(old, old.topic) == end  # and it wrote nothing more there
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert f"goes on on topic {new.topic!r}" in err
    # Continuing the old topic a second time is refused, naming the topic to continue instead; nothing written.
    other = new_topic_name("long-other")
    again = _cli(old, "continue", "--swarm", SWARM, "--from", old.topic, "--to", other)
    assert again.returncode == 70 and f"went on on topic {new.topic!r} already" in again.stderr, again.stderr
    assert f"--from {new.topic}" in again.stderr
    assert high_watermark(old, other) == 0


def test_with_the_old_topic_deleted_the_new_one_runs_and_replays_from_its_seeds_with_a_clear_note(base_settings,
                                                                                                  tmp_path):
    old = _started(base_settings, "long-gone")
    new = old.model_copy(update={"topic": new_topic_name("long-gone-new")})
    _play(old, 1)
    done = _cli(old, "continue", "--swarm", SWARM, "--from", old.topic, "--to", new.topic)
    assert done.returncode == 0, done.stderr[-3000:]
    admin = admin_client(old)  # kept: a client collected while its request is in flight fails it
    admin.delete_topics([old.topic])[old.topic].result(30)
    live = _play(new, 2)  # the agents start from their seeds: the old topic is not read
    replayed = _cli(new, "replay", "--swarm", SWARM, "--json")
    assert replayed.returncode == 0, replayed.stdout[-3000:] + replayed.stderr[-3000:]
    report = json.loads(replayed.stdout)
    assert not report["diverged"] and report["agents"] == live
    assert report["continues"]["status"] == "gone"
    assert "does not exist any more" in report["continues"]["detail"]
    text = _cli(new, "replay", "--swarm", SWARM, "--token-out", str(tmp_path / "new.json"))
    assert text.returncode == 0 and f"continues topic {old.topic}" in text.stdout and "GONE" in text.stdout
    verified = _cli(new, "replay", "--verify", str(tmp_path / "new.json"))
    assert verified.returncode == 0 and f"continues {old.topic}" in verified.stdout and "GONE" in verified.stdout


def test_continue_and_replay_in_a_terminal_finish_with_their_progress_bars(base_settings):
    import pexpect

    old = _started(base_settings, "long-tty")
    new = old.model_copy(update={"topic": new_topic_name("long-tty-new")})
    _play(old, 1)
    # On a terminal both show a tqdm bar: one with no total yet refuses bool(), which once crashed both commands.
    for argv, done in ((["continue", "--swarm", SWARM, "--from", old.topic, "--to", new.topic],
                        f"run continued on {new.topic}"),
                       (["replay", "--swarm", SWARM, "--topic", new.topic], "VERIFIED")):
        child = pexpect.spawn(sys.executable, ["-m", "swarmlog.cli", *argv], env=_env(old), encoding="utf-8",
                              timeout=300, dimensions=(40, 200))
        try:
            child.expect(pexpect.EOF)
        finally:
            child.close()
        assert child.exitstatus == 0 and done in child.before and "Traceback" not in child.before, child.before
