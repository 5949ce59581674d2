"""Swarms the runtime tests run live and then replay."""

from __future__ import annotations

import itertools
from typing import Any

import httpx

from swarmlog import Agent, Swarm, on, on_message, on_timer

N_AGENTS = 5
CHAINS = 4
TTL = 12


def _names(n: int = N_AGENTS) -> list[str]:
    return [f"r{i}" for i in range(n)]


class Relay(Agent):
    """Passes tokens to random peers; uses every door of ctx: random, effects, timers, broadcasts."""

    ttl = TTL

    def initial_state(self):
        return {"hops": 0, "total": 0, "draws": [], "finished": [], "ticks": 0, "lookups": {}}

    @on("run.started")
    def start(self, ctx, event):
        ctx.timer("tick", after_events=25)
        if self.name == "r0":
            for chain in range(CHAINS):
                ctx.send(ctx.choice(_names()[1:]), "hop", {"chain": chain, "ttl": self.ttl})

    @on_message("hop")
    def hop(self, ctx, event):
        msg = event.json()
        draw = ctx.randint(0, 1000)
        self.state["hops"] += 1
        self.state["total"] += draw
        self.state["draws"] = (self.state["draws"] + [draw])[-5:]
        if msg["chain"] % 2 == 0:
            # Recorded I/O: runs live once, is served from the log on replay.
            looked_up = ctx.effect("lookup", _lookup, msg["chain"], msg["ttl"])
            self.state["lookups"][str(msg["chain"])] = looked_up
        if msg["ttl"] > 0:
            peers = [n for n in _names() if n != self.name]
            ctx.send(ctx.choice(peers), "hop", {"chain": msg["chain"], "ttl": msg["ttl"] - 1})
        else:
            ctx.broadcast("finished", {"chain": msg["chain"], "by": self.name})
            self.state["finished"].append(msg["chain"])

    @on_message("finished")
    def finished(self, ctx, event):
        self.state["finished"].append(event.json()["chain"])

    @on_timer("tick")
    def tick(self, ctx, event):
        self.state["ticks"] += 1
        if self.state["ticks"] < 3:
            ctx.timer("tick", after_events=25)


CALLS = {"lookup": 0}


def _lookup(chain: int, ttl: int) -> dict:
    CALLS["lookup"] += 1
    return {"chain": chain, "ttl": ttl, "square": chain * chain + ttl}


relay = Swarm(name="relay", agents=lambda: [Relay(n) for n in _names()], code_version="relay-1")


class LongRelay(Relay):
    ttl = 150


relay_long = Swarm(name="relay-long", agents=lambda: [LongRelay(n) for n in _names()], code_version="long-1")


class RelayChanged(Relay):
    """The same swarm with one changed decision: replaying its log must diverge, and say where."""

    @on_message("hop")
    def hop(self, ctx, event):
        msg = event.json()
        if msg["ttl"] == TTL - 3 and msg["chain"] == 1:
            self.state["hops"] += 1
            ctx.broadcast("finished", {"chain": msg["chain"], "by": self.name})  # gives up early
            return
        super().hop(ctx, event)


relay_changed = Swarm(name="relay", agents=lambda: [RelayChanged(n) for n in _names()], code_version="relay-2")


class LongRelayChanged(RelayChanged):
    ttl = 150


relay_changed_long = Swarm(name="relay-long", agents=lambda: [LongRelayChanged(n) for n in _names()],
                           code_version="long-2")


class Scatter(Agent):
    """Iterates a set of strings: the order of its outputs follows the process's string hashes."""

    ITEMS = frozenset(f"item-{c}" for c in "abcdefghijkl")

    def initial_state(self):
        return {"rounds": 0, "order": []}

    @on("run.started")
    def start(self, ctx, event):
        self._scatter(ctx)

    @on_message("again")
    def again(self, ctx, event):
        self._scatter(ctx)

    def _scatter(self, ctx):
        names = set(self.ITEMS)
        self.state["rounds"] += 1
        self.state["order"].append(list(names))
        for name in names:
            ctx.send("gather", "item", name)


class Gather(Agent):
    def initial_state(self):
        return {"items": []}

    @on_message("item")
    def item(self, ctx, event):
        self.state["items"].append(event.body)


sets = Swarm(name="sets", agents=lambda: [Scatter("scatter"), Gather("gather")], code_version="sets-1")


# --- a swarm that does every traced thing: messages, a broadcast, both kinds of timer, an effect,
# an LLM call, an HTTP exchange (to a StubServer whose URL the test puts in SERVER), a failing handler.

SERVER: dict[str, str] = {}


class _Model:
    def complete(self, request: dict[str, Any]) -> dict[str, Any]:
        return {"choices": [{"message": {"role": "assistant", "content": "42"}}]}


def _note(what: str) -> dict[str, str]:
    return {"noted": what}


class Planner(Agent):
    def initial_state(self) -> dict[str, Any]:
        return {"answers": 0, "ticks": 0}

    @on("run.started")
    def start(self, ctx, event):
        ctx.send("researcher", "question", "what is six times seven?")
        ctx.broadcast("hello", "everyone")
        ctx.timer("tick", after_events=3)

    @on_message("answer")
    def answer(self, ctx, event):
        self.state["answers"] += 1

    @on_timer("tick")
    def tick(self, ctx, event):
        self.state["ticks"] += 1
        ctx.effect("note", _note, "ticked")
        ctx.timeout("late", seconds=0.05)

    @on_timer("late")
    def late(self, ctx, event):
        ctx.send("researcher", "bye")


class Researcher(Agent):
    def initial_state(self) -> dict[str, Any]:
        return {"heard": 0}

    @on_message("hello")
    def hello(self, ctx, event):
        self.state["heard"] += 1

    @on_message("question")
    def question(self, ctx, event):
        reply = ctx.llm({"model": "m", "messages": [{"role": "user", "content": event.body}]})
        checked = ctx.http(httpx).post(SERVER["url"] + "/chat/completions?api_key=sekret",
                                       json={"model": "m", "messages": [{"role": "user", "content": "check"}]})
        ctx.send("planner", "answer", {"llm": reply["choices"][0]["message"]["content"], "http": checked.status_code})

    @on_message("bye")
    def bye(self, ctx, event):
        raise ValueError("no more questions")  # recorded as handler.failed: the span says so


traced = Swarm(name="traced", agents=lambda: [Planner("planner"), Researcher("researcher")], llm=_Model(),
               code_version="1")


def _slow() -> int:
    import time

    time.sleep(3.0)
    return 1


class Echo(Agent):
    """Answers a ping, then takes a while (a slow recorded effect) before its step commits."""

    @on_message("ping")
    def ping(self, ctx, event):
        ctx.send("operator", "pong", event.body)
        ctx.effect("slow", _slow)


echo = Swarm(name="echo", agents=lambda: [Echo("e")], code_version="echo-1")


def _pause() -> int:
    import time

    time.sleep(0.05)
    return 1


class SlowRelay(LongRelay):
    """A relay whose every hop holds its transaction open a while: its output is sent, then a slow
    recorded effect runs before the step commits (agents killed at random die mid-transaction)."""

    ttl = 400

    @on_message("hop")
    def hop(self, ctx, event):
        super().hop(ctx, event)
        ctx.effect("pause", _pause)


class ShortSlowRelay(SlowRelay):
    ttl = 100


slow_relay = Swarm(name="slow-relay", agents=lambda: [SlowRelay(n) for n in _names()], code_version="slow-1")
short_slow_relay = Swarm(name="slow-relay", agents=lambda: [ShortSlowRelay(n) for n in _names()],
                         code_version="slow-short-1")


_TRAP_DRAWS = itertools.count()
TRAP_CHAIN, TRAP_TTL = 1, TTL - 2
"""The one hop where :class:`StateTrapRelay` springs its trap."""


class StateTrapRelay(Relay):
    """Nondeterminism that reaches only the state, at one step, that no guard can refuse.

    At the hop of chain ``TRAP_CHAIN`` with ttl ``TRAP_TTL``, the agent stores an object's
    ``id()`` (an address: another one in every process, ASLR) and a draw from a counter that
    lives outside ``self.state`` (another one in every replay, even in the same process).
    Its outputs are exactly the relay's: only the state departs.
    """

    @on_message("hop")
    def hop(self, ctx, event):
        super().hop(ctx, event)
        msg = event.json()
        if (msg["chain"], msg["ttl"]) == (TRAP_CHAIN, TRAP_TTL):
            self.state["trap"] = [id(object()), next(_TRAP_DRAWS)]


state_trap = Swarm(name="relay", agents=lambda: [StateTrapRelay(n) for n in _names()], code_version="trap-1")


# --- the desk: work in and out of a running swarm (swarmlog.client) ------------------------------------


class Front(Agent):
    """Takes a question, has the back office work on it, answers whoever asked."""

    def initial_state(self):
        return {"asked_by": {}}

    @on_message("question")
    def question(self, ctx, event):
        self.state["asked_by"][str(ctx.now())] = event.agent_id
        ctx.send("back", "work", {"question": event.body, "ticket": ctx.now()})

    @on_message("done")
    def done(self, ctx, event):
        result = event.json()
        asker = self.state["asked_by"].pop(str(result["ticket"]))
        ctx.send(asker, "progress", "nearly there")
        ctx.send(asker, "answer", f"{result['question']}: {result['answer']}")

    @on_message("explode")
    def explode(self, ctx, event):
        raise ValueError(f"cannot take {event.body!r}")

    @on_message("ignore")
    def ignore(self, ctx, event):
        pass


class Back(Agent):
    """Answers after a wall-clock timeout: the reply's chain passes through a timer.set and its firing.
    One timer per item: a reply is found through its causes, so a step must answer what it handles
    (a queue flushed by one timer would answer every item from the step of the last)."""

    def initial_state(self):
        return {"queue": {}}

    @on_message("work")
    def work(self, ctx, event):
        name = f"think-{ctx.now()}"
        self.state["queue"][name] = event.json()
        ctx.timeout(name, seconds=0.05)

    @on("timer.fired")
    def think(self, ctx, event):
        item = self.state["queue"].pop(event.payload["name"])
        ctx.send("front", "done", {**item, "answer": len(item["question"])})


DESK = Swarm(name="desk", agents=lambda: [Front("front"), Back("back")])


class RelayLateFix(Relay):
    """The relay with two unrelated changes, each met by only some runs (a regression replay's case):

    * ``hop``: the chain-3 token that r0 hands to r4 first (ttl still ``TTL``) ends there;
    * ``finished``: an agent told that r1 or r2 ended chain 0 passes the news on to r0 once more.

    Whether a run meets either depends on the peers its seed drew, which the log records:
    :func:`late_fix_triggers` finds, from a run's events, the steps these changes alter.
    """

    @on_message("hop")
    def hop(self, ctx, event):
        msg = event.json()
        if self.name == "r4" and msg["chain"] == 3 and msg["ttl"] == TTL:
            ctx.broadcast("finished", {"chain": 3, "by": self.name})
            return
        super().hop(ctx, event)

    @on_message("finished")
    def finished(self, ctx, event):
        msg = event.json()
        if msg["chain"] == 0 and msg["by"] in ("r1", "r2") and self.name != "r0":
            ctx.send("r0", "noted", {"chain": 0})
        super().finished(ctx, event)


relay_late_fix = Swarm(name="relay", agents=lambda: [RelayLateFix(n) for n in _names()], code_version="relay-3")


def late_fix_triggers(messages: list[tuple[int, str | None, dict[str, Any]]]) -> dict[str, int]:
    """Of a relay run's ``agent.message`` events, as (offset, to, payload): the first offset where each
    of :class:`RelayLateFix`'s changes alters a step ("hop", "finished"), for the ones the run meets."""
    import json

    first: dict[str, int] = {}
    for offset, to, payload in messages:
        body = json.loads(payload["body"]) if payload.get("body") else {}
        if payload["kind"] == "hop" and to == "r4" and body["chain"] == 3 and body["ttl"] == TTL:
            first.setdefault("hop", offset)
        # A broadcast reaches every agent but its sender: r1's "finished" reaches r2, r3, r4 (and r0).
        if payload["kind"] == "finished" and body["chain"] == 0 and body["by"] in ("r1", "r2"):
            first.setdefault("finished", offset)
    return first


# --- code that changes while a run is in flight (tests/integration/test_evolution.py) ---------------


class Chain(Agent):
    """Works through jobs 1..3, each one's step asking the relay for the next: job 1, its second step, fails
    and stops the chain."""

    def initial_state(self):
        return {"done": []}

    @on("run.started")
    def start(self, ctx, event):
        ctx.send("relay", "next", "1")

    @on_message("job")
    def job(self, ctx, event):
        n = int(event.body)
        self.state["done"].append(self.work(ctx, n))
        if n < 3:
            ctx.send("relay", "next", str(n + 1))

    def work(self, ctx, n):
        if n == 1:
            raise ZeroDivisionError("job 1 divides by zero")
        return n


class Forwarder(Agent):
    @on_message("next")
    def next(self, ctx, event):
        ctx.send("chain", "job", event.body)


class FixedChain(Chain):
    def work(self, ctx, n):
        if ctx.patched("job-1-no-division"):
            return n * 10
        return super().work(ctx, n)


def _held_until_released(n):
    """The fixed job's live effect: it says it started, then waits for the test to let it finish (a
    process killed here dies in the middle of the retried step)."""
    import os
    import time
    from pathlib import Path

    release = Path(os.environ["CHAIN_RELEASE_FILE"])
    Path(f"{release}.started").write_text(str(n))
    while not release.exists():
        time.sleep(0.05)
    return n


class SlowFixChain(Chain):
    def work(self, ctx, n):
        if ctx.patched("job-1-no-division"):
            return ctx.effect("fix", _held_until_released, n) * 10
        return super().work(ctx, n)


chain_buggy = Swarm(name="chain", agents=lambda: [Chain("chain"), Forwarder("relay")], code_version="chain-1")
chain_fixed = Swarm(name="chain", agents=lambda: [FixedChain("chain"), Forwarder("relay")], code_version="chain-2")
chain_slow_fix = Swarm(name="chain", agents=lambda: [SlowFixChain("chain"), Forwarder("relay")],
                       code_version="chain-2")
chain_pinned = Swarm(name="chain", agents=lambda: [FixedChain("chain"), Forwarder("relay")], code_version="chain-2",
                     pin_runs=True)
chain_pinned_next = Swarm(name="chain", agents=lambda: [FixedChain("chain"), Forwarder("relay")],
                          code_version="chain-3", pin_runs=True)
"""Runs pinned to their code (Swarm(pin_runs=True)): chain-3 refuses a run chain-2 started unless told otherwise."""
