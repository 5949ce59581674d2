"""A short command's start: ``swarmlog replay`` of a 3-event topic as a process, beside the floor.

Subject ``cli.cli_replay_3``: ``swarmlog replay --topic T --json`` as a process (the console
script's own code path: ``python -m swarmlog.cli``) on a fresh topic of three events, from the
spawn to the exit: the interpreter's start, swarmlog's imports, the settings, the schemas, the
Kafka clients' connections and round trips, the read to the end of the log, the JSON printed,
the interpreter's shutdown. Target: < 0.4 s (issue 14).

Baselines, repetitions interleaved, same run:

* ``cli.confluent_kafka_import``: ``python -c "import confluent_kafka"`` — a process that only
  starts Python and imports the Kafka client: the floor of any command that talks to Kafka.
* ``cli.swarmlog_cli_import``: ``python -c "import swarmlog.cli"`` — what swarmlog's own imports
  add before a command starts (beside ``cli.python_start``, ``python -c pass``).

``seconds`` is the median wall time of ``BENCH_CLI_RUNS`` (15) processes each; ``cpu_s`` the
median CPU (user + system) of the same processes, steadier on a shared machine. The processes
get their bytecode from a cache as an installed wheel does (``PYTHONPYCACHEPREFIX`` in a
temporary directory, warmed by one run first): with ``PYTHONDONTWRITEBYTECODE=1`` in the
environment every run would otherwise compile swarmlog's sources again.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path
from time import perf_counter
from typing import Any

from swarmlog.schema.registry import SchemaRegistry
from swarmlog.settings import Settings

from .common import Run, env_int, fresh_topic, interleave, log, make_stream, populate, row

REPO = Path(__file__).resolve().parent.parent
RUNS = env_int("BENCH_CLI_RUNS", 15, scale=False)


def _process(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one process run to its exit."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = perf_counter()
    cp = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    seconds = perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if cp.returncode != 0:
        raise RuntimeError(f"{argv} exited {cp.returncode}: {cp.stderr[-2000:]}")
    return seconds, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def run(s: Settings, registry: SchemaRegistry) -> list[dict[str, Any]]:
    tiny = fresh_topic(s, "replay-tiny")
    populate(s, registry, make_stream(registry), tiny, 3)
    with tempfile.TemporaryDirectory(prefix="swarmlog-bench-pyc-") as pyc:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env.update(PYTHONPYCACHEPREFIX=pyc,
                   PYTHONPATH=os.pathsep.join([str(REPO / "platform"), str(REPO / "connectors"),
                                               os.environ.get("PYTHONPATH", "")]))
        replay_argv = [sys.executable, "-m", "swarmlog.cli", "replay", "--topic", tiny, "--json"]
        out = subprocess.run(replay_argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
        if out.returncode != 0 or '"events": 3' not in out.stdout:
            raise RuntimeError(f"swarmlog replay of {tiny}: exit {out.returncode}, {out.stdout[-500:]} "
                               f"{out.stderr[-2000:]}")
        subprocess.run([sys.executable, "-c", "import swarmlog.cli"], env=env, cwd=REPO, check=True)

        cli = Run("cli.cli_replay_3", 3)
        floor = Run("cli.confluent_kafka_import", 3)
        imp = Run("cli.swarmlog_cli_import", 3)
        py = Run("cli.python_start", 3)

        def timed(run_: Run, argv: list[str]) -> Any:
            def go(r: int) -> None:
                seconds, cpu = _process(argv, env)
                run_.add(seconds, cpu_s=cpu)
            return go

        interleave(RUNS, timed(cli, replay_argv),
                   timed(floor, [sys.executable, "-c", "import confluent_kafka"]),
                   timed(imp, [sys.executable, "-c", "import swarmlog.cli"]),
                   timed(py, [sys.executable, "-c", "pass"]))
    log(f"cli.cli_replay_3: {cli.seconds:.3f} s (floor {floor.seconds:.3f} s, import swarmlog.cli "
        f"{imp.seconds:.3f} s, python {py.seconds:.3f} s)")
    return [
        row(cli, floor, headline=True, target="< 0.4 s (seconds)", unit="process",
            baseline_seconds=round(floor.seconds, 4), baseline_cpu_s=floor.medians()["cpu_s"],
            note="one `swarmlog replay` process of a 3-event topic; baseline: `python -c 'import confluent_kafka'`"),
        row(imp, py, unit="process", baseline_seconds=round(py.seconds, 4),
            note="start-up: importing swarmlog.cli beside `python -c pass`"),
    ]
