"""Agents and swarms: what users write.

An agent is a set of handlers over the events addressed to it, and a state that
is nothing but the fold of those handlers over the log::

    from swarmlog import Agent, Swarm, on, on_message, on_timer

    class Worker(Agent):
        def initial_state(self):
            return {"done": 0}

        @on_message("task")
        def task(self, ctx, event):
            answer = ctx.llm({"model": "m", "messages": [{"role": "user", "content": event.body}]})
            self.state["done"] += 1
            ctx.send("coordinator", "result", answer["choices"][0]["message"]["content"])

    swarm = Swarm(name="demo", agents=lambda: [Coordinator("coordinator"), Worker("w1")])

A handler may be ``async def``: its coroutine runs on the agent's deterministic loop, where
recorded calls made concurrently overlap live and replay in their recorded order
(:mod:`swarmlog.aio`, ``docs/async.md``).

Rules that make replay exact (the determinism guard enforces the first two):

* A handler touches the world only through ``ctx``: ``ctx.now()`` for time,
  ``ctx.random()`` for randomness, ``ctx.llm()`` / ``ctx.effect()`` for I/O,
  ``ctx.timer()`` / ``ctx.timeout()`` for waiting.
* All state lives in ``self.state`` and is JSON-serialisable (it is hashed to
  compare a replay with the live run).
* Handlers run one at a time per agent, in log order.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from .errors import ConfigurationError
from .events import Event
from .llm.sdk import llm_client
from .log.protocol import AGENT_NAME_FORBIDDEN, MESSAGE, TIMER_FIRED

__all__ = ["Agent", "Handler", "Swarm", "on", "on_message", "on_timer"]

Handler = Callable[[Any, Any, Event], Any]
"""``(self, ctx, event)``: returns nothing, or (``async def``) a coroutine the runtime runs on the step's loop."""

_HANDLES = "__swarmlog_handles__"


def on(event_type: str) -> Callable[[Handler], Handler]:
    """Handle every event of ``event_type`` addressed to this agent (or broadcast)."""
    return _mark((event_type, None))


def on_message(kind: str) -> Callable[[Handler], Handler]:
    """Handle ``agent.message`` events of one ``kind`` (``ctx.send(to, kind, body)``)."""
    return _mark((MESSAGE, kind))


def on_timer(name: str) -> Callable[[Handler], Handler]:
    """Handle the firing of the timer or timeout called ``name``."""
    return _mark((TIMER_FIRED, name))


def _mark(key: tuple[str, str | None]) -> Callable[[Handler], Handler]:
    def decorate(fn: Handler) -> Handler:
        if inspect.isasyncgenfunction(fn):
            # Called, it returns an async generator: neither a result nor an awaitable, so it would
            # silently never run. A handler is a function or an ``async def`` coroutine function.
            raise ConfigurationError(f"handler {fn.__qualname__} is an async generator (an async def with yield): a "
                                     f"handler is a function or an async def without yield")
        keys = list(getattr(fn, _HANDLES, ()))
        keys.append(key)
        setattr(fn, _HANDLES, tuple(keys))
        return fn

    return decorate


class Agent:
    """Base class of agents: subclass it and declare handlers with :func:`on` & co."""

    _handlers: dict[tuple[str, str | None], str] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        handlers: dict[tuple[str, str | None], str] = {}
        for klass in reversed(cls.__mro__):
            for attr, value in vars(klass).items():
                for key in getattr(value, _HANDLES, ()):
                    handlers[key] = attr
        cls._handlers = handlers

    def __init__(self, name: str) -> None:
        if not name or any(c in name for c in AGENT_NAME_FORBIDDEN):
            raise ConfigurationError(f"agent name {name!r} must be non-empty, without spaces or any of "
                                     f"{AGENT_NAME_FORBIDDEN.strip()!r} (they would make its event ids ambiguous)")
        self.name = name
        state = self.initial_state()
        if inspect.isawaitable(state):
            if inspect.iscoroutine(state):
                state.close()
            raise ConfigurationError(f"{type(self).__qualname__}.initial_state is async: it runs when the agent is "
                                     f"built, outside any step, so it must return the state itself (a dict)")
        self.state: dict[str, Any] = state

    def initial_state(self) -> dict[str, Any]:
        """The state before the first event; override to add fields."""
        return {}

    def handler_for(self, event: Event) -> Callable[[Any, Event], None] | None:
        """The bound handler for ``event``, most specific first (message kind, timer name)."""
        handlers = self._handlers
        if not handlers:
            return None
        sub = None
        if event.event_type == MESSAGE:
            sub = event.payload.get("kind")
        elif event.event_type == TIMER_FIRED:
            sub = event.payload.get("name")
        attr = handlers.get((event.event_type, sub)) if sub is not None else None
        if attr is None:
            attr = handlers.get((event.event_type, None))
        return getattr(self, attr) if attr is not None else None

    def handled_types(self) -> frozenset[str]:
        return frozenset(t for t, _ in self._handlers)


class Swarm:
    """A named set of agents, built fresh for every run or replay by ``agents()``."""

    def __init__(self, *, name: str, agents: Callable[[], Sequence[Agent]], llm: Any = None,
                 code_version: str = "", pin_runs: bool = False, compatible_with: Sequence[str] = ()) -> None:
        self.name = name
        self._factory = agents
        self.llm = llm_client(llm)
        """The LLM client ``ctx.llm`` calls live (never on replay); see ``swarmlog.llm``. An
        ``openai.OpenAI`` or ``anthropic.Anthropic`` client is taken as it is (``swarmlog.llm.sdk``)."""
        self.code_version = code_version
        """Recorded in ``run.started`` (empty: a hash of the agents' modules' source)."""
        self.pin_runs = pin_runs
        """A live agent refuses a run whose ``run.started`` recorded another code version, unless that version
        is in :attr:`compatible_with` (:class:`~swarmlog.errors.CodeVersionRefused`; docs/evolution.md)."""
        self.compatible_with = tuple(compatible_with)
        """Earlier code versions whose runs this code goes on with (their changes behind versioned steps)."""
        names = [a.name for a in agents()]
        if len(set(names)) != len(names):
            raise ConfigurationError(f"swarm {name!r} has duplicate agent names: {names}")
        self.agent_names = names

    def agents(self) -> list[Agent]:
        """Fresh agent instances (initial state)."""
        return list(self._factory())

    def agent(self, name: str) -> Agent:
        for a in self._factory():
            if a.name == name:
                return a
        raise ConfigurationError(f"swarm {self.name!r} has no agent {name!r} (agents: {', '.join(self.agent_names)})")

