"""The guard's error: a handler called something whose result or effect the log does not record."""

from __future__ import annotations

from ..errors import NondeterminismError

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
                 case: str | None = None, kind: str = "", intercepted: str | None = None) -> None:
        self.call = call
        self.case = case or f"{call}()"
        self.kind = kind
        self.use = use
        self.reason = reason
        self.intercepted = intercepted
        detail = (f"{call}() is forbidden inside an agent handler: it {reason}, which the log "
                  f"does not record, so a replay would diverge. Use {use} instead.")
        if intercepted is not None and intercepted != call:
            detail += f" (intercepted at {intercepted}())"
        super().__init__(offset=offset, agent=agent, detail=detail)
