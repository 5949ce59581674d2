"""A handler's located send waits for its offset inside the determinism guard; what the log
client does meanwhile on that thread (librdkafka serving its error and log callbacks, which
read the clock) is swarmlog's own I/O, not a forbidden call of the handler."""

from __future__ import annotations

import time

import pytest

from swarmlog.context import Output
from swarmlog.guard import ForbiddenCall, guarded
from swarmlog.log.protocol import MESSAGE
from swarmlog.runtime.sink import LiveSink
from swarmlog.schema.registry import SchemaRegistry

# Every test here runs under each of the guard's profile hooks, the C one and the Python one.
pytestmark = pytest.mark.usefixtures("guard_hook")


class _ClockReadingChannel:
    """A channel whose located send does what librdkafka's callbacks do while a broker is down."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def begin(self) -> None:
        pass

    def send(self, value: bytes, key: bytes | None, headers: list[tuple[str, bytes]]) -> None:
        self.sent.append(value)

    def send_located(self, value: bytes, key: bytes | None, headers: list[tuple[str, bytes]]) -> int:
        time.monotonic()  # kafka.errors.error_recorder: when the error event came
        self.sent.append(value)
        return 41 + len(self.sent)


def test_a_located_send_is_not_charged_with_the_clock_reads_of_the_log_client(registry: SchemaRegistry) -> None:
    channel = _ClockReadingChannel()
    sink = LiveSink(channel=channel, registry=registry, agent="a")  # type: ignore[arg-type]
    out = Output("a@7.0", MESSAGE, {"kind": "hop", "body": "x"}, "b", [7])
    with guarded(agent="a", offset=7):
        assert sink.write(out, locate=True) == 42
    assert len(channel.sent) == 1
    # The same call made by the handler itself is still refused.
    with pytest.raises(ForbiddenCall), guarded(agent="a", offset=8):
        channel.send_located(b"", None, [])
