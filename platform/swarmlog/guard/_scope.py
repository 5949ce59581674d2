"""The two scopes: :class:`guarded` around a handler call, :class:`allowed` around swarmlog's own I/O.

The enter/exit methods run with the hook installed on one side or the other, and every call they
make costs a hook event: they avoid calls (``del stack[-1]``, not ``.pop()``) and switch the
hook off first and on last.
"""

from __future__ import annotations

import sys
import types
import warnings

from ..errors import NondeterminismError
from . import _hook
from ._state import local, thread_state
from .errors import ForbiddenCall

__all__ = ["allowed", "guarded", "is_guarded"]

_getframe = sys._getframe
_warned_profiler = False


def is_guarded() -> bool:
    """Whether the calling thread is inside a handler (and not inside :func:`allowed`)."""
    stack = thread_state().stack
    return bool(stack) and stack[-1].guards


class guarded:
    """Forbid nondeterministic calls on this thread for the duration of a handler call.

    Re-entrant: nested guards stack, and the innermost names the agent and offset in errors.
    Other threads are never affected. If the handler swallows a :class:`ForbiddenCall`, the
    guard raises it again on a normal exit.
    """

    __slots__ = ("agent", "offset", "violation", "base", "_st")
    guards = True

    def __init__(self, *, agent: str, offset: int) -> None:
        self.agent = agent
        self.offset = offset
        self.violation: ForbiddenCall | None = None
        self.base: types.FrameType | None = None

    def __enter__(self) -> guarded:
        try:
            st = local.state
        except AttributeError:
            st = thread_state()
        self._st = st
        # The frame that entered the guard: the handler's frames are below it, and nothing
        # above it (the runtime, an import that is running the swarm) may excuse a call.
        self.base = _getframe(1)
        st.stack.append(self)
        if not st.hooked and not st.yielded:
            profiler = _hook.getprofile()
            if profiler is None:
                _hook.install()
                st.hooked = True
            else:
                st.yielded = True
                _warn_profiler(profiler)
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        st = self._st
        stack = st.stack
        if stack[-1] is self:
            del stack[-1]
        else:
            stack.remove(self)
        if st.hooked and (not stack or not stack[-1].guards):
            _hook.uninstall()
            st.hooked = False
        if not stack:
            st.yielded = False
        if st.rearm_frames is not None and not st.hooked:
            _hook.disarm(st)
        self.base = None
        violation = self.violation
        if violation is not None and exc is not violation \
                and (exc_type is None or isinstance(exc, Exception) and not isinstance(exc, NondeterminismError)):
            # The handler swallowed a ForbiddenCall: it still must not count as a success, nor as a failure of
            # the handler's own (recorded as handler.failed, replayed as one) if it then raised something else.
            raise violation from exc if isinstance(exc, BaseException) else None


class allowed:
    """Let swarmlog's own code do a forbidden thing inside a handler (``ctx.effect`` running the
    effect live, ``ctx.llm`` calling the model). Not for handlers: what runs in here is not
    replayed unless the caller records its result."""

    __slots__ = ("_st",)
    guards = False

    def __enter__(self) -> allowed:
        try:
            st = local.state
        except AttributeError:
            st = thread_state()
        self._st = st
        if st.hooked:
            _hook.uninstall()
            st.hooked = False
        st.stack.append(self)
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        st = self._st
        stack = st.stack
        if stack[-1] is self:
            del stack[-1]
        else:
            stack.remove(self)
        if stack and stack[-1].guards and not st.yielded:
            _hook.install()
            st.hooked = True


_hook.watch_guard_entry(guarded.__enter__.__code__)


def _warn_profiler(profiler: object) -> None:
    global _warned_profiler
    if not _warned_profiler:
        _warned_profiler = True
        warnings.warn(f"swarmlog's determinism guard is off while another profiler ({profiler!r}) "
                      f"is installed: both use sys.setprofile", RuntimeWarning, stacklevel=3)
