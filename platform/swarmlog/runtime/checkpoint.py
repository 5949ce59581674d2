"""An agent's fold, captured at an offset and restored later: the ground snapshots stand on.

Public inside the package (the debugger's snapshots and cursors). An
:class:`~swarmlog.runtime.engine.AgentCore` that has read the log up to offset N is more
than ``agent.state``: its timers (a logical timer counts events seen, a wall-clock one
carries its due time), the outputs of replayed steps still waiting for their recorded
counterparts, how many events and steps it has seen, the run's seed. :func:`capture` writes
all of that as plain JSON-able data and :func:`restore` puts it back into a fresh core, so
that folding the rest of the log from there gives exactly what folding the whole log gives
(``tests/unit/ test_debug_engine.py::test_snapshot_plus_tail_equals_full_replay``).

``FOLD_FIELDS`` and ``WIRING_FIELDS`` together name every attribute of an
``AgentCore``; a unit test fails when the core gains one that neither names, so a new
piece of fold state cannot be left out of snapshots silently.

Agent state goes through a tagged JSON codec (:func:`encode_value`, :func:`decode_value`):
plain JSON keeps dict order, and tuples, sets, bytes and dicts with non-string keys come
back as what they were, so a handler that keeps a set finds a set after a restore.
"""

from __future__ import annotations

from typing import Any

from ..context import Output
from ..errors import CheckpointUnreadable, StateNotCapturable
from ..events import Event
from ..log.hashing import state_hash
from . import interpreter
from .outcomes import Divergence, FailedStep
from .timers import Timer

__all__ = [
    "CHECKPOINT_FORMAT",
    "FOLD_FIELDS",
    "WIRING_FIELDS",
    "CheckpointUnreadable",
    "StateNotCapturable",
    "capture",
    "clean",
    "copy_state",
    "decode_value",
    "encode_value",
    "restore",
]

CHECKPOINT_FORMAT = 1
"""Bump when what :func:`capture` writes changes meaning; older captures are then refused."""

FOLD_FIELDS = frozenset({
    "divergences", "pending", "timers", "events_seen", "position", "steps", "last_recorded_step", "unverified",
    "stopped", "stopped_at", "run_pin", "states_checked", "state_mismatches", "state_diverged_at", "failures",
    "checked_from", "watch",
})
"""Core attributes that are the fold's state (beside ``agent.state`` and the ``ctx``'s run)."""
WIRING_FIELDS = frozenset({
    "agent", "name", "decoder", "history", "ctx", "live_sink", "verify_sink", "strict", "on_divergence",
    "_handled", "_raised", "_held", "step_latency", "tracer", "recorder", "live_states", "_marks", "_decode_error",
})
"""Core attributes that are how it is wired (or derived from the wiring), set up anew by whoever builds it.
``history`` is what the agent recorded, read from the log from the capture's position on (:mod:`.history`);
``_raised`` and ``_held`` are only ever set by a strict fold; ``step_latency`` is the live worker's histogram
and ``tracer`` its spans (what the process observes, not what the fold is); ``recorder`` holds a live agent's
digests until its transaction commits (None in a replay, which snapshots are of); ``live_states`` is where a
replay may ask for the live run's states; ``_marks`` says whether the core marks the offsets it reads itself, and
``_decode_error`` is the last message's reason not to decode, read at once. (Of ``watch``, the offsets read —
its ``presence`` — are not kept: a fold from a snapshot knows holes only from the snapshot on.)"""


# --- the tagged JSON codec -------------------------------------------------------------------

_TAG = "$sl:"


def encode_value(value: Any, *, agent: str = "", path: str = "") -> Any:
    """``value`` as plain JSON data that :func:`decode_value` turns back into an equal value of the same types."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        return [encode_value(v, agent=agent, path=f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        if all(isinstance(k, str) and not k.startswith(_TAG) for k in value):
            return {k: encode_value(v, agent=agent, path=f"{path}[{k!r}]") for k, v in value.items()}
        return {_TAG + "dict": [[encode_value(k, agent=agent, path=path), encode_value(v, agent=agent,
                                                                                      path=f"{path}[{k!r}]")]
                                for k, v in value.items()]}
    if isinstance(value, tuple):
        return {_TAG + "tuple": [encode_value(v, agent=agent, path=f"{path}[{i}]") for i, v in enumerate(value)]}
    if isinstance(value, (set, frozenset)):
        tag = "frozenset" if isinstance(value, frozenset) else "set"
        return {_TAG + tag: [encode_value(v, agent=agent, path=f"{path}{{}}") for v in value]}
    if isinstance(value, (bytes, bytearray)):
        return {_TAG + "bytes": bytes(value).hex()}
    raise StateNotCapturable(agent=agent, path=path, type_name=type(value).__name__)


def decode_value(data: Any) -> Any:
    if isinstance(data, list):
        return [decode_value(v) for v in data]
    if isinstance(data, dict):
        if len(data) == 1:
            (key, inner), = data.items()
            if key.startswith(_TAG):
                tag = key[len(_TAG):]
                if tag == "dict":
                    return {decode_value(k): decode_value(v) for k, v in inner}
                if tag == "tuple":
                    return tuple(decode_value(v) for v in inner)
                if tag == "set":
                    return {decode_value(v) for v in inner}
                if tag == "frozenset":
                    return frozenset(decode_value(v) for v in inner)
                if tag == "bytes":
                    return bytes.fromhex(inner)
        return {k: decode_value(v) for k, v in data.items()}
    return data


def copy_state(state: Any, *, agent: str = "") -> Any:
    """A deep copy of an agent's state through the codec: what a snapshot of it would restore."""
    return decode_value(encode_value(state, agent=agent))


# --- capture and restore ---------------------------------------------------------------------


Core = Any
"""An :class:`~swarmlog.runtime.engine.AgentCore`, by name only: the engine restores a continued run's seeded
fold through this module (:mod:`.continued`), so this module does not import the engine."""


def clean(core: Core) -> bool:
    """Whether ``core``'s fold is one a snapshot may keep: nothing diverged, nothing stopped it, and
    every step so far could be checked against the log."""
    return not core.divergences and not core.stopped and core.unverified is None


def capture(core: Core) -> dict[str, Any]:
    """Everything folding has built up in ``core``, as JSON-able data."""
    ctx = core.ctx
    return {
        "format": CHECKPOINT_FORMAT,
        "agent": core.name,
        "state": encode_value(core.agent.state, agent=core.name),
        "state_hash": state_hash(core.agent.state),
        "position": core.position,
        "events_seen": core.events_seen,
        "steps": core.steps,
        "last_recorded_step": core.last_recorded_step,
        "unverified": core.unverified,
        "stopped": core.stopped,
        "stopped_at": core.stopped_at,
        "run": [ctx.run_id, ctx.seed] if ctx.seed is not None else None,
        "hash": list(core.run_pin) if core.run_pin is not None else None,
        "timers": [[t.name, t.set_offset, t.due_count, t.due_wall_ms, t.firing] for t in core.timers.values()],
        "pending": [[step, [[o.event_id, o.event_type, encode_value(o.payload), o.to, list(o.causes)]
                            for o in outs.values()]] for step, outs in core.pending.items()],
        "divergences": [d.to_json() for d in core.divergences],
        "states": [core.states_checked, core.state_mismatches, core.state_diverged_at],
        # Failed steps not retried yet: a step.retried past the capture runs their input again.
        "failures": [[f.offset, f.error_type, f.message, [*f.input[:-2], encode_value(f.input.payload),
                                                           f.input.timestamp_ms]]
                     for f in core.failures.values()],
        "checked_from": core.checked_from,
        "watch": core.watch.capture(),
    }


def restore(core: Core, doc: dict[str, Any]) -> None:
    """Put a :func:`capture` of the same agent back into ``core`` (freshly built, nothing folded yet)."""
    if doc.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointUnreadable(agent=core.name, reason=f"format {doc.get('format')!r}, this swarmlog reads "
                                                           f"format {CHECKPOINT_FORMAT}")
    if doc.get("agent") != core.name:
        raise CheckpointUnreadable(agent=core.name, reason=f"it is agent {doc.get('agent')!r}'s")
    try:
        state = decode_value(doc["state"])
        if state_hash(state) != doc["state_hash"]:
            raise CheckpointUnreadable(agent=core.name, reason="its state does not hash to the hash beside it")
        core.agent.state = state
        core.position = doc["position"]
        core.events_seen = doc["events_seen"]
        core.steps = doc["steps"]
        core.last_recorded_step = doc["last_recorded_step"]
        core.unverified = doc["unverified"]
        core.stopped = doc["stopped"]
        core.stopped_at = doc.get("stopped_at")
        if doc.get("hash") is not None:
            # What folding run.started would have checked: the fold goes on in this interpreter.
            core.run_pin = (doc["hash"][0], doc["hash"][1])
            interpreter.require(run_id=doc["run"][0] if doc["run"] else "", seed=core.run_pin[0],
                                algorithm=core.run_pin[1])
        if doc["run"] is not None:
            core.ctx.set_run(run_id=doc["run"][0], seed=doc["run"][1])
        core.timers = {name: Timer(name=name, set_offset=set_offset, due_count=due_count, due_wall_ms=due_wall_ms,
                                   firing=firing)
                       for name, set_offset, due_count, due_wall_ms, firing in doc["timers"]}
        core.pending = {step: {event_id: Output(event_id, event_type, decode_value(payload), to, causes)
                               for event_id, event_type, payload, to, causes in outs}
                        for step, outs in doc["pending"]}
        core.divergences = [Divergence(**d) for d in doc["divergences"]]
        # Captures made before state digests existed have no "states": nothing was checked then.
        core.states_checked, core.state_mismatches, core.state_diverged_at = doc.get("states", (0, 0, None))
        core.failures = {offset: FailedStep(offset=offset, agent=core.name, error_type=error_type, message=message,
                                            input=Event._make([*event[:-2], decode_value(event[-2]), event[-1]]))
                         for offset, error_type, message, event in doc.get("failures", ())}
        # A live agent's checkpoint (.resume) says from where on its own outputs are records to check.
        core.checked_from = int(doc.get("checked_from", 0))
        # Captures made before issue 28 have no "watch": the ids taken before them are not known.
        core.watch.restore(doc.get("watch"))
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointUnreadable(agent=core.name, reason=f"malformed ({exc!r})") from None
