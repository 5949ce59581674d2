"""A swarm whose run goes on across topics (``swarmlog continue``): the long-run tests run it live, continue it,
and replay it. Each ``serve`` from outside starts a rally of random length between two agents; a logical timer
set at a serve comes due 20 events later, across a continuation when one falls in between. Nothing it does
depends on an offset (no ``ctx.now()``, no ``ctx.random()``: both derive from the topic's offsets, which
start again at 0 on a new topic), so a continued run and the same run on one topic reach the same states."""

from __future__ import annotations

from swarmlog import Agent, Swarm, on, on_message

AGENTS = ("a", "b")


class Player(Agent):
    def initial_state(self):
        return {"hits": 0, "serves": 0, "ticks": 0, "seen": []}

    @on_message("serve")
    def serve(self, ctx, event):
        self.state["serves"] += 1
        ctx.timer(f"tick-{self.state['serves']}", after_events=20)
        ctx.send("b" if self.name == "a" else "a", "ball", {"n": 1, "len": 8 + self.state["serves"] * 5 % 9})

    @on_message("ball")
    def hit(self, ctx, event):
        ball = event.json()
        self.state["hits"] += 1
        self.state["seen"] = sorted({*self.state["seen"], ball["len"]})
        if ball["n"] < ball["len"]:
            ctx.send("b" if self.name == "a" else "a", "ball", {"n": ball["n"] + 1, "len": ball["len"]})

    @on("timer.fired")
    def tick(self, ctx, event):
        self.state["ticks"] += 1


rally = Swarm(name="rally", agents=lambda: [Player(n) for n in AGENTS], code_version="rally-1")


class PlayerChanged(Player):
    """One changed decision, in the first rally only: a replay diverges in the run's first part."""

    @on_message("ball")
    def hit(self, ctx, event):
        if self.state["serves"] + self.state["hits"] == 3 and self.name == "b":
            self.state["hits"] += 2  # counts a hit twice, and writes the same: a state divergence
        super().hit(ctx, event)


rally_changed = Swarm(name="rally", agents=lambda: [PlayerChanged(n) for n in AGENTS], code_version="rally-2")
