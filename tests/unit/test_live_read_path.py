"""What a live agent pays for the messages it reads (in memory).

Every agent of a swarm reads every message of its topic and acts on few: the live path routes
each by its envelope alone (no header read, so no header can steer it), and an agent's own
output of a live step, read back, is not decoded (its id says all it changes). What the agent
must still see it still decodes: its timers, and every own output of a step it rebuilds.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from swarmlog import Agent, on_message
from swarmlog.log.memory import MemoryMessage
from swarmlog.log.protocol import H_STEP, H_TO, MESSAGE, Route
from swarmlog.runtime.engine import AgentCore
from swarmlog.runtime.history import NoHistory
from swarmlog.runtime.sink import LiveSink
from swarmlog.schema.codec import Decoder, Encoder

from ..conftest import examples


class _Channel:
    """Takes the live sink's sends, to be read back as the log would serve them."""

    def __init__(self) -> None:
        self.sent: list[tuple[bytes, bytes | None, list[tuple[str, bytes]]]] = []

    def begin(self) -> None:
        pass

    def send(self, value: bytes, key: bytes | None, headers: list[tuple[str, bytes]]) -> None:
        self.sent.append((value, key, list(headers)))


class _CountingDecoder(Decoder):
    def __init__(self, registry: Any) -> None:
        super().__init__(registry)
        self.decoded: list[int | None] = []

    def decode(self, value: bytes | None, offset: int | None = None) -> Any:
        self.decoded.append(offset)
        return super().decode(value, offset)


class _Relay(Agent):
    def initial_state(self) -> dict[str, Any]:
        return {"seen": 0}

    @on_message("hop")
    def hop(self, ctx: Any, event: Any) -> None:
        self.state["seen"] += 1
        ctx.send("b", "hop", event.payload["body"])
        if self.state["seen"] == 1:
            ctx.timer("nudge", after_events=1000)


def _live_core(registry: Any, *, last_step: int = -1) -> tuple[AgentCore, _Channel, _CountingDecoder]:
    channel = _Channel()
    decoder = _CountingDecoder(registry)
    sink = LiveSink(channel=channel, registry=registry, agent="a")  # type: ignore[arg-type]
    history = NoHistory()
    history.last_step = last_step  # a rebuilding agent's: steps up to it are history
    core = AgentCore(agent=_Relay("a"), decoder=decoder, history=history, live_sink=sink, digest_every=1)
    sink.core = core
    core.ctx.set_run(run_id="r", seed=1)
    return core, channel, decoder


def _hop_to_a(registry: Any, offset: int) -> MemoryMessage:
    enc = Encoder(registry.latest(MESSAGE))
    value = enc.encode_event(f"z@{offset}#0", "r", "z", "a", [offset], {"kind": "hop", "body": str(offset)})
    return MemoryMessage(offset, value, b"z", enc.headers(b"z", b"a"), 0)


def _fold(core: AgentCore, msgs: list[MemoryMessage]) -> None:
    for m in msgs:
        core.process(m, core.decoder.envelope_route(m))


def test_a_live_steps_own_output_read_back_is_not_decoded_but_its_timer_is(registry):
    core, channel, decoder = _live_core(registry)
    _fold(core, [_hop_to_a(registry, 0)])  # one step: a hop to b and a timer.set
    assert len(channel.sent) == 2
    back = [MemoryMessage(1 + i, v, k, h, 0) for i, (v, k, h) in enumerate(channel.sent)]
    decoder.decoded.clear()
    _fold(core, back)
    assert decoder.decoded == [2]  # the timer.set only: the hop's own copy was not decoded
    assert core.last_recorded_step == 0
    assert list(core.timers) == ["nudge"] and core.timers["nudge"].set_offset == 2
    assert core.position == 3 and core.events_seen == 3


def test_a_rebuilt_steps_own_output_is_still_decoded_and_checked(registry):
    # The log already holds this agent's outputs for step 0: the step is history, replayed and checked.
    live, channel, _ = _live_core(registry)
    _fold(live, [_hop_to_a(registry, 0)])
    rebuilt, _, decoder = _live_core(registry, last_step=0)
    _fold(rebuilt, [_hop_to_a(registry, 0)])
    assert rebuilt.pending  # the replayed step's outputs wait for the recorded ones
    decoder.decoded.clear()
    _fold(rebuilt, [MemoryMessage(1 + i, v, k, h, 0) for i, (v, k, h) in enumerate(channel.sent)])
    assert decoder.decoded == [1, 2] and not rebuilt.pending and not rebuilt.divergences


def test_the_live_route_goes_by_the_envelope_whatever_a_header_says(registry):
    core, channel, _ = _live_core(registry)
    m = _hop_to_a(registry, 0)
    lying = MemoryMessage(0, m.value(), m.key(), [(k, b"c" if k == H_TO else v) for k, v in m.headers()], 0)
    _fold(core, [lying])
    assert core.steps == 1 and len(channel.sent) == 2  # handled by a, its recipient in the body


_names = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=80)


@settings(max_examples=examples(300), deadline=None)
@given(event_id=_names, agent=_names, to=st.none() | _names, step=st.none() | st.integers(0, 2**62))
def test_the_envelope_route_is_the_checked_route_without_the_step(registry, event_id, agent, to, step):
    enc = Encoder(registry.latest(MESSAGE))
    value = enc.encode_event(event_id, "run", agent, to, [1], {"kind": "k", "body": "b"})
    headers = enc.headers(agent.encode(), None if to is None else to.encode())
    if step is not None and event_id.endswith(f"@{step}#0"):
        headers = [*headers, (H_STEP, str(step).encode())]  # a new list: the encoder's is shared
    m = MemoryMessage(5, value, None, headers, 0)
    dec = Decoder(registry)
    checked = dec.route(m)
    assert dec.envelope_route(m) == Route(checked.event_type, checked.agent, checked.to, None) == \
        Route(MESSAGE, agent, to, None)


@given(step=st.integers(0, 2**62), index=st.integers(0, 1000))
def test_the_step_read_from_the_envelope_is_the_ids(registry, step, index):
    enc = Encoder(registry.latest(MESSAGE))
    for event_id, want in ((f"a@{step}#{index}", step), (f"a@timer{step}", None), (f"a@state{step}", step),
                           (f"a@stop{step}", None)):
        value = enc.encode_event(event_id, "run", "a", None, [], {"kind": "k", "body": "b"})
        assert Decoder.step(MemoryMessage(0, value, None, None, 0)) == want
    assert Decoder.step(MemoryMessage(0, b"not an event", None, None, 0)) is None
