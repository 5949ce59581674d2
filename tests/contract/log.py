"""The behaviour every log backend keeps (see :mod:`swarmlog.log.base`), as one test suite.

``tests/unit/test_contract_memory.py`` runs it on the in-memory log,
``tests/integration/test_contract_kafka.py`` on the real broker. A subclass provides
the fixtures ``backend`` (a :class:`~swarmlog.log.base.LogBackend`) and ``log_topic``
(a fresh topic on it), and ``wait`` (how long a backend may take to show a commit).
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from swarmlog.errors import AgentFenced, GroupHasActiveMembers, TopicExists, TopicNotFound
from swarmlog.log.base import LogBackend, message_at, messages_at
from swarmlog.log.protocol import agent_group


def read_all(backend: LogBackend, topic: str, start: int = 0) -> list[Any]:
    with backend.reader(topic) as reader:
        reader.assign(start)
        return [m for batch in reader.batches() for m in batch]


def values(msgs: list[Any]) -> list[bytes]:
    return [m.value() for m in msgs]


def append(backend: LogBackend, topic: str, *payloads: bytes) -> list[int]:
    appender = backend.appender(topic)
    for p in payloads:
        appender.send(p, b"k", [("h", b"v")])
    delivered = appender.flush(30)
    appender.close()
    assert delivered.errors == {} and delivered.pending == 0
    return delivered.offsets


class LogContract:
    wait: float = 0.0
    """Seconds a backend may need before a commit is visible to a new reader."""

    def _eventually(self, fn: Any, expect: Any) -> Any:
        deadline = time.monotonic() + max(self.wait, 0.1)
        got = fn()
        while got != expect and time.monotonic() < deadline:
            time.sleep(0.05)
            got = fn()
        return got

    def test_appended_messages_read_back_in_order_with_their_offsets_headers_and_keys(self, backend, log_topic):
        offsets = append(backend, log_topic, b"a", b"b", b"c")
        assert offsets == sorted(offsets) and len(set(offsets)) == 3
        msgs = read_all(backend, log_topic)
        assert values(msgs) == [b"a", b"b", b"c"]
        assert [m.offset() for m in msgs] == offsets
        assert msgs[0].key() == b"k" and msgs[0].headers() == [("h", b"v")]

    def test_the_log_stamps_append_time_and_it_never_decreases(self, backend, log_topic):
        append(backend, log_topic, *[bytes([i]) for i in range(20)])
        stamps = [m.timestamp() for m in read_all(backend, log_topic)]
        assert all(kind != 0 for kind, _ in stamps)  # a real timestamp, set by the log
        assert [ts for _, ts in stamps] == sorted(ts for _, ts in stamps)

    def test_a_missing_topic_is_refused_by_name(self, backend):
        with pytest.raises(TopicNotFound) as err:
            backend.reader("swarmlog.no-such-topic-contract")
        assert err.value.topic == "swarmlog.no-such-topic-contract"

    def test_reading_from_an_offset_starts_there(self, backend, log_topic):
        offsets = append(backend, log_topic, b"a", b"b", b"c")
        assert values(read_all(backend, log_topic, start=offsets[1])) == [b"b", b"c"]

    def test_a_transaction_is_invisible_until_it_commits_and_holds_back_what_follows(self, backend, log_topic):
        channel = backend.agent_channel(log_topic, "agent-a")
        try:
            channel.fence()
            channel.begin()
            channel.send(b"in-txn", b"agent-a", [("sl.agent", b"agent-a")])
            append(backend, log_topic, b"after")  # appended after the open transaction's first message
            # read_committed: nothing past the first offset of an open transaction is served.
            assert read_all(backend, log_topic) == []
            channel.start(lambda: 0)
            channel.commit(0)
        finally:
            channel.close()
        assert self._eventually(lambda: values(read_all(backend, log_topic)), [b"in-txn", b"after"]) \
            == [b"in-txn", b"after"]

    def test_an_aborted_transaction_is_never_seen_and_its_offsets_stay_taken(self, backend, log_topic):
        first = append(backend, log_topic, b"before")[0]
        channel = backend.agent_channel(log_topic, "agent-a")
        try:
            channel.fence()
            channel.begin()
            located = channel.send_located(b"aborted", b"agent-a", [])
            channel.abort()
        finally:
            channel.close()
        after = append(backend, log_topic, b"after")[0]
        assert first < located < after
        # The aborted message and the abort's control record both took offsets: never offset + 1.
        assert after >= located + 2
        assert values(read_all(backend, log_topic)) == [b"before", b"after"]

    def test_a_commit_takes_an_offset_of_its_own(self, backend, log_topic):
        channel = backend.agent_channel(log_topic, "agent-a")
        try:
            channel.fence()
            channel.start(lambda: 0)
            channel.begin()
            located = channel.send_located(b"one", b"agent-a", [])
            channel.commit(located + 1)
        finally:
            channel.close()
        after = append(backend, log_topic, b"two")[0]
        assert after == located + 2  # the commit marker sits between them
        assert self._eventually(lambda: [m.offset() for m in read_all(backend, log_topic)], [located, after]) \
            == [located, after]

    def test_a_new_life_fences_the_old_one_and_aborts_what_it_left_open(self, backend, log_topic):
        old = backend.agent_channel(log_topic, "agent-a")
        new = backend.agent_channel(log_topic, "agent-a")
        try:
            old.fence()
            old.start(lambda: 0)
            old.begin()
            old.send(b"zombie", b"agent-a", [])
            old.send_located(b"zombie-2", b"agent-a", [])
            new.fence()  # a restart: aborts the zombie's open transaction
            with pytest.raises(AgentFenced) as err:
                old.commit(0)
            assert err.value.agent == "agent-a"
        finally:
            old.close()
            new.close()
        append(backend, log_topic, b"later")
        assert values(read_all(backend, log_topic)) == [b"later"]

    def test_a_commit_moves_the_agents_group_position_with_its_outputs(self, backend, log_topic):
        append(backend, log_topic, b"input")
        group = agent_group(log_topic, "agent-a")
        assert backend.committed(group, log_topic) is None
        channel = backend.agent_channel(log_topic, "agent-a")
        try:
            channel.fence()
            channel.start(lambda: 0)
            deadline = time.monotonic() + 30
            seen: list[Any] = []
            while not seen and time.monotonic() < deadline:
                seen, _ = channel.poll(10, 0.2)
            assert values(seen) == [b"input"]
            channel.begin()
            out = channel.send_located(b"output", b"agent-a", [])
            channel.commit(out + 2)
        finally:
            channel.close()
        assert backend.committed(group, log_topic) == out + 2
        assert self._eventually(lambda: values(read_all(backend, log_topic)), [b"input", b"output"]) \
            == [b"input", b"output"]

    def test_a_group_cannot_be_reset_while_a_member_consumes_in_it(self, backend, log_topic):
        append(backend, log_topic, b"input")
        channel = backend.agent_channel(log_topic, "agent-a")
        group = agent_group(log_topic, "agent-a")
        try:
            channel.fence()
            channel.start(lambda: 0)
            deadline = time.monotonic() + 30
            seen: list[Any] = []
            while not seen and time.monotonic() < deadline:
                seen, _ = channel.poll(10, 0.2)
            assert seen
            with pytest.raises(GroupHasActiveMembers) as err:
                backend.reset_group(group, log_topic, 0)
            assert err.value.group == group and err.value.members
        finally:
            channel.close()
        deadline = time.monotonic() + 30
        while True:  # a consumer that left may stay a member for a moment
            try:
                backend.reset_group(group, log_topic, 0)
                break
            except GroupHasActiveMembers:
                assert time.monotonic() < deadline, "the group still has members after its consumer closed"
                time.sleep(0.5)
        assert backend.committed(group, log_topic) == 0

    def test_the_high_watermark_counts_open_transactions(self, backend, log_topic):
        append(backend, log_topic, b"a")
        _, before = backend.watermarks(log_topic)
        channel = backend.agent_channel(log_topic, "agent-a")
        try:
            channel.fence()
            channel.begin()
            channel.send_located(b"open", b"agent-a", [])
            _, during = backend.watermarks(log_topic)
            assert during > before  # a swarm blocked behind an open transaction does not look finished
            channel.abort()
        finally:
            channel.close()

    def test_a_following_reader_yields_empty_batches_while_idle_then_what_arrives(self, backend, log_topic):
        append(backend, log_topic, b"a")
        got: list[bytes] = []
        idle = 0
        with backend.reader(log_topic) as reader:
            reader.assign(0)
            for batch in reader.batches(follow=True, timeout=0.1):
                if not batch:
                    idle += 1
                    if idle == 2:
                        append(backend, log_topic, b"b")
                    assert idle < 200, "what was appended never arrived"
                got += values(batch)
                if got == [b"a", b"b"]:
                    break
        assert got == [b"a", b"b"] and idle >= 2

    def test_a_copy_holds_every_message_at_its_own_offset_with_its_bytes_and_time_and_no_gap_shows(
            self, backend, log_topic):
        # A source whose offsets have gaps of every size: a commit marker (1), two markers side by
        # side (2), and aborted transactions with their markers (3 and more).
        append(backend, log_topic, b"a")
        a_ch, b_ch = backend.agent_channel(log_topic, "agent-a"), backend.agent_channel(log_topic, "agent-b")
        try:
            for ch in (a_ch, b_ch):
                ch.fence()
                ch.start(lambda: 0)
            # Commits carry no consumer position (None): these channels never poll, so their
            # consumers may be mid-join, and a position sent with a not-yet-current group
            # generation is refused (ILLEGAL_GENERATION); the gaps come from the markers alone.
            a_ch.begin()
            a_ch.send_located(b"b", b"agent-a", [("sl.agent", b"agent-a")])
            a_ch.commit(None)  # gap of 1
            a_ch.begin()
            a_ch.send_located(b"c", b"agent-a", [])
            b_ch.begin()
            b_ch.send_located(b"d", b"agent-b", [])
            a_ch.commit(None)
            b_ch.commit(None)  # gap of 2
            a_ch.begin()
            a_ch.send_located(b"never", b"agent-a", [])
            a_ch.abort()  # gap of 2 (the aborted record, its marker)...
            a_ch.begin()
            a_ch.send_located(b"never again", b"agent-a", [])
            a_ch.send_located(b"nor this", b"agent-a", [])
            a_ch.abort()  # ...and 3 more
        finally:
            a_ch.close()
            b_ch.close()
        append(backend, log_topic, b"e")
        source = self._eventually(lambda: values(read_all(backend, log_topic)), [b"a", b"b", b"c", b"d", b"e"])
        assert source == [b"a", b"b", b"c", b"d", b"e"]
        msgs = read_all(backend, log_topic)
        offsets = [m.offset() for m in msgs]
        assert offsets[-1] - offsets[0] > len(offsets)  # the source does have gaps

        copy = f"{log_topic}-copy"
        end = backend.create_copy(copy, iter(msgs[:-1]), end=offsets[-1])
        assert end >= offsets[-1]
        copied = self._eventually(lambda: [m.offset() for m in read_all(backend, copy)], offsets[:-1])
        assert copied == offsets[:-1]
        for src, dst in zip(msgs, read_all(backend, copy), strict=False):
            assert (dst.value(), dst.key(), dst.headers()) == (src.value(), src.key(), src.headers())
            assert dst.timestamp()[1] == src.timestamp()[1]
        # It takes new appends after the copied prefix, stamped by the log again.
        new = append(backend, copy, b"after the fork")[0]
        assert new >= offsets[-1]
        last = read_all(backend, copy)[-1]
        assert last.value() == b"after the fork" and last.timestamp()[1] >= msgs[-1].timestamp()[1]

    def test_a_copy_is_never_written_into_a_topic_that_exists(self, backend, log_topic):
        with pytest.raises(TopicExists):
            backend.create_copy(log_topic, iter(()))

    # -- knowing when nothing is left to do (LogBackend.settle, wait_for_append, AgentChannel.wake) ---

    def test_a_log_that_says_it_settled_is_right_and_one_that_cannot_tell_says_so_at_once(self, backend, log_topic):
        import threading

        if backend.settle(log_topic, [], 0) is None:  # Kafka: other processes append; nothing to wait on
            started = time.monotonic()
            assert backend.settle(log_topic, [], 5) is None and backend.wait_for_append(log_topic, 0, 5) is None
            assert time.monotonic() - started < 1
            return
        append(backend, log_topic, b"a")
        channel = backend.agent_channel(log_topic, "agent-a")
        try:
            channel.fence()
            channel.start(lambda: 0)
            assert backend.settle(log_topic, [channel], 0.05) is False  # it has not read to the end
            assert channel.poll(10, 0)[0]  # now it has; but it is not waiting for more
            assert backend.settle(log_topic, [channel], 0.05) is False
            polled: list[Any] = []
            waiter = threading.Thread(target=lambda: polled.append(channel.poll(10, 30)))
            waiter.start()
            assert backend.settle(log_topic, [channel], 10) is True  # waiting at the end: nothing left
            other = backend.agent_channel(log_topic, "agent-b")
            try:
                other.fence()
                other.begin()
                other.send(b"in-txn", b"agent-b", [])
                assert backend.settle(log_topic, [channel], 0.05) is False  # a transaction is open
                other.commit(None)
            finally:
                other.close()
            waiter.join(10)  # the log changed: the poll returned
            assert not waiter.is_alive()
            got = values(polled[0][0]) or values(channel.poll(10, 0)[0])
            assert got == [b"in-txn"]
            started = time.monotonic()
            channel.wake()  # stopping: the next poll at the end returns at once
            msgs, end = channel.poll(10, 30)
            assert msgs == [] and end == backend.watermarks(log_topic)[1] and time.monotonic() - started < 5
        finally:
            channel.close()

    def test_a_log_names_the_end_a_dead_lifes_open_transaction_holds_until_its_next_life_fences_it(
            self, backend, log_topic):
        """What lets a clean stop end its drain there instead of at its deadline (runtime._worker): the end
        named is the one readers are held at, only while the transaction's channel is closed, and no more
        once a new life fenced it."""
        if backend.settle(log_topic, [], 0) is None:  # Kafka: a dead producer is not told from a slow one
            assert backend.abandoned_end(log_topic) is None
            return
        append(backend, log_topic, b"before")
        dead = backend.agent_channel(log_topic, "agent-a")
        live = backend.agent_channel(log_topic, "agent-b")
        try:
            live.fence()
            live.begin()
            live.send(b"live", b"agent-b", [])
            dead.fence()
            dead.begin()
            held_at = dead.send_located(b"dying", b"agent-a", [])
            live.commit(None)
            assert backend.abandoned_end(log_topic) is None  # open, but its life may still commit it
            dead.close()  # the life ends between sending and committing: nothing aborts it
            assert backend.abandoned_end(log_topic) == held_at
            assert values(read_all(backend, log_topic)) == [b"before", b"live"]  # held there indeed
            live.begin()
            live.send(b"after", b"agent-b", [])
            live.commit(None)
            assert backend.abandoned_end(log_topic) == held_at  # a later commit does not move it
            assert values(read_all(backend, log_topic)) == [b"before", b"live"]
        finally:
            live.close()
        again = backend.agent_channel(log_topic, "agent-a")
        try:
            again.fence()  # the next life: aborts it, and readers go on
            assert backend.abandoned_end(log_topic) is None
            assert values(read_all(backend, log_topic)) == [b"before", b"live", b"after"]
        finally:
            again.close()

    def test_waiting_for_an_append_ends_with_it(self, backend, log_topic):
        import threading

        end = backend.watermarks(log_topic)[1]
        if backend.wait_for_append(log_topic, end, 0) is None:
            return  # Kafka: a reader polls instead (the test above checks it answers at once)
        assert backend.wait_for_append(log_topic, end, 0.05) is False
        later = threading.Timer(0.1, lambda: append(backend, log_topic, b"x"))
        later.start()
        try:
            assert backend.wait_for_append(log_topic, end, 30) is True
        finally:
            later.join()

    def delete_before(self, backend: LogBackend, topic: str, before: int) -> None:
        """Delete ``topic``'s offsets below ``before`` (DeleteRecords); a backend's subclass says how."""
        backend.delete_records(topic, before)  # type: ignore[attr-defined]

    def test_the_message_at_an_offset_is_the_one_a_reader_sees_there_and_none_where_it_sees_none(
            self, backend, log_topic):
        first = append(backend, log_topic, b"first")[0]
        channel = backend.agent_channel(log_topic, "agent-a")
        try:
            channel.fence()
            channel.start(lambda: 0)
            channel.begin()
            aborted = channel.send_located(b"aborted", b"agent-a", [])
            channel.abort()
            channel.begin()
            committed = channel.send_located(b"committed", b"agent-a", [("h", b"v")])
            channel.commit(None)
            channel.begin()
            still_open = channel.send_located(b"open", b"agent-a", [])
            try:
                m = self._eventually(lambda: (x := message_at(backend, log_topic, committed)) and x.value(),
                                     b"committed")
                assert m == b"committed"
                got = message_at(backend, log_topic, committed)
                assert got is not None and got.offset() == committed and got.key() == b"agent-a"
                assert got.headers() == [("h", b"v")]
                assert message_at(backend, log_topic, first).value() == b"first"
                # Every offset a read_committed reader sees nothing at: the aborted record, the abort's
                # marker, the commit's marker, a record of a transaction still open, the log's end and past it.
                for nothing in (aborted, aborted + 1, committed + 1, still_open, still_open + 1, still_open + 100, -1):
                    assert message_at(backend, log_topic, nothing) is None, nothing
                assert set(messages_at(backend, log_topic, [first, aborted, committed, committed + 1, still_open])) \
                    == {first, committed}
                assert messages_at(backend, log_topic, []) == {}
            finally:
                channel.abort()
        finally:
            channel.close()
        # Deleted (before the log start): a reader put there starts at the log start, a later message.
        self.delete_before(backend, log_topic, committed)
        assert message_at(backend, log_topic, first) is None
        assert message_at(backend, log_topic, committed).value() == b"committed"
