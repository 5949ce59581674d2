"""``ctx``: a handler's only door to the world.

Everything a handler can learn or do that is not a pure function of its state
and its input goes through here, and is either *derived from the log* (time,
randomness) or *recorded in the log* (messages, timers, effects, LLM calls):

* ``ctx.now()`` is the offset being handled: logical time. ``ctx.log_time_ms()``
  is the broker's append time as recorded in the log, never a clock reading.
* ``ctx.random()`` is derived from (the run's seed, the agent, the offset, the
  call's index within this step), never from a stream: adding a random call to
  one handler cannot shift the numbers any other step sees.
* ``ctx.llm()``, ``ctx.effect()`` and ``ctx.http()`` (an httpx client for any
  SDK) run live once, and their results are appended to the log; on replay they
  are served from the log and the model is never called again. A request that
  differs from the recorded one is a divergence. ``ctx.credential()`` gives such
  an SDK its key: the environment's live, a placeholder on replay.

Every output of a step gets the id ``<agent>@<offset>#<index>``
(:func:`swarmlog.log.protocol.output_id`): deterministic, so the runtime can tell, for
each input, which outputs an earlier life of the agent already wrote.
"""

from __future__ import annotations

import json
import uuid as _uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NamedTuple, Protocol, TypeVar

from .errors import (
    ConfigurationError,
    EffectDiverged,
    EffectFailed,
    FailedStepChanged,
    InvalidEvent,
    NoRunStarted,
    OutsideStep,
)
from .events import Event
from .guard import allowed
from .log.hashing import canonical, short_sha256
from .log.protocol import (
    AGENT_NAME_RULE,
    EFFECT_RECORDED,
    HANDLER_FAILED,
    LABEL_RULE,
    LLM_CALL,
    MESSAGE,
    PATCH_MARKER,
    TIMER_CANCELLED,
    TIMER_FIRED,
    TIMER_SET,
    agent_name_problem,
    name_problem,
    output_id,
    patch_marker_id,
)
from .schema.registry import SchemaRegistry

__all__ = ["Context", "EffectRunner", "Output", "OutputSink"]

T = TypeVar("T")


class Output(NamedTuple):
    """One event a step wrote (or would write).

    A named tuple, not a frozen dataclass: it is made inside the handler, under the guard's
    profile hook, where a frozen dataclass's five ``object.__setattr__`` calls cost ten hook
    events on every output.
    """

    event_id: str
    event_type: str
    payload: dict[str, Any]
    to: str | None
    causes: list[int]


EffectRunner = Callable[[str, Callable[..., Any], tuple[Any, ...]], Any]
"""``(name, fn, args) -> result``: performs a live effect (see :attr:`Context.run_effect`)."""


class OutputSink(Protocol):
    """Where a step's outputs go: the live transaction, or the verifier."""

    def write(self, out: Output, *, locate: bool) -> int | None:
        """Write (or check) one output; with ``locate`` return its offset in the log."""

    def recorded(self, event_id: str) -> Event | None:
        """The recorded event with this id (replay), or None when running live."""


class Context:
    """One per agent, reused for every step (so the hot path allocates little)."""

    __slots__ = ("agent", "registry", "llm_client", "run_effect", "_sink", "_event", "_step", "_index",
                 "_rand_index", "_effects", "_rand_prefix", "seed", "run_id", "_http", "_live", "_loop",
                 "choose_completion", "_secrets", "_patches", "_named", "_labelled", "signal")

    def __init__(self, *, agent: str, registry: SchemaRegistry, llm_client: Any = None,
                 run_effect: EffectRunner | None = None) -> None:
        self.agent = agent
        self.registry = registry
        self.llm_client = llm_client
        self.run_effect = run_effect
        """How live I/O is performed: ``ctx.effect(name, fn, *args)`` as ``run_effect(name, fn, args)``,
        a recorded exchange (``ctx.http()``) as ``run_effect(event_type, make_payload, ())``; when
        None, ``fn(*args)`` and ``make_payload()``. The simulator (:mod:`swarmlog.testing`) answers
        from its models instead of the world. Either way the result is recorded the same way, and
        replay serves the record."""
        self.seed: int | None = None
        self.run_id = ""
        self._rand_prefix = b""
        self._sink: OutputSink | None = None
        self._event: Event | None = None
        self._step = -1
        self._index = 0
        self._rand_index = 0
        self._effects: list[int] = []
        self.signal: BaseException | None = None
        """What stops this step's replay (a divergence of an effect, a record the live run never made), kept
        until the step ends: the engine raises it again if the handler caught it and went on or failed."""
        self._http: dict[Any, Any] = {}  # (library, options) -> (client, transport), kept across steps
        self._named: set[str] = set()  # recipients found to follow the name grammar (they repeat)
        self._labelled: set[str] = set()  # message kinds and timer names found to follow it
        self._live = False  # the step runs live (its outputs are written), not replayed
        self._loop: Any = None  # the agent's StepLoop (swarmlog.aio), made on its first async step
        self._secrets: tuple[str, ...] = ()  # values ctx.credential handed out: scrubbed from what ctx.http records
        self._patches: dict[str, bool] = {}  # this step's answers to ctx.patched (a step asks the log once a patch)
        self.choose_completion: Callable[[list[str]], int] | None = None
        """The simulator's schedule, choosing which of an async step's calls in flight is delivered
        next, or that the next timer fires first (the last option, when one is set): it returns an
        index into the options it is given. None: the world decides live, the log on replay."""

    # -- driven by the runtime -----------------------------------------------------------

    def set_run(self, *, run_id: str, seed: int) -> None:
        self.run_id = run_id
        self.seed = seed
        self._rand_prefix = f"{seed}\x1f{self.agent}\x1f".encode()

    def begin(self, *, step: int, event: Event | None, sink: OutputSink, live: bool = False) -> None:
        self._step = step
        self._event = event
        self._sink = sink
        self._live = live
        self._index = 0
        self._rand_index = 0
        self._effects = []
        self.signal = None
        if self._patches:
            self._patches = {}
        if self._loop is not None:
            self._loop.new_step()

    def end(self) -> int:
        """Close the step; return how many outputs it wrote."""
        n = self._index
        self._sink = None
        self._event = None
        return n

    # -- time and randomness --------------------------------------------------------------

    def now(self) -> int:
        """Logical time: the offset of the event being handled."""
        return self._step

    def log_time_ms(self) -> int | None:
        """The broker's append time of the event being handled, as recorded in the log."""
        return self._event.timestamp_ms if self._event is not None else None

    def _draw(self, domain: bytes) -> bytes:
        if self.seed is None:
            raise NoRunStarted(agent=self.agent, offset=self._step)
        i = self._rand_index
        self._rand_index = i + 1
        # A few dozen bytes (seed, agent, domain, step, index): CPython's own sha256, not OpenSSL's.
        return short_sha256(self._rand_prefix + domain + f"{self._step}\x1f{i}".encode()).digest()

    def random(self) -> float:
        """A float in [0, 1) derived from (seed, agent, offset, call index)."""
        return (int.from_bytes(self._draw(b"f")[:8], "big") >> 11) * (1.0 / (1 << 53))

    def randint(self, a: int, b: int) -> int:
        """An integer in [a, b], derived like :meth:`random` (unbiased)."""
        span = b - a + 1
        if span <= 0:
            raise ValueError(f"empty range [{a}, {b}]")
        return a + int.from_bytes(self._draw(b"i"), "big") % span  # 256 bits: bias < 2**-200

    def choice(self, seq: Sequence[Any]) -> Any:
        return seq[self.randint(0, len(seq) - 1)]

    def uuid(self) -> str:
        """A UUID (version 4 layout) derived like :meth:`random`."""
        return str(_uuid.UUID(bytes=self._draw(b"u")[:16], version=4))

    # -- messages ---------------------------------------------------------------------------

    def send(self, to: str, kind: str, body: Any = "") -> None:
        """Send an ``agent.message`` to one agent. A non-string body is sent as canonical JSON."""
        self._output(MESSAGE, {"kind": kind, "body": body if isinstance(body, str) else canonical(body)}, to)

    def broadcast(self, kind: str, body: Any = "") -> None:
        """Send an ``agent.message`` to every other agent."""
        self._output(MESSAGE, {"kind": kind, "body": body if isinstance(body, str) else canonical(body)}, None)

    def emit(self, event_type: str, payload: dict[str, Any], *, to: str | None = None) -> None:
        """Write an event of any type in ``schemas/`` (validated before anything is written)."""
        self._output(event_type, payload, to)

    # -- timers -----------------------------------------------------------------------------

    def timer(self, name: str, *, after_events: int) -> None:
        """Fire ``name`` once ``after_events`` more events have been appended to the log."""
        if after_events < 1:
            raise ValueError("after_events must be at least 1")
        self._output(TIMER_SET, {"name": name, "after_events": after_events, "after_ms": None}, self.agent)

    def timeout(self, name: str, *, seconds: float) -> None:
        """Fire ``name`` after a wall-clock timeout. The firing is appended to the log, so once
        fired its place in the total order is fixed and every replay sees it there."""
        if seconds < 0:
            raise ValueError("seconds must be >= 0")
        self._output(TIMER_SET, {"name": name, "after_events": None, "after_ms": int(seconds * 1000)}, self.agent)

    def cancel_timer(self, name: str) -> None:
        self._output(TIMER_CANCELLED, {"name": name}, self.agent)

    # -- recorded I/O -----------------------------------------------------------------------

    def effect(self, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(*args)`` live once and record its (JSON) result; on replay, serve the record.

        Returns the result as it reads back from JSON, live and on replay alike.
        Raises :class:`EffectFailed` if ``fn`` raised (live) or the record says it did (replay).
        """
        args_json = canonical(list(args))
        event_id, recorded = self._next_recorded()
        payload: dict[str, Any]
        if recorded is None:
            error = None
            result_json: str | None
            with allowed():
                try:
                    run = self.run_effect
                    result_json = canonical(fn(*args) if run is None else run(name, fn, args))
                except Exception as exc:  # recorded, then raised to the handler as EffectFailed
                    result_json, error = None, f"{type(exc).__name__}: {exc}"
            payload = {"name": name, "args_json": args_json, "result_json": result_json, "error": error}
        else:
            payload = recorded.payload
            if recorded.event_type != EFFECT_RECORDED or payload["name"] != name \
                    or payload["args_json"] != args_json:
                self._diverged(f"effect {name!r} with args {args_json} is not what the log recorded here",
                               recorded=_describe(recorded), replayed={"effect": name, "args": args_json})
        self._effects.append(self._output(EFFECT_RECORDED, payload, self.agent, locate=True, event_id=event_id))
        if payload["error"] is not None:
            raise EffectFailed(name=name, error=payload["error"])
        return json.loads(payload["result_json"])

    def llm(self, request: dict[str, Any]) -> dict[str, Any]:
        """Call the swarm's LLM live once and record request and response; on replay, serve the
        recorded response. A request that differs from the recorded one is a divergence."""
        request_json = canonical(request)
        event_id, recorded = self._next_recorded()
        if recorded is None:
            if self.llm_client is None:
                raise ConfigurationError("ctx.llm() needs an LLM client: Swarm(..., llm=OpenAIChat(...))")
            with allowed():
                response = self.llm_client.complete(request)
            payload = {"model": str(request.get("model", "")), "request_json": request_json,
                       "response_json": canonical(response)}
        else:
            payload = recorded.payload
            if recorded.event_type != LLM_CALL or payload["request_json"] != request_json:
                self._diverged("the LLM request differs from the recorded one",
                               recorded=_describe(recorded), replayed={LLM_CALL: request_json})
        self._effects.append(self._output(LLM_CALL, payload, self.agent, locate=True, event_id=event_id))
        return json.loads(payload["response_json"])

    def http(self, library: Any = None, *, retries: int = 2, redact_headers: Sequence[str] = (),
             redact_params: Sequence[str] = ()) -> Any:
        """An httpx client whose every request and response is recorded (see :mod:`swarmlog.llm.http`).

        ``httpx2.Client`` by default, the library both official LLM SDKs take
        (``openai.OpenAI(http_client=ctx.http())``, ``anthropic.Anthropic(http_client=ctx.http())``);
        ``ctx.http(httpx)`` gives an ``httpx.Client``. ``retries`` are made live, inside the
        recorded call; ``redact_headers``/``redact_params`` name more credentials to keep out of
        the log. The same client is returned for the same arguments, step after step.
        """
        return self._http_pair(library, retries, redact_headers, redact_params)[0]

    def http_transport(self, library: Any = None, *, retries: int = 2, redact_headers: Sequence[str] = (),
                       redact_params: Sequence[str] = ()) -> Any:
        """The recorded transport behind :meth:`http`, for code that builds its own client."""
        return self._http_pair(library, retries, redact_headers, redact_params)[1]

    def _http_pair(self, library: Any, retries: int, redact_headers: Sequence[str],
                   redact_params: Sequence[str], *, asynchronous: bool = False) -> tuple[Any, Any]:
        from .llm.http import RecordedHTTP, httpx_library, transport_type
        from .redaction import Redaction

        with allowed():  # the first use imports httpx2, which reads its package metadata: not the handler's I/O
            lib = httpx_library(library)
        key = (lib.__name__, retries, tuple(redact_headers), tuple(redact_params), asynchronous)
        pair = self._http.get(key)
        if pair is None:
            redaction = Redaction(headers=frozenset(h.lower() for h in redact_headers),
                                  params=frozenset(p.lower() for p in redact_params))
            recorder = RecordedHTTP(ctx=self, library=lib, retries=retries, redaction=redaction)
            if asynchronous:
                from .aio._http import async_transport_type

                transport = async_transport_type(lib)(recorder)
            else:
                transport = transport_type(lib)(recorder)
            with allowed():  # building a client reads the environment (proxies); nothing it returns
                client = (lib.AsyncClient if asynchronous else lib.Client)(transport=transport)
            pair = self._http[key] = (client, transport)
        return pair

    def credential(self, name: str) -> str:
        """The key in the environment variable ``name``, for an SDK the handler builds on a recorded client:
        ``openai.OpenAI(api_key=ctx.credential("OPENAI_API_KEY"), http_client=ctx.http())``.

        Live, the variable's value (:class:`~swarmlog.llm.errors.CredentialMissing` if it is unset);
        on replay a placeholder, so that a replay needs no key (:mod:`swarmlog.llm.credentials` says why).
        Not recorded: keep it out of state and messages. Every value handed out is scrubbed from what
        ``ctx.http()`` records.
        """
        from .llm.credentials import read_credential

        self._require_sink()
        with allowed():  # the one read of the environment a handler is given: never recorded, only redacted
            value = read_credential(name, agent=self.agent, live=self._live and self.run_effect is None)
        if value not in self._secrets:
            self._secrets = (*self._secrets, value)
        return value

    # -- versioned steps ---------------------------------------------------------------------

    def patched(self, patch_id: str) -> bool:
        """Whether this step takes the new path of a code change named ``patch_id``::

            if ctx.patched("accept-late-messages"):
                ...  # the new code
            else:
                ...  # the code the run's earlier steps were recorded with

        True where the step runs live (the answer is recorded in the log, as a ``patch.marker`` of the
        step); on replay, true where the log recorded that marker for this step and false where it did not
        (a step recorded before the change). So a run in flight takes the fix from its next step on, its
        older steps replay as they were recorded, and code older than the patch that replays a step
        recorded with it fails naming the patch (:class:`~swarmlog.errors.PatchUnknown`). The marker's id
        (``<agent>@<step>#patch:<id>``) is not one of the step's numbered outputs: adding the call shifts
        no other id. Asked again in the same step, the same answer. Works in ``async def`` handlers too.
        Retire it with :meth:`deprecate_patch` (docs/evolution.md; ``swarmlog patches`` says when).
        """
        return self._patch(patch_id, deprecated=False)

    def deprecate_patch(self, patch_id: str) -> None:
        """The new path of ``patch_id`` is the only one left: no recorded run still replays a step without
        it (``swarmlog patches --swarm`` says so). Replace ``if ctx.patched(id): new else: old`` by
        ``ctx.deprecate_patch(id); new``: live it still records the marker, so code that still has
        ``patched(id)`` (a rollout in progress) replays what this code writes, and on replay it accepts a
        step with or without the marker. Remove the call once no recorded run holds the marker."""
        self._patch(patch_id, deprecated=True)

    def _patch(self, patch_id: str, *, deprecated: bool) -> bool:
        answered = self._patches.get(patch_id)
        if answered is not None:
            return answered
        sink = self._require_sink()
        if type(patch_id) is not str or not _valid_patch_id(patch_id):
            raise ValueError(f"a patch id is 1-100 letters, digits, '.', '_' or '-': got {patch_id!r}")
        event_id = patch_marker_id(self.agent, self._step, patch_id)
        with allowed():  # swarmlog's own recorded I/O: the log, not the handler, answers
            taken = self._live or sink.recorded(event_id) is not None
            if taken:
                # Causes: the step's input only, whatever the step did before asking (live and replay agree).
                sink.write(Output(event_id, PATCH_MARKER, {"patch_id": patch_id}, self.agent,
                                  [self._step] if self._step >= 0 else []), locate=False)
        self._patches[patch_id] = taken
        return taken or deprecated

    # -- async steps (swarmlog.aio) ----------------------------------------------------------

    def run(self, coro: Awaitable[T]) -> T:
        """Run a coroutine to completion on the step's deterministic loop, from a sync handler.

        An ``async def`` handler's coroutine runs there already (await things instead). The loop has
        a virtual clock and delivers recorded calls in a recorded order: see :mod:`swarmlog.aio`.
        """
        return self._step_loop().run_step(coro)

    async def async_effect(self, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        """:meth:`effect` as a concurrent call of an async step: live, ``fn(*args)`` (or an ``async def``
        fn) runs on a worker thread of the agent's, overlapping other calls; the result is recorded
        when it is delivered, and on replay served in the recorded order (:mod:`swarmlog.aio`)."""
        from .aio._recorded import async_effect

        return await async_effect(self, name, fn, *args)

    async def async_llm(self, request: dict[str, Any]) -> dict[str, Any]:
        """:meth:`llm` as a concurrent call of an async step (see :meth:`async_effect`). A failed call
        is recorded too, and raised as :class:`~swarmlog.errors.EffectFailed` live and on replay."""
        from .aio._recorded import async_llm

        return await async_llm(self, request)

    def async_http(self, library: Any = None, *, retries: int = 2, redact_headers: Sequence[str] = (),
                   redact_params: Sequence[str] = ()) -> Any:
        """:meth:`http` for async code: an ``httpx2.AsyncClient`` (``ctx.async_http(httpx)``: an
        ``httpx.AsyncClient``) whose every request is a concurrent recorded call of the step, for
        ``openai.AsyncOpenAI(http_client=ctx.async_http())`` and ``anthropic.AsyncAnthropic(...)``."""
        return self._http_pair(library, retries, redact_headers, redact_params, asynchronous=True)[0]

    def async_http_transport(self, library: Any = None, *, retries: int = 2, redact_headers: Sequence[str] = (),
                             redact_params: Sequence[str] = ()) -> Any:
        """The recorded async transport behind :meth:`async_http`, for code that builds its own client."""
        return self._http_pair(library, retries, redact_headers, redact_params, asynchronous=True)[1]

    def _step_loop(self) -> Any:
        loop = self._loop
        if loop is None:
            from .aio._loop import StepLoop

            loop = self._loop = StepLoop(ctx=self)
        return loop

    # -- internals --------------------------------------------------------------------------

    def _record_io(self, event_type: str, *, live: Callable[[], dict[str, Any]],
                   check: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        """One recorded call of any kind: live, ``live()`` makes the payload (doing its own I/O
        inside :func:`allowed`); on replay the recorded payload is served once ``check(payload)``
        has found the call the same as the recorded one (it raises a divergence if not)."""
        event_id, recorded = self._next_recorded()
        if recorded is None:
            run = self.run_effect
            payload = live() if run is None else run(event_type, live, ())
        else:
            if recorded.event_type != event_type:
                self._diverged(f"the step now makes a {event_type} effect where the log recorded a "
                               f"{recorded.event_type}", recorded=_describe(recorded),
                               replayed={"event_type": event_type})
            payload = recorded.payload
            try:
                check(payload)
            except EffectDiverged as exc:
                # Where the differing call was recorded: a reader marks that row (the exchange), not
                # only the step's input. The check knows the payload, not where the log holds it.
                if isinstance(exc.recorded, dict):
                    exc.recorded.setdefault("offset", recorded.offset)
                raise
        self._effects.append(self._output(event_type, payload, self.agent, locate=True, event_id=event_id))
        return payload

    def _next_recorded(self) -> tuple[str, Event | None]:
        sink = self._require_sink()
        if self.signal is not None:
            raise self.signal  # the step's replay stopped at an earlier call: nothing after it can be served
        event_id = output_id(self.agent, self._step, self._index)
        return event_id, sink.recorded(event_id)

    def _require_sink(self) -> OutputSink:
        if self._sink is None:
            raise OutsideStep(agent=self.agent)
        return self._sink

    def _output(self, event_type: str, payload: dict[str, Any], to: str | None, *, locate: bool = False,
                event_id: str | None = None) -> int:
        # Runs inside the handler, under the guard's profile hook: every call here costs more.
        sink = self._sink
        if sink is None:
            raise OutsideStep(agent=self.agent)
        if self.signal is not None:
            raise self.signal  # the step's replay stopped at an earlier call: what it writes after is not its record
        try:
            schema = self.registry.newest[event_type]  # a subscript: no call for the hook to see
        except (KeyError, TypeError):
            schema = self.registry.latest(event_type)  # raises UnknownEventType
        payload = schema.validate_payload(payload)
        causes = [self._step, *self._effects] if self._step >= 0 else list(self._effects)
        # What the handler handed over is plain data from here on — the payload as strict validation
        # rebuilt it (exact str, int, dict... never the handler's own subclass), the names as exact
        # strings — so writing it runs none of the handler's code. The write is swarmlog's own
        # recorded I/O (naming it, encoding it, sending it in the step's transaction, or, on replay,
        # checking it against the record), and runs with the hook off: it was dozens of hooked calls
        # of every ring step, a good part of the step's CPU (bench/README.md, "Where a ring step's
        # time goes").
        if type(event_type) is not str:
            event_type = str.__str__(event_type)
        if to is not None and type(to) is not str and isinstance(to, str):
            to = str.__str__(to)
        index = self._index
        self._index = index + 1
        with allowed():
            # The grammar of what terminals and ids will show (protocol.name_problem), checked once
            # per distinct name: a recipient, a message kind or a timer name a handler made up.
            if to is not None and to not in self._named:
                self._check_name(event_type, "to", to, agent=True)
            if event_type == MESSAGE:
                if payload["kind"] not in self._labelled:
                    self._check_name(event_type, "payload.kind", payload["kind"], agent=False)
            elif (event_type == TIMER_SET or event_type == TIMER_CANCELLED) and payload["name"] not in self._labelled:
                self._check_name(event_type, "payload.name", payload["name"], agent=False)
            if event_id is None:
                event_id = output_id(self.agent, self._step, index)
            offset = sink.write(Output(event_id, event_type, payload, to, causes), locate=locate)
        return -1 if offset is None else offset

    def _check_name(self, event_type: str, field: str, value: str, *, agent: bool) -> None:
        """:class:`InvalidEvent` unless ``value`` follows the grammar of names (``agent``: a recipient)
        or of labels (a kind, a timer name); remembered once it does."""
        problem = agent_name_problem(value) if agent else name_problem(value, agent=False)
        if problem is not None:
            raise InvalidEvent(event_type=event_type, field=field,
                               problem=f"{value!r} {problem}; {AGENT_NAME_RULE if agent else LABEL_RULE}")
        known = self._named if agent else self._labelled
        if len(known) >= 4096:  # names repeat; anything else must not grow this forever
            known.clear()
        known.add(value)

    def output_timer_fired(self, *, name: str, set_offset: int, clock: str, causes: list[int]) -> None:
        """The runtime's own output: a logical timer fired during this step."""
        sink = self._require_sink()
        event_id = output_id(self.agent, self._step, self._index)
        self._index += 1
        payload = {"name": name, "set_offset": set_offset, "clock": clock}
        sink.write(Output(event_id, TIMER_FIRED, payload, self.agent, causes), locate=False)

    def _diverged(self, detail: str, *, recorded: Any, replayed: Any) -> None:
        # A recorded effect the handler cannot be served: it cannot go on from here. Kept in ``signal`` as
        # well as raised: a handler that catches it (``except Exception``) has not made the step replay.
        exc: EffectDiverged
        if isinstance(recorded, dict) and recorded.get("event_type") == HANDLER_FAILED:
            payload = recorded["payload"]  # the step failed live where it now calls the world: a fix, not versioned
            exc = FailedStepChanged(offset=self._step, agent=self.agent, error_type=payload["error_type"],
                                    message=payload["message"], replayed=replayed)
        else:
            exc = EffectDiverged(offset=self._step, agent=self.agent, detail=detail, recorded=recorded,
                                 replayed=replayed)
        self.signal = exc
        raise exc


def _valid_patch_id(patch_id: str) -> bool:
    return 0 < len(patch_id) <= 100 and all(c.isascii() and (c.isalnum() or c in "._-") for c in patch_id)


def _describe(event: Event) -> dict[str, Any]:
    return {"event_type": event.event_type, "to": event.to, "payload": event.payload, "offset": event.offset}
