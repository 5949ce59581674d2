"""Routing a message: the route read from the envelope with its headers checked, beside trusting the headers.

Every agent routes every message of its swarm's log (the first pass over the log, the live
loop, replay), so this is on the hot path of all of them. In one process, no Kafka, the same
``BENCH_ROUTE_EVENTS`` (200k) messages exactly as EventLog writes them (value, headers), the
repetitions interleaved:

* ``route.checked``: :meth:`swarmlog.schema.codec.Decoder.route` — the envelope's first fields
  read by hand, the ``sl.*`` headers checked against them (one list comparison in the common
  case). What the runtime, replay and the debugger route by.
* ``route.checked_step``: the same, for runtime outputs (an ``sl.step`` header, checked against
  the event id's step).
* ``route.headers_only`` (baseline): :func:`swarmlog.log.protocol.route` — the headers parsed and
  trusted, no look at the body. What they routed by before the check.
* ``route.full_decode``: :meth:`Decoder.decode` — the whole event decoded by fastavro: what
  checking the headers by decoding each message would have cost.

``ratio`` = events/s ÷ the baseline's: how much of the header-only rate the check keeps.
"""

from __future__ import annotations

from typing import Any

from swarmlog.log.protocol import H_STEP, Headers, route
from swarmlog.schema.codec import Decoder, Encoder
from swarmlog.schema.registry import SchemaRegistry
from swarmlog.settings import Settings

from .common import EVENT_TYPE, RUN_ID, Run, encode_stream, env_int, interleave, log, make_stream, reps, row, timed

EVENTS = env_int("BENCH_ROUTE_EVENTS", 200_000)


class _Message:
    """What a reader hands the router: confluent-kafka's Message surface (value, headers, offset)."""

    __slots__ = ("_value", "_headers", "_offset")

    def __init__(self, value: bytes, headers: Headers, offset: int) -> None:
        self._value, self._headers, self._offset = value, headers, offset

    def value(self) -> bytes:
        return self._value

    def headers(self) -> Headers:
        return self._headers

    def offset(self) -> int:
        return self._offset


def _outputs(registry: SchemaRegistry, n: int) -> list[_Message]:
    """Runtime outputs: event ids ``agent@step#i`` and an ``sl.step`` header, as an agent writes them."""
    enc = Encoder(registry.latest(EVENT_TYPE))
    agents = [f"agent-{i}" for i in range(10)]
    out = []
    for i in range(n):
        agent, to = agents[i % 10], agents[(i + 1) % 10]
        step = 2 * i + 1
        payload = enc.schema.validate_payload({"kind": "hop", "body": "x" * 120})
        value = enc.encode({"event_id": f"{agent}@{step}#0", "run_id": RUN_ID, "agent_id": agent,
                            "event_type": EVENT_TYPE, "schema_version": enc.schema.version, "to": to,
                            "causes": (step,), "payload": payload})
        headers = [*enc.headers(agent.encode(), to.encode()), (H_STEP, str(step).encode())]
        out.append(_Message(value, headers, 2 * i + 2))
    return out


def run(s: Settings, registry: SchemaRegistry) -> list[dict[str, Any]]:
    log(f"encoding {EVENTS:,} messages")
    plain = [_Message(v, h, i) for i, (v, _, h) in enumerate(encode_stream(registry, make_stream(registry), EVENTS))]
    outputs = _outputs(registry, EVENTS)
    decoder = Decoder(registry)
    checked, checked_step = Run("route.checked", EVENTS), Run("route.checked_step", EVENTS)
    headers_only, full = Run("route.headers_only", EVENTS), Run("route.full_decode", EVENTS)

    def checked_rep(_: int) -> None:
        r = decoder.route
        checked.add(timed(lambda: [r(m) for m in plain])[0])

    def checked_step_rep(_: int) -> None:
        r = decoder.route
        seconds, routes = timed(lambda: [r(m) for m in outputs])
        assert routes[-1].step == 2 * EVENTS - 1, "the step header was not read"
        checked_step.add(seconds)

    def headers_rep(_: int) -> None:
        headers_only.add(timed(lambda: [route(m.headers()) for m in plain])[0])

    def full_rep(_: int) -> None:
        d = decoder.decode
        full.add(timed(lambda: [d(m.value(), m.offset()) for m in plain])[0])

    n = reps(5)
    log(f"routing {EVENTS:,} messages four ways, {n} repetitions interleaved")
    interleave(n, headers_rep, checked_rep, checked_step_rep, full_rep)
    return [row(checked, headers_only, headline=True), row(checked_step, headers_only), row(full, headers_only),
            row(headers_only)]
