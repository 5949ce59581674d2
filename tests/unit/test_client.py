"""The client's logic on the in-memory log: a reply found by the log's causes, input held until its run
starts and written into it, typed errors that say what was sent and where. The same client against
real Kafka, with the swarm as `swarmlog run` processes: tests/integration/test_client.py."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

import swarmlog.client as client_module
from swarmlog import (
    AsyncClient,
    Client,
    InputBeforeRun,
    InputHandlerFailed,
    NotAnAgentOfTheRun,
    ReplyTimeout,
    RunNotStarted,
)
from swarmlog.log.memory import InMemoryLog
from swarmlog.log.protocol import MESSAGE, RUN_STARTED
from swarmlog.runtime import interpreter, run_agents, start_run
from swarmlog.schema.codec import Decoder
from swarmlog.settings import Settings

from ..swarms import DESK


@pytest.fixture
def running(backend: InMemoryLog, run_settings: Settings, registry) -> Iterator[Settings]:
    """The desk swarm started and running live on the in-memory log (threads of this process)."""
    start_run(settings=run_settings, swarm=DESK, run_id="desk-1", seed=3, backend=backend, registry=registry)
    stop = threading.Event()
    agents = threading.Thread(target=run_agents, kwargs=dict(settings=run_settings, swarm=DESK, backend=backend,
                                                             registry=registry, stop=stop))
    agents.start()
    try:
        yield run_settings
    finally:
        stop.set()
        agents.join()


def _client(settings: Settings, backend: InMemoryLog, registry, **kwargs) -> Client:
    return Client(settings=settings, backend=backend, registry=registry, **kwargs)


def _events(backend: InMemoryLog, topic: str, registry) -> list[dict]:
    decoder = Decoder(registry)
    out = []
    for m in backend.messages(topic):
        writer, rec = decoder.decode(m.value(), m.offset())
        out.append({"offset": m.offset(), "type": writer.event_type, **rec})
    return out


def test_an_ask_returns_the_reply_its_input_caused_through_another_agent_and_a_timer(running, backend, registry):
    with _client(running, backend, registry) as client:
        reply = client.ask("front", "question", "why", timeout=20, reply_kind="answer")
    assert reply.body == "why: 3" and reply.to == "client" and reply.agent_id == "front"
    log = _events(backend, running.topic, registry)
    question = next(e for e in log if e["type"] == MESSAGE and e["payload"]["kind"] == "question")
    # The reply chains back to the question through the back office's message, its timeout and the firing.
    by_offset = {e["offset"]: e for e in log}
    chain, at = [], reply.offset
    while at != question["offset"]:
        chain.append(by_offset[at]["type"])
        at = max(c for c in by_offset[at]["causes"] if c >= question["offset"])
    assert chain == ["agent.message", "agent.message", "timer.fired", "timer.set", "agent.message"]


def test_without_a_reply_kind_the_first_message_to_the_sender_is_the_reply(running, backend, registry):
    with _client(running, backend, registry) as client:
        assert client.ask("front", "question", "what", timeout=20).body == "nearly there"


def test_two_clients_with_the_same_sender_each_get_the_reply_to_their_own_input(running, backend, registry):
    questions = [f"question number {i}" for i in range(6)]
    replies: dict[str, str] = {}

    def ask(q: str) -> None:
        with _client(running, backend, registry) as client:  # same sender name "client", own reader each
            replies[q] = client.ask("front", "question", q, timeout=20, reply_kind="answer").body

    threads = [threading.Thread(target=ask, args=(q,)) for q in questions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert replies == {q: f"{q}: {len(q)}" for q in questions}


def test_one_client_shared_by_threads_answers_each_ask_with_its_own_reply(running, backend, registry):
    questions = [f"q{i}" * (i + 1) for i in range(8)]
    replies: dict[str, str] = {}
    with _client(running, backend, registry) as client:
        def ask(q: str) -> None:
            replies[q] = client.ask("front", "question", q, timeout=20, reply_kind="answer").body

        threads = [threading.Thread(target=ask, args=(q,)) for q in questions]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert replies == {q: f"{q}: {len(q)}" for q in questions}


def test_the_async_client_answers_many_concurrent_asks(running, backend, registry):
    async def main() -> list[str]:
        async with AsyncClient(settings=running, backend=backend, registry=registry) as client:
            asks = [client.ask("front", "question", "x" * n, timeout=20, reply_kind="answer") for n in range(1, 11)]
            return [r.body for r in await asyncio.gather(*asks)]

    assert asyncio.run(main()) == [f"{'x' * n}: {n}" for n in range(1, 11)]


def test_input_sent_before_the_run_starts_is_held_and_written_into_the_run(backend, run_settings, registry):
    sent = []
    with _client(run_settings, backend, registry) as client:
        early = threading.Thread(target=lambda: sent.append(client.send("front", "question", "early", timeout=20)))
        early.start()
        early.join(0.3)
        assert early.is_alive() and backend.messages(run_settings.topic) == []  # held by the client, not written
        run = start_run(settings=run_settings, swarm=DESK, run_id="desk-late", seed=1, backend=backend,
                        registry=registry)
        early.join()
    (input_,) = sent
    assert input_.run_id == "desk-late" and input_.offset > run.offset
    log = _events(backend, run_settings.topic, registry)
    assert [e["type"] for e in log] == [RUN_STARTED, MESSAGE]
    assert log[1]["run_id"] == "desk-late" and log[1]["agent_id"] == "client" and log[1]["to"] == "front"


def test_input_that_finds_no_run_within_its_timeout_is_refused_and_nothing_is_written(backend, run_settings,
                                                                                      registry):
    with _client(run_settings, backend, registry) as client:
        with pytest.raises(InputBeforeRun) as refused:
            client.ask("front", "question", "anyone?", timeout=0.3)
    assert isinstance(refused.value, RunNotStarted)
    assert refused.value.topic == run_settings.topic and refused.value.to == "front"
    assert "was not written" in str(refused.value)
    assert backend.messages(run_settings.topic) == []


def test_a_reply_that_never_comes_is_a_timeout_naming_what_was_sent_and_where(running, backend, registry):
    with _client(running, backend, registry) as client:
        with pytest.raises(ReplyTimeout) as late:
            client.ask("front", "ignore", "this", timeout=0.5)
    err = late.value
    assert isinstance(err, TimeoutError)
    assert (err.topic, err.run_id, err.to, err.kind, err.caused) == (running.topic, "desk-1", "front", "ignore", 0)
    sent = next(e for e in _events(backend, running.topic, registry) if e["event_id"] == err.event_id)
    assert sent["offset"] == err.offset and sent["payload"]["kind"] == "ignore"
    assert f"offset {err.offset}" in str(err) and err.event_id in str(err)


def test_a_failing_handler_ends_the_wait_at_once_with_what_it_raised(running, backend, registry):
    with _client(running, backend, registry) as client:
        with pytest.raises(InputHandlerFailed) as failed:
            client.ask("front", "explode", "boom", timeout=60)
    err = failed.value
    assert (err.agent, err.error_type, err.kind) == ("front", "ValueError", "explode")
    assert err.failed_at > err.offset and "cannot take 'boom'" in str(err)


def test_input_to_an_agent_the_run_does_not_have_or_from_one_of_its_agents_is_refused(running, backend, registry):
    with _client(running, backend, registry) as client:
        with pytest.raises(NotAnAgentOfTheRun, match="has no agent 'frnot'"):
            client.send("frnot", "question", "typo", timeout=5)
    with _client(running, backend, registry, sender="back") as impostor:
        with pytest.raises(NotAnAgentOfTheRun, match="is an agent of run"):
            impostor.send("front", "question", "as back", timeout=5)
    assert not any(e["type"] == MESSAGE and e["payload"]["body"] in ("typo", "as back")
                   for e in _events(backend, running.topic, registry))


def test_client_start_records_the_hash_seed_the_agents_will_run_under(backend, run_settings, registry):
    with _client(run_settings, backend, registry) as client:
        run = client.start(DESK, run_id="desk-2", seed=9)
        again = client.start(DESK, run_id="desk-2", seed=9)
    assert run.created and not again.created and again.offset == run.offset
    assert run.hash_seed == interpreter.seed_for_new_run()  # never None: a client runs no handler itself
    (started,) = _events(backend, run_settings.topic, registry)
    assert started["payload"]["hash_seed"] == interpreter.seed_for_new_run()
    assert started["payload"]["agents"] == ["front", "back"]


def test_client_start_creates_a_missing_topic(backend, registry):
    settings = Settings(topic="swarmlog.unit-new-topic", bootstrap_servers="127.0.0.1:1",
                        database_url="postgresql://nobody@127.0.0.1:1/x")
    with _client(settings, backend, registry) as client:
        assert client.start(DESK, run_id="fresh", seed=1).created
    assert len(backend.messages(settings.topic)) == 1


def test_input_to_a_topic_that_does_not_exist_yet_is_held_until_its_run_makes_it(backend, registry):
    settings = Settings(topic="swarmlog.unit-made-later", bootstrap_servers="127.0.0.1:1",
                        database_url="postgresql://nobody@127.0.0.1:1/x")
    sent = []
    with _client(settings, backend, registry) as client:
        early = threading.Thread(target=lambda: sent.append(client.send("front", "question", "early", timeout=20)))
        early.start()
        early.join(0.3)
        assert early.is_alive()
        with _client(settings, backend, registry, sender="starter") as starter:
            run = starter.start(DESK, run_id="made-later", seed=1)
        early.join()
    assert sent[0].run_id == "made-later" and sent[0].offset > run.offset


def test_closing_the_client_ends_a_waiting_ask_at_once_with_a_clear_error(running, backend, registry):
    client = _client(running, backend, registry)
    outcome: list[BaseException] = []

    def ask() -> None:
        try:
            client.ask("front", "ignore", "never answered", timeout=60)
        except BaseException as exc:  # noqa: BLE001 - the test looks at what it was
            outcome.append(exc)

    waiting = threading.Thread(target=ask)
    waiting.start()
    waiting.join(0.5)
    assert waiting.is_alive()
    client.close()
    waiting.join(5)
    assert not waiting.is_alive() and "closed while this ask waited" in str(outcome[0])


def test_closing_a_client_does_not_wait_out_its_reply_readers_poll(backend, run_settings, registry, monkeypatch):
    # A reader that waited its whole poll before it looked at the stop flag would hold close() for a minute.
    monkeypatch.setattr(client_module, "_FOLLOW_POLL_S", 60.0)
    start_run(settings=run_settings, swarm=DESK, run_id="desk-1", seed=3, backend=backend, registry=registry)
    client = _client(run_settings, backend, registry)
    with pytest.raises(ReplyTimeout):  # no agent runs: nothing is appended after the input, the reader idles
        client.ask("front", "question", "anyone?", timeout=0.1)
    closing = threading.Thread(target=client.close)
    closing.start()
    closing.join(10)
    assert not closing.is_alive()
