"""What a replay of a framework's agents can find changed, as typed errors.

Both are :class:`~swarmlog.errors.EffectDiverged`: the step cannot be served what the log recorded, so the
agent's replay stops there, and ``swarmlog replay --swarm`` reports the first one (kind ``effect``) with
the agent and the step:

* :class:`ModelRequestDiverged`: a model call asks something else than the recorded one (a changed
  instruction, tool list or conversation); it names the first differing JSON path, and the tool when
  what differs is a tool's result inside the conversation.
* :class:`ToolResultDiverged`: a tool returned something else than it did in the recorded run (or another
  tool ran in its place).
"""

from __future__ import annotations

from typing import Any

from ..errors import EffectDiverged
from ..llm.compare import first_difference, show
from ..llm.errors import RequestDiverged

__all__ = ["ModelRequestDiverged", "ToolResultDiverged"]



class ModelRequestDiverged(RequestDiverged):
    """A replayed model call of a framework asks something else than the call the log recorded at its place.

    ``part`` is the first differing JSON path of the request (``request.instructions``,
    ``request.input[2].output``, ``request.messages[0].parts[0].content``); ``recorded_value`` and
    ``replayed_value`` that part on each side; ``about`` what it is when the request says (``the result of
    tool 'word_count' (call call_1)``).
    """

    def __init__(self, *, offset: int | None, agent: str | None, model: str, part: str, recorded_value: Any,
                 replayed_value: Any, about: str | None = None) -> None:
        self.model = model
        super().__init__(offset=offset, agent=agent, call=f"the model call to {model!r}", part=part,
                         recorded_value=recorded_value, replayed_value=replayed_value, about=about,
                         remedy="Fix the program", recorded={"model": model})

    @classmethod
    def between(cls, *, offset: int | None, agent: str | None, model: str, recorded: Any,
                replayed: Any) -> ModelRequestDiverged:
        """The divergence of two requests known to differ (their first difference)."""
        found = first_difference(recorded, replayed, root="request")
        part, was, now, about = found if found is not None else ("request", recorded, replayed, None)
        return cls(offset=offset, agent=agent, model=model, part=part, recorded_value=was, replayed_value=now,
                   about=about)


class ToolResultDiverged(EffectDiverged):
    """A framework's tool, run again on replay, returned something else than it did in the recorded run.

    ``tool`` names it (and ``call_id`` the model's call of it); ``recorded_result`` and ``replayed_result``
    are the two results as canonical JSON. When another tool (or the same with other arguments) ran where
    the log recorded one, ``recorded_name`` and the arguments say so.
    """

    def __init__(self, *, offset: int | None, agent: str | None, tool: str, call_id: str | None,
                 recorded_name: str, recorded_args: str, replayed_args: str, recorded_result: str,
                 replayed_result: str) -> None:
        self.tool = tool
        self.call_id = call_id
        self.recorded_result = recorded_result
        self.replayed_result = replayed_result
        call = f" (call {call_id})" if call_id else ""
        if recorded_name != tool or recorded_args != replayed_args:
            detail = (f"tool {tool!r}{call} ran with {show(replayed_args)} where the recorded run's tool "
                      f"{recorded_name!r} ran with {show(recorded_args)}")
        else:
            detail = (f"tool {tool!r}{call} returned {show(replayed_result)} where the recorded run's returned "
                      f"{show(recorded_result)}")
        super().__init__(
            offset=offset, agent=agent, detail=detail + ". Fix the tool, or replay with the code that made the log",
            recorded={"tool": recorded_name, "args": recorded_args, "result": recorded_result},
            replayed={"tool": tool, "args": replayed_args, "result": replayed_result})
