"""An agent's Kafka channel and its consumer group: what the log contract cannot say (no group in memory)."""

from __future__ import annotations

import threading
import time
from typing import Any

from swarmlog.kafka import KafkaBackend
from swarmlog.kafka.config import admin_client
from swarmlog.kafka.groups import group_members
from swarmlog.kafka.topic import create_topic
from swarmlog.log.protocol import agent_group
from swarmlog.settings import Settings

from ..contract.log import append, read_all, values
from .conftest import new_topic_name


def _poll_until(channel: Any, done: Any, *, seconds: float = 30.0) -> tuple[list[Any], int | None]:
    deadline = time.monotonic() + seconds
    seen: list[Any] = []
    eof = None
    while not done(seen, eof):
        assert time.monotonic() < deadline, f"nothing more after {values(seen)}"
        msgs, end = channel.poll(10, 0.2)
        seen += msgs
        eof = end if end is not None else eof
    return seen, eof


def test_a_position_committed_while_the_group_still_waits_for_an_earlier_life_commits_once_let_in(
        base_settings: Settings) -> None:
    """A new life's consumer is counted into its group (the member id given, the generation not yet:
    the group waits for the earlier life's member) when its first transaction commits a position.
    Sent then, the offsets are refused (ILLEGAL_GENERATION) and the transaction aborted; the channel
    waits until the group lets its consumer in, then commits, and what it read meanwhile is kept."""
    topic = new_topic_name("channel-join")
    create_topic(base_settings, topic)
    backend = KafkaBackend(base_settings)
    group = agent_group(topic, "agent-a")
    append(backend, topic, b"input")
    old = backend.agent_channel(topic, "agent-a")
    new = backend.agent_channel(topic, "agent-a")
    leaving = threading.Timer(3.0, old.close)  # as the group evicts a dead life's member: later
    try:
        old.fence()
        old.start(lambda: 0)
        _poll_until(old, lambda seen, eof: eof is not None)  # it holds the partition, and polls no more
        new.fence()  # a restart
        new.start(lambda: 0)
        admin = admin_client(base_settings)
        deadline = time.monotonic() + 30
        while len(group_members(admin, group)) < 2:  # the coordinator counts the new member in
            assert time.monotonic() < deadline, "the new life's consumer never joined the group"
            time.sleep(0.05)
        leaving.start()
        started = time.monotonic()
        new.begin()
        located = new.send_located(b"output", b"agent-a", [])
        new.commit(located + 1)
        assert time.monotonic() - started > 2.0  # it waited for the earlier member to go, not past it
        seen, _ = _poll_until(new, lambda seen, eof: len(seen) >= 2)
        assert values(seen) == [b"input", b"output"]  # read from zero, nothing skipped or repeated
    finally:
        leaving.cancel()
        leaving.join()
        old.close()
        new.close()
    assert backend.committed(group, topic) == located + 1
    assert values(read_all(backend, topic)) == [b"input", b"output"]
