"""When a refused call is not the handler's doing: the rules, each as narrow as it can be.

The guard stops a call the moment it is made; this decides, on that rare path, whether the code
that made it acts for the handler in a way whose result the handler never sees. It looks only at
the frames between the call and the guard's own (so nothing above the handler can excuse
anything), walking outward from the caller once:

* **Not the handler's logic**: a garbage-collector callback or a finalizer (``__del__``,
  ``weakref.finalize``) runs wherever a collection or a last reference happens to fall.
* **A first import**: the import system, and the top-level code of a module imported for the
  first time inside a handler, run as they would at import time outside it (module-level code is
  never guarded, so an import must not behave differently for having been lazy).
  ``importlib.reload`` is a row of its own and is refused.
* **Logging, under a Logger call**: a Logger call (``log.info(...)``) makes a record (the clock, the process
  and thread ids) and hands it to handlers, formatters and filters, which may open files or
  sockets; the Logger call returns nothing, so the handler never sees any of it. But code of the
  handler's own objects rendered into the message (``__str__`` of an argument, called by
  ``LogRecord.getMessage``; an exception's, called by ``traceback``) is refused as anywhere else,
  and ``logging.makeLogRecord`` / ``LogRecord(...)`` outside a Logger call are refused. (While
  ``Logger._log`` runs, the hook applies this rule without walking: see ``_hook``.)
* **linecache, for source code**: its entry points are rows refused for any file that is not the
  program's source (``linecache.getline("/etc/hosts", 1)``); what its frames do after that check
  (``os.stat``, ``tokenize.open``) passes. Tracebacks and warnings render source lines this way.
* **zoneinfo**: reading the time zone database, which is part of the deployment like the code.
* **Library setup** (:data:`LIBRARY_SETUP`): a library discovering its own plugins the first time
  it is used, which may be inside a handler — pydantic's ``get_plugins`` reads
  ``PYDANTIC_DISABLE_PLUGINS`` and scans the installed packages' entry points whenever a model's
  validator is built (the SDKs build theirs lazily, parsing a response). Which plugins are
  installed is part of the deployment, like the code; the same read made by the handler, or by
  any other function of the library, is refused.
* **Debuggers** (:data:`DEBUGGER_MODULES`): a debugger entered from inside a handler
  (``breakpoint()``, ``pdb.set_trace()``) sets itself up in the handler's thread (``~/.pdbrc``,
  source files, its clock); its prompt then runs inside a trace function, where CPython calls no
  profile hook at all. A call made by a debugger's frame, or by the standard library for one,
  passes; never with handler code between the call and the debugger (``pdb.runcall(handler)``
  stays guarded).
* **Credential discovery** (:data:`CREDENTIAL_DISCOVERY`): an SDK reading its credential files while a
  client is built; what it finds goes only into redacted, never compared, request headers.
* **Trusted libraries** (:data:`TRUSTED_LIBRARIES`): an HTTP client or SDK reading the clock, the
  environment or OS entropy for its own bookkeeping, decided by the nearest frame outside the
  standard library (so a user's callback called by httpx is the user's, not httpx's).
"""

from __future__ import annotations

import gc
import importlib._bootstrap
import linecache
import logging
import site
import sys
import sysconfig
import traceback
import types
import weakref

from .table import Row

__all__ = ["CREDENTIAL_DISCOVERY", "DEBUGGER_MODULES", "FRAMEWORKS", "LIBRARY_SETUP", "TRUSTED_KINDS",
           "TRUSTED_LIBRARIES", "calling_library", "exemption", "trust_library"]

# HTTP clients and the SDKs built on them read the clock and OS entropy for their own
# bookkeeping while a handler uses ctx.http(): timeouts and timings, retry jitter and backoff,
# idempotency keys and multipart boundaries, cookie expiry (http.cookiejar, under httpx's
# cookie jar); their configuration from the environment (OPENAI_API_KEY, proxies); the trace
# ids and span times of OpenTelemetry, which the SDKs put in request headers; and the host they
# describe in those headers (openai's and anthropic's X-Stainless-OS and -Arch: platform.system(),
# platform.machine()). None of it flows into what the handler gets back, which is the recorded
# response (request headers are recorded, never compared: swarmlog.llm.http). So a call of these
# kinds whose nearest caller outside the standard library is one of these packages passes. The
# network, files and processes stay refused for them: an SDK client not built on ctx.http()
# still fails at its first connect.
# swarmlog's own tracing times a step's recorded calls from inside the handler (when each asks
# for its record and when it writes it); the times go only into spans, never into the step.
#
# The agent frameworks swarmlog integrates (swarmlog.integrations) do the same for their own bookkeeping, so
# a user of a supported framework writes no trust_library line. LangGraph and LangChain: the environment
# (LANGCHAIN_*/LANGSMITH_* tracing switches, OPENAI_API_KEY and OPENAI_BASE_URL read by ChatOpenAI's
# defaults), run ids for callbacks (uuid4), checkpoint ids and timestamps (uuid6: the clock and entropy),
# and callback timings. What of it reaches the handler is ids, never decisions: the ids of messages the
# graph makes itself (add_messages gives an id-less message a uuid4) and of checkpoints; what reaches
# the log (requests, outputs) is compared on replay, and an id kept in state is a state divergence
# (docs/integrations/langgraph.md says to keep them out of state). Threads stay refused for them too:
# LangGraph's prebuilt ToolNode runs tools on a thread pool (a sync graph runs its tools in a node of
# its own; an async one on the step's loop).
FRAMEWORKS: dict[str, frozenset[str]] = {
    "langgraph": frozenset({"langgraph", "langchain_core", "langchain_openai", "langsmith"}),
    "openai-agents": frozenset({"agents"}),
    "pydantic-ai": frozenset({"pydantic_ai", "pydantic_graph"}),
}
"""Per supported framework, the packages whose own clock, environment, machine and entropy reads pass."""

TRUSTED_LIBRARIES: set[str] = {"httpx", "httpx2", "httpcore", "httpcore2", "openai", "anthropic", "opentelemetry",
                               "http.cookiejar", "swarmlog.observe.tracing",
                               *(p for packages in FRAMEWORKS.values() for p in packages)}
"""Packages (or exact modules) whose own clock, environment, machine and entropy reads pass inside handlers."""
TRUSTED_KINDS = frozenset({"clock", "timezone", "random", "entropy", "environment", "machine"})

CREDENTIAL_DISCOVERY = ("anthropic.lib.credentials",)
"""Modules of SDKs that find their credentials in files: anthropic (2.17 on) reads its active profile
(``~/.config/anthropic/active_config`` and the profile it names) whenever a client is built, key given
or not. What they find only goes into credential headers, which recorded HTTP redacts and never compares,
so their reads of files (as of the environment) pass; a file read by the handler, or by any other module
of the SDK, does not."""
CREDENTIAL_KINDS = frozenset({"files", "environment", "machine"})


def trust_library(package: str) -> None:
    """Let ``package``'s own code read the clock, the environment, the machine's description and
    OS entropy inside handlers (never the network, files or processes): for an SDK other than openai/anthropic that you
    hand ``ctx.http()``, and that times or retries its requests itself, or a logging library
    that stamps its own records (``trust_library("structlog")``)."""
    TRUSTED_LIBRARIES.add(package)


DEBUGGER_MODULES = frozenset({"pdb", "bdb", "ipdb", "pudb", "debugpy", "pydevd", "_pydevd_bundle", "_pydev_bundle",
                              "_pydevd_frame_eval"})
"""Debuggers: what they do on their own account (``~/.pdbrc``, source files, their clocks) is not the
handler's (see the module docstring)."""

# Compared by identity (`is`): hashing a code object hashes its bytecode and constants.
_FIRST_IMPORT = importlib._bootstrap._find_and_load.__code__  # type: ignore[attr-defined]
_FINALIZER = weakref.finalize.__call__.__code__
# A Logger call, and where it runs the handler's code (also the Logger-call scope's, in _hook).
LOG, _HANDLE = logging.Logger._log.__code__, logging.Logger.handle.__code__
MESSAGE = logging.LogRecord.getMessage.__code__
EXCEPTION_TEXT = traceback._safe_string.__code__  # type: ignore[attr-defined]
_LINECACHE = linecache.__name__
_ZONEINFO = "zoneinfo"

_stdlib: dict[str, bool] = {}  # module name -> whether it is in the standard library

LIBRARY_SETUP = ("pydantic.plugin._loader:get_plugins",
                 "agents.tracing.processors:BatchTraceProcessor._ensure_thread_started",
                 "pydantic_ai._display:display_agent_banner")
"""Functions of libraries (``module:qualname``, installed or not) whose calls, and everything under them, pass:

* pydantic discovering its plugins (see the module docstring);
* the OpenAI Agents SDK starting its trace exporter's thread on a run's first trace: the thread only sends
  finished spans to the tracing backend, nothing comes back to the run (and swarmlog's
  ``integrations.openai_agents.recorded`` turns the SDK's tracing off on replay, so a replay exports nothing);
* pydantic-ai's first-run banner: whether stderr is a terminal, its width, ``COLUMNS``, and the banner
  written there; the run gets nothing back from it."""

_SETUP: dict[int, types.CodeType] = {}  # by id(code), the code beside it: hashing a code object hashes its bytecode
_unresolved = list(LIBRARY_SETUP)


def _resolve_setup() -> None:
    """Find the code of each :data:`LIBRARY_SETUP` function whose module has been imported since: looked up
    lazily (on the guard's rare path), so that the guard never imports a framework itself."""
    for path in list(_unresolved):
        module, _, qualname = path.partition(":")
        found: object = sys.modules.get(module)
        # Not imported, or still running its top-level code (first imported inside a handler: the import's
        # own calls come here before the function exists): look again on a later rare path.
        if found is None or getattr(getattr(found, "__spec__", None), "_initializing", False):
            continue
        _unresolved.remove(path)
        for name in qualname.split("."):
            found = getattr(found, name, None)
        code = getattr(found, "__code__", None)
        if isinstance(code, types.CodeType):
            _SETUP[id(code)] = code


def _is_trusted(module: str) -> bool:
    return module in TRUSTED_LIBRARIES or module.partition(".")[0] in TRUSTED_LIBRARIES


_INSTALLED = tuple({p for p in (sysconfig.get_paths().get("purelib"), sysconfig.get_paths().get("platlib"),
                                 *site.getsitepackages()) if p})
_library_of: dict[str, str | None] = {}  # module name -> its installed library's top-level package, or None


def calling_library(caller: types.FrameType | None, base: types.FrameType | None) -> str | None:
    """The installed third-party library whose code made a refused call, or None when it is the
    handler's own code (or the standard library's on its behalf): the nearest frame outside the
    standard library and swarmlog, if its module was installed (in site-packages). For the error's
    advice: a library, unlike the handler, may be one to :func:`trust_library`."""
    f = caller
    while f is not None and f is not base:
        module = f.f_globals.get("__name__", "")
        top = module.partition(".")[0]
        if top not in sys.stdlib_module_names and top != "swarmlog":
            found = _library_of.get(module, "")
            if found == "":
                file = f.f_code.co_filename
                found = _library_of[module] = top if file.startswith(_INSTALLED) else None
            return found
        f = f.f_back
    return None


def exemption(row: Row, caller: types.FrameType | None, base: types.FrameType | None) -> str | None:
    """Why the call ``caller`` made of ``row`` is not the handler's doing, or None if it is.

    ``base`` is the frame that entered the guard: the walk stops there. It runs for every
    refused call a handler's logging makes (a record's clock, pid and thread), so the loop is
    kept tight: identity compares per frame, module names only up to the nearest frame outside
    the standard library.
    """
    if _unresolved:
        _resolve_setup()
    callbacks = gc.callbacks
    gc_codes = tuple(getattr(getattr(cb, "__func__", cb), "__code__", None) for cb in callbacks) if callbacks else ()
    stdlib_cache, stdlib_names = _stdlib, sys.stdlib_module_names
    nearest: str | None = None  # the nearest module outside the standard library
    rendering = False  # the handler's own object is being rendered into a log message
    f = caller
    while f is not None and f is not base:
        code = f.f_code
        if code is LOG or code is _HANDLE:
            if not rendering:
                return "logging"
        elif code is _FIRST_IMPORT:
            return "import"
        elif code is MESSAGE or code is EXCEPTION_TEXT:
            rendering = rendering or nearest is not None
        elif code is _FINALIZER or code.co_name == "__del__" or (gc_codes and any(code is c for c in gc_codes)):
            return "finalizer"
        elif _SETUP.get(id(code)) is code:
            return "library setup"
        elif nearest is None:
            module = f.f_globals.get("__name__", "")
            if module.partition(".")[0] in DEBUGGER_MODULES:
                return "debugger"
            stdlib = stdlib_cache.get(module)
            if stdlib is None:
                stdlib = stdlib_cache[module] = module.partition(".")[0] in stdlib_names
            if stdlib:
                if module == _LINECACHE:
                    return "linecache"
                if module == _ZONEINFO or module.startswith("zoneinfo."):
                    return "zoneinfo"
            else:
                nearest = module
                if row.kind in TRUSTED_KINDS and _is_trusted(module):
                    return "trusted"
                if row.kind in CREDENTIAL_KINDS and module.startswith(CREDENTIAL_DISCOVERY):
                    return "credentials"
        f = f.f_back
    return None
