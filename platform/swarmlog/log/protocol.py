"""The log protocol: what a message in a swarm's topic means beyond its Avro body.

One home for every convention that readers and writers of the log share:

* **event types** the runtime itself writes and reacts to (``run.started``,
  ``agent.message``, the timer events, the recorded effects);
* the **event-id grammar** of the runtime's outputs, ``<agent>@<step>#<index>``:
  deterministic, so that an agent rebuilding from offset zero recognises what an
  earlier life of it already wrote; a wall-clock firing is ``<agent>@timer<set offset>``;
  a state digest record ``<agent>@state<last step>`` (``<agent>@stop<position>`` at a stop);
* the **routing headers** (``sl.type``, ``sl.v``, ``sl.agent``, ``sl.to``, ``sl.step``)
  that let a reader skip an event without decoding it, their parsing, and their check
  against the envelope (:func:`checked_route`): a header that steers behaviour is never
  trusted over the body it describes;
* the names of the **Kafka resources** of an agent (its transactional id and
  consumer group), of the replay Job and of the sink (their consumer groups), which
  operators see in Kafka's own tools, and of the side topics kept beside a log.
"""

from __future__ import annotations

from typing import Any, NamedTuple, NoReturn

from ..errors import RoutingHeaderMismatch

__all__ = ["AGENT_NAME_FORBIDDEN", "CONTINUED_RECORDS", "EFFECT_RECORDED", "HANDLER_FAILED", "HTTP_EXCHANGE",
           "H_AGENT", "H_SNAPSHOT_AT", "H_SNAPSHOT_CODE", "H_STEP", "H_TO", "H_TYPE", "H_VERSION", "Headers",
           "LANGGRAPH_CHECKPOINT", "LANGGRAPH_DELETED", "LANGGRAPH_WRITES", "LLM_CALL", "MESSAGE", "RECORDED_EFFECTS",
           "RECORDED_EFFECT_HEADERS", "RUN_CONTINUED", "RUN_FORKED", "RUN_MOVED", "RUN_SEEDED", "RUN_STARTED",
           "RUN_STARTED_HEADER", "RUN_STARTER_CHANNEL", "RUN_WRITER", "Route", "SELF_RECORDS", "SIDE_TOPIC_SUFFIXES",
           "STATE_DIGEST", "STATE_DIGEST_TYPE", "TIMER_CANCELLED", "TIMER_FIRED", "TIMER_SET", "agent_group",
           "agent_transactional_id", "checked_route", "copy_transactional_ids", "is_side_topic", "new_route",
           "output_id", "output_id_prefix", "parse_step", "replay_group", "route", "run_continued_id", "run_moved_id",
           "run_seed_id", "run_started_id", "sink_group", "snapshot_topic", "state_digest_id", "step_of",
           "stop_digest_id", "wall_timer_id", "writer_step"]

# --- event types ------------------------------------------------------------------------

RUN_STARTED = "run.started"
"""The first event of a run: swarm, seed, code version, agents."""
MESSAGE = "agent.message"
"""What ``ctx.send`` and ``ctx.broadcast`` write."""
TIMER_SET = "timer.set"
TIMER_FIRED = "timer.fired"
TIMER_CANCELLED = "timer.cancelled"
EFFECT_RECORDED = "effect.recorded"
"""The recorded result of ``ctx.effect``."""
LLM_CALL = "llm.call"
"""The recorded request and response of ``ctx.llm``."""
HTTP_EXCHANGE = "http.exchange"
"""A recorded request and response of ``ctx.http()`` (:mod:`swarmlog.llm.http`)."""
HANDLER_FAILED = "handler.failed"
"""A handler raised; replay expects the same failure at the same step."""
RUN_FORKED = "run.forked"
"""Appended to a fork right after the prefix it copied: where the fork came from."""
RUN_CONTINUED = "run.continued"
"""The first event of a run continued on a new topic (``swarmlog continue``): the run, and the link to the old topic."""
RUN_SEEDED = "run.continued.seed"
"""An agent's fold at the old topic's end, right after ``run.continued``: its fold on the new topic starts from it."""
RUN_MOVED = "run.continued.to"
"""The last event of a run's part on the topic it left: where the run went (a live agent reading it stops)."""
CONTINUED_RECORDS = frozenset({RUN_CONTINUED, RUN_SEEDED, RUN_MOVED})
"""Bookkeeping of a continued run: no handler takes them, no logical timer counts them."""
STATE_DIGEST = "state.digest"
"""An agent's state after its steps, as digests (:mod:`swarmlog.runtime.digests`): written in
the same transaction as those steps' outputs, and at every clean stop."""
LANGGRAPH_CHECKPOINT = "langgraph.checkpoint"
LANGGRAPH_WRITES = "langgraph.writes"
LANGGRAPH_DELETED = "langgraph.deleted"
"""LangGraph's checkpointer on the log (:mod:`swarmlog.integrations.langgraph`): a checkpoint, a task's
pending writes, and checkpoints taken out of view. Written by the checkpointer, handled by no agent."""

PATCH_MARKER = "patch.marker"
"""A live step took the patched path of ``ctx.patched(id)`` (:mod:`swarmlog.runtime.patches`): replay
answers true where the log holds one, false where it does not."""
STEP_RETRIED = "step.retried"
"""Appended by ``swarmlog retry``: the agent runs its handler again, with the code it runs now, for the
input of a step that failed (:mod:`swarmlog.runtime.failures`)."""

RECORDED_EFFECTS = frozenset({EFFECT_RECORDED, LLM_CALL, HTTP_EXCHANGE})
"""Recorded I/O: run live once, served from the log on every replay. A handler needs the
result at once, so replay indexes these ahead of the steps that made them."""
RECORDED_EFFECT_HEADERS = frozenset(t.encode() for t in RECORDED_EFFECTS)
""":data:`RECORDED_EFFECTS` as the bytes of an ``sl.type`` header."""
HISTORY_RECORDS = frozenset({*RECORDED_EFFECTS, PATCH_MARKER, HANDLER_FAILED})
"""What a replayed step is served by id from the agent's recorded history (:mod:`swarmlog.runtime.history`):
its recorded I/O, the patch markers that say which path of a versioned step it took, and a failure (so a
step that now calls the world where it failed live is told apart: :class:`~swarmlog.errors.FailedStepChanged`)."""
SELF_RECORDS = frozenset({*RECORDED_EFFECTS, TIMER_SET, TIMER_CANCELLED, HANDLER_FAILED, STATE_DIGEST,
                          PATCH_MARKER})
"""What an agent writes about itself: never dispatched to handlers."""

# --- headers ------------------------------------------------------------------------------

H_TYPE = "sl.type"
H_VERSION = "sl.v"
H_AGENT = "sl.agent"
H_TO = "sl.to"
H_STEP = "sl.step"
"""On runtime outputs: the offset of the step that wrote it (so readers know an agent's reach
without decoding)."""
H_SNAPSHOT_AT = "sl.snap.at"
"""On a snapshot record: the offset its state is "just before"."""
H_SNAPSHOT_CODE = "sl.snap.code"
"""On a snapshot record: the code version that made it."""

Headers = list[tuple[str, bytes]]

RUN_STARTED_HEADER = (H_TYPE, RUN_STARTED.encode())
STATE_DIGEST_TYPE = STATE_DIGEST.encode()
""":data:`STATE_DIGEST` as the bytes of an ``sl.type`` header."""


class Route(NamedTuple):
    """What the routing headers say about a message, read without decoding it."""

    event_type: str
    agent: str
    to: str | None
    step: int | None


_NO_ROUTE = Route("", "", None, None)
new_route = tuple.__new__
"""``new_route(Route, (type, agent, to, step))``: a Route without the named tuple's Python-level
``__new__`` (a frame on every message routed, a part of a route's cost: ``route.*``)."""


def route(headers: Headers | None) -> Route:
    """The routing headers of a message (empty fields for a message that has none)."""
    if not headers:
        return _NO_ROUTE
    t = a = ""
    to = None
    step = None
    for k, v in headers:
        if k == H_TYPE:
            t = v.decode()
        elif k == H_AGENT:
            a = v.decode()
        elif k == H_TO:
            to = v.decode()
        elif k == H_STEP:
            step = int(v)
    return new_route(Route, (t, a, to, step))


def checked_route(headers: Headers | None, offset: int, event_type: str, event_type_b: bytes, version: bytes,
                  event_id: bytes, agent: bytes, to: bytes | None, expected: dict[Any, Headers], /) -> Route:
    """The route of a message as its envelope gives it, its routing headers checked against it.

    ``event_type`` is the writer schema's type (the fingerprint's; ``event_type_b`` encoded),
    ``version`` its version as an ``sl.v`` header spells it; ``event_id``, ``agent`` and ``to``
    are the envelope's fields as bytes. Raises :class:`~swarmlog.errors.RoutingHeaderMismatch`
    for a header that says something else, or for ``sl.type``, ``sl.agent`` or ``sl.to``
    missing from a message that carries routing headers (an absent ``sl.to`` means a
    broadcast). A message without any (written by another tool) is routed by its envelope.

    Speed: a swarm replay and an agent's first pass route every message. swarmlog's writers put
    the headers in one order (``sl.type``, ``sl.v``, ``sl.agent``, ``sl.to`` if any, ``sl.step``
    on runtime outputs), so the common case is one list comparison with the headers such an
    envelope should have (kept in ``expected``, the caller's cache); anything else is checked
    header by header.
    """
    step = None
    if headers:
        key = (event_type_b, version, agent, to)
        want = expected.get(key)
        if want is None:
            want = _expected_headers(expected, key)
        if headers != want:
            n = len(want)
            last = headers[-1]
            if len(headers) == n + 1 and last[0] == H_STEP and last[1] == step_of(event_id) and headers[:n] == want:
                step = int(last[1])
            else:
                step = _check_each(headers, offset, event_type_b, version, event_id, agent, to)
    return new_route(Route, (event_type, agent.decode(), None if to is None else to.decode(), step))


_EXPECTED_MAX = 4096


def _expected_headers(expected: dict[Any, Headers], key: tuple[bytes, bytes, bytes, bytes | None]) -> Headers:
    if len(expected) >= _EXPECTED_MAX:  # (type, version, agent, recipient) repeat; guard against what does not
        expected.clear()
    event_type_b, version, agent, to = key
    want = [(H_TYPE, event_type_b), (H_VERSION, version), (H_AGENT, agent)]
    if to is not None:
        want.append((H_TO, to))
    expected[key] = want
    return want


def _check_each(headers: Headers, offset: int, event_type_b: bytes, version: bytes, event_id: bytes, agent: bytes,
                to: bytes | None) -> int | None:
    """Header by header (any order, other headers among them); the step, if ``sl.step`` is there."""
    step = None
    seen = 0
    for k, v in headers:
        if k == H_TYPE:
            seen |= 1
            if v != event_type_b:
                _mismatch(offset, H_TYPE, v, event_type_b)
        elif k == H_VERSION:
            seen |= 8
            if v != version:
                _mismatch(offset, H_VERSION, v, version)
        elif k == H_AGENT:
            seen |= 2
            if v != agent:
                _mismatch(offset, H_AGENT, v, agent)
        elif k == H_TO:
            seen |= 4
            if v != to:
                _mismatch(offset, H_TO, v, to)
        elif k == H_STEP:
            seen |= 8
            if v != step_of(event_id):
                _mismatch(offset, H_STEP, v, step_of(event_id))
            step = int(v)
    if seen:
        if not seen & 1:
            _mismatch(offset, H_TYPE, None, event_type_b)
        if not seen & 2:
            _mismatch(offset, H_AGENT, None, agent)
        if not seen & 4 and to is not None:
            _mismatch(offset, H_TO, None, to)
    return step


def _mismatch(offset: int, header: str, header_value: bytes | None, envelope_value: bytes | None) -> NoReturn:
    def text(b: bytes | None) -> str | None:
        return None if b is None else b.decode("utf-8", "backslashreplace")

    raise RoutingHeaderMismatch(offset=offset, header=header, header_value=text(header_value),
                                envelope_value=text(envelope_value))


# --- event ids ------------------------------------------------------------------------------

_STEP_MARK = "@"
_INDEX_MARK = "#"
_WALL_TIMER_MARK = "@timer"
_STEP_MARK_B = _STEP_MARK.encode()
_INDEX_MARK_B = _INDEX_MARK.encode()
_PATCH_MARK = "patch:"
_PATCH_MARK_B = _PATCH_MARK.encode()
PATCH_INDEX = -1
"""The index :func:`parse_step` gives a patch marker's id (``<agent>@<step>#patch:<id>``): not one of
the step's numbered outputs, so a ``ctx.patched()`` call added to a step shifts none of their ids."""
_DIGEST_MARK = "@state"
_DIGEST_MARK_B = _DIGEST_MARK.encode()
_STOP_MARK = "@stop"
AGENT_NAME_FORBIDDEN = "@#:/ *"
"""Characters an agent name may not hold besides the non-printable ones (:func:`name_problem`):
``@ # :`` and ``/`` would make its event ids ambiguous, and ``*`` is how ``swarmlog log`` shows a
broadcast's recipient."""

# --- names ----------------------------------------------------------------------------------
# The grammar of what the log names (docs/edges.md, "Names"). Names are read back into terminals
# (``swarmlog log``, ``show``, ``timeline``, ``replay``, ``check``), into Kafka resource names and
# into event ids, so they are checked where they are written: an agent's name when the agent is
# made, a recipient, a message kind and a timer name when a step or ``EventLog`` writes them, an
# explicit event id and a run id by ``EventLog``. What an older writer or another tool put in the
# log is escaped on its way to a terminal (:mod:`swarmlog.terminal`), never trusted to be clean.

NAME_MAX = 128
"""The most characters an agent name, a recipient, a message kind or a timer name may have."""
ID_MAX = 256
"""The most characters an event id or a run id may have."""


AGENT_NAME_RULE = (f"an agent name (and a recipient) is 1 to {NAME_MAX} printable characters, without whitespace or "
                   f"any of {AGENT_NAME_FORBIDDEN.strip()!r} (docs/edges.md, Names)")
LABEL_RULE = f"a message kind or a timer name is 1 to {NAME_MAX} printable characters (docs/edges.md, Names)"
ID_RULE = f"an event id or a run id is 1 to {ID_MAX} printable characters, without whitespace (docs/edges.md, Names)"


def name_problem(name: object, *, agent: bool = True, limit: int = NAME_MAX) -> str | None:
    """What is wrong with ``name``, or None if nothing.

    ``agent`` (agent names and recipients, event ids, run ids): 1 to ``limit`` printable characters,
    no whitespace; an agent name also none of :data:`AGENT_NAME_FORBIDDEN`. Otherwise (a message
    kind, a timer name): 1 to ``limit`` printable characters, spaces allowed. *Printable* is
    Python's ``str.isprintable``: no control characters (C0, DEL, C1: ESC, BEL, newline, CSI...),
    no format characters (bidirectional overrides, zero-width joiners), no line or paragraph
    separators, nothing unassigned; letters, digits, punctuation and symbols of any script are.
    """
    if type(name) is not str:
        return f"is a {type(name).__name__}, not a string"
    if not name:
        return "is empty"
    if len(name) > limit:
        return f"has {len(name)} characters, more than {limit}"
    if name.isprintable() and (not agent or " " not in name):
        return None
    for i, c in enumerate(name):
        if not c.isprintable() or (agent and c == " "):
            return f"holds {'a space' if c == ' ' else f'the non-printable character U+{ord(c):04X}'} at index {i}"
    return None  # pragma: no cover - isprintable() said otherwise


def agent_name_problem(name: object) -> str | None:
    """What is wrong with ``name`` as an agent's name (or a message's recipient), or None."""
    problem = name_problem(name)
    if problem is None and isinstance(name, str):
        bad = sorted({c for c in name if c in AGENT_NAME_FORBIDDEN})
        if bad:
            return (f"holds {' '.join(repr(c) for c in bad)} (none of {AGENT_NAME_FORBIDDEN.strip()!r}: they "
                    f"would make its event ids ambiguous, and '*' means a broadcast)")
    return problem


def id_problem(value: object, *, empty: bool = False) -> str | None:
    """What is wrong with ``value`` as an event id (or, ``empty`` allowed, a run id), or None."""
    if empty and value == "":
        return None
    return name_problem(value, limit=ID_MAX)


def output_id(agent: str, step: int, index: int) -> str:
    """The id of the ``index``-th output of ``agent``'s step at offset ``step``."""
    return f"{agent}{_STEP_MARK}{step}{_INDEX_MARK}{index}"


def output_id_prefix(agent: str, step: int) -> str:
    """What every output id of one step starts with."""
    return f"{agent}{_STEP_MARK}{step}{_INDEX_MARK}"


def patch_marker_id(agent: str, step: int, patch_id: str) -> str:
    """The id of the marker ``agent``'s step at offset ``step`` writes for ``ctx.patched(patch_id)``."""
    return f"{agent}{_STEP_MARK}{step}{_INDEX_MARK}{_PATCH_MARK}{patch_id}"


def wall_timer_id(agent: str, set_offset: int) -> str:
    """The id of a wall-clock timeout's firing: one per ``timer.set``, whichever life fires it."""
    return f"{agent}{_WALL_TIMER_MARK}{set_offset}"


def step_of(event_id: bytes) -> bytes | None:
    """The step of an ``agent@step#i`` id as the bytes of an ``sl.step`` header (None: no step);
    for a ``state.digest`` (``agent@state<step>``), the last step it digests."""
    _, _, tail = event_id.rpartition(_STEP_MARK_B)
    step, sep, index = tail.partition(_INDEX_MARK_B)
    if sep:
        return step if step.isdigit() and (index.isdigit() or index.startswith(_PATCH_MARK_B)) else None
    _, sep, last = event_id.rpartition(_DIGEST_MARK_B)
    return last if sep and last.isdigit() else None


def state_digest_id(agent: str, last_step: int) -> str:
    """The id of the ``state.digest`` record whose last digested step is ``last_step``: one per
    step, whichever life writes it."""
    return f"{agent}{_DIGEST_MARK}{last_step}"


def stop_digest_id(agent: str, position: int) -> str:
    """The id of the ``state.digest`` record an agent writes as it stops cleanly at ``position``."""
    return f"{agent}{_STOP_MARK}{position}"


def run_started_id(run_id: str) -> str:
    return f"run@{run_id}"


def run_continued_id(run_id: str) -> str:
    """The event id of a continued run's ``run.continued`` (its new topic's first record)."""
    return f"run@{run_id}:continued"


def run_moved_id(run_id: str) -> str:
    """The event id of the ``run.continued.to`` that ends a run's part on the topic it left."""
    return f"run@{run_id}:continued-to"


def run_seed_id(run_id: str, agent: str) -> str:
    """The event id of an agent's ``run.continued.seed``."""
    return f"run@{run_id}:seed:{agent}"


RUN_WRITER = "swarmlog"
"""The ``agent`` that writes ``run.started``."""
RUN_STARTER_CHANNEL = "@run-start"
"""The name the run's starter opens its transactional channel under: its transactional id is
``swarmlog.<topic>.@run-start``, which no agent's can be (``@`` is not allowed in agent names)."""


def writer_step(event_id: str) -> tuple[str, int] | None:
    """``agent@step#...`` -> (agent, step): the agent whose step wrote it, and that step; None for a
    wall-clock firing or an id of another grammar."""
    writer, mark, tail = event_id.rpartition(_STEP_MARK)
    step, sep, _ = tail.partition(_INDEX_MARK)
    if not mark or not sep or not step.isdigit():
        return None
    return writer, int(step)


def parse_step(event_id: str) -> tuple[int, int] | None:
    """``agent@step#i`` -> (step, i); a patch marker's ``agent@step#patch:<id>`` -> (step, :data:`PATCH_INDEX`);
    None for a wall-clock firing or an id of another grammar."""
    _, _, tail = event_id.rpartition(_STEP_MARK)
    step, sep, index = tail.partition(_INDEX_MARK)
    if not sep or not step.isdigit():
        return None
    if index.isdigit():
        return int(step), int(index)
    return (int(step), PATCH_INDEX) if index.startswith(_PATCH_MARK) else None


# --- Kafka resources of an agent ----------------------------------------------------------------


def agent_transactional_id(topic: str, agent: str) -> str:
    """The agent's stable ``transactional.id``: a new life fences every earlier one."""
    return f"swarmlog.{topic}.{agent}"


def agent_group(topic: str, agent: str) -> str:
    """The agent's consumer group: its committed offset says how far the live agent got."""
    return f"swarmlog.{topic}.{agent}"


def replay_group(topic: str) -> str:
    """The consumer group the replay Job reads as by default: its own, so a replay never touches an agent.

    Outside the agents' ``swarmlog.<topic>.`` prefix, so no agent name can ever collide with it.
    """
    return f"swarmlog-replay.{topic}"


# --- Kafka resources of the debugging tools ------------------------------------------------------


def snapshot_topic(topic: str) -> str:
    """Where the per-agent state snapshots of ``topic``'s log are kept: a topic of their own, so
    that the log itself holds only what the swarm did."""
    return f"{topic}.snapshots"


SIDE_TOPIC_SUFFIXES = (".snapshots",)
"""The endings of the topics swarmlog keeps beside a swarm's log (:func:`snapshot_topic`): not a
swarm's log themselves, so a sink mirroring every topic of a pattern leaves them out unless asked."""


def is_side_topic(name: str) -> bool:
    """Whether ``name`` is one of swarmlog's side topics, or one of Kafka's internal ones (``__...``)."""
    return name.startswith("__") or name.endswith(SIDE_TOPIC_SUFFIXES)


# --- Kafka resources of the sink ---------------------------------------------------------------


def sink_group(topic: str | None = None) -> str:
    """The consumer group the sink commits its position to, for Kafka's tools (advisory only: the
    position in Postgres is the truth). One topic's sink: ``swarmlog-sink.<topic>``; a sink of a
    pattern (``topic`` None): ``swarmlog-sink``, with one committed offset per topic it mirrors."""
    return "swarmlog-sink" if topic is None else f"swarmlog-sink.{topic}"


def copy_transactional_ids(topic: str) -> tuple[str, str]:
    """The two transactional ids that write a fork's offset-exact copy into ``topic``: one whose
    transactions commit (the copied events), one whose transactions abort (the gaps)."""
    return f"swarmlog.copy.{topic}.visible", f"swarmlog.copy.{topic}.gaps"
