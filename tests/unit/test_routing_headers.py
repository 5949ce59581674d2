"""Routing headers are checked against the envelope wherever they steer behaviour (in memory).

A header that says another recipient than the body used to route a message to nobody, silently.
Now the route comes from the envelope itself and a header that disagrees is a named error: in the
runtime and in replay it stops there, `check causality` reports it (the sink dead-letters it:
tests/integration/test_sink.py and tests/faults/test_bad_inputs.py).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from swarmlog import Agent, Swarm, on, on_message
from swarmlog.debug import Session
from swarmlog.errors import RoutingHeaderMismatch
from swarmlog.log.append import EventLog
from swarmlog.log.memory import MemoryMessage
from swarmlog.log.protocol import H_AGENT, H_STEP, H_TO, H_TYPE, H_VERSION, Route
from swarmlog.replaying import replay_swarm
from swarmlog.replaying.causality import check_causality
from swarmlog.runtime import run_agents, start_run
from swarmlog.schema.codec import Decoder, Encoder

from ..conftest import examples


def _message(registry, *, headers=None, agent="alice", to="bob", event_id="alice@7#0", offset=42,
             event_type="agent.message"):
    enc = Encoder(registry.latest(event_type))
    value = enc.encode_event(event_id, "run", agent, to, [1], {"kind": "k", "body": "b"})
    if headers is None:
        headers = enc.headers(agent.encode(), None if to is None else to.encode()) + [(H_STEP, b"7")]
    return MemoryMessage(offset, value, agent.encode(), headers, 0)


def _replace(headers, key, value):
    out = [(k, v) for k, v in headers if k != key]
    return out if value is None else out + [(key, value)]


def test_the_route_is_the_envelopes_and_headers_that_agree_pass(registry):
    m = _message(registry)
    assert Decoder(registry).route(m) == Route("agent.message", "alice", "bob", 7)
    writer, rec = Decoder(registry).decode_checked(m)
    assert (writer.event_type, rec["to"]) == ("agent.message", "bob")


@pytest.mark.parametrize(("header", "value", "envelope"), [
    (H_TO, b"carol", "bob"),            # the reported case: handled by nobody
    (H_TO, None, "bob"),                # absent sl.to means a broadcast; the body names bob
    (H_AGENT, b"mallory", "alice"),
    (H_TYPE, b"timer.fired", "agent.message"),
    (H_VERSION, b"1", "3"),
    (H_STEP, b"8", "7"),                # would move where alice's history ends
])
def test_a_header_that_disagrees_with_the_envelope_is_a_named_error(registry, header, value, envelope):
    good = _message(registry).headers()
    m = _message(registry, headers=_replace(good, header, value))
    for check in (Decoder(registry).route, Decoder(registry).decode_checked):
        with pytest.raises(RoutingHeaderMismatch) as err:
            check(m)
        assert (err.value.offset, err.value.header, err.value.envelope_value) == (42, header, envelope)
        assert err.value.header_value == (None if value is None else value.decode())


def test_a_broadcast_with_an_sl_to_header_is_a_mismatch_too(registry):
    m = _message(registry, to=None, headers=[(H_TYPE, b"agent.message"), (H_VERSION, b"3"), (H_AGENT, b"alice"),
                                             (H_TO, b"bob")])
    with pytest.raises(RoutingHeaderMismatch) as err:
        Decoder(registry).route(m)
    assert (err.value.header, err.value.envelope_value) == (H_TO, None)


def test_a_message_without_routing_headers_is_routed_by_its_envelope(registry):
    m = _message(registry, headers=[("trace-id", b"x")])
    assert Decoder(registry).route(m) == Route("agent.message", "alice", "bob", None)


@pytest.mark.parametrize("value", [b"", b"garbage", b"\xc3\x01" + b"\xee" * 8 + b"unknown", b"\xc3\x01\x12"])
def test_what_is_not_an_event_keeps_its_header_route_and_fails_where_it_is_decoded(registry, value):
    m = MemoryMessage(3, value, None, [(H_TYPE, b"agent.message"), (H_AGENT, b"a"), (H_TO, b"b")], 0)
    assert Decoder(registry).route(m) == Route("agent.message", "a", "b", None)


def test_a_truncated_envelope_is_not_read_past_its_end(registry):
    whole = _message(registry).value()
    envelope_end = whole.index(b"bob") + 3  # `to` is the envelope's last field read
    for cut in range(10, envelope_end):  # every field cut, the `to` string included
        m = MemoryMessage(3, whole[:cut], None, [(H_TYPE, b"agent.message"), (H_AGENT, b"a")], 0)
        assert Decoder(registry).route(m).agent == "a"  # the header route: decoding fails later
    whole_envelope = MemoryMessage(3, whole[:envelope_end], None, None, 0)
    assert Decoder(registry).route(whole_envelope).to == "bob"


_names = st.text(min_size=0, max_size=80)


@settings(max_examples=examples(300), deadline=None)
@given(event_id=_names, agent=_names, to=st.none() | _names, run=_names)
def test_the_hand_read_envelope_route_equals_the_decoded_one(registry, event_id, agent, to, run):
    enc = Encoder(registry.latest("agent.message"))
    value = enc.encode_event(event_id, run, agent, to, [1, 2], {"kind": "k", "body": "b"})
    m = MemoryMessage(5, value, None, None, 0)
    _, rec = Decoder(registry).decode(value, 5)
    assert Decoder(registry).route(m) == Route("agent.message", rec["agent_id"], rec["to"], None)


# --- where headers steer: the runtime, replay, the causality check ---------------------------------


class _Pinger(Agent):
    @on("run.started")
    def start(self, ctx, event):
        ctx.send("bob", "ping", "1")


class _Bob(Agent):
    def initial_state(self):
        return {"pings": 0}

    @on_message("ping")
    def ping(self, ctx, event):
        self.state["pings"] += 1


_swarm = Swarm(name="routing", agents=lambda: [_Pinger("alice"), _Bob("bob"), _Bob("carol")], code_version="1")


def _lying_log(backend, run_settings, registry) -> int:
    start_run(settings=run_settings, swarm=_swarm, run_id="r", seed=1, backend=backend)
    with EventLog(settings=run_settings, registry=registry, backend=backend, run_id="r") as log:
        enc = Encoder(registry.latest("agent.message"))
        value = enc.encode_event("op-1", "r", "operator", "bob", [], {"kind": "ping", "body": "2"})
        log.produce_raw(value, key=b"operator", headers=enc.headers(b"operator", b"carol"))  # body: bob
        log.produce_raw(b"not an event at all")
        return log.flush()[0]


def test_an_agent_meeting_a_lying_header_stops_with_the_named_error(backend, run_settings, registry):
    lie = _lying_log(backend, run_settings, registry)
    with pytest.raises(RoutingHeaderMismatch) as err:
        run_agents(settings=run_settings, swarm=_swarm, until_quiet=0.3, backend=backend)
    assert (err.value.offset, err.value.header, err.value.header_value, err.value.envelope_value) == \
        (lie, H_TO, "carol", "bob")


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_replaying_a_log_with_a_lying_header_stops_with_the_named_error(backend, run_settings, registry, workers):
    # Split across processes, each checks a share of the headers and trusts the rest: whichever
    # checks the lying one fails the replay with it.
    lie = _lying_log(backend, run_settings, registry)
    with pytest.raises(RoutingHeaderMismatch) as err:
        replay_swarm(settings=run_settings, swarm=_swarm, registry=registry, backend=backend, workers=workers)
    assert err.value.offset == lie


def test_the_debugger_opens_a_log_with_a_lying_header_routing_every_message_by_its_envelope(backend, run_settings,
                                                                                          registry):
    # A replay refuses the log, naming the lie; the debugger, there to look at such a log, reads it, and
    # the header steers nothing: the message goes where its envelope says.
    lie = _lying_log(backend, run_settings, registry)
    session = Session(settings=run_settings, swarm=_swarm, registry=registry, backend=backend, snapshots=False)
    states = session.states(at=lie + 2)
    assert states["bob"].state == {"pings": 1} and states["carol"].state == {"pings": 0}


def test_check_causality_names_lying_headers_and_unreadable_messages(backend, run_settings, registry):
    lie = _lying_log(backend, run_settings, registry)
    count, violations = check_causality(settings=run_settings, registry=registry, backend=backend)
    assert [(v.offset, v.rule) for v in violations] == [(lie, "header_mismatch"), (lie + 1, "unreadable")]
    assert "carol" in violations[0].detail and "Avro single-object header" in violations[1].detail
    assert count == 2  # run.started and the lying (readable) message
