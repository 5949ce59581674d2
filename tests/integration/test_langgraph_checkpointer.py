"""LangGraph's checkpointer on the swarm's log (swarmlog.integrations.langgraph.SwarmlogSaver), on the real
Kafka and Postgres: checkpoints and writes are events of the topic, reads come from the mirror the sink
keeps, and a reader sees its own writes.

Must show (issue 27): ``langgraph-checkpoint-conformance``, LangGraph's own suite, passes every capability
(base and extended) against it; a real graph keeps its thread across savers and processes.
"""

from __future__ import annotations

import asyncio
import operator
import threading
from collections.abc import Iterator
from typing import Annotated, TypedDict

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from swarmlog.errors import MirrorBehind
from swarmlog.integrations.langgraph import SwarmlogSaver
from swarmlog.log.protocol import LANGGRAPH_CHECKPOINT, LANGGRAPH_DELETED, LANGGRAPH_WRITES
from swarmlog_connectors.postgres_sink import PostgresSink

from .conftest import read_log


@pytest.fixture
def sink(settings, registry) -> Iterator[PostgresSink]:
    """The topic's sink, mirroring into Postgres while the test runs (as `swarmlog sink` would)."""
    running = PostgresSink(settings=settings, registry=registry)
    thread = threading.Thread(target=running.run, name="test-sink", daemon=True)
    thread.start()
    yield running
    running.stop()
    thread.join(timeout=30)


def test_langgraph_checkpoint_conformance_passes_every_capability_on_kafka_and_postgres(settings, sink):
    savers: list[SwarmlogSaver] = []

    @checkpointer_test(name="SwarmlogSaver")
    async def swarmlog_saver():
        saver = SwarmlogSaver(settings=settings)
        savers.append(saver)
        yield saver
        saver.close()

    report = asyncio.run(validate(swarmlog_saver))
    report.print_report()
    failures = {cap: r.failures for cap, r in report.results.items() if r.failures}
    assert failures == {}
    assert report.passed_all_base()
    # The extended capabilities are detected (overridden) and pass too: nothing skipped.
    assert {cap: (r.detected, r.passed) for cap, r in report.results.items()} == {
        cap: (True, True) for cap in ("put", "put_writes", "get_tuple", "list", "delete_thread",
                                      "delete_for_runs", "copy_thread", "prune")}
    assert sum(r.tests_passed for r in report.results.values()) >= 80
    assert len(savers) == 8  # a fresh saver for each capability, as the suite asks


class Chat(TypedDict):
    messages: Annotated[list, add_messages]
    turns: Annotated[int, operator.add]


def _graph():
    def bot(state: Chat) -> dict:
        return {"messages": [AIMessage(f"reply {len(state['messages'])}")], "turns": 1}

    builder = StateGraph(Chat)
    builder.add_node("bot", bot)
    builder.add_edge(START, "bot")
    builder.add_edge("bot", END)
    return builder


def test_a_graph_keeps_its_thread_in_the_log_across_savers(settings, registry, sink):
    thread = {"configurable": {"thread_id": "incident-42"}}
    with SwarmlogSaver(settings=settings) as saver:
        graph = _graph().compile(checkpointer=saver)
        graph.invoke({"messages": [HumanMessage("hello")], "turns": 0}, thread)
        out = graph.invoke({"messages": [HumanMessage("again")]}, thread)
        assert [m.content for m in out["messages"]] == ["hello", "reply 1", "again", "reply 3"]
        assert out["turns"] == 2
        history = list(graph.get_state_history(thread))
        assert [h.metadata["step"] for h in history] == [4, 3, 2, 1, 0, -1]  # newest first, time travel works

    # Another saver (a restarted pod) reads the same thread from the mirror and goes on from it.
    with SwarmlogSaver(settings=settings) as restarted:
        graph = _graph().compile(checkpointer=restarted)
        assert graph.get_state(thread).values["turns"] == 2
        # Time travel: go on from the first turn's end, a branch of the thread; the old branch stays.
        first_turn = next(h for h in graph.get_state_history(thread) if h.metadata["step"] == 1)
        branch = graph.invoke({"messages": [HumanMessage("instead")]}, first_turn.config)
        assert [m.content for m in branch["messages"]] == ["hello", "reply 1", "instead", "reply 3"]
        listed = list(restarted.list(thread))
        assert len(listed) > 6 and {t.config["configurable"]["checkpoint_id"] for t in history} <= \
            {t.config["configurable"]["checkpoint_id"] for t in listed}
        restarted.delete_thread("incident-42")
        assert graph.get_state(thread).values == {}

    # Every checkpoint, write and deletion is an event of the swarm's topic, in its order.
    types = [r.event_type for r in read_log(settings, registry)]
    assert types.count(LANGGRAPH_CHECKPOINT) == len(listed)
    assert types.count(LANGGRAPH_WRITES) >= 4
    assert types[-1] == LANGGRAPH_DELETED


def test_a_read_waits_for_the_mirror_and_says_so_when_the_sink_is_not_running(settings):
    with SwarmlogSaver(settings=settings, read_timeout=0.5) as saver:
        stored = saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}},
                           {"v": 1, "id": "1f0", "ts": "", "channel_values": {}, "channel_versions": {},
                            "versions_seen": {}, "updated_channels": None}, {"source": "input", "step": -1}, {})
        with pytest.raises(MirrorBehind) as caught:
            saver.get_tuple(stored)
    assert caught.value.written >= 0 and caught.value.mirrored <= caught.value.written
    assert "swarmlog sink" in str(caught.value)
    # Once the sink has mirrored the write, the same read sees it (read-your-writes).
    PostgresSink(settings=settings).run(until_end=True)
    with SwarmlogSaver(settings=settings) as reader:
        assert reader.get_tuple(stored).checkpoint["id"] == "1f0"
