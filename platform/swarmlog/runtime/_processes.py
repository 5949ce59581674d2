"""Parts of one job run side by side in forked processes, each part's result handed back.

Internal; the swarm replayer (``_replayer``) splits a swarm's agents across processes with it:
agents' folds are independent in a replay (each reads its inputs from the log, never from
another agent's replayed outputs), so each process folds some of them over the whole log and
the results are put together as one folding them all would have left them.

**Why fork.** A child forked from the caller has the swarm's code, the schemas and everything
decoded so far without importing or pickling anything: a :class:`~swarmlog.agent.Swarm` may be
any object (agents made by a lambda), and the interpreter's pinned string-hash seed is the
parent's. What a child must not do is use the parent's Kafka clients: librdkafka's threads are
not copied by a fork. So a child reads through :meth:`~swarmlog.log.base.LogBackend.after_fork`
(clients of its own), never closes or frees what it inherited (``gc.freeze``: the cycle
collector leaves the inherited objects alone, so no inherited client is destroyed waiting for
threads that are not there), and leaves by ``os._exit``, running no finalizer or ``atexit``
hook of the parent's.

**Results and errors.** A child sends its result back pickled, through a pipe that the parent
reads only once its own part is done (the child waits on a full pipe, which costs nothing: its
work is done). An error in a child comes back as itself — its type and its fields, with the
child's traceback as a note — so the caller decides by its type as if it had been raised here;
a child that dies without a result (a kill, memory) is a :class:`~swarmlog.errors.ReplayWorkerFailed`.
A child whose parent is gone stops at its next report. The parent kills and reaps its children
on every way out.

**Progress.** Each child writes how far it got into memory shared with the parent (an
anonymous shared mapping, made before the fork), read by the parent for its progress bar.
"""

from __future__ import annotations

import gc
import logging
import math
import mmap
import os
import pickle
import signal
import struct
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ..errors import ReplayWorkerFailed

logger = logging.getLogger(__name__)

T = TypeVar("T")

_SLOT = struct.Struct("q")


def available_cpus() -> int:
    """CPUs this process may use: its affinity, and a cgroup (v2) CPU quota such as a Kubernetes
    pod's ``resources.limits.cpu`` (rounded up), whichever is less."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    try:
        with open("/sys/fs/cgroup/cpu.max") as f:
            quota, period = f.read().split()[:2]
        if quota != "max":
            cpus = min(cpus, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, cpus)


def can_fork() -> bool:
    """Whether parts may run in forked processes here: Linux only (macOS's system libraries are not
    safe to use in a forked child of a process that has threads, and Windows has no fork)."""
    return sys.platform.startswith("linux") and hasattr(os, "fork")


class Slots:
    """One int64 per part in memory shared with the children forked after it was made."""

    def __init__(self, n: int, *, initial: int = 0) -> None:
        self._map = mmap.mmap(-1, _SLOT.size * max(1, n))
        for i in range(n):
            _SLOT.pack_into(self._map, _SLOT.size * i, initial)

    def __getitem__(self, i: int) -> int:
        return int(_SLOT.unpack_from(self._map, _SLOT.size * i)[0])

    def __setitem__(self, i: int, value: int) -> None:
        _SLOT.pack_into(self._map, _SLOT.size * i, value)


class Part:
    """What a part's function is given: its number of how many, and where it reports how far it got."""

    __slots__ = ("index", "count", "slots", "_parent")

    def __init__(self, index: int, count: int, slots: Slots, parent: int | None) -> None:
        self.index = index
        self.count = count
        self.slots = slots
        self._parent = parent  # the parent's pid, in a child

    @property
    def in_child(self) -> bool:
        return self._parent is not None

    def report(self, position: int) -> None:
        """Say how far this part got (shared with the parent); in a child whose parent is gone, stop."""
        self.slots[self.index] = position
        if self._parent is not None and os.getppid() != self._parent:
            os._exit(1)


def run_parts(parts: Sequence[Callable[[Part], T]], *, slots: Slots, names: Sequence[str]) -> list[T]:
    """``parts[0]`` in this process, every other part in a child forked for it; their results, in order.

    ``names`` says what each part is (the agents it replays), for errors. An error raised by this
    process's part is raised at once (the children are killed); else the first child's error, if any.
    """
    children: list[tuple[int, int]] = []  # (pid, read end of its pipe)
    me = os.getpid()
    try:
        for i in range(1, len(parts)):
            r, w = os.pipe()
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child's coverage is its result
                os.close(r)
                _child(parts[i], Part(i, len(parts), slots, me), w)
            os.close(w)
            children.append((pid, r))
        results = [parts[0](Part(0, len(parts), slots, None))]
        failure: BaseException | None = None
        for i, (pid, r) in enumerate(children, 1):
            with os.fdopen(r, "rb") as pipe:
                data = pipe.read()
            _, status = os.waitpid(pid, 0)
            children[i - 1] = (0, -1)
            outcome = _outcome(data, status, names[i])
            if isinstance(outcome, BaseException):
                failure = failure or outcome
            else:
                results.append(outcome)
        if failure is not None:
            raise failure
        return results
    finally:
        for pid, r in children:
            if pid:
                _end(pid, r)


def _child(part: Callable[[Part], Any], info: Part, w: int) -> None:  # pragma: no cover - runs in the child
    status = 1
    try:
        gc.freeze()  # the parent's objects (its Kafka clients among them) are never collected here
        try:
            out: tuple[str, Any] = ("ok", part(info))
        except BaseException as exc:  # noqa: BLE001 - carried to the parent, which raises it
            out = ("error", _carry(exc))
        try:
            data = pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # noqa: BLE001 - a result that cannot cross: said so, not lost
            data = pickle.dumps(("error", (None, (), {}, f"its result could not be sent back: {exc!r}", "")))
        with os.fdopen(w, "wb") as pipe:
            pipe.write(data)
        status = 0
    finally:
        os._exit(status)


def _carry(exc: BaseException) -> tuple[Any, ...]:
    """An exception as (type, args, fields, text, traceback): rebuilt as itself in the parent."""
    text = "".join(traceback.format_exception(exc))
    fields = dict(getattr(exc, "__dict__", {}))
    fields.pop("__notes__", None)
    try:
        pickle.loads(pickle.dumps((type(exc), exc.args, fields)))
    except Exception:  # noqa: BLE001 - not picklable as itself: its text is carried
        return (None, (), {}, f"{type(exc).__name__}: {exc}", text)
    return (type(exc), exc.args, fields, str(exc), text)


def _outcome(data: bytes, status: int, name: str) -> Any:
    """A child's result, or the exception it carried back (rebuilt), or ReplayWorkerFailed."""
    if not data:
        how = (f"killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
               else f"exit status {os.WEXITSTATUS(status)}")
        return ReplayWorkerFailed(agents=name.split(","), detail=f"its process ended without a result ({how})")
    kind, value = pickle.loads(data)
    if kind == "ok":
        return value
    cls, args, fields, text, trace = value
    if cls is None or not isinstance(cls, type) or not issubclass(cls, BaseException):
        return ReplayWorkerFailed(agents=name.split(","), detail=text)
    exc = cls.__new__(cls)
    exc.args = args
    exc.__dict__.update(fields)
    if trace:
        exc.add_note(f"raised in the replay process for agent(s) {name}:\n{trace}")
    return exc


def _end(pid: int, r: int) -> None:
    """Kill and reap a child that has not been reaped (an error or an interrupt on the way out)."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
    if r >= 0:
        try:
            os.close(r)
        except OSError:
            pass
