"""Long runs: continue a run on a new topic, seeded with every agent's fold (Temporal's continue-as-new).

The continuation wing. Its face (every name imported when first used):

* :func:`continue_run` (``swarmlog continue``) ends a run's part on its topic and starts a new topic
  with a link to it and each agent's fold there (:class:`Continued`);
* :func:`check_link` (what ``swarmlog replay --swarm`` does on a continued topic) replays the old
  topic's part, checks that it reaches the seeded folds, and says so (:class:`LinkCheck`), or that
  the old topic is gone;
* :func:`check_chain` (what ``swarmlog replay --verify`` adds on a continued topic) checks each old
  topic's bytes against the token its link holds (:class:`ChainLink`).

What the new topic holds and how every fold reads it: :mod:`swarmlog.runtime.continued`. The
modules: ``_continue``, ``_follow``, ``command`` (``swarmlog continue``). docs/long-runs.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import exports

if TYPE_CHECKING:
    from ._continue import Continued, continue_run
    from ._follow import ChainLink, LinkCheck, check_chain, check_link

__getattr__ = exports(globals(), {
    "Continued": "._continue",
    "continue_run": "._continue",
    "ChainLink": "._follow",
    "LinkCheck": "._follow",
    "check_chain": "._follow",
    "check_link": "._follow",
})

__all__ = ["ChainLink", "Continued", "LinkCheck", "check_chain", "check_link", "continue_run"]
