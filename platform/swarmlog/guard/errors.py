"""The guard's error: a handler called something whose result or effect the log does not record."""

from __future__ import annotations

from ..errors import NondeterminismError
from ._exemptions import TRUSTED_KINDS
from .table import KINDS

__all__ = ["ForbiddenCall"]


class ForbiddenCall(NondeterminismError):
    """A handler called something whose result or effect the log does not record.

    ``call`` is the function the handler called (a row of :data:`swarmlog.guard.COVERAGE`),
    ``case`` the row's name for this way of calling it (``"time.gmtime()"``, without a time),
    ``kind`` what it reaches (``"clock"``, ``"files"``, ...), ``use`` the ``ctx`` method to use
    instead, and ``intercepted`` the function the guard stopped, when that is not ``call``
    itself (``uuid.uuid4`` stopped at ``os.urandom`` by a wrapper of the handler's own).
    """

    def __init__(self, *, offset: int | None, agent: str | None, call: str, use: str, reason: str,
                 case: str | None = None, kind: str = "", intercepted: str | None = None,
                 library: str | None = None) -> None:
        self.call = call
        self.case = case or f"{call}()"
        self.kind = kind
        self.use = use
        self.reason = reason
        self.intercepted = intercepted
        self.library = library
        """The installed library whose code made the call (``anyio``), or None: the handler's own code."""
        detail = (f"{call}() is forbidden inside an agent handler: it {reason}, which the log "
                  f"does not record, so a replay would diverge. Use {use} instead.")
        if intercepted is not None and intercepted != call:
            detail += f" (intercepted at {intercepted}())"
        if library is not None:
            detail += f" It was called by {library}, an installed library: " + trust_advice(library, kind)
        super().__init__(offset=offset, agent=agent, detail=detail)


def trust_advice(library: str, kind: str) -> str:
    """Whether ``swarmlog.guard.trust_library(library)`` would let a call of this kind through."""
    if kind in TRUSTED_KINDS:
        return (f"swarmlog.guard.trust_library({library!r}) lets its own reads of the clock, the environment, the "
                f"machine and OS entropy through, if nothing it reads reaches what the handler gets back "
                f"(timeouts, retry jitter, request ids).")
    return (f"swarmlog.guard.trust_library does not apply (it lets a library read the clock, the environment, the "
            f"machine and entropy, never reach {KINDS.get(kind, 'anything else')}): use the library through ctx "
            f"(its async client on ctx.async_http(), its I/O in ctx.async_effect(...)), or keep it out of the step.")
