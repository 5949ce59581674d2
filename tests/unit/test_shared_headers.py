"""``Encoder.headers`` hands out one shared list per (agent, to): the runtime, which adds the
``sl.step`` header to its outputs', must never change it (every later event would carry it)."""

from __future__ import annotations

from swarmlog.context import Output
from swarmlog.log.protocol import H_AGENT, H_STEP, H_TO, H_TYPE, H_VERSION, MESSAGE, STATE_DIGEST
from swarmlog.runtime.digests import DigestRecord
from swarmlog.runtime.sink import LiveSink
from swarmlog.schema.codec import Encoder
from swarmlog.schema.registry import SchemaRegistry


class _RecordingChannel:
    def __init__(self) -> None:
        self.headers: list[list[tuple[str, bytes]]] = []

    def begin(self) -> None:
        pass

    def send(self, value: bytes, key: bytes | None, headers: list[tuple[str, bytes]]) -> None:
        self.headers.append(list(headers))

    def send_located(self, value: bytes, key: bytes | None, headers: list[tuple[str, bytes]]) -> int:
        self.send(value, key, headers)
        return len(self.headers)


def test_the_same_pair_gets_the_same_headers_and_other_pairs_their_own(registry: SchemaRegistry) -> None:
    enc = Encoder(registry.latest(MESSAGE))
    v = str(enc.schema.version).encode()
    assert enc.headers(b"a", b"b") is enc.headers(b"a", b"b")
    assert enc.headers(b"a", b"b") == [(H_TYPE, MESSAGE.encode()), (H_VERSION, v), (H_AGENT, b"a"), (H_TO, b"b")]
    assert enc.headers(b"a", None) == [(H_TYPE, MESSAGE.encode()), (H_VERSION, v), (H_AGENT, b"a")]
    assert enc.headers(b"b", b"a") == [(H_TYPE, MESSAGE.encode()), (H_VERSION, v), (H_AGENT, b"b"), (H_TO, b"a")]


def test_the_runtimes_step_header_never_changes_the_encoders_shared_headers(registry: SchemaRegistry) -> None:
    channel = _RecordingChannel()
    encoders: dict[str, Encoder] = {}
    sink = LiveSink(channel=channel, registry=registry, agent="a", encoders=encoders)  # type: ignore[arg-type]
    sink.write(Output("a@7#0", MESSAGE, {"kind": "hop", "body": "x"}, "b", [7]), locate=False)
    sink.write(Output("a@8#0", MESSAGE, {"kind": "hop", "body": "y"}, "b", [8]), locate=True)
    sink.write(Output("op-1", MESSAGE, {"kind": "hop", "body": "z"}, "b", []), locate=False)  # no step
    record = DigestRecord(steps=[7, 8], digests=[b"\x00" * 32, b"\x01" * 32], position=9, state=b"\x02" * 32,
                          final=False, every=1)
    sink.write_digests(record)
    sink.write_digests(DigestRecord(steps=[9], digests=[b"\x03" * 32], position=10, state=b"\x03" * 32,
                                    final=False, every=1))
    steps = [[v for k, v in h if k == H_STEP] for h in channel.headers]
    assert steps == [[b"7"], [b"8"], [], [b"8"], [b"9"]]
    assert all(k != H_STEP for k, _ in encoders[MESSAGE].headers(b"a", b"b"))
    assert all(k != H_STEP for k, _ in encoders[STATE_DIGEST].headers(b"a", b"a"))
