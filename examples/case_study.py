"""The seed document's case study: a flaky 5-agent swarm, its deadlock, and the fix.

    coordinator --task--> worker --task_complete--> reviewer --approved--> coordinator
                \\--expect--> reviewer (starts a wall-clock timeout)
    reviewer --escalate--> supervisor --note--> auditor          (when the timeout fires)

The worker's real job takes as long as it takes (recorded with ``ctx.effect``), so
its ``task_complete`` races the reviewer's timeout. When the timeout fires first, the
buggy reviewer has moved on to ``timed_out`` and ignores the late message because of a
state check: the coordinator waits for an approval that never comes. Deadlock.

The timeout's firing is an event in the log, so the order that caused the deadlock is
fixed there: replaying the log reproduces the deadlock every time. The fix (accept
late messages) is checked against that same log — replay says exactly where the fixed
code departs from the run — and against new live runs.

It ships with swarmlog as ``swarmlog.examples.case_study`` (the repo's ``examples/``).
Run it: ``swarmlog demo`` (part of ``make demo``), or
``swarmlog run swarmlog.examples.case_study:buggy --run-id r1 --seed 1 --until-quiet 1``, then
``swarmlog replay --swarm swarmlog.examples.case_study:fixed``.
Or find the race without running anything live: ``swarmlog.testing.Simulator`` explores
the interleavings of the same agents (docs/simulation.md).
"""

from __future__ import annotations

import random
import time
import uuid
from dataclasses import dataclass
from typing import Any

from swarmlog import Agent, Swarm, on, on_message, on_timer
from swarmlog.kafka.topic import create_topic
from swarmlog.replaying import replay_swarm
from swarmlog.runtime import run_agents, start_run
from swarmlog.settings import Settings

TIMEOUT_S = 0.3


def do_work(task: str) -> dict[str, Any]:
    """The worker's real job: its duration is the race. Runs live only, inside ctx.effect."""
    seconds = random.uniform(0.05, 0.6)
    time.sleep(seconds)
    return {"summary": task.upper(), "took_ms": int(seconds * 1000)}


class Coordinator(Agent):
    def initial_state(self) -> dict[str, Any]:
        return {"phase": "starting", "result": None}

    @on("run.started")
    def start(self, ctx, event):
        ctx.send("reviewer", "expect", "worker")
        ctx.send("worker", "task", "summarise the incident")
        self.state["phase"] = "waiting"

    @on_message("approved")
    def approved(self, ctx, event):
        self.state["phase"] = "done"
        self.state["result"] = event.json()


class Worker(Agent):
    def initial_state(self) -> dict[str, Any]:
        return {"done": False}

    @on_message("task")
    def task(self, ctx, event):
        result = ctx.effect("work", do_work, event.body)
        self.state["done"] = True
        ctx.send("reviewer", "task_complete", result)


class Reviewer(Agent):
    """The buggy reviewer: a task_complete that arrives after its timeout is ignored."""

    def initial_state(self) -> dict[str, Any]:
        return {"phase": "idle", "ignored": 0}

    @on_message("expect")
    def expect(self, ctx, event):
        self.state["phase"] = "waiting"
        ctx.timeout("deadline", seconds=TIMEOUT_S)

    @on_timer("deadline")
    def deadline(self, ctx, event):
        if self.state["phase"] == "waiting":
            self.state["phase"] = "timed_out"
            ctx.send("supervisor", "escalate", "worker is late")

    @on_message("task_complete")
    def task_complete(self, ctx, event):
        if self.state["phase"] == "waiting":
            ctx.cancel_timer("deadline")
            self.approve(ctx, event)
        else:
            self.state["ignored"] += 1  # the bug: the state check drops a late message

    def approve(self, ctx, event):
        self.state["phase"] = "approved"
        ctx.send("coordinator", "approved", event.json())


class FixedReviewer(Reviewer):
    """The fix from the seed document: accept late messages."""

    @on_message("task_complete")
    def task_complete(self, ctx, event):
        if self.state["phase"] == "waiting":
            ctx.cancel_timer("deadline")
        if self.state["phase"] in ("waiting", "timed_out"):
            self.approve(ctx, event)


class PatchedReviewer(Reviewer):
    """The same fix, deployed into runs in flight behind a versioned step (docs/evolution.md): a
    task_complete the reviewer handled before the deploy replays as it was recorded (ignored, if it
    came late), and one it handles from the deploy on is accepted late."""

    @on_message("task_complete")
    def task_complete(self, ctx, event):
        if ctx.patched("accept-late-task-complete"):
            FixedReviewer.task_complete(self, ctx, event)
        else:
            Reviewer.task_complete(self, ctx, event)


class Supervisor(Agent):
    def initial_state(self) -> dict[str, Any]:
        return {"escalations": 0}

    @on_message("escalate")
    def escalate(self, ctx, event):
        self.state["escalations"] += 1
        ctx.send("auditor", "note", {"from": event.agent_id, "what": event.body, "at": ctx.now()})


class Auditor(Agent):
    def initial_state(self) -> dict[str, Any]:
        return {"notes": []}

    @on_message("note")
    def note(self, ctx, event):
        self.state["notes"].append(event.json())


def _agents(reviewer: type[Reviewer]) -> list[Agent]:
    return [Coordinator("coordinator"), Worker("worker"), reviewer("reviewer"), Supervisor("supervisor"),
            Auditor("auditor")]


buggy = Swarm(name="case-study", agents=lambda: _agents(Reviewer), code_version="case-study-buggy")
fixed = Swarm(name="case-study", agents=lambda: _agents(FixedReviewer), code_version="case-study-fixed")
patched = Swarm(name="case-study", agents=lambda: _agents(PatchedReviewer), code_version="case-study-patched")
"""The fix as a versioned step: it goes on with runs the buggy code started, where ``fixed`` diverges."""


def deadlocked(states: dict[str, dict[str, Any]]) -> bool:
    """The coordinator never got its approval."""
    return states["coordinator"]["phase"] != "done"


def finished(states: dict[str, dict[str, Any]]) -> bool:
    """The end state every run must reach: the coordinator got its approval."""
    return not deadlocked(states)


MODELS = {"work": lambda task: {"summary": task.upper(), "took_ms": 100}}
"""What a simulation answers for the worker's job (``swarmlog.testing.Simulator(effects=...)``). How
long it takes is not in it: in a simulation that is *when* the worker's step runs, the schedule's choice."""


@dataclass
class LiveRun:
    settings: Settings
    states: dict[str, dict[str, Any]]
    hashes: dict[str, str]

    @property
    def deadlocked(self) -> bool:
        return deadlocked(self.states)


def live_run(settings: Settings, swarm: Swarm, *, seed: int) -> LiveRun:
    """One live run of ``swarm`` on a fresh topic, until it is quiet (no timeout pending)."""
    topic = f"{settings.topic}.case-{uuid.uuid4().hex[:8]}"
    create_topic(settings, topic)
    s = settings.model_copy(update={"topic": topic})
    start_run(settings=s, swarm=swarm, run_id=f"case-{uuid.uuid4().hex[:6]}", seed=seed)
    results = run_agents(settings=s, swarm=swarm, until_quiet=1.0)
    return LiveRun(settings=s, states={r.agent: r.state for r in results},
                   hashes={r.agent: r.state_hash for r in results})


def find_deadlock(settings: Settings, *, max_runs: int = 30) -> tuple[LiveRun, int]:
    """Run the buggy swarm live until a run deadlocks; return it and how many runs it took."""
    for attempt in range(1, max_runs + 1):
        run = live_run(settings, buggy, seed=attempt)
        if run.deadlocked:
            return run, attempt
    raise RuntimeError(f"no deadlock in {max_runs} live runs")


def replay_deadlock(run: LiveRun, swarm: Swarm = buggy) -> Any:
    return replay_swarm(settings=run.settings, swarm=swarm)
