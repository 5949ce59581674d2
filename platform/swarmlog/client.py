"""Work in and out of a running swarm: :class:`Client` and :class:`AsyncClient`.

A swarm's agents run as ``swarmlog run`` processes (pods on Kubernetes); a program beside
them — a web service, a notebook, a test — starts the run, sends an agent an input and
waits for the reply that input causes::

    from swarmlog import Client

    with Client.from_env() as client:                     # SWARMLOG_BOOTSTRAP_SERVERS, SWARMLOG_TOPIC
        reply = client.ask("oracle", "question", "what is swarmlog?", timeout=30)
        print(reply.body)

**Input belongs to the run it is sent to.** Every event a client writes carries the run id
of the topic's ``run.started``, so the mirror files it under that run. An input sent to a
topic that holds no run yet is **held by the client** (waiting, within the call's timeout,
for ``run.started`` to appear) and never written ahead of it: the log's order is the
swarm's clock, and an input the agents read before their run would belong to no run — no
run id, no seed for ``ctx.random()`` (``NoRunStarted`` at its first draw). Held rather than
refused, because a service is usually deployed beside its swarm (the chart's run-start hook
Job races the service's pods): its first requests should wait for the run, not fail. A run
that does not start within the timeout is :class:`~swarmlog.errors.InputBeforeRun`, and
nothing was written.

**The reply is found by the log's causes**, not by names or timing: every output of a step
lists the offset of the input it handled (and of the step's recorded calls), a timer's
firing lists the ``timer.set``. The events whose causes chain back to the input are what
it set off, however many agents and timers it passed through; the reply is the first
``agent.message`` among them addressed to the client's ``sender`` (of kind ``reply_kind``,
if given). An agent answers with ``ctx.send(event.agent_id, "answer", ...)``. If a handler
it set off raises (``handler.failed``), the wait ends at once with
:class:`~swarmlog.errors.InputHandlerFailed`; if nothing answers in time,
:class:`~swarmlog.errors.ReplyTimeout` (a ``TimeoutError``) names what was sent and its
offset. Many clients may share a sender name: each one's replies are told apart by causes.

**No process-global state.** Each client owns its producer and, from its first ``ask``, one
reader following the topic (a thread) that every waiting ask of that client shares, however
many there are; ``close()`` (or the ``with`` block) stops them. A client is safe to share
between the threads of a service; :class:`AsyncClient` is the same client for ``asyncio``
(its asks wait on futures, not on threads). ``swarmlog append`` writes through the same
path as :meth:`Client.append`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from .agent import Swarm
from .errors import (
    InputBeforeRun,
    InputHandlerFailed,
    NotAnAgentOfTheRun,
    ReplyTimeout,
    TopicNotFound,
    UsageError,
)
from .events import Event
from .kafka.backend import backend_for
from .log.append import EventLog
from .log.base import LogBackend, Reader, message_at
from .log.hashing import canonical
from .log.protocol import AGENT_NAME_RULE, HANDLER_FAILED, MESSAGE, agent_name_problem
from .runtime import interpreter
from .runtime.runner import RunInfo, find_run, start_run
from .schema.codec import Decoder
from .schema.registry import SchemaRegistry
from .settings import Settings

logger = logging.getLogger(__name__)

__all__ = ["AsyncClient", "Client", "Sent"]

_RUN_POLL_S = 0.5
"""How often a held input looks for its run's ``run.started`` again."""
_FOLLOW_POLL_S = 0.2
"""How long the reply reader waits for new messages before it looks whether it should stop."""
DEFAULT_SENDER = "client"


class Sent(NamedTuple):
    """Where an input went: its place in the log, its run and its id."""

    topic: str
    offset: int
    event_id: str
    run_id: str
    event_type: str
    to: str | None


class Client:
    """Start a swarm's run, send its agents input, wait for the replies; one topic (one run).

    ``sender`` is the name the client's events are written as (their ``agent_id``): agents
    reply to it (``ctx.send(event.agent_id, ...)``); it may not be the name of one of the
    run's agents. ``backend`` defaults to the Kafka cluster ``settings`` point at (the
    in-memory log is for unit tests).
    """

    def __init__(self, *, settings: Settings, topic: str | None = None, sender: str = DEFAULT_SENDER,
                 registry: SchemaRegistry | None = None, backend: LogBackend | None = None) -> None:
        problem = agent_name_problem(sender)
        if problem is not None:
            raise UsageError(f"sender {sender!r} {problem}: agents reply to it by that name, so {AGENT_NAME_RULE}")
        self.settings = settings
        self.topic = topic or settings.topic
        self.sender = sender
        self.registry = registry or SchemaRegistry.load(settings.schema_dirs())
        self._backend = backend_for(settings, backend)
        self._run: RunInfo | None = None
        self._agents: list[str] | None = None
        self._log: EventLog | None = None
        self._write = threading.Lock()  # EventLog pairs acknowledgements by position: one writer at a time
        self._replies: _Replies | None = None
        self._replies_lock = threading.Lock()
        self._closed = False

    @classmethod
    def from_env(cls, *, topic: str | None = None, sender: str = DEFAULT_SENDER) -> Client:
        """A client of the cluster and topic the ``SWARMLOG_*`` environment names."""
        return cls(settings=Settings.from_env(topic=topic), sender=sender)

    # -- the run ------------------------------------------------------------------------

    def start(self, swarm: Swarm, *, run_id: str, seed: int) -> RunInfo:
        """Start the topic's run (write its ``run.started``), creating the topic if it does not exist.

        Exactly once, as ``swarmlog run --start``: the same run again returns it, another one is
        :class:`~swarmlog.errors.RunAlreadyRecorded`. The agents (``swarmlog run module:swarm``,
        the chart's Deployments) may already be waiting for it, or start later. The run is pinned
        to the string-hash seed its agents will run under — this process's ``PYTHONHASHSEED``,
        else 0 — not to whatever this process hashes with, since it runs no handler itself
        (:mod:`swarmlog.runtime.interpreter`; ``swarmlog run`` re-executes itself with the recorded one).
        """
        try:
            find_run(self.settings, self.topic, self.registry, backend=self._backend)
        except TopicNotFound:
            self._backend.create_topic(self.topic)
        pin = interpreter.HashPin(seed=interpreter.seed_for_new_run(), algorithm=interpreter.hash_algorithm())
        run = start_run(settings=self.settings, swarm=swarm, run_id=run_id, seed=seed, topic=self.topic,
                        registry=self.registry, backend=self._backend, pin=pin)
        self._remember(run)
        return run

    def run(self, *, wait: float = 0.0) -> RunInfo:
        """The topic's run, waiting up to ``wait`` seconds for its ``run.started``.

        Raises :class:`~swarmlog.errors.InputBeforeRun` (a ``RunNotStarted``) when there is none by then.
        """
        return self._await_run(time.monotonic() + wait, event_type="input", to=None)

    def _await_run(self, deadline: float, *, event_type: str, to: str | None) -> RunInfo:
        if self._run is not None:  # a topic holds one run, and its run.started never changes
            return self._run
        started = time.monotonic()
        said = False
        while True:
            try:
                run = find_run(self.settings, self.topic, self.registry, backend=self._backend)
            except TopicNotFound:  # made by whoever starts the run (Client.start, the chart's hook Job): no run yet
                run = None
            if run is not None:
                if said:
                    logger.info("topic %s: run %s started; sending the held %s", self.topic, run.run_id, event_type)
                return self._remember(run)
            now = time.monotonic()
            if now >= deadline:
                raise InputBeforeRun(topic=self.topic, waited_s=now - started, event_type=event_type, to=to)
            if not said:
                said = True
                logger.warning("topic %s holds no run yet: holding the %s until its run.started appears (up to "
                               "%.0f s)", self.topic, event_type, deadline - now)
            time.sleep(min(_RUN_POLL_S, max(0.0, deadline - now)))

    def _remember(self, run: RunInfo) -> RunInfo:
        self._run = run
        self._agents = _run_agents(self.settings, self.topic, self.registry, self._backend, run)
        return run

    # -- work in ------------------------------------------------------------------------

    def send(self, to: str, kind: str, body: Any = "", *, timeout: float = 30.0) -> Sent:
        """Send agent ``to`` an ``agent.message`` of ``kind`` (a non-string ``body`` as canonical JSON,
        as ``ctx.send`` does), in the topic's run; return where it went. Waits for the run to
        start and for Kafka's acknowledgement, within ``timeout`` seconds in all."""
        return self.append(MESSAGE, _message(kind, body), to=to, timeout=timeout)

    def append(self, event_type: str, payload: Any, *, to: str | None = None, causes: Sequence[int] = (),
               run_id: str | None = None, timeout: float = 60.0, event_id: str | None = None) -> Sent:
        """Write one event of any type into the topic's run (what ``swarmlog append`` does).

        Validated against its schema before anything is written. ``to`` must be an agent of the
        run (or None: every agent). ``run_id``, if given, must be the topic's run's: a caller
        that means a particular run is told when the topic holds another.
        """
        deadline = time.monotonic() + timeout
        run = self._await_run(deadline, event_type=event_type, to=to)
        if run_id is not None and run_id != run.run_id:
            raise UsageError(f"topic {self.topic!r} holds run {run.run_id!r}, not {run_id!r}: input belongs to the "
                             f"run of the topic it is written to")
        self._check_names(run, to)
        return self._write_event(event_type, payload, run_id=run.run_id, to=to, causes=causes,
                                 event_id=event_id or uuid.uuid4().hex, deadline=deadline)

    def append_outside_run(self, event_type: str, payload: Any, *, to: str | None = None,
                           causes: Sequence[int] = (), run_id: str = "", timeout: float = 60.0,
                           event_id: str | None = None) -> Sent:
        """Write an event to a topic that no swarm runs on (a plain event log: ``swarmlog append --no-run``).

        Refused on a topic that holds a run: its events belong to it (use :meth:`append`).
        """
        run = find_run(self.settings, self.topic, self.registry, backend=self._backend)
        if run is not None:
            raise UsageError(f"topic {self.topic!r} holds run {run.run_id!r}: what is written there belongs to that "
                             f"run (leave out --no-run)")
        return self._write_event(event_type, payload, run_id=run_id, to=to, causes=causes,
                                 event_id=event_id or uuid.uuid4().hex, deadline=time.monotonic() + timeout)

    def _check_names(self, run: RunInfo, to: str | None) -> None:
        agents = self._agents
        if not agents:
            return  # a run.started that lists no agents (written by another tool): nothing to check against
        if to is not None and to not in agents:
            raise NotAnAgentOfTheRun(topic=self.topic, run_id=run.run_id, name=to, agents=agents, role="recipient")
        if self.sender in agents:
            raise NotAnAgentOfTheRun(topic=self.topic, run_id=run.run_id, name=self.sender, agents=agents,
                                     role="sender")

    def _write_event(self, event_type: str, payload: Any, *, run_id: str, to: str | None, causes: Sequence[int],
                     event_id: str, deadline: float) -> Sent:
        with self._write:
            if self._closed:
                raise UsageError("this swarmlog Client is closed")
            if self._log is None:
                self._log = EventLog(settings=self.settings, registry=self.registry, topic=self.topic,
                                     backend=self._backend)
            offset = self._log.append(event_type, payload, agent=self.sender, to=to, causes=list(causes),
                                      run_id=run_id, event_id=event_id,
                                      timeout=max(0.1, deadline - time.monotonic()))
        return Sent(topic=self.topic, offset=offset, event_id=event_id, run_id=run_id, event_type=event_type, to=to)

    # -- work out -----------------------------------------------------------------------

    def ask(self, to: str, kind: str, body: Any = "", *, timeout: float = 30.0,
            reply_kind: str | None = None) -> Event:
        """Send ``to`` a message and return the reply it causes: the first ``agent.message`` to this
        client's sender (of ``reply_kind``, if given) whose causes chain back to it.

        ``timeout`` covers it all: waiting for the run, the write, the swarm's work. Raises
        :class:`~swarmlog.errors.ReplyTimeout` or :class:`~swarmlog.errors.InputHandlerFailed`.
        """
        deadline = time.monotonic() + timeout
        waiter, sent = self._send_expecting(to, kind, body, reply_kind=reply_kind, deadline=deadline)
        if not waiter.done.wait(max(0.0, deadline - time.monotonic())):
            self._replies_of().forget(waiter)
        return waiter.outcome(sent, timeout=timeout)

    def _send_expecting(self, to: str, kind: str, body: Any, *, reply_kind: str | None,
                        deadline: float) -> tuple[_Waiter, Sent]:
        # Why the waiter is registered before the input is written: the reader then cannot miss
        # the input, whose id it recognises — it reads from a position taken before any of this
        # client's inputs was written.
        self._await_run(deadline, event_type=MESSAGE, to=to)  # the topic exists once its run does
        event_id = uuid.uuid4().hex
        replies = self._replies_of()
        waiter = replies.expect(event_id, kind=kind, sender=self.sender, reply_kind=reply_kind)
        try:
            sent = self.append(MESSAGE, _message(kind, body), to=to, event_id=event_id,
                               timeout=max(0.0, deadline - time.monotonic()))
        except BaseException:
            replies.forget(waiter)
            raise
        return waiter, sent

    def _replies_of(self) -> _Replies:
        with self._replies_lock:
            if self._closed:
                raise UsageError("this swarmlog Client is closed")
            if self._replies is None:
                self._replies = _Replies(backend=self._backend, topic=self.topic, registry=self.registry)
            return self._replies

    # -- lifetime -----------------------------------------------------------------------

    def close(self, timeout: float = 30.0) -> None:
        """Stop the reply reader and close the producer (waiting up to ``timeout`` s for what it holds)."""
        with self._replies_lock:
            self._closed = True
            replies, self._replies = self._replies, None
        if replies is not None:
            replies.close()
        with self._write:
            log, self._log = self._log, None
        if log is not None:
            log.close(timeout)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClient:
    """:class:`Client` for ``asyncio`` (a FastAPI or Starlette service): the same methods, awaited.

    Writes run in the loop's default executor (each is one acknowledged Kafka write); an
    ask waits for its reply on a future, so a thousand waiting asks hold no thread.
    """

    def __init__(self, *, settings: Settings, topic: str | None = None, sender: str = DEFAULT_SENDER,
                 registry: SchemaRegistry | None = None, backend: LogBackend | None = None) -> None:
        self.client = Client(settings=settings, topic=topic, sender=sender, registry=registry, backend=backend)
        """The synchronous client underneath (one producer, one reply reader)."""

    @classmethod
    def from_env(cls, *, topic: str | None = None, sender: str = DEFAULT_SENDER) -> AsyncClient:
        return cls(settings=Settings.from_env(topic=topic), sender=sender)

    @property
    def topic(self) -> str:
        return self.client.topic

    async def start(self, swarm: Swarm, *, run_id: str, seed: int) -> RunInfo:
        return await asyncio.to_thread(self.client.start, swarm, run_id=run_id, seed=seed)

    async def run(self, *, wait: float = 0.0) -> RunInfo:
        return await asyncio.to_thread(self.client.run, wait=wait)

    async def send(self, to: str, kind: str, body: Any = "", *, timeout: float = 30.0) -> Sent:
        return await asyncio.to_thread(self.client.send, to, kind, body, timeout=timeout)

    async def append(self, event_type: str, payload: Any, *, to: str | None = None, causes: Sequence[int] = (),
                     run_id: str | None = None, timeout: float = 60.0) -> Sent:
        return await asyncio.to_thread(self.client.append, event_type, payload, to=to, causes=causes, run_id=run_id,
                                       timeout=timeout)

    async def ask(self, to: str, kind: str, body: Any = "", *, timeout: float = 30.0,
                  reply_kind: str | None = None) -> Event:
        """As :meth:`Client.ask`; cancelling the task stops the wait (the input stays in the log)."""
        deadline = time.monotonic() + timeout
        waiter, sent = await asyncio.to_thread(self.client._send_expecting, to, kind, body, reply_kind=reply_kind,
                                               deadline=deadline)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()

        def settle() -> None:
            if not future.done():
                future.set_result(None)

        def wake() -> None:  # called in the reader's thread
            loop.call_soon_threadsafe(settle)

        waiter.on_done(wake)
        try:
            await asyncio.wait_for(future, max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            pass
        finally:
            if not waiter.done.is_set():
                self.client._replies_of().forget(waiter)
        return waiter.outcome(sent, timeout=timeout)

    async def close(self, timeout: float = 30.0) -> None:
        await asyncio.to_thread(self.client.close, timeout)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


# --- machinery ------------------------------------------------------------------------------


def _message(kind: str, body: Any) -> dict[str, Any]:
    return {"kind": kind, "body": body if isinstance(body, str) else canonical(body)}


def _run_agents(settings: Settings, topic: str, registry: SchemaRegistry, backend: LogBackend,
                run: RunInfo) -> list[str]:
    """The agents ``run.started`` lists (what an input may be addressed to)."""
    m = message_at(backend, topic, run.offset)
    if m is None:
        return []
    _, rec = Decoder(registry).decode(m.value(), m.offset())
    return list(rec["payload"].get("agents") or [])


class _Waiter:
    """One ask's wait: its input's id, the offsets that chain back to it, and how it ended."""

    __slots__ = ("event_id", "kind", "sender", "reply_kind", "closure", "caused", "last", "reply", "failure",
                 "error", "done", "_callbacks")

    def __init__(self, event_id: str, *, kind: str, sender: str, reply_kind: str | None) -> None:
        self.event_id = event_id
        self.kind = kind
        self.sender = sender
        self.reply_kind = reply_kind
        self.closure: list[int] = []
        """The input's offset, then every offset whose causes reach one already here."""
        self.caused = 0
        self.last: str | None = None
        self.reply: Event | None = None
        self.failure: tuple[str, int, str, str] | None = None  # (agent, offset, error type, message)
        self.error: BaseException | None = None
        """Why the wait ended without a reply or a failure: the client closed, its reader died."""
        self.done = threading.Event()
        self._callbacks: list[Callable[[], None]] = []

    def on_done(self, callback: Callable[[], None]) -> None:
        self._callbacks.append(callback)
        if self.done.is_set():
            callback()

    def finish(self) -> None:
        self.done.set()
        for callback in self._callbacks:
            try:
                callback()
            except RuntimeError as exc:  # an asyncio loop that closed while its ask waited
                logger.debug("reply of %s: its waiter is gone: %s", self.event_id, exc)

    def outcome(self, sent: Sent, *, timeout: float) -> Event:
        """The reply, or the typed error that says why there is none."""
        if self.reply is not None:
            return self.reply
        if self.error is not None:
            raise self.error
        fields: dict[str, Any] = {"topic": sent.topic, "run_id": sent.run_id, "offset": sent.offset,
                                  "event_id": sent.event_id, "to": sent.to, "kind": self.kind,
                                  "caused": self.caused, "last": self.last}
        if self.failure is not None:
            agent, at, error_type, error = self.failure
            raise InputHandlerFailed(agent=agent, failed_at=at, error_type=error_type, error=error, **fields)
        wanted = "reply" + (f" of kind {self.reply_kind!r}" if self.reply_kind else "") + f" to {self.sender!r}"
        raise ReplyTimeout(timeout=timeout, reply=wanted, **fields)


class _Replies:
    """One reader of the topic, following it in a thread, that finds every waiting ask's reply.

    It starts at the end of the log as it was when it was made — before the first ask's input
    was written — so it reads every input of this client and everything after it. It decodes
    only while an ask waits. An event whose id is a waiting input's starts that ask's closure;
    an event one of whose causes is in a closure joins it: a look-up per cause, however many
    asks wait.
    """

    def __init__(self, *, backend: LogBackend, topic: str, registry: SchemaRegistry) -> None:
        self._backend = backend
        self._topic = topic
        self._decoder = Decoder(registry)
        self._inputs: dict[str, _Waiter] = {}
        """Waiting asks whose input has not been read yet, by its event id."""
        self._owners: dict[int, list[_Waiter]] = {}
        """Offset -> the waiting asks whose closure holds it."""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        # The end including open transactions: any input written from now on lands at or after it.
        self._start = backend.watermarks(topic)[1]
        self._failed: BaseException | None = None
        self._reader: Reader | None = None
        self._thread = threading.Thread(target=self._follow, name=f"swarmlog-replies-{topic}", daemon=True)
        self._thread.start()

    def expect(self, event_id: str, *, kind: str, sender: str, reply_kind: str | None) -> _Waiter:
        if self._failed is not None:
            raise self._failed
        waiter = _Waiter(event_id, kind=kind, sender=sender, reply_kind=reply_kind)
        with self._lock:
            self._inputs[event_id] = waiter
        return waiter

    def forget(self, waiter: _Waiter) -> None:
        with self._lock:
            self._drop(waiter)

    def _drop(self, waiter: _Waiter) -> None:
        self._inputs.pop(waiter.event_id, None)
        owners = self._owners
        for offset in waiter.closure:
            held = owners.get(offset)
            if held is not None:
                if len(held) == 1:
                    del owners[offset]
                else:
                    held.remove(waiter)

    def close(self) -> None:
        self._stop.set()
        reader = self._reader
        if reader is not None:
            reader.wake()  # its idle wait ends now: closing a client does not wait out a poll
        self._thread.join()
        self._end_all(UsageError("the swarmlog Client was closed while this ask waited for its reply; the input "
                                 "stays in the log"))

    def _end_all(self, error: BaseException) -> None:
        """End every wait still open with ``error``: none is left to its timeout."""
        with self._lock:
            waiting = {id(w): w for w in self._inputs.values()}
            waiting.update((id(w), w) for ws in self._owners.values() for w in ws)
            self._inputs, self._owners = {}, {}
        for waiter in waiting.values():
            waiter.error = error
            waiter.finish()

    def _follow(self) -> None:
        try:
            with self._backend.reader(self._topic) as reader:
                reader.assign(self._start)
                self._reader = reader
                if self._stop.is_set():
                    return  # closed while it was being made: close() found no reader to wake
                for batch in reader.batches(follow=True, timeout=_FOLLOW_POLL_S):
                    if self._stop.is_set():
                        return
                    if batch and (self._inputs or self._owners):
                        self._read(batch)
        except BaseException as exc:  # a reader that died: every waiting ask is told, not left hanging
            logger.error("the reply reader of topic %s stopped: %s", self._topic, exc)
            self._failed = exc
            self._end_all(exc)

    def _read(self, batch: list[Any]) -> None:
        decode = self._decoder.decode
        finished: list[_Waiter] = []
        with self._lock:
            inputs, owners = self._inputs, self._owners
            for m in batch:
                if not (inputs or owners):
                    break
                offset = m.offset()
                try:
                    writer, record = decode(m.value(), offset)
                except Exception as exc:  # not an event: nothing can chain back through it
                    logger.debug("reply reader: offset %d is not readable: %s", offset, exc)
                    continue
                started = inputs.pop(record["event_id"], None) if inputs else None
                if started is not None:
                    started.closure.append(offset)
                    owners[offset] = [started]
                    continue
                reached: list[_Waiter] = []
                for cause in record["causes"]:
                    for waiter in owners.get(cause, ()):
                        if waiter not in reached:
                            reached.append(waiter)
                if not reached:
                    continue
                event = Event.from_message(m, writer, record)
                for waiter in reached:
                    if waiter.reply is not None or waiter.failure is not None:
                        continue  # ended earlier in this batch
                    waiter.closure.append(offset)
                    owners.setdefault(offset, []).append(waiter)
                    waiter.caused += 1
                    waiter.last = f"at offset {offset}: {_describe(event)}"
                    if event.event_type == MESSAGE and event.to == waiter.sender \
                            and (waiter.reply_kind is None or event.kind == waiter.reply_kind):
                        waiter.reply = event
                    elif event.event_type == HANDLER_FAILED:
                        p = event.payload
                        waiter.failure = (event.agent_id, offset, p["error_type"], p["message"])
                    else:
                        continue
                    finished.append(waiter)
            for waiter in finished:
                self._drop(waiter)
        for waiter in finished:
            waiter.finish()


def _describe(event: Event) -> str:
    what = event.event_type + (f":{event.kind}" if event.kind is not None else "")
    return f"{what} from {event.agent_id}" + (f" to {event.to}" if event.to else "")
