"""Running a swarm live: ``swarmlog run module:swarm``.

A run begins with one ``run.started`` event recording the swarm, its seed (every
``ctx.random()`` derives from it) and the code version. One topic holds one run:
a second, different ``run.started`` is refused, because agents rebuilding from
offset zero would otherwise mix two runs' histories.

All agents in one process (one thread each), or one agent per process with
``--agent NAME`` (one pod per agent on Kubernetes); the code path is the same
:class:`swarmlog.runtime._worker.AgentWorker` either way.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import signal
import sys
import sysconfig
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..agent import Swarm
from ..errors import (
    CodeVersionRefused,
    ConfigurationError,
    RunAlreadyRecorded,
    RunNotStarted,
    SwarmImportFailed,
    TransactionAborted,
)
from ..guard import hook_in_use
from ..kafka.backend import backend_for
from ..log.base import LogBackend
from ..log.protocol import RUN_CONTINUED, RUN_STARTED, RUN_STARTER_CHANNEL, RUN_WRITER, run_started_id
from ..observe import tracing
from ..schema.codec import Decoder, Encoder
from ..schema.registry import SchemaRegistry
from ..settings import Settings
from . import interpreter
from ._worker import AgentWorker, WorkerResult
from .versions import code_version

logger = logging.getLogger(__name__)


def load_swarm(spec: str) -> Swarm:
    """``package.module:name`` -> the :class:`Swarm` it names (or a function returning one)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigurationError(f"expected module:swarm, got {spec!r}")
    try:
        module = _import_here_too(module_name)
    except ModuleNotFoundError as exc:
        if not _names_the_module(exc, module_name):
            raise SwarmImportFailed(spec=spec, module=module_name, error=_one_line(exc),
                                    where=_where_it_raised(exc, module_name)) from exc
        raise ConfigurationError(f"cannot load swarm {spec!r}: {exc}") from None
    except Exception as exc:  # the module's own code raised (SyntaxError included): one line, not its traceback
        raise SwarmImportFailed(spec=spec, module=module_name, error=_one_line(exc),
                                where=_where_it_raised(exc, module_name)) from exc
    try:
        obj = getattr(module, attr)
    except AttributeError as exc:
        raise ConfigurationError(f"cannot load swarm {spec!r}: {exc}") from None
    if callable(obj) and not isinstance(obj, Swarm):
        obj = obj()
    if not isinstance(obj, Swarm):
        raise ConfigurationError(f"{spec!r} is a {type(obj).__name__}, not a swarmlog.Swarm")
    return obj


def _import_here_too(module_name: str) -> Any:
    """Import ``module_name``; if its top-level package is nowhere on ``sys.path``, from the current directory.

    ``swarmlog run hello:swarm`` beside ``hello.py`` finds it, as ``uvicorn main:app`` and
    ``gunicorn`` do: a console script's ``sys.path`` starts at its own ``bin/``, not where the
    user stands. Only a module that cannot be found otherwise comes from there, so nothing that
    imported before changes.
    """
    here = os.getcwd()
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name.partition(".")[0] or here in sys.path:
            raise
    sys.path.insert(0, here)  # outside the except: what the module raises is not chained to the first miss
    return importlib.import_module(module_name)


def _names_the_module(exc: ModuleNotFoundError, module_name: str) -> bool:
    """Whether the module not found is the swarm's (or a package above it), not one its code imports."""
    parts = module_name.split(".")
    return exc.name in {".".join(parts[:i]) for i in range(1, len(parts) + 1)}


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, SyntaxError):
        return f"{type(exc).__name__}: {exc.msg}"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _where_it_raised(exc: BaseException, module_name: str) -> str:
    """``path:line`` of the line that raised, in the swarm's code: the deepest frame in the swarm's own
    package (or file, installed or not) or anywhere outside Python's library and the installed packages,
    else the deepest one at all; for a SyntaxError, the line it names. Paths under the working directory
    are shown relative to it."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return _shown(exc.filename, exc.lineno)
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<")]
    files, dirs = _sources_of(module_name.partition(".")[0])
    libraries = tuple({sysconfig.get_paths()[k] + os.sep for k in ("stdlib", "platstdlib", "purelib", "platlib")})
    nearest = [f for f in frames if f.filename in files or f.filename.startswith(dirs)
               or not f.filename.startswith(libraries)] or frames
    return _shown(nearest[-1].filename, nearest[-1].lineno) if nearest else ""


def _sources_of(top: str) -> tuple[set[str], tuple[str, ...]]:
    """The file of a top-level module, or the folders of a package: where the swarm's own code is (an
    installed one too, among the libraries)."""
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return set(), ()
    if spec.submodule_search_locations:
        return set(), tuple(d + os.sep for d in spec.submodule_search_locations)
    return ({spec.origin} if spec.origin else set()), ()


def _shown(filename: str, lineno: int | None) -> str:
    here = os.getcwd() + os.sep
    path = filename[len(here):] if filename.startswith(here) else filename
    return f"{path}:{lineno}" if lineno else path


@dataclass(frozen=True, slots=True)
class RunInfo:
    run_id: str
    seed: int
    offset: int
    created: bool
    code_version: str = ""
    hash_seed: int | None = None
    """The PYTHONHASHSEED every process running the swarm's handlers must have; None: unpinned."""
    hash_algorithm: str | None = None
    swarm: str = ""
    """The name of the swarm that started the run ("" where the caller did not read it)."""


_RUN_FIRST = frozenset({RUN_STARTED, RUN_CONTINUED})
"""What a run's first record is: its start, or the link of a run continued on this topic."""


def find_run(settings: Settings, topic: str, registry: SchemaRegistry, *,
             backend: LogBackend | None = None) -> RunInfo | None:
    """The topic's ``run.started``, if any (found by its envelope's route, headers checked; decoded only it).

    A run continued on this topic (``swarmlog continue``) starts with ``run.continued`` instead, which says
    the same of the run (:mod:`.continued`)."""
    decoder = Decoder(registry)
    backend = backend_for(settings, backend)
    with backend.reader(topic) as reader:
        reader.assign(0)
        for batch in reader.batches():
            for m in batch:
                if decoder.route(m).event_type in _RUN_FIRST:
                    _, rec = decoder.decode(m.value(), m.offset())
                    p = rec["payload"]
                    return RunInfo(run_id=rec["run_id"], seed=p["seed"], offset=m.offset(), created=False,
                                   code_version=p["code_version"], hash_seed=p["hash_seed"],
                                   hash_algorithm=p["hash_algorithm"], swarm=p["swarm"])
    return None


def pin_interpreter(settings: Settings | None, *, may_reexec: bool, new_run: bool = False,
                    run_id: str | None = None) -> None:
    """Make this process hash strings as the run's interpreter did, before any handler runs.

    ``settings`` names the topic whose ``run.started`` says how (None: no log to ask, as for
    the demo); with no run there yet, ``new_run`` pins to the seed a new run will record
    (:func:`swarmlog.runtime.interpreter.seed_for_new_run`). A process that may not re-execute itself
    (``may_reexec`` false: a library caller) is left as it is; the runtime then refuses a
    pinned run's handlers under another seed. For the command line: a new process under the
    recorded ``PYTHONHASHSEED`` replaces this one (:func:`swarmlog.runtime.interpreter.reexec_with`).
    """
    if not may_reexec:
        return
    run = None
    if settings is not None:
        run = find_run(settings, settings.topic, SchemaRegistry.load(settings.schema_dirs()))
    if run is not None:
        if run.hash_seed is None:
            return  # an unpinned run (written before run.started v2, or started without a seed)
        seed, algorithm, name = run.hash_seed, run.hash_algorithm, run.run_id
    elif new_run:
        seed, algorithm, name = interpreter.seed_for_new_run(), None, run_id or "(new)"
    else:
        return
    here = interpreter.current()
    if algorithm not in (None, here.algorithm):
        interpreter.require(run_id=name, seed=seed, algorithm=algorithm)  # raises: no re-exec cures that
    if here.seed != seed:
        interpreter.reexec_with(seed, run_id=name)


_START_ATTEMPTS = 5
_START_BACKOFF_S = 1.0


def start_run(*, settings: Settings, swarm: Swarm, run_id: str, seed: int, topic: str | None = None,
              registry: SchemaRegistry | None = None, backend: LogBackend | None = None,
              pin: interpreter.HashPin | None = None) -> RunInfo:
    """Append ``run.started`` unless the topic already has it: exactly once for the same run.

    Exactly once even when starters race (a retried hook Job, a second pod of it, an operator
    at the same moment): a starter first fences every other one, through a transactional id
    of the run's own (:data:`~swarmlog.log.protocol.RUN_STARTER_CHANNEL`), then reads the log, and
    writes only if it holds no run yet, in a transaction. Fencing waits for whatever an earlier
    starter had in flight to commit or abort, so the read sees a run that any other starter
    committed; and a starter fenced between its read and its commit commits nothing, reads
    again, and finds the run of the one that fenced it.

    It records how this interpreter hashes strings (:mod:`swarmlog.runtime.interpreter`): with
    ``PYTHONHASHSEED`` set, the run is pinned to it; without, the run is unpinned (and a
    warning says so), since no seed can be recorded for a random one. A starter that runs no
    handler itself (:class:`swarmlog.client.Client`) gives the ``pin`` the agents will run under
    instead: its own interpreter's seed does not matter to the run.
    """
    topic = topic or settings.topic
    registry = registry or SchemaRegistry.load(settings.schema_dirs())
    backend = backend_for(settings, backend)
    existing = find_run(settings, topic, registry, backend=backend)
    pin = pin or interpreter.current()
    if existing is None and pin.seed is None:
        logger.warning("run %s is not pinned to a string-hash seed: this process has no PYTHONHASHSEED, so a "
                       "handler iterating a set of strings may act differently when another process replays or "
                       "restarts it. Start runs with `swarmlog run`, or set PYTHONHASHSEED", run_id)
    attempt = 0
    started_ns = time.time_ns()
    while existing is None:
        attempt += 1
        version = code_version(swarm)
        payload = {"swarm": swarm.name, "seed": seed, "code_version": version, "agents": swarm.agent_names,
                   "hash_seed": pin.seed, "hash_algorithm": pin.algorithm}
        try:
            existing, offset = _write_run_started(settings=settings, backend=backend, topic=topic,
                                                  registry=registry, run_id=run_id, payload=payload)
        except TransactionAborted as exc:
            if attempt == _START_ATTEMPTS:
                raise
            logger.info("starting run %s: another starter fenced this one (%s); reading the log again", run_id,
                        exc.detail)
            # Give the starter that fenced this one the time to commit, rather than fence it in turn.
            time.sleep(_START_BACKOFF_S * attempt)
            existing = find_run(settings, topic, registry, backend=backend)
            continue
        if existing is None:
            logger.info("run %s of swarm %s started at offset %d (seed %d, code %s, PYTHONHASHSEED %s)", run_id,
                        swarm.name, offset, seed, version, pin.seed)
            traced = tracing.current()
            if traced is not None:  # the trace's root: written once, by the starter that wrote the run
                traced.run_started(topic=topic, run_id=run_id, offset=offset, swarm=swarm.name, seed=seed,
                                   code_version=version, started_ns=started_ns)
            return RunInfo(run_id=run_id, seed=seed, offset=offset, created=True, code_version=version,
                           hash_seed=pin.seed, hash_algorithm=pin.algorithm)
    if existing.run_id != run_id or existing.seed != seed:
        raise RunAlreadyRecorded(topic=topic, run_id=existing.run_id, seed=existing.seed,
                                 requested_run_id=run_id, requested_seed=seed)
    return existing


def _write_run_started(*, settings: Settings, backend: LogBackend, topic: str, registry: SchemaRegistry,
                       run_id: str, payload: dict[str, Any]) -> tuple[RunInfo | None, int]:
    """(the run already there, -1), or (None, the offset ``run.started`` was written at)."""
    channel = backend.agent_channel(topic, RUN_STARTER_CHANNEL)
    try:
        channel.fence()  # from here on no other starter commits, and what one committed is readable
        existing = find_run(settings, topic, registry, backend=backend)
        if existing is not None:
            return existing, -1
        enc = Encoder(registry.latest(RUN_STARTED))
        value = enc.encode_event(run_started_id(run_id), run_id, RUN_WRITER, None, [],
                                 enc.schema.validate_payload(payload))
        key = RUN_WRITER.encode()
        channel.begin()
        try:
            offset = channel.send_located(value, key, enc.headers(key, None))
            channel.commit(None)  # outputs only: the starter consumes nothing
        except BaseException:
            channel.abort()
            raise
        return None, offset
    finally:
        channel.close()


_RUN_POLL_S = 2.0
_RUN_WAIT_LOG_EVERY_S = 30.0


def wait_for_run(*, settings: Settings, timeout: float, topic: str | None = None, run_id: str | None = None,
                 seed: int | None = None, registry: SchemaRegistry | None = None,
                 backend: LogBackend | None = None, stop: threading.Event | None = None) -> RunInfo | None:
    """The topic's run, waiting up to ``timeout`` seconds for its ``run.started``.

    An agent started before its run (a pod that beat the chart's run-start Job, or a run
    nobody started) says so in its log and waits instead of idling silently, then fails with
    :class:`~swarmlog.errors.RunNotStarted`. Given ``run_id``/``seed`` (the agent's own
    ``--run-id``/``--seed``), a recorded run that differs is refused with
    :class:`~swarmlog.errors.RunAlreadyRecorded`: the agent was configured for another run.
    Returns None only if ``stop`` was set while waiting.
    """
    topic = topic or settings.topic
    registry = registry or SchemaRegistry.load(settings.schema_dirs())
    backend = backend_for(settings, backend)
    stop = stop or threading.Event()
    started = last_log = time.monotonic()
    while True:
        run = find_run(settings, topic, registry, backend=backend)
        if run is not None:
            if (run_id is not None and run.run_id != run_id) or (seed is not None and run.seed != seed):
                raise RunAlreadyRecorded(topic=topic, run_id=run.run_id, seed=run.seed,
                                         requested_run_id=run_id if run_id is not None else run.run_id,
                                         requested_seed=seed if seed is not None else run.seed)
            if last_log != started:
                logger.info("found run %s (seed %d) at offset %d after %.0f s", run.run_id, run.seed, run.offset,
                            time.monotonic() - started)
            return run
        waited = time.monotonic() - started
        if last_log == started or time.monotonic() - last_log >= _RUN_WAIT_LOG_EVERY_S:
            last_log = time.monotonic()
            logger.warning("no run.started in topic %s yet: waiting for the run to be started (%.0f of %.0f s; "
                           "`swarmlog run <module:swarm> --start --run-id ID --seed N` starts it)", topic, waited,
                           timeout)
        if waited >= timeout:
            raise RunNotStarted(topic=topic, waited_s=waited)
        # Look again when the log grows where it can say so (the in-memory log), else in a while; never
        # past the timeout, which is then reported as waited.
        pause = min(_RUN_POLL_S, timeout - waited)
        end = backend.watermarks(topic)[1]
        if backend.wait_for_append(topic, end, pause) is None and stop.wait(pause):
            return None
        if stop.is_set():
            return None


def run_agents(*, settings: Settings, swarm: Swarm, agents: list[str] | None = None, topic: str | None = None,
               registry: SchemaRegistry | None = None, until_quiet: float | None = None,
               stop: threading.Event | None = None,
               on_started: Callable[[list[AgentWorker]], None] | None = None,
               backend: LogBackend | None = None, accept_versions: tuple[str, ...] = (),
               from_zero: bool = False) -> list[WorkerResult]:
    """Run the named agents (default: all) live, one thread each, until ``stop`` is set,
    SIGTERM/SIGINT arrives (in the main thread), or — with ``until_quiet`` — the log has not
    grown for that many seconds and no agent has a timeout pending. On a log that knows when
    nothing is left to do (the in-memory log: :meth:`~swarmlog.log.base.LogBackend.settle`),
    ``until_quiet`` stops the run as soon as every agent waits at the log's end with nothing
    pending, without waiting out the seconds. ``from_zero``: every agent rebuilds from offset zero,
    re-verifying every step, whatever checkpoints it has (:mod:`.resume`).

    An agent whose code cannot go on with the run (it diverges from the log, or is not the run's code
    version) parks, not ready, while the others run on; once the run stops, its error is raised."""
    topic = topic or settings.topic
    registry = registry or SchemaRegistry.load(settings.schema_dirs())
    names = agents or swarm.agent_names
    backend = backend_for(settings, backend)
    pinned = _pinned_run(settings=settings, swarm=swarm, topic=topic, registry=registry, backend=backend,
                         accept_versions=accept_versions)
    workers = [AgentWorker(settings=settings, swarm=swarm, agent=n, registry=registry, topic=topic, backend=backend,
                           version_refusal=pinned(n) if pinned is not None else None, from_zero=from_zero)
               for n in names]
    # What every handler of this process runs under: an operator comparing agents' CPU sees it here.
    logger.info("determinism guard: %s", hook_in_use())
    stop = stop or threading.Event()
    results: dict[str, WorkerResult] = {}
    errors: dict[str, BaseException] = {}

    def work(w: AgentWorker) -> None:
        try:
            results[w.agent.name] = w.run()
        except BaseException as exc:  # surfaced below, after every agent stopped
            errors[w.agent.name] = exc
            stop.set()

    # SIGTERM/SIGINT stop the run while it runs, and are the caller's again once it returns (a library
    # caller's Ctrl-C must not set the stop event of a run that ended long ago).
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, lambda *_: stop.set())
    try:
        threads = [threading.Thread(target=work, args=(w,), name=f"agent-{w.agent.name}") for w in workers]
        for t in threads:
            t.start()
        if on_started is not None:
            on_started(workers)
        watcher = _QuietWatcher(backend, topic, workers) if until_quiet else None
        while not stop.is_set() and not errors:
            if watcher is None:
                stop.wait(0.2)
            elif watcher.quiet(until_quiet, stop):  # type: ignore[arg-type]
                break
        for w in workers:
            w.stop()
        for t in threads:
            t.join()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if errors:
        name, exc = next(iter(errors.items()))
        raise exc
    for w in workers:
        # Parked until stopped (AgentWorker._park): not an exit that a supervisor would restart into
        # the same refusal, but the caller learns of it once the run stops.
        if w.refusal is not None:
            raise w.refusal
    return [results[n] for n in names]


def _pinned_run(*, settings: Settings, swarm: Swarm, topic: str, registry: SchemaRegistry, backend: LogBackend,
                accept_versions: tuple[str, ...]) -> Callable[[str], CodeVersionRefused] | None:
    """A run pinned to its code (``Swarm(pin_runs=True)``) that another code version started, and that this
    code is not declared compatible with: per agent, the error it refuses the run with (None: it goes on)."""
    if not swarm.pin_runs:
        return None
    run = find_run(settings, topic, registry, backend=backend)
    if run is None:
        return None  # no run yet: the one the agents join is started with their own version
    current = code_version(swarm)
    compatible = (*swarm.compatible_with, *accept_versions)
    if run.code_version == current or run.code_version in compatible:
        return None
    return lambda agent: CodeVersionRefused(topic=topic, run_id=run.run_id, agent=agent, recorded=run.code_version,
                                            current=current, compatible=compatible)


class _QuietWatcher:
    """"Quiet": the log end has not moved for a while, every agent has read to it, no timeout pending.

    On a log that settles (the in-memory log), "a while" is no time at all: once every agent's
    channel waits at the end with no transaction open, nothing more happens until someone outside
    the run appends, so the run is quiet as soon as the agents also have nothing pending.
    """

    def __init__(self, backend: LogBackend, topic: str, workers: list[AgentWorker]) -> None:
        self._backend = backend
        self._topic = topic
        self._workers = workers
        self._high = -1
        self._since = time.monotonic()
        self._settles = backend.settle(topic, [], 0) is not None

    def _end(self) -> int:
        # The end *including* open transactions: a swarm blocked behind one is not quiet.
        return self._backend.watermarks(self._topic)[1]

    def quiet(self, seconds: float, stop: threading.Event) -> bool:
        """Whether the run is quiet, after waiting a moment for it (at most 0.2 s; less once ``stop`` is set)."""
        if self._settles:
            return self._settled(stop)
        if stop.wait(0.2):
            return False
        high = self._end()
        now = time.monotonic()
        if high != self._high:
            self._high, self._since = high, now
            return False
        if now - self._since < seconds:
            return False
        # A step that committed while the workers were being looked at moved the end.
        return self._idle(high) and self._end() == high

    def _idle(self, high: int) -> bool:
        for w in self._workers:
            if w.refused is not None:
                continue  # parked: it does nothing more until stopped (AgentWorker._park)
            core = w.core
            # An open transaction may hold outputs the broker has not seen yet (its
            # coordinator still loading, a commit in flight): the log end says nothing then.
            if core is None or not w.caught_up.is_set() or w.in_transaction or core.next_wall_due_ms() is not None \
                    or w.eof_at < high:
                return False
        return True

    def _settled(self, stop: threading.Event) -> bool:
        active = [w for w in self._workers if w.refused is None]
        channels = [c for w in active for c in [w.channel] if c is not None]
        if len(channels) < len(active):  # an agent still starting
            stop.wait(0.01)
            return False
        if not self._backend.settle(self._topic, channels, 0.05):  # briefly: a failed agent stops the run
            return False
        high = self._end()
        if self._idle(high) and self._backend.settle(self._topic, channels, 0) and self._end() == high:
            return True
        # Every channel waits, yet an agent is not done: a wall-clock timeout is pending (or an agent
        # not caught up has yet to say so). Wait for the soonest timeout rather than look again at once.
        due = [d for w in self._workers if w.core is not None for d in [w.core.next_wall_due_ms()] if d is not None]
        stop.wait(min(0.2, max(0.0, (min(due) - time.time() * 1000) / 1000)) if due else 0.01)
        return False


def result_json(results: list[WorkerResult]) -> dict[str, Any]:
    return {"agents": {r.agent: r.state_hash for r in results}, "positions": {r.agent: r.position for r in results},
            "steps": {r.agent: r.steps for r in results},
            "states_checked": {r.agent: r.states_checked for r in results},
            "resumed_from": {r.agent: r.resumed_from for r in results}}
