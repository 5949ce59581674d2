"""One string-hash seed for a run, across the processes that run its handlers (swarmlog.runtime.interpreter).

A handler that iterates a set of strings does things in the order of the process's string
hashes. Live in one process, restarted in a second and replayed in a third — each started
with a different PYTHONHASHSEED — the run must neither diverge nor change a state hash:
each `swarmlog` process re-executes itself with the seed recorded in run.started.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from swarmlog.errors import HashSeedMismatch
from swarmlog.log.append import EventLog
from swarmlog.log.protocol import MESSAGE, RUN_STARTED
from swarmlog.replaying import replay_swarm
from swarmlog.runtime import interpreter

from .. import swarms
from .conftest import read_log, subprocess_env

RUN_SEED = 101


def _swarmlog(settings, hash_seed: int, *argv: str) -> subprocess.CompletedProcess[str]:
    env = subprocess_env(settings)
    env["PYTHONHASHSEED"] = str(hash_seed)
    env.pop("SWARMLOG_REEXEC_HASH_SEED", None)
    return subprocess.run([sys.executable, "-m", "swarmlog.cli", *argv], env=env, capture_output=True, text=True,
                          timeout=300)


def _set_order(hash_seed: int) -> list[str]:
    code = f"import json; print(json.dumps(list(set({sorted(swarms.Scatter.ITEMS)!r}))))"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONHASHSEED": str(hash_seed)},
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def test_a_set_iterating_handler_live_restarted_and_replayed_under_three_seeds_never_diverges(settings, registry):
    # The handler really is order-sensitive under these seeds: without the pin, the restart
    # would find its outputs "differ from the log" and the replay would diverge.
    assert len({tuple(_set_order(s)) for s in (RUN_SEED, 202, 303)}) == 3

    live = _swarmlog(settings, RUN_SEED, "run", "tests.swarms:sets", "--run-id", "hs", "--seed", "3",
                     "--until-quiet", "1")
    assert live.returncode == 0, live.stderr
    first = json.loads(live.stdout)
    started = [r for r in read_log(settings, registry) if r.event_type == RUN_STARTED]
    assert started[0].record["payload"]["hash_seed"] == RUN_SEED
    assert started[0].record["payload"]["hash_algorithm"] == interpreter.hash_algorithm()

    with EventLog(settings=settings, registry=registry, run_id="hs") as log:
        log.append(MESSAGE, {"kind": "again", "body": ""}, agent="operator", to="scatter")

    # A second process, another seed: it rebuilds (checking every recorded output) and goes on live.
    restarted = _swarmlog(settings, 202, "run", "tests.swarms:sets", "--run-id", "hs", "--seed", "3",
                          "--until-quiet", "1")
    assert restarted.returncode == 0, restarted.stderr
    after = json.loads(restarted.stdout)
    assert after["steps"]["gather"] == 2 * len(swarms.Scatter.ITEMS)
    assert after["agents"] != first["agents"]  # the new input was handled

    # A third process, a third seed: the replay re-runs the code against the log.
    replayed = _swarmlog(settings, 303, "-v", "replay", "--swarm", "tests.swarms:sets", "--json")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    doc = json.loads(replayed.stdout)
    assert doc["diverged"] is False and doc["divergences"] == 0
    assert doc["agents"] == after["agents"]
    assert f"re-executing with PYTHONHASHSEED={RUN_SEED}" in replayed.stderr

    # The order the state recorded is the run's seed's, whichever seed each process started with.
    items = [r.record["payload"]["body"] for r in read_log(settings, registry)
             if r.event_type == MESSAGE and r.record["to"] == "gather"]
    assert items == _set_order(RUN_SEED) * 2


def test_a_library_caller_with_another_seed_is_refused_not_silently_diverging(settings, registry):
    assert _swarmlog(settings, RUN_SEED, "run", "tests.swarms:sets", "--run-id", "hs2", "--seed", "1",
                     "--until-quiet", "1").returncode == 0
    assert interpreter.current().seed != RUN_SEED  # this test process cannot re-execute itself
    with pytest.raises(HashSeedMismatch) as caught:
        replay_swarm(settings=settings, swarm=swarms.sets, registry=registry)
    err = caught.value
    assert err.run_id == "hs2" and err.recorded_seed == RUN_SEED and err.current_seed == interpreter.current().seed
    assert f"PYTHONHASHSEED={RUN_SEED}" in str(err)



@pytest.mark.parametrize("command", ["timeline", "state"])
def test_every_command_running_the_swarms_code_reexecutes_under_the_runs_seed_from_a_shell_without_one(
        settings, registry, command):
    # A user's shell has no PYTHONHASHSEED: the command neither refuses (HashSeedMismatch) nor folds
    # the code in another set order; it replaces itself by a process under the run's recorded seed.
    assert _swarmlog(settings, RUN_SEED, "run", "tests.swarms:sets", "--run-id", "hs3", "--seed", "1",
                     "--until-quiet", "1").returncode == 0
    end = read_log(settings, registry)[-1].offset + 1
    env = subprocess_env(settings)
    env.pop("PYTHONHASHSEED", None)
    env.pop("SWARMLOG_REEXEC_HASH_SEED", None)
    argv = ["timeline"] if command == "timeline" else ["state", "scatter", "--at", str(end)]
    proc = subprocess.run([sys.executable, "-m", "swarmlog.cli", *argv, "--json", "--swarm", "tests.swarms:sets",
                           "-v"], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert f"re-executing with PYTHONHASHSEED={RUN_SEED}" in proc.stderr
    doc = json.loads(proc.stdout)
    if command == "timeline":  # the code was run against the log, and found to do what it recorded
        assert doc["code_version"] == "sets-1" and doc["divergence"] is None
        assert len(doc["rows"]) >= 1 + len(swarms.Scatter.ITEMS)
    else:
        assert doc["state"]["order"] == [_set_order(RUN_SEED)]
