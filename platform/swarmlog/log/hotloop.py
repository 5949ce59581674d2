"""How swarmlog's hot loops set the interpreter while they run: fewer collections, prompter thread switches.

Two of CPython's process-wide knobs cost the loops over the log measurable time at their
defaults. Each is changed for the duration of a ``with`` block and put back by the
outermost block to leave (blocks nest and may run on several threads at once). A program
that changes the same knob while a block runs gets its own value back when the block ends.
Measured in bench/README.md, "Issue 14, fourth pass" (``sink.swarmlog``).

**The cyclic collector** (:func:`fewer_collections`). A loop over the log allocates a few
container objects an event (the message, the decoded record's dicts and tuples) and frees
almost all of them by reference counting: they form no cycles, so the collector finds nothing
in them. It still walks them. At CPython's default thresholds (700, 10, 10) a young collection
runs every 700 allocations, and every object still alive then (the sink's batches of messages
waiting for their Postgres transaction, an agent's state, the lookahead's index) is walked
again as it ages, up to full collections of the whole heap: the sink's decoding thread spent
a good part of its CPU there, in long pauses. Inside the block a young
collection runs every :data:`YOUNG_THRESHOLD` allocations: cycles are still collected, in
larger batches, and the memory they hold meanwhile is bounded by that many objects.

**Thread switches** (:func:`prompt_thread_switches`). The sink decodes on one thread while
another feeds Postgres its ``COPY``. psycopg writes a transaction's stream in chunks and waits
for the socket between them with the GIL released; to write the next chunk, that thread must
get the GIL back from the decoding thread, which gives it up only every switch interval (5 ms
by default). Meanwhile Postgres, the slower side, waits for data. Inside the block the interval
is :data:`SWITCH_INTERVAL_S`.
"""

from __future__ import annotations

import gc
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

__all__ = ["SWITCH_INTERVAL_S", "YOUNG_THRESHOLD", "fewer_collections", "prompt_thread_switches"]

YOUNG_THRESHOLD = 50_000
"""Allocations (less deallocations) of container objects between young collections in a hot loop.

Ten batches' worth of the sink's messages; CPython's default is 700. At the default the sink's
decoding thread spent far more CPU than with the collector off; from ten thousand on, about as
little, and no less above (``sink.swarmlog``; the figures in bench/README.md, "The figures behind
the code's comments").
"""

SWITCH_INTERVAL_S = 0.0005
"""The longest a thread waiting for the GIL waits for a running one in a hot loop (CPython: 5 ms)."""


class _Knob:
    """One process-wide setting, changed while at least one block runs, restored after the last."""

    def __init__(self, get: Callable[[], Any], set_: Callable[[Any], None], want: Callable[[Any], Any]) -> None:
        self._get, self._set, self._want = get, set_, want
        self._lock = threading.Lock()
        self._depth = 0
        self._saved: Any = None

    @contextmanager
    def held(self) -> Iterator[None]:
        with self._lock:
            if self._depth == 0:
                self._saved = self._get()
                wanted = self._want(self._saved)
                if wanted != self._saved:
                    self._set(wanted)
            self._depth += 1
        try:
            yield
        finally:
            with self._lock:
                self._depth -= 1
                if self._depth == 0:
                    self._set(self._saved)


def _fewer(thresholds: tuple[int, int, int]) -> tuple[int, int, int]:
    young, older, oldest = thresholds
    if young == 0 or young >= YOUNG_THRESHOLD:  # 0: the program switched the collector off
        return thresholds
    return (YOUNG_THRESHOLD, older, oldest)


_collections = _Knob(gc.get_threshold, lambda t: gc.set_threshold(*t), _fewer)
_switches = _Knob(sys.getswitchinterval, sys.setswitchinterval, lambda s: min(s, SWITCH_INTERVAL_S))


def fewer_collections() -> AbstractContextManager[None]:
    """A young collection every :data:`YOUNG_THRESHOLD` allocations instead of 700 while the block runs."""
    return _collections.held()


def prompt_thread_switches() -> AbstractContextManager[None]:
    """A switch interval of :data:`SWITCH_INTERVAL_S` (at most) while the block runs."""
    return _switches.held()
