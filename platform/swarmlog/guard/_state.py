"""Per-thread guard state: the scopes open on this thread, and whether the hook is installed."""

from __future__ import annotations

import threading
import types

__all__ = ["ThreadState", "innermost_guard", "thread_state"]


class ThreadState:
    __slots__ = ("stack", "hooked", "yielded", "rearm_frames", "rearm_trace", "scope_hooks")

    def __init__(self) -> None:
        self.stack: list = []  # the open scopes, innermost last; `scope.guards` tells a guard from allowed()
        self.hooked = False  # whether the hook is (meant to be) this thread's profile function
        self.yielded = False  # another profiler was installed first: stay out of its way
        self.rearm_frames: list[types.FrameType] | None = None
        self.rearm_trace: object = None
        # The lighter profile functions of a Logger call in progress (see _hook), kept referenced
        # while installed; None when the full hook is the one.
        self.scope_hooks: tuple[object, ...] | None = None


local = threading.local()


def thread_state() -> ThreadState:
    try:
        return local.state
    except AttributeError:
        st = local.state = ThreadState()
        return st


def innermost_guard(st: ThreadState) -> object | None:
    """The innermost handler guard open on this thread, if any."""
    for scope in reversed(st.stack):
        if scope.guards:
            return scope
    return None
