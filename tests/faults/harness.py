"""What the fault suite shares: a dev cluster's processes to kill, and the audit of a topic and mirror.

Faults are real signals to real processes: the broker and Postgres of a dev cluster the suite
starts for itself (never the user's), the sink and the agents as the ``swarmlog`` CLI. Every
case is checked afterwards by reading the whole topic and the whole mirror, and reports one row
of the table ``make faults`` prints.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from swarmlog.dev import cluster, process
from swarmlog.kafka.reader import LogReader
from swarmlog.log.protocol import parse_step
from swarmlog.schema.codec import Decoder
from swarmlog.schema.registry import SchemaRegistry
from swarmlog.settings import Settings

from ..conftest import REPO, subprocess_env

SCALE = os.environ.get("SWARMLOG_FAULTS", "slice")
"""``full`` (``make faults``): every case at its stated size. ``slice`` (``make test``): the same
cases, smaller and shorter, minutes in all."""
FULL = SCALE == "full"


def scaled(full: Any, slice_: Any) -> Any:
    return full if FULL else slice_


# --- the table ---------------------------------------------------------------------------------


@dataclass
class Audit:
    """What reading the whole topic (or mirror) back found, against what should be there."""

    checked: int = 0
    lost: int = 0
    duplicated: int = 0
    out_of_order: int = 0

    def __add__(self, other: Audit) -> Audit:
        return Audit(self.checked + other.checked, self.lost + other.lost, self.duplicated + other.duplicated,
                     self.out_of_order + other.out_of_order)

    @property
    def clean(self) -> bool:
        return self.lost == self.duplicated == self.out_of_order == 0


@dataclass
class Row:
    fault: str
    repetitions: int
    audit: Audit
    notes: str = ""


ROWS: list[Row] = []


def record(row: Row) -> None:
    ROWS.append(row)


def table(rows: Sequence[Row]) -> str:
    lines = ["| fault | repetitions | events checked | lost | duplicated | out of order | notes |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        if r.repetitions:
            a = r.audit
            lines.append(f"| {r.fault} | {r.repetitions} | {a.checked:,} | {a.lost} | {a.duplicated} | "
                         f"{a.out_of_order} | {r.notes} |")
        else:
            lines.append(f"| {r.fault} | — | — | — | — | — | {r.notes} |")
    return "\n".join(lines)


# --- auditing ------------------------------------------------------------------------------------


def audit_order(expected: Sequence[str], observed: Iterable[tuple[int, str]]) -> Audit:
    """``expected`` ids in the order they were produced; ``observed`` (offset, id) of everything read.

    Lost: expected and not there. Duplicated: there more than once. Out of order: an expected
    event at a lower offset than the one produced before it.
    """
    seen: Counter[str] = Counter()
    first: dict[str, int] = {}
    for off, eid in observed:
        seen[eid] += 1
        first.setdefault(eid, off)
    offsets = [first[e] for e in expected if e in first]
    wanted = set(expected)
    return Audit(checked=len(expected), lost=sum(1 for e in expected if e not in first),
                 duplicated=sum(n - 1 for e, n in seen.items() if n > 1 and e in wanted),
                 out_of_order=sum(1 for a, b in zip(offsets, offsets[1:], strict=False) if b < a))


def audit_steps(log: Sequence[Any]) -> Audit:
    """A swarm's log (``read_log``'s records, in offset order) against what its agents owe it.

    Checked: every hop sent, and every step taken. Lost: a hop its recipient never handled (no
    output of that agent names the hop's offset as its step). Duplicated: an event id written
    twice. Out of order: an agent's step at a lower input offset than one it took before, or an
    output at or before the offset that caused it.
    """
    ids = Counter(r.record["event_id"] for r in log)
    handled = {(r.record["agent_id"], step[0]) for r in log if (step := parse_step(r.record["event_id"])) is not None}
    hops = [(r.offset, r.record["to"]) for r in log
            if r.event_type == "agent.message" and r.record["payload"]["kind"] == "hop"]
    out_of_order = 0
    last_step: dict[str, int] = {}
    for r in log:
        step = parse_step(r.record["event_id"])
        if step is None:
            continue
        agent = r.record["agent_id"]
        causes = r.record["causes"]
        out_of_order += step[0] < last_step.get(agent, -1) or bool(causes and causes[0] >= r.offset)
        last_step[agent] = max(step[0], last_step.get(agent, -1))
    return Audit(checked=len(hops) + len(handled), lost=sum(1 for off, to in hops if (to, off) not in handled),
                 duplicated=sum(n - 1 for n in ids.values() if n > 1), out_of_order=out_of_order)


def read_topic(settings: Settings, registry: SchemaRegistry) -> list[tuple[int, str]]:
    """(offset, event id) of every event of the whole topic, read_committed, in offset order."""
    decoder = Decoder(registry)
    out = []
    with LogReader(settings=settings) as reader:
        reader.assign(0)
        for batch in reader.batches():
            for m in batch:
                try:
                    out.append((m.offset(), decoder.decode(m.value(), m.offset())[1]["event_id"]))
                except Exception:  # noqa: BLE001 - not an event: the cases that write such check them apart
                    continue
    return out


def read_mirror(database_url: str, topic: str) -> list[tuple[int, str]]:
    with psycopg.connect(database_url, autocommit=True) as conn:
        return [(int(s), e) for s, e in conn.execute(
            "SELECT seq, event_id FROM events WHERE topic = %s ORDER BY seq", (topic,)).fetchall()]


def audit_mirror(topic_rows: Sequence[tuple[int, str]], mirror_rows: Sequence[tuple[int, str]]) -> Audit:
    """The mirror against the topic: every event once, at its offset (``seq``)."""
    audit = audit_order([e for _, e in topic_rows], mirror_rows)
    where = dict(topic_rows)
    at = {e: s for s, e in mirror_rows}
    audit.out_of_order += sum(1 for e, s in at.items() if e in where and where[e] != s)
    return audit


# --- the dev cluster's processes -------------------------------------------------------------------


def _quiet(_: str) -> None:
    pass


@dataclass
class DevCluster:
    """A dev cluster of the suite's own (its own home and ports): the one process set it may kill.

    Never the cluster the user works with: ``make faults`` (and ``make test``'s slice) starts a
    throwaway one, kills and restarts its broker and Postgres, and purges it at the end.
    """

    home: Path
    kafka_port: int
    controller_port: int
    postgres_port: int
    outages: list[float] = field(default_factory=list)
    frozen: list[int] = field(default_factory=list)

    def _where(self) -> dict[str, Any]:
        return {"home": self.home, "kafka_port": self.kafka_port, "controller_port": self.controller_port,
                "postgres_port": self.postgres_port}

    def ensure_up(self) -> cluster.ClusterInfo:
        self.thaw()
        for attempt in range(3):
            try:
                return cluster.up(**self._where(), progress=_quiet)
            except Exception:  # noqa: BLE001 - issue 11 item 3: `dev up` right after a crash may fail once
                if attempt == 2:
                    raise
                time.sleep(2)
        raise AssertionError("unreachable")

    def down(self) -> None:
        self.thaw()
        cluster.down(home=self.home, purge=True, progress=_quiet)

    def _status(self) -> cluster.ClusterStatus:
        return cluster.status(**self._where())

    def broker_pid(self) -> int:
        pid = self._status().kafka.pid
        assert pid is not None, "the suite's broker is not running"
        return pid

    def kill_broker(self) -> None:
        pid = self.broker_pid()
        os.kill(pid, signal.SIGKILL)
        _wait_dead([pid])

    def freeze_broker(self) -> None:
        """SIGSTOP: the broker keeps its connections open and answers nothing, then picks up where it was."""
        pid = self.broker_pid()
        os.kill(pid, signal.SIGSTOP)
        self.frozen.append(pid)

    def thaw(self) -> None:
        while self.frozen:
            try:
                os.kill(self.frozen.pop(), signal.SIGCONT)
            except ProcessLookupError:
                pass

    def kill_postgres(self) -> None:
        """SIGKILL the postmaster and every backend: a crash, not a shutdown."""
        pid = self._status().postgres.pid
        assert pid is not None, "the suite's Postgres is not running"
        pids = [pid, *process.children(pid)]
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _wait_dead(pids)

    def restart(self) -> float:
        """Start whatever was killed (``swarmlog dev up``); seconds it took."""
        t0 = time.monotonic()
        self.ensure_up()
        took = time.monotonic() - t0
        self.outages.append(took)
        return took


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _wait_dead(pids: list[int], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while any(process.is_alive(p) for p in pids):
        assert time.monotonic() < deadline, f"processes {pids} did not die"
        time.sleep(0.05)


# --- processes the suite runs ----------------------------------------------------------------------


def cli_env(settings: Settings, database_url: str | None = None) -> dict[str, str]:
    env = subprocess_env(settings)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env["PYTHONPATH"]])
    if database_url is not None:
        env["SWARMLOG_DATABASE_URL"] = database_url
    return env


def spawn(settings: Settings, *args: str, database_url: str | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "swarmlog.cli", *args], env=cli_env(settings, database_url),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def run_cli(settings: Settings, *args: str, database_url: str | None = None,
            timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "swarmlog.cli", *args], env=cli_env(settings, database_url),
                          capture_output=True, text=True, timeout=timeout)
