"""Debugging a swarm like a single-threaded program: read its log, travel to any offset, stop in a
real debugger at any step, keep snapshots, fork a run.

The public face (``tests/unit/test_layout.py`` pins it):

* :class:`LogView` — the log's events decoded (:class:`LoggedEvent`), filtered, followed,
  with causes resolved both ways (:meth:`LogView.explain`, :meth:`LogView.graph`).
* :class:`Session` — the swarm's code over its log: :meth:`~Session.state` just before any
  offset, :meth:`~Session.diff`, :meth:`~Session.steps` (:class:`AgentStep`: input, handler, state
  before and after, outputs, divergences), a :class:`Cursor` stepping forward and back,
  :meth:`~Session.first_divergence`, :meth:`~Session.debug` (a step's handler under pdb or
  ``breakpoint()``'s debugger), :meth:`~Session.snapshot`.
* :class:`SnapshotStore` — per-agent snapshots beside the log, tagged with code and schema versions.
* :func:`fork` — a run's prefix copied, offset for offset, into a new topic to go on from.
* :class:`Stepper` — a whole run one event at a time, forward and back past any cursor's
  start, stopping at :class:`Breakpoint` s both ways (a :class:`Hit`).
* :mod:`swarmlog.debug.timeline` — a range of the log as a sequence diagram, for a
  terminal or as one self-contained HTML page (``swarmlog timeline``).

What a stepping view or a timeline needs is all here: the events of a range with their causes
(``graph``), every agent's state before and after each step (``steps``, ``Cursor``), moving
forward and back (``Cursor.forward/back/next_step/prev_step``), and the first divergence.
The machinery is private: ``_rebuild`` (agents folded from zero or a snapshot, their recorded
history read ahead through the runtime's one seam), ``_debugger`` (the handler trap and the
debugger hook).
"""

from typing import TYPE_CHECKING

from .._lazy import exports

# ``fork`` is both a submodule and the function this face exports: importing the submodule binds
# the attribute to the module, so the function is bound here, before anyone can (swarmlog._lazy).
from .fork import Forked, fork

if TYPE_CHECKING:
    from ..errors import SnapshotStale
    from ..runtime.snapshots import Ignored, SnapshotInfo, SnapshotStore
    from ._debugger import Stop
    from ._rebuild import AgentStep
    from .breakpoints import Breakpoint
    from .diff import Change, StateDiff
    from .logview import CausalGraph, Explained, LoggedEvent, LogView
    from .session import AgentState, Cursor, Replayed, Session, SnapshotsTaken
    from .stepper import Hit, Stepper

# Every name is imported when first used (swarmlog._lazy): the CLI's parser imports
# ``swarmlog.debug.command`` for every command, and the fold, the session and the views bring the
# runtime and the determinism guard along.
__getattr__ = exports(globals(), {
    "Stop": "._debugger",
    "SnapshotStale": "..errors",
    "AgentStep": "._rebuild",
    "Breakpoint": ".breakpoints",
    "Change": ".diff",
    "StateDiff": ".diff",
    "CausalGraph": ".logview",
    "Explained": ".logview",
    "LoggedEvent": ".logview",
    "LogView": ".logview",
    "AgentState": ".session",
    "Cursor": ".session",
    "Replayed": ".session",
    "Session": ".session",
    "SnapshotsTaken": ".session",
    "Ignored": "..runtime.snapshots",
    "SnapshotInfo": "..runtime.snapshots",
    "SnapshotStore": "..runtime.snapshots",
    "Hit": ".stepper",
    "Stepper": ".stepper",
})

__all__ = [
    "AgentState",
    "AgentStep",
    "Breakpoint",
    "CausalGraph",
    "Change",
    "Cursor",
    "Explained",
    "Forked",
    "Hit",
    "Ignored",
    "LogView",
    "LoggedEvent",
    "Replayed",
    "Session",
    "SnapshotInfo",
    "SnapshotStale",
    "SnapshotStore",
    "SnapshotsTaken",
    "StateDiff",
    "Stepper",
    "Stop",
    "fork",
]
