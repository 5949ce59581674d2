"""Two workers claim the same task: a check-then-act race across messages, and its fix.

    board --offer(t1)--> alice                        alice takes t1 at once
    board --job(t0)--> bob --review--> reviewer --ok--> bob --ask--> board --status--> bob

The board offers task ``t1`` to alice, and gives bob a job that needs a review first.
Once bob's job is approved he looks for more work: he asks the board, and takes ``t1``
if the board says nobody owns it. The board records a ``take`` without checking (the
answer bob acted on was only true when it was given): if alice is slow to take her
offer — slower than bob's whole review round trip — both take ``t1``, and both do it.

No timeout is involved: it is purely which messages the board handles first. In the
order where every message is handled as soon as it is sent, alice's ``take`` reaches the
board long before bob's ``ask``, so a live run rarely shows it. The fix makes the claim
atomic: the board grants a ``claim`` only if the task is free, and a worker works only
on a grant.
"""

from __future__ import annotations

from typing import Any

from swarmlog import Agent, Swarm, on, on_message

TASK = "t1"


def do_task(task: str, worker: str) -> dict[str, Any]:
    """The work itself (live only, inside ctx.effect): here, a summary of who did what."""
    return {"task": task, "by": worker}


class Board(Agent):
    """The buggy board: ``take`` overwrites the owner without checking it."""

    def initial_state(self) -> dict[str, Any]:
        return {"owner": {TASK: None}}

    @on("run.started")
    def start(self, ctx, event):
        ctx.send("alice", "offer", TASK)
        ctx.send("bob", "job", "t0")

    @on_message("ask")
    def ask(self, ctx, event):
        ctx.send(event.agent_id, "status", {"task": TASK, "owner": self.state["owner"][TASK]})

    @on_message("take")
    def take(self, ctx, event):
        self.state["owner"][event.body] = event.agent_id  # the bug: whoever asked last wins

    @on_message("done")
    def done(self, ctx, event):
        pass


class FixedBoard(Board):
    """The fix: a claim is granted only if the task is free, atomically, in one step."""

    @on_message("claim")
    def claim(self, ctx, event):
        task = event.body
        if self.state["owner"][task] is None:
            self.state["owner"][task] = event.agent_id
            ctx.send(event.agent_id, "granted", task)
        else:
            ctx.send(event.agent_id, "refused", task)


class Worker(Agent):
    def initial_state(self) -> dict[str, Any]:
        return {"doing": []}

    def work(self, ctx, task):
        ctx.effect("task", do_task, task, self.name)
        self.state["doing"].append(task)
        ctx.send("board", "done", task)


class Alice(Worker):
    @on_message("offer")
    def offer(self, ctx, event):
        ctx.send("board", "take", event.body)
        self.work(ctx, event.body)


class Bob(Worker):
    @on_message("job")
    def job(self, ctx, event):
        ctx.send("reviewer", "review", event.body)

    @on_message("ok")
    def ok(self, ctx, event):
        ctx.send("board", "ask", TASK)

    @on_message("status")
    def status(self, ctx, event):
        info = event.json()
        if info["owner"] is None:
            ctx.send("board", "take", info["task"])
            self.work(ctx, info["task"])


class Reviewer(Agent):
    @on_message("review")
    def review(self, ctx, event):
        ctx.send(event.agent_id, "ok", event.body)


class ClaimingAlice(Worker):
    @on_message("offer")
    def offer(self, ctx, event):
        ctx.send("board", "claim", event.body)

    @on_message("granted")
    def granted(self, ctx, event):
        self.work(ctx, event.body)

    @on_message("refused")
    def refused(self, ctx, event):
        pass


class ClaimingBob(Bob):
    @on_message("status")
    def status(self, ctx, event):
        info = event.json()
        if info["owner"] is None:
            ctx.send("board", "claim", info["task"])

    @on_message("granted")
    def granted(self, ctx, event):
        self.work(ctx, event.body)

    @on_message("refused")
    def refused(self, ctx, event):
        pass


buggy = Swarm(name="claims", agents=lambda: [Board("board"), Alice("alice"), Bob("bob"), Reviewer("reviewer")],
              code_version="claims-buggy")
fixed = Swarm(name="claims", agents=lambda: [FixedBoard("board"), ClaimingAlice("alice"), ClaimingBob("bob"),
                                              Reviewer("reviewer")], code_version="claims-fixed")


def done_once(run: Any) -> str | None:
    """Invariant over the log: every task was done by exactly one worker."""
    by_task: dict[str, list[str]] = {}
    for e in run.events():
        if e.kind == "done":
            by_task.setdefault(e.body, []).append(e.agent_id)
    twice = {task: who for task, who in by_task.items() if len(who) > 1}
    if twice:
        return "done more than once: " + ", ".join(f"{t} by {' and '.join(w)}" for t, w in sorted(twice.items()))
    if TASK not in by_task:
        return f"{TASK} was never done"
    return None


MODELS = {"task": lambda task, worker: {"task": task, "by": worker}}
"""What the simulation answers for the effect (the work's result)."""
