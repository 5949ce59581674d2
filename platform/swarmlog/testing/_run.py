"""What one simulated run was: its steps, its log, its agents' states, and what it violated."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from ..agent import Swarm
from ..errors import NondeterminismError, SwarmlogError
from ..events import Event
from ..log.memory import InMemoryLog
from ..log.protocol import STATE_DIGEST
from ..schema.codec import Decoder
from ._schedule import Schedule

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Violation:
    """A check a run failed: ``check`` names it (``deadlock``, ``runtime``, an invariant's name)."""

    check: str
    message: str


@dataclass(frozen=True, slots=True)
class Step:
    """One thing that happened in a run: a step, a timeout firing, or reading a cancellation."""

    number: int
    """1-based, in the order things happened."""
    kind: str
    """``step`` (a handler ran on its input), ``timers`` (logical timers fired), ``fire`` (a wall-clock
    timeout fired), ``read`` (the agent read its own ``timer.cancelled``), ``crash`` (the step ran and the
    agent's life ended before its commit; its next life runs it again)."""
    agent: str
    input: int | None
    """The input's offset (``step``, ``read``)."""
    handled: bool
    """A handler of the agent ran on the input (False: the agent has none for it)."""
    wrote: tuple[int, int]
    """The offsets it wrote: ``[start, end)`` (transaction markers included)."""
    at_ms: int
    """Simulated time at the step (the log's clock)."""
    options: int
    """How many things could have happened here."""
    choice: int
    """Which one did (0: the default)."""
    passed_over: str | None
    """What the default would have been, when the schedule chose otherwise."""
    timers: tuple[str, ...]
    """The timeouts that fired (``fire``)."""
    state_before: str
    state_after: str
    """The agent's state before and after, as canonical JSON."""
    completions: tuple[str, ...] = ()
    """Inside an async step, each completion order the schedule chose away from the default
    (``call #1 (effect 'b') before call #0 (effect 'a')``)."""


class SimulationFailed(AssertionError):
    """A simulated run violated a check; the message is the run as a readable sequence of steps."""

    def __init__(self, run: SimRun, *, header: str = "", exported: Any = None) -> None:
        self.run = run
        self.exported = exported
        text = run.describe()
        if exported is not None:
            text += f"\n{exported}"
        super().__init__(f"{header}\n{text}" if header else text)


@dataclass(eq=False)
class SimRun:
    """One run of a swarm under one schedule."""

    swarm: Swarm
    schedule: Schedule
    """The choices the run made; ``Simulator.run(run.schedule)`` makes the same run again."""
    sizes: tuple[int, ...]
    """How many options each choice had."""
    steps: list[Step]
    states: dict[str, Any]
    """Agent -> its ``state`` at the end."""
    at_rest: bool
    """Nothing could happen any more (else the run stopped at ``max_steps``)."""
    log: InMemoryLog
    topic: str
    decoder: Decoder
    error: NondeterminismError | None
    max_steps: int
    initial: dict[str, str]
    """Agent -> its initial state, as canonical JSON."""
    replayable: bool = True
    """``Simulator.run(run.schedule)`` makes this run again (False when a model drew from a Hypothesis
    strategy: those values are not part of a schedule)."""
    violations: list[Violation] = field(default_factory=list)
    _events: list[Event] | None = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        return not self.violations

    def check(self) -> None:
        """Raise :class:`SimulationFailed` (an ``AssertionError``) if the run violated anything."""
        if self.violations:
            raise SimulationFailed(self)

    def events(self) -> list[Event]:
        """Every event of the run's log, decoded, in offset order (what a replay reads), without the
        ``state.digest`` records: what the agents' states were is bookkeeping, not an event of the swarm."""
        if self._events is None:
            out = []
            for m in self.log.messages(self.topic):
                try:
                    writer, rec = self.decoder.decode(m.value(), m.offset())
                except SwarmlogError:
                    continue
                if writer.event_type != STATE_DIGEST:
                    out.append(Event.from_message(m, writer, rec))
            self._events = out
        return self._events

    def event(self, offset: int) -> Event | None:
        for e in self.events():
            if e.offset == offset:
                return e
        return None

    def written(self, step: Step) -> list[Event]:
        """The events ``step`` wrote."""
        start, end = step.wrote
        return [e for e in self.events() if start <= e.offset < end]

    def handled(self, agent: str) -> set[int]:
        """The offsets of the inputs a handler of ``agent`` ran on."""
        return {s.input for s in self.steps if s.agent == agent and s.kind == "step" and s.handled
                and s.input is not None}

    def describe(self) -> str:
        """The run as a readable sequence of steps, its violations first."""
        from ._report import describe

        return describe(self)

    def replay(self) -> Any:
        """Replay the run's log with the runtime's swarm replayer (in memory): what ``swarmlog replay
        --swarm`` gives on the exported topic. A run the simulator made replays with no divergence."""
        from ..runtime import replay_swarm_log

        return replay_swarm_log(backend=self.log, swarm=self.swarm, topic=self.topic, registry=self.decoder.registry)
