"""Replay: rebuild every agent's state from offset zero, and check what the log holds.

The replay wing. Its face (every name imported when first used):

* :func:`replay` folds the log with a reducer (:class:`Ledger` by default): what can be rebuilt
  from the log alone, with no swarm code (:class:`Fold`, :class:`ReplayResult`);
* :func:`replay_swarm` re-runs a swarm's handlers over the log and says where the code now
  diverges (:class:`SwarmReplayResult`, :class:`Divergence`; the engine is the runtime's);
* :func:`swarm_report`, the report an operator reads after a replay Job;
* :func:`check_causality`, ``swarmlog check causality``: the log's order respects what caused what.

The modules: ``_replay`` (the two replays), ``fold`` (a reducer over the log, the plain replay's
engine), ``ledger`` (the default reducer), ``report``, ``causality``, ``command`` (``swarmlog
replay`` and ``swarmlog check``).

The package is ``swarmlog.replaying``, not ``swarmlog.replay``: ``swarmlog.replay`` is the
function (``swarmlog.replay(settings=...)``), and a module of the same name would shadow it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import exports

if TYPE_CHECKING:
    from ..runtime import Divergence, LiveStates, SwarmReplayResult
    from ._replay import replay, replay_swarm
    from .causality import CausalityViolation, check_causality
    from .fold import Fold, Reducer, ReplayResult, Undecodable
    from .ledger import Ledger
    from .report import swarm_report

# Imported when first used: the plain replay (``swarmlog replay`` without ``--swarm``) runs no agent
# code and must not pay for importing the runtime and the determinism guard at every start.
__getattr__ = exports(globals(), {
    "Divergence": "..runtime",
    "LiveStates": "..runtime",
    "SwarmReplayResult": "..runtime",
    "replay": "._replay",
    "replay_swarm": "._replay",
    "CausalityViolation": ".causality",
    "check_causality": ".causality",
    "Fold": ".fold",
    "Reducer": ".fold",
    "ReplayResult": ".fold",
    "Undecodable": ".fold",
    "Ledger": ".ledger",
    "swarm_report": ".report",
})

__all__ = ["CausalityViolation", "Divergence", "Fold", "Ledger", "LiveStates", "Reducer", "ReplayResult",
           "SwarmReplayResult", "Undecodable", "check_causality", "replay", "replay_swarm", "swarm_report"]
