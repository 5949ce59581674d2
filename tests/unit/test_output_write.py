"""A handler's output is written with the guard's hook off, and runs none of the handler's code.

``ctx.send`` / ``emit`` / ``timer`` validate what the handler handed over under the hook, then
write it — encode, send in the step's transaction, or on replay check it against the record —
as swarmlog's own recorded I/O, with the hook off (it was about fifty hooked calls of every ring
step). That is safe only because what is written is plain data: strict validation rebuilds the
payload from exact builtins, and the recipient and event type are made exact strings, so no
method of the handler's own types can run unguarded. The hook is back on for the rest of the step.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from swarmlog import Agent, on_message
from swarmlog.guard import ForbiddenCall, _hook
from swarmlog.log.memory import MemoryMessage
from swarmlog.log.protocol import H_TO, H_TYPE, MESSAGE
from swarmlog.runtime.engine import AgentCore
from swarmlog.runtime.history import NoHistory
from swarmlog.runtime.sink import LiveSink
from swarmlog.schema.codec import Decoder, Encoder

# Every test here runs under each of the guard's profile hooks, the C one and the Python one.
pytestmark = pytest.mark.usefixtures("guard_hook")

CALLS: list[str] = []


class _Tricky(str):
    """A str whose methods are the handler's own code, reading the clock."""

    def encode(self, *a: Any, **k: Any) -> bytes:
        CALLS.append("encode")
        time.time()
        return str.encode(self, *a, **k)

    def __hash__(self) -> int:
        CALLS.append("hash")
        time.time()
        return str.__hash__(self)

    def __eq__(self, other: object) -> bool:
        CALLS.append("eq")
        time.time()
        return str.__eq__(self, other)


class _Channel:
    def __init__(self) -> None:
        self.sent: list[tuple[bytes, list[tuple[str, bytes]]]] = []
        self.hooked_at_send: list[bool] = []

    def begin(self) -> None:
        pass

    def send(self, value: bytes, key: bytes | None, headers: list[tuple[str, bytes]]) -> None:
        self.hooked_at_send.append(_hook.getprofile() is not None)
        self.sent.append((value, list(headers)))


class _Sender(Agent):
    @on_message("hop")
    def hop(self, ctx: Any, event: Any) -> None:
        ctx.send(_Tricky("b"), _Tricky("hop"), _Tricky("body"))
        if event.payload["body"] == "then the clock":
            time.time()  # after the write: the hook must be back on


def _step(registry: Any, body: str, channel: _Channel | None = None,
          agent: type[Agent] = _Sender) -> tuple[_Channel, Decoder]:
    channel = channel or _Channel()
    decoder = Decoder(registry)
    sink = LiveSink(channel=channel, registry=registry, agent="a")  # type: ignore[arg-type]
    core = AgentCore(agent=agent("a"), decoder=decoder, history=NoHistory(), live_sink=sink)
    sink.core = core
    core.ctx.set_run(run_id="r", seed=1)
    enc = Encoder(registry.latest(MESSAGE))
    value = enc.encode_event("z@0#0", "r", "z", "a", [0], {"kind": "hop", "body": body})
    m = MemoryMessage(0, value, b"z", enc.headers(b"z", b"a"), 0)
    core.process(m, decoder.envelope_route(m))
    return channel, decoder


def _types(channel: _Channel) -> list[bytes]:
    return [dict(h)[H_TYPE] for _, h in channel.sent]


def test_an_output_is_written_with_the_hook_off_and_none_of_the_handlers_methods_run(registry):
    CALLS.clear()
    channel, decoder = _step(registry, "plain")
    assert _types(channel) == [MESSAGE.encode()]  # the step succeeded: nothing was refused
    assert channel.hooked_at_send == [False]
    assert CALLS == []  # neither validation nor the write called the handler's str methods
    value, headers = channel.sent[0]
    assert dict(headers)[H_TO] == b"b"
    _, record = decoder.decode(value, 1)
    assert record["payload"]["kind"] == "hop" and record["payload"]["body"] == "body"
    assert type(record["to"]) is str


def test_the_hook_is_back_on_after_the_write(registry):
    channel = _Channel()
    with pytest.raises(ForbiddenCall) as refused:
        _step(registry, "then the clock", channel)
    assert refused.value.call == "time.time"
    assert _types(channel) == [MESSAGE.encode()] and channel.hooked_at_send == [False]  # written, unhooked


class _TrickyType(Agent):
    @on_message("hop")
    def hop(self, ctx: Any, event: Any) -> None:
        ctx.emit(_Tricky(MESSAGE), {"kind": "hop", "body": "x"}, to="b")


def test_the_schema_lookup_of_a_handlers_own_event_type_runs_under_the_hook(registry):
    # The event type's schema is looked up by subscript (no call for the hook), but the handler's
    # own str subclass still hashes under the hook: its clock read is refused, nothing is written.
    channel = _Channel()
    CALLS.clear()
    with pytest.raises(ForbiddenCall) as refused:
        _step(registry, "b", channel, agent=_TrickyType)
    assert refused.value.call == "time.time"
    assert CALLS[:1] == ["hash"] and channel.sent == []
