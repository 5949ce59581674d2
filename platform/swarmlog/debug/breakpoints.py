"""Breakpoints on steps: an agent, an event type, or any Python predicate (``swarmlog step``).

A breakpoint matches a :class:`~swarmlog.debug.AgentStep` — one agent handling one offset —
never a bare message: what a breakpoint stops at is always an agent about to have done
something, with a state before and after.

* ``Breakpoint.agent("reviewer")``: the reviewer's steps.
* ``Breakpoint.event_type("timer.fired")`` or ``"agent.message:task_complete"``: steps
  handling that type (or that message kind), as ``swarmlog log --type`` spells them.
* ``Breakpoint.predicate("after['phase'] == 'timed_out'")``: a Python expression,
  compiled once, evaluated per step with these names: ``step``, ``event``, ``agent``,
  ``handler``, ``offset``, ``type``, ``kind``, ``before``, ``after``, ``outputs``. As in
  pdb's conditional breakpoints, an expression that raises *stops* (the error is kept in
  :attr:`Breakpoint.last_error`): a broken condition shows itself instead of running past
  everything.

Parsing (:func:`parse`) takes what a person types in the view: ``agent reviewer``,
``type timer.fired``, ``if <expr>``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import CodeType
from typing import Any

from ..errors import UsageError
from ._rebuild import AgentStep

__all__ = ["AGENT", "Breakpoint", "IF", "TYPE", "first_match", "names", "parse"]

logger = logging.getLogger(__name__)

AGENT = "agent"
TYPE = "type"
IF = "if"


@dataclass(eq=False, slots=True)
class Breakpoint:
    """One breakpoint: ``kind`` is ``agent``, ``type`` or ``if``; ``value`` what it names or tests."""

    kind: str
    value: str
    _code: CodeType | None = field(default=None, repr=False)
    last_error: str | None = None
    """``if``: the error the expression last raised (and so stopped at), None if it did not."""

    @classmethod
    def agent(cls, name: str) -> Breakpoint:
        return cls(AGENT, name)

    @classmethod
    def event_type(cls, name: str) -> Breakpoint:
        return cls(TYPE, name)

    @classmethod
    def predicate(cls, expression: str) -> Breakpoint:
        try:
            code = compile(expression, "<breakpoint>", "eval")
        except SyntaxError as exc:
            raise UsageError(f"breakpoint condition {expression!r} is not a Python expression: {exc.msg}") from exc
        return cls(IF, expression, code)

    def matches(self, step: AgentStep) -> bool:
        if self.kind == AGENT:
            return step.agent == self.value
        e = step.event
        if self.kind == TYPE:
            if e is None:
                return False
            return e.event_type == self.value or (e.kind is not None and f"{e.event_type}:{e.kind}" == self.value)
        assert self._code is not None
        try:
            hit = bool(eval(self._code, {"__builtins__": __builtins__}, names(step)))
        except Exception as exc:  # as pdb does: a condition that fails stops, and says why
            self.last_error = f"{type(exc).__name__}: {exc}"
            return True
        self.last_error = None
        return hit

    def __str__(self) -> str:
        return f"{self.kind} {self.value}"


def names(step: AgentStep) -> dict[str, Any]:
    """What a predicate sees of a step."""
    e = step.event
    return {"step": step, "event": e, "agent": step.agent, "handler": step.handler, "offset": step.offset,
            "type": e.event_type if e is not None else None, "kind": e.kind if e is not None else None,
            "before": step.before, "after": step.after, "outputs": step.outputs}


def parse(text: str) -> Breakpoint:
    """``agent NAME``, ``type TYPE[:KIND]`` or ``if EXPRESSION``."""
    word, _, rest = text.strip().partition(" ")
    rest = rest.strip()
    if word == AGENT and rest:
        return Breakpoint.agent(rest)
    if word == TYPE and rest:
        return Breakpoint.event_type(rest)
    if word == IF and rest:
        return Breakpoint.predicate(rest)
    raise UsageError(f"a breakpoint is `agent NAME`, `type TYPE[:KIND]` or `if EXPRESSION`, not {text!r}")


def first_match(breakpoints: Iterable[Breakpoint], step: AgentStep) -> Breakpoint | None:
    """The first of ``breakpoints`` that ``step`` matches."""
    for b in breakpoints:
        if b.matches(step):
            return b
    return None
