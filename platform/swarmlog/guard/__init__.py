"""The determinism guard: inside an agent's handler, every way of reading the clock, randomness,
the environment, the process, the machine, the file system or the network that the standard
library offers raises :class:`ForbiddenCall`, which names the call and the ``ctx`` method to use
instead. What is refused and what is allowed is a table, :data:`COVERAGE`
(:mod:`swarmlog.guard.table`), which the tests run row by row in a live handler.

The runtime wraps every handler call in :func:`guarded`; swarmlog's own code performs recorded
I/O (``ctx.effect``, ``ctx.llm``) inside :func:`allowed`::

    with guarded(agent="planner", offset=42):
        handler(ctx, event)            # time.time() in here raises ForbiddenCall

    # inside ctx.effect, when the effect really runs:
    with allowed():
        result = fn()                  # may use the network, the clock, files

How it works, and why this way
------------------------------
A per-thread hook, installed only while a handler runs, sees every call into a C function (with
the function object) and every Python function starting (with its frame). On CPython 3.11 it is a
profile function (``sys.setprofile``: the ``c_call`` and ``call`` events); on 3.12 and later the
interpreter's monitoring API (PEP 669, ``sys.monitoring``: the ``CALL`` and ``PY_START`` events),
under a tool id of its own, which costs less there (:mod:`swarmlog.guard._monitoring` says why,
bench/README.md has the figures). It matches *objects*: the C function
(``time.time``, ``os.urandom``, the bound methods of ``random``'s hidden module-level
``Random``), the C method on any instance (``socket.socket.connect``), or the code object of a
Python function (``uuid.uuid4``, ``os.environ.get``, ``threading.Thread.start``). Matching the
object catches every import style — ``from time import time``, ``import time as t``, a reference
stashed in a dict at import time — which patching module attributes cannot, and
``datetime.datetime`` cannot be patched at all. A Python function is stopped at its first line,
before it has done anything, and also when its result is cached (``uuid.getnode``,
``tempfile.gettempdir``), where no C call would be seen. The error names the outermost row on
the stack (``subprocess.run``, not the ``fork_exec`` under it).

A few rows depend on the arguments: ``time.gmtime()`` reads the clock, ``time.gmtime(secs)``
does not. For a Python function the arguments are its frame's locals; for a C function the guard
reads the caller's call instruction (:mod:`swarmlog.guard._callsite`).

Some code acts for a handler without making it nondeterministic: logging under a Logger call,
tracebacks reading source lines, a first import, a garbage-collector callback, an HTTP client's
own timing behind ``ctx.http()``, a debugger setting itself up. Each has a narrow rule
(:mod:`swarmlog.guard._exemptions`), tested on both sides; no module is exempt as a whole.

The hook's common path — a C call to a function known to be harmless, a Python function whose
name no row has, every return — is in C where swarmlog was built with a compiler
(:mod:`swarmlog.guard._native`, CPython 3.11 to 3.13); it hands every other event to the Python
hook, which keeps every rule and cache. :func:`hook_in_use` says which one this process installs,
through which API (``SWARMLOG_GUARD_HOOK=python`` asks for the Python one).

The hook is per thread, so a timer thread or a Kafka client's callback thread keeps working while
a handler runs. A profile function is installed only while a handler runs, and outside handlers
nothing costs anything; sys.monitoring's events are the process's, on from the first handler on,
and a thread with no hook pays one C call per call for them (bench/README.md). An audit hook
(``sys.addaudithook``) was not used: it can never be removed, it runs on every audited event of
every thread, it has no events for the clock or ``random``, and its ``open`` event also fires
for ``import``.

A handler that swallows the :class:`ForbiddenCall` (``except Exception: pass``) must not run
unguarded afterwards. A profile function that raises is uninstalled by CPython, so before raising
the hook arms a one-shot trace function on the stack's frames that reinstalls it at the next line,
exception or call (a sys.monitoring callback that raises stays in place). And the guard remembers
the violation and raises it again when the handler returns normally, so a swallowed violation still
fails the handler.

What no hook can see — a C extension's own reads, C code calling a refused C function
(``functools.partial(time.time)()``), ``id()`` values, values that reach a handler without a
call — is listed in docs/agents.md; per-step state digests catch their effects.
"""

from __future__ import annotations

from ._exemptions import DEBUGGER_MODULES, TRUSTED_LIBRARIES, trust_library
from ._hook import GuardHook, hook_in_use
from ._rules import resolve
from ._scope import allowed, guarded, is_guarded
from .errors import ForbiddenCall
from .table import COVERAGE, DENY_LIST, KINDS, Row

__all__ = ["COVERAGE", "DEBUGGER_MODULES", "DENY_LIST", "KINDS", "ForbiddenCall", "GuardHook", "Row",
           "TRUSTED_LIBRARIES", "allowed", "guarded", "hook_in_use", "is_guarded", "resolve", "trust_library"]
