"""Tools for testing swarms: the same ones swarmlog tests itself with.

**Simulation** — find the race before production. :class:`Simulator` runs a swarm's
unchanged agents in one process on the in-memory log, deterministically, under a
*schedule* that decides the interleaving of the agents' steps, when each wall-clock
timeout fires relative to them, and what each modelled effect and LLM call returns.
Hypothesis explores schedules and shrinks a failure to its smallest form, printed as a
readable sequence of steps; the failing run is a real log, which
:func:`export` writes to a Kafka topic with its replay token::

    from swarmlog.testing import Simulator, no_message_ignored
    from swarmlog.examples import case_study

    sim = Simulator(case_study.buggy, effects={"work": {"summary": "done", "took_ms": 1}},
                    end_state=case_study.finished, invariants=[no_message_ignored])
    found = sim.explore(max_examples=1000)        # Hypothesis: explore, then shrink
    print(found.failure.describe())               # the smallest failing schedule, step by step

In pytest, the ``simulate`` fixture (this package's pytest plugin) does the same in a line
and reports what it explored. See :mod:`swarmlog.testing._simulator` for what a schedule
decides, :mod:`swarmlog.testing._schedule` for schedules and models.

**Stubs** for the world outside:

* :class:`ScriptedLLM` (re-exported from :mod:`swarmlog.llm`): a deterministic in-process
  model that counts its calls, for asserting that a replay never called the model.
* :class:`StubServer`: a tiny HTTP server on the loopback interface speaking OpenAI's chat
  completions and Anthropic's messages API, each plain or streamed (server-sent events), tool
  calls included, for exercising a real HTTP client (:class:`swarmlog.llm.OpenAIChat`, the
  ``openai`` and ``anthropic`` SDKs through ``ctx.http()``) without a real model::

      from swarmlog.llm import OpenAIChat
      from swarmlog.testing import StubServer

      with StubServer(lambda request: "hello") as server:
          server.fail_next(2)                      # two 503s, then answers
          chat = OpenAIChat(base_url=server.base_url, api_key="sk-test", backoff=0.01)
          chat.complete({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
          assert server.request_count == 3
"""

from ._explore import Exploration
from ._export import Exported, export
from ._invariants import no_handler_failed, no_message_ignored
from ._run import SimRun, SimulationFailed, Step, Violation
from ._schedule import Fail, Schedule, one_of, schedules
from ._simulator import Simulator
from ._stub import ScriptedLLM, StubRequest, StubServer, anthropic_message, tool_call_reply

__all__ = [
    "Exploration",
    "Exported",
    "Fail",
    "Schedule",
    "ScriptedLLM",
    "SimRun",
    "SimulationFailed",
    "Simulator",
    "Step",
    "StubRequest",
    "StubServer",
    "Violation",
    "anthropic_message",
    "export",
    "no_handler_failed",
    "no_message_ignored",
    "one_of",
    "schedules",
    "tool_call_reply",
]
