"""What a simulated run is a function of: its schedule, and the models of the world.

**A schedule** is the sequence of choices a run made. Wherever more than one thing could
happen next — two agents each with a step due, a timeout that could fire now or later,
an effect modelled by ``one_of`` several outcomes — the run asks its chooser for an index
into the possibilities, listed in a fixed order whose first entry is the *default*: the
oldest input first, a timeout only once nothing else is due, the first outcome. A run
with no choice is recorded as ``Schedule()``; beyond its last recorded choice a schedule
takes the default. So a schedule is small data (``Schedule(choices=(0, 1))``), printable,
and replays the same run every time (``Simulator.run(schedule)``); and shrinking it
toward zeros (what Hypothesis does) moves it toward the default order, keeping only the
choices the failure needs.

Choosers: a recorded :class:`Schedule`, a seed (``random.Random``, stable across
processes), a Hypothesis ``st.data()`` object, or :func:`schedules` (a Hypothesis
strategy). Whatever made it, the run records the choices it took as a :class:`Schedule`.

**Models** answer what the simulator never asks the world: an effect's result, an LLM's
reply. A model is a value (answered as it is), a function of the call's arguments
(``ctx.effect("work", do_work, task)`` calls the model with ``task``; ``ctx.llm`` with the
request), :class:`Fail` (the call fails with that exception, recorded as the live call's
failure would be), :func:`one_of` (the schedule chooses among models), or — with a
Hypothesis ``st.data()`` chooser — a Hypothesis strategy to draw the answer from.
Latency is not a model: how long a call takes is *when* its step runs, which is the
schedule's to choose.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import MissingDependency, ScheduleMismatch, UsageError


@dataclass(frozen=True, slots=True)
class Schedule:
    """The choices of one run, in order (see the module). ``Schedule()`` is the default order."""

    choices: tuple[int, ...] = ()

    def trimmed(self) -> Schedule:
        """The same schedule without trailing defaults (they change nothing)."""
        c = list(self.choices)
        while c and c[-1] == 0:
            c.pop()
        return Schedule(tuple(c))

    @property
    def deviations(self) -> int:
        """How many choices differ from the default."""
        return sum(1 for c in self.choices if c)


class Chooser(Protocol):
    """Where a run's choices come from."""

    def choose(self, n: int, what: str) -> int:
        """An index in ``range(n)`` (``n >= 2``); ``what`` says what is being chosen."""

    def draw(self, strategy: Any, what: str) -> Any:
        """A value of a Hypothesis strategy (only a Hypothesis chooser can)."""


class _NoDraw:
    def draw(self, strategy: Any, what: str) -> Any:
        raise UsageError(f"{what} is modelled by a Hypothesis strategy, which only a Hypothesis chooser can draw "
                         f"from: run the simulation with st.data() (Simulator.explore does), or model it with "
                         f"one_of(...) so that any schedule can choose")


class Replaying(_NoDraw):
    """A recorded :class:`Schedule`: its choices in order, then the defaults."""

    def __init__(self, schedule: Schedule) -> None:
        self.schedule = schedule
        self._i = 0

    def choose(self, n: int, what: str) -> int:
        i = self._i
        self._i = i + 1
        choices = self.schedule.choices
        c = choices[i] if i < len(choices) else 0
        if c >= n:
            raise ScheduleMismatch(decision=i, choice=c, options=n)
        return c


class Seeded(_NoDraw):
    """Uniform choices from ``random.Random(seed)``: the same seed, the same run, in any process."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._rng = random.Random(seed)

    def choose(self, n: int, what: str) -> int:
        return self._rng.randrange(n)


class Drawing:
    """Choices drawn from a Hypothesis ``st.data()`` object: Hypothesis explores and shrinks them."""

    def __init__(self, data: Any) -> None:
        self.data = data
        self._ranges: dict[int, Any] = {}

    def choose(self, n: int, what: str) -> int:
        s = self._ranges.get(n)
        if s is None:
            from hypothesis import strategies as st

            s = self._ranges[n] = st.integers(0, n - 1)
        return int(self.data.draw(s))

    def draw(self, strategy: Any, what: str) -> Any:
        return self.data.draw(strategy)


class RandomSchedule(_NoDraw):
    """A schedule drawn from a Hypothesis-controlled ``random.Random`` (what :func:`schedules` makes)."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self.taken: list[int] = []

    def choose(self, n: int, what: str) -> int:
        c = self._rng.randrange(n)
        self.taken.append(c)
        return c

    def __repr__(self) -> str:
        return f"RandomSchedule(taken={Schedule(tuple(self.taken)).trimmed()!r})"


def require_hypothesis(what: str) -> None:
    """Hypothesis is the ``testing`` extra: without it, exploring says so instead of an ImportError."""
    try:
        import hypothesis  # noqa: F401
    except ImportError as exc:
        raise MissingDependency(program=f"Hypothesis ({what})",
                                install_hint="Install the extra: pip install 'swarmlog[testing]'. Seeded "
                                             "schedules (Simulator.sample, .run(seed), .exhaust) need nothing.") \
            from exc


def schedules() -> Any:
    """A Hypothesis strategy of schedules, for ``@given(schedules())`` and ``Simulator.run``.

    Choices are drawn lazily, as the run needs them, and shrink toward the default order.
    (To model answers with Hypothesis strategies as well, use ``st.data()`` instead.)
    """
    require_hypothesis("swarmlog.testing.schedules()")
    from hypothesis import strategies as st

    return st.builds(RandomSchedule, st.randoms(use_true_random=False, note_method_calls=False))


def chooser_for(schedule: Any) -> Chooser:
    """What a run's ``schedule`` argument means (see :meth:`Simulator.run`)."""
    if schedule is None:
        return Replaying(Schedule())
    if isinstance(schedule, Schedule):
        return Replaying(schedule)
    if isinstance(schedule, bool):
        raise UsageError("a schedule is a Schedule, a seed (int), st.data() or schedules(), not a bool")
    if isinstance(schedule, int):
        return Seeded(schedule)
    if isinstance(schedule, random.Random):
        return RandomSchedule(schedule)
    if hasattr(schedule, "choose") and hasattr(schedule, "draw"):
        return schedule
    try:
        from hypothesis.strategies import DataObject
    except ImportError:  # no Hypothesis: nothing can be a DataObject
        pass
    else:
        if isinstance(schedule, DataObject):
            return Drawing(schedule)
    raise UsageError(f"cannot run a schedule of type {type(schedule).__name__}: give a Schedule, a seed (int), "
                     f"a random.Random, st.data() or a value of schedules()")


# --- models ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fail:
    """The call fails with ``error`` (an exception, or a message for a ``RuntimeError``): the
    handler sees what it would see live (``EffectFailed`` from ``ctx.effect``; the exception
    itself from ``ctx.llm``), and the failure is recorded as a live one would be."""

    error: BaseException | str

    def exception(self) -> BaseException:
        e = self.error
        return copy.copy(e) if isinstance(e, BaseException) else RuntimeError(e)


@dataclass(frozen=True)
class OneOf:
    """The schedule chooses which of ``alternatives`` answers the call (the first is the default)."""

    alternatives: tuple[Any, ...] = field(default=())


def one_of(*alternatives: Any) -> OneOf:
    """Let the schedule choose the answer: ``one_of({"ok": True}, Fail(TimeoutError("slow")))``."""
    if not alternatives:
        raise UsageError("one_of() needs at least one alternative")
    return OneOf(tuple(alternatives))


def _is_strategy(model: Any) -> bool:
    try:
        from hypothesis.strategies import SearchStrategy
    except ImportError:  # pragma: no cover - hypothesis is what makes strategies
        return False
    return isinstance(model, SearchStrategy)


def answer(model: Any, args: tuple[Any, ...], chooser: Chooser, what: str) -> Any:
    """The answer ``model`` gives a call with ``args`` (raises the failure a :class:`Fail` models)."""
    while True:
        if isinstance(model, OneOf):
            alts = model.alternatives
            model = alts[chooser.choose(len(alts), what) if len(alts) > 1 else 0]
            continue
        if isinstance(model, Fail):
            raise model.exception()
        if _is_strategy(model):
            return chooser.draw(model, what)
        if callable(model):
            return model(*args)
        return copy.deepcopy(model)


Model = Any
"""A value, a function of the call's arguments, :class:`Fail`, :func:`one_of` or a Hypothesis strategy."""
