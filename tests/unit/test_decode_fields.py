"""``Decoder.decode_fields`` (the sink's decoder: the envelope read by hand, fastavro on the
payload alone) gives what ``decode_checked`` gives, refuses what it refuses, and is never laxer."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from swarmlog.errors import RoutingHeaderMismatch, SwarmlogError, UndecodableMessage
from swarmlog.log.memory import MemoryMessage
from swarmlog.log.protocol import H_AGENT, H_TO
from swarmlog.schema.codec import Decoder, Encoder

from ..conftest import examples

names = st.text(min_size=1, max_size=90)  # past 63 bytes a string's length takes two bytes
causes = st.lists(st.integers(min_value=-(2 ** 63), max_value=2 ** 63 - 1), max_size=5)


def _fields(writer, rec):
    to = rec["to"]
    return (writer, rec["event_id"].encode(), rec["run_id"].encode(), rec["agent_id"].encode(),
            None if to is None else to.encode(), rec["causes"], rec["payload"])


def _outcome(fn, msg):
    try:
        return fn(msg)
    except SwarmlogError as exc:
        return type(exc)


def _message(registry, event_type, version, payload, *, event_id="e-1", run="run", agent="alice", to="bob",
             cs=(3, 17), offset=7, headers=True):
    enc = Encoder(registry.get(event_type, version))
    value = enc.encode_event(event_id, run, agent, to, list(cs), payload)
    hs = enc.headers(agent.encode(), None if to is None else to.encode()) if headers else []
    return MemoryMessage(offset, value, agent.encode(), hs, 0)


WRITERS = [  # (type, version, payload): the newest, one resolved by Avro alone, one through an upcaster
    ("agent.message", 3, {"kind": "k", "body": "b", "urgency": "high"}),
    ("run.started", 1, {"swarm": "s", "seed": 5, "code_version": "c", "agents": ["a", "b"]}),
    ("agent.message", 2, {"kind": "k", "body": "b", "priority": 10}),
    ("agent.message", 1, {"kind": "k", "body": "b"}),
]


@pytest.mark.parametrize(("event_type", "version", "payload"), WRITERS)
@settings(max_examples=examples(60), deadline=None)
@given(event_id=names, run=names, agent=names, to=st.none() | names, cs=causes)
def test_decode_fields_gives_what_decode_checked_gives(registry, event_type, version, payload, event_id, run, agent,
                                                       to, cs):
    msg = _message(registry, event_type, version, payload, event_id=event_id, run=run, agent=agent, to=to, cs=cs)
    assert Decoder(registry).decode_fields(msg) == _fields(*Decoder(registry).decode_checked(msg))


@pytest.mark.parametrize(("event_type", "version", "payload"), WRITERS[:2])
def test_decode_fields_is_never_laxer_than_decode_checked_on_damaged_bytes(registry, event_type, version, payload):
    # Every truncation and every single-byte change of a message: where decode_fields gives
    # fields, decode_checked gives the same ones; where it refuses, with a typed error.
    good = _message(registry, event_type, version, payload, event_id="x" * 70, to="bob")
    value = good.value()
    damaged = [value[:n] for n in range(len(value))]
    damaged += [value[:i] + bytes([b]) + value[i + 1:] for i in range(2, len(value)) for b in (0x00, 0x7F, 0xFF)]
    fast, whole = Decoder(registry), Decoder(registry)
    for v in damaged:
        msg = MemoryMessage(7, v, None, [], 0)
        got = _outcome(fast.decode_fields, msg)
        if isinstance(got, type):
            assert issubclass(got, SwarmlogError)
        else:
            assert got == _outcome(lambda m: _fields(*whole.decode_checked(m)), msg), v


def test_invalid_utf8_in_any_envelope_string_is_undecodable(registry):
    d = Decoder(registry)
    for field in ("event_id", "run", "agent", "to", "event_type"):
        strings = {"event_id": "e-1", "run": "run", "agent": "alice", "to": "bob", field: "\x01" + field}
        enc = Encoder(registry.latest("agent.message"))
        value = enc.encode_event(strings["event_id"], strings["run"], strings["agent"], strings["to"], [],
                                 {"kind": "k", "body": "b"})
        if field == "event_type":  # written from the schema: damage its first byte in place
            value = value.replace(b"agent.message", b"\xffgent.message", 1)
        else:
            value = value.replace(b"\x01" + field.encode(), b"\xff" + field.encode(), 1)
        assert b"\xff" in value
        for decode in (d.decode_fields, d.decode_checked):
            with pytest.raises(UndecodableMessage):
                decode(MemoryMessage(1, value, None, [], 0))


def test_decode_fields_refuses_a_routing_header_that_lies(registry):
    msg = _message(registry, "agent.message", 3, {"kind": "k", "body": "b"})
    for key, lie in ((H_TO, b"mallory"), (H_AGENT, b"mallory")):
        headers = [(k, lie if k == key else v) for k, v in msg.headers()]
        with pytest.raises(RoutingHeaderMismatch):
            Decoder(registry).decode_fields(MemoryMessage(7, msg.value(), None, headers, 0))


def test_decode_fields_of_a_message_without_headers_is_its_envelope(registry):
    msg = _message(registry, "agent.message", 3, {"kind": "k", "body": "b"}, headers=False)
    assert Decoder(registry).decode_fields(msg) == _fields(*Decoder(registry).decode_checked(msg))
