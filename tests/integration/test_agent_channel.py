"""An agent's Kafka channel and its consumer group: what the log contract cannot say (no group in memory)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from swarmlog.errors import TransactionAborted
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


def _joining_behind_an_earlier_life(settings: Settings, backend: KafkaBackend, topic: str) -> tuple[Any, Any]:
    """(old, new): two lives of one agent; the old one holds the partition and polls no more, the new
    one is counted into the group, which waits for the old member to rejoin or leave."""
    group = agent_group(topic, "agent-a")
    old = backend.agent_channel(topic, "agent-a")
    new = backend.agent_channel(topic, "agent-a")
    old.fence()
    old.start(lambda: 0)
    _poll_until(old, lambda seen, eof: eof is not None)  # it holds the partition, and polls no more
    new.fence()  # a restart
    new.start(lambda: 0)
    admin = admin_client(settings)
    deadline = time.monotonic() + 30
    while len(group_members(admin, group)) < 2:  # the coordinator counts the new member in
        assert time.monotonic() < deadline, "the new life's consumer never joined the group"
        time.sleep(0.05)
    return old, new


def test_a_position_committed_while_the_group_still_waits_for_an_earlier_life_commits_once_let_in(
        base_settings: Settings) -> None:
    """A new life's consumer is counted into its group (the member id given, the generation not yet:
    the group waits for the earlier life's member) when its first transaction commits a position.
    Sent then, the offsets are refused (ILLEGAL_GENERATION) and the transaction aborted; the channel
    waits until the group lets its consumer in, then commits, and what it read meanwhile is kept."""
    topic = new_topic_name("channel-join")
    create_topic(base_settings, topic)
    backend = KafkaBackend(base_settings)
    append(backend, topic, b"input")
    old, new = _joining_behind_an_earlier_life(base_settings, backend, topic)
    leaving = threading.Timer(3.0, old.close)  # as the group evicts a dead life's member: later
    try:
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
    assert backend.committed(agent_group(topic, "agent-a"), topic) == located + 1
    assert values(read_all(backend, topic)) == [b"input", b"output"]


def test_a_stopping_agent_stops_waiting_for_its_group_and_commits_nothing(base_settings: Settings) -> None:
    """The wait to be let into the group ends when the agent is told to stop (``wake``, from another
    thread): its transaction is refused, typed, with nothing written, instead of holding the stop up."""
    topic = new_topic_name("channel-join-stop")
    create_topic(base_settings, topic)
    backend = KafkaBackend(base_settings)
    old, new = _joining_behind_an_earlier_life(base_settings, backend, topic)
    stopping = threading.Timer(1.0, new.wake)
    try:
        stopping.start()
        started = time.monotonic()
        with pytest.raises(TransactionAborted) as err:
            new.begin()
        assert time.monotonic() - started < 10.0  # not the join's bound: the stop ended it
        assert err.value.agent == "agent-a"
    finally:
        stopping.cancel()
        stopping.join()
        new.close()
        old.close()
    assert backend.committed(agent_group(topic, "agent-a"), topic) is None
    assert read_all(backend, topic) == []
