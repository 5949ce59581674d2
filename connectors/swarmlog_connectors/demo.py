"""``swarmlog demo``: a small swarm, its Postgres mirror, and a replay that matches it.

Agents pass tasks around a ring through the log. Each agent is a thread with its
own idempotent producer and its own consumer that follows the topic live and
folds what it reads into its state. Meanwhile the sink mirrors the topic into
Postgres. At the end a replay rebuilds every agent's state from offset zero with
a fresh consumer; the demo prints both hashes side by side, the topic's event
count next to the mirror's row count, and exits non-zero if anything differs.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from swarmlog.kafka.reader import LogReader
from swarmlog.kafka.topic import create_topic
from swarmlog.log.append import EventLog
from swarmlog.log.hashing import state_hash
from swarmlog.log.protocol import MESSAGE, RUN_STARTED
from swarmlog.replaying import replay
from swarmlog.replaying.fold import Fold
from swarmlog.schema.registry import SchemaRegistry
from swarmlog.settings import Settings

__all__ = ["main"]

_TASKS_PER_AGENT = 5


@dataclass
class _Agent:
    name: str
    peers: list[str]
    settings: Settings
    topic: str
    registry: SchemaRegistry
    run_id: str
    hops: int
    total_tasks: int
    live_hash: str = ""
    error: BaseException | None = None
    sent: int = 0
    done_seen: set[str] = field(default_factory=set)

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # reported by the main thread
            self.error = exc

    def _run(self) -> None:
        fold = Fold(registry=self.registry)
        nxt = self.peers[(self.peers.index(self.name) + 1) % len(self.peers)]
        with EventLog(settings=self.settings, topic=self.topic, registry=self.registry, run_id=self.run_id) as log, \
                LogReader(settings=self.settings, topic=self.topic) as reader:
            for t in range(_TASKS_PER_AGENT):
                task = f"{self.name}-{t}"
                log.produce(MESSAGE, {"kind": "task", "body": json.dumps({"task": task, "hops": self.hops})},
                            agent=self.name, to=nxt)
                self.sent += 1
            log.flush()
            reader.assign(0)
            deadline = time.monotonic() + 120
            for batch in reader.batches(follow=True, timeout=0.1):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{self.name}: swarm did not finish within 120 s")
                fold.apply_batch(batch)
                for m in batch:
                    self._handle(log, m, fold, nxt)
                log.flush()
                if len(self.done_seen) >= self.total_tasks:
                    # The last task's `done` is the last event anyone writes, so the
                    # fold now covers the whole log.
                    break
            self.live_hash = state_hash(fold.states.get(self.name, {}))

    def _handle(self, log: EventLog, m: Any, fold: Fold, nxt: str) -> None:
        writer, rec = fold.decoder.decode(m.value(), m.offset())
        if writer.event_type != MESSAGE:
            return
        body = rec["payload"]
        if body["kind"] == "done":
            self.done_seen.add(body["body"])
            return
        if rec["to"] != self.name or body["kind"] != "task":
            return
        task = json.loads(body["body"])
        causes = [m.offset()]
        if task["hops"] > 0:
            task["hops"] -= 1
            log.produce(MESSAGE, {"kind": "task", "body": json.dumps(task)}, agent=self.name, to=nxt,
                        causes=causes)
        else:
            log.produce(MESSAGE, {"kind": "done", "body": task["task"]}, agent=self.name, causes=causes)
        self.sent += 1


def main(*, settings: Settings, agents: int = 3, rounds: int = 200) -> int:
    """Run the demo; return 0 when live and replayed state, and topic and mirror, agree."""
    from .postgres_migrations import migrate
    from .postgres_sink import PostgresSink, connect

    if agents < 3:
        print("the demo needs at least 3 agents")
        return 2
    topic = f"{settings.topic}.demo-{uuid.uuid4().hex[:8]}"
    settings = settings.model_copy(update={"topic": topic})
    registry = SchemaRegistry.load(settings.schema_dirs())
    create_topic(settings, topic)
    run_id = f"demo-{uuid.uuid4().hex[:8]}"
    names = [f"agent-{chr(ord('a') + i)}" for i in range(agents)]
    print(f"swarm of {agents} agents on topic {topic} (one partition: its offsets are the clock)")

    with connect(settings) as conn:  # the mirror's tables (`swarmlog mirror migrate`), then the sink
        migrate(conn)
    sink = PostgresSink(settings=settings, registry=registry)
    sink_thread = threading.Thread(target=sink.run, name="sink", daemon=True)
    sink_thread.start()

    with EventLog(settings=settings, registry=registry, run_id=run_id) as log:
        log.append(RUN_STARTED, {"swarm": "demo-ring", "seed": 0, "code_version": "demo", "agents": names},
                   agent="demo")
    hops = max(1, rounds // (agents * _TASKS_PER_AGENT))
    swarm = [_Agent(name=n, peers=names, settings=settings, topic=topic, registry=registry, run_id=run_id,
                    hops=hops, total_tasks=agents * _TASKS_PER_AGENT) for n in names]
    threads = [threading.Thread(target=a.run, name=a.name) for a in swarm]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    failed = [a for a in swarm if a.error is not None]
    if failed:
        sink.stop()
        for a in failed:
            print(f"{a.name} failed: {a.error!r}")
        return 1

    result = replay(settings=settings, registry=registry)
    _wait_for_sink(sink, result.end_offset)
    sink.stop()
    sink_thread.join(timeout=30)
    with connect(settings) as conn:
        rows = conn.execute("SELECT count(*) FROM events WHERE topic = %s", (topic,)).fetchone()[0]  # type: ignore[index]
        matrix = conn.execute(
            "SELECT agent_id, coalesce(recipient, '*'), count(*) FROM events WHERE topic = %s "
            "AND event_type = 'agent.message' GROUP BY 1, 2", (topic,)).fetchall()

    print(f"\n{result.events} events in {elapsed:.2f} s; replayed up to offset {result.end_offset}\n")
    print(_flow_picture(names, matrix))
    print(f"\n{'agent':<10} {'live state hash':<20} {'replayed state hash':<20}")
    ok = True
    for a in swarm:
        replayed = result.agents.get(a.name, "")
        same = replayed == a.live_hash
        ok &= same
        print(f"{a.name:<10} {a.live_hash[:16]:<20} {replayed[:16]:<20} {'equal' if same else 'DIFFERENT'}")
    print(f"\nevents in topic: {result.events}   rows in Postgres mirror: {rows}   "
          f"{'equal' if rows == result.events else 'DIFFERENT'}")
    ok &= rows == result.events
    print(f"stream hash: {result.stream_hash}")
    print("\nquery the mirror:")
    print(f'  psql "{settings.database_url}" -c "SELECT seq, agent_id, recipient, payload->>\'kind\' AS kind '
          f"FROM events WHERE topic = '{topic}' ORDER BY seq LIMIT 20\"")
    print(f"replay it yourself:\n  swarmlog replay --topic {topic}")
    ok &= _case_study(settings.model_copy(update={"topic": settings.topic.rsplit(".demo-", 1)[0]}))
    return 0 if ok else 1


def _case_study(settings: Settings) -> bool:
    """The seed document's case study: find a deadlock live, replay it, verify the fix."""
    from swarmlog.examples import case_study as cs  # installed with swarmlog (the repo's examples/)

    print("\n== the case study: 5 agents; the worker's task_complete races the reviewer's timeout ==")
    for attempt in range(1, 31):
        run = cs.live_run(settings, cs.buggy, seed=attempt)
        print(f"live run {attempt}: {'DEADLOCK' if run.deadlocked else 'finished'}"
              f"  (reviewer: {run.states['reviewer']['phase']}, ignored {run.states['reviewer']['ignored']})")
        if run.deadlocked:
            break
    else:
        print("no deadlock in 30 live runs")
        return False
    print(f"found a deadlock after {attempt} live run(s): topic {run.settings.topic}")
    same = True
    for i in range(3):
        r = cs.replay_deadlock(run)
        equal = r.agents == run.hashes and not r.divergences
        same &= equal and cs.deadlocked(r.states)
        print(f"  replay {i + 1} with the same code: {'deadlock' if cs.deadlocked(r.states) else 'no deadlock'}, "
              f"state {'identical to the live run' if equal else 'DIFFERENT'}")
    what_if = cs.replay_deadlock(run, cs.fixed)
    first = what_if.first_divergence
    if first is not None:
        print(f"the fix (accept late messages) replayed against the same log first diverges at offset "
              f"{first.offset}: {first.agent} now sends "
              f"{first.replayed['payload']['kind']!r} to {first.replayed['to']} where the run wrote nothing")
    print(f"  try it: swarmlog replay --topic {run.settings.topic} --swarm swarmlog.examples.case_study:fixed")
    runs = [cs.live_run(settings, cs.fixed, seed=100 + i) for i in range(3)]
    print(f"new live runs with the fix: {sum(not r.deadlocked for r in runs)}/{len(runs)} finished")
    return same and first is not None and not any(r.deadlocked for r in runs)


def _wait_for_sink(sink: Any, end_offset: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while sink.stats.position < end_offset and time.monotonic() < deadline:
        time.sleep(0.05)


def _flow_picture(names: list[str], matrix: list[tuple[str, str, int]]) -> str:
    """Who sent how many messages to whom, as a small table (``*`` = broadcast)."""
    counts = {(s, r): n for s, r, n in matrix}
    cols = names + ["*"]
    width = max(len(c) for c in cols) + 2
    lines = ["messages  from \\ to".ljust(width + 10) + "".join(c.rjust(width) for c in cols)]
    for s in names:
        lines.append(s.ljust(width + 10) + "".join(str(counts.get((s, r), 0) or ".").rjust(width) for r in cols))
    return "\n".join(lines)
