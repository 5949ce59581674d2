"""What version of a swarm's code a record was made by: the tag beside snapshots and checkpoints.

Public inside the package (the runner records it in ``run.started``; the debugger's snapshots and the
live agents' checkpoints are tagged with it, and only a fold of the same code is restored).
"""

from __future__ import annotations

import hashlib
import importlib
import inspect

from ..agent import Swarm

__all__ = ["code_version"]


def code_version(swarm: Swarm) -> str:
    """The swarm's declared code version, else a hash of the source of its agents' modules."""
    if swarm.code_version:
        return swarm.code_version
    h = hashlib.sha256()
    modules = sorted({type(a).__module__ for a in swarm.agents()})
    for name in modules:
        module = importlib.import_module(name)
        try:
            h.update(inspect.getsource(module).encode())
        except (OSError, TypeError):
            h.update(name.encode())
    return "src-" + h.hexdigest()[:12]
