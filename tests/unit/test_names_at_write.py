"""The grammar of what the log names, checked where swarmlog writes it (issue 28, items 4 and 7;
docs/edges.md, Names): agent names when an agent is made, recipients, kinds and timer names when a
step or ``EventLog`` writes them, event and run ids by ``EventLog``; causes and repeated ids too.

On the in-memory log: the checks are pure logic before anything is written (the same refusals on
Kafka, as processes: tests/integration/test_edges_at_write.py)."""

from __future__ import annotations

import pytest

from swarmlog import Agent, Swarm, on
from swarmlog.errors import ConfigurationError, DuplicateEventId, InvalidCause, InvalidEvent
from swarmlog.log.append import EventLog
from swarmlog.log.memory import InMemoryLog
from swarmlog.log.protocol import HANDLER_FAILED, MESSAGE, agent_name_problem, id_problem, name_problem
from swarmlog.runtime import run_agents, start_run
from swarmlog.schema.codec import Decoder
from swarmlog.schema.registry import SchemaRegistry
from swarmlog.settings import Settings

SETTINGS = Settings(topic="names", bootstrap_servers="127.0.0.1:1", database_url="postgresql://nobody@127.0.0.1:1/x")

BAD_NAMES = ["", "a b", "esc\x1b[31m", "bel\x07", "new\nline", "tab\t", "nul\x00", "c1\x9b", "del\x7f",
             "rtl\u202eevil", "zw\u200bj", "ls\u2028", "x" * 129]


@pytest.mark.parametrize("name", BAD_NAMES + ["a@b", "a#1", "a:b", "a/b", "*"])
def test_an_agent_name_outside_the_grammar_is_refused_when_the_agent_is_made(name):
    assert agent_name_problem(name) is not None
    with pytest.raises(ConfigurationError, match="docs/edges.md"):
        Agent(name)


@pytest.mark.parametrize("name", ["reviewer", "r3", "réviseur", "审查员", "a.b-c_d", "A+B=C", "x" * 128, "😀"])
def test_letters_digits_punctuation_and_symbols_of_any_script_are_names(name):
    assert agent_name_problem(name) is None and name_problem(name, agent=False) is None
    Agent(name)


def test_kinds_may_hold_spaces_but_nothing_non_printable_and_ids_no_whitespace():
    assert name_problem("task complete", agent=False) is None
    assert name_problem("task\ncomplete", agent=False) == "holds the non-printable character U+000A at index 4"
    assert id_problem("alice@3#0") is None and id_problem("x" * 256) is None
    assert id_problem("a b") == "holds a space at index 1" and id_problem("x" * 257) is not None
    assert id_problem("", empty=True) is None and id_problem("") == "is empty"


def _log(backend: InMemoryLog, **kw) -> EventLog:
    if "names" not in backend._topics:
        backend.create_topic("names")
    return EventLog(settings=SETTINGS, backend=backend, **kw)


@pytest.mark.parametrize(("field", "kwargs"), [
    ("agent_id", {"agent": "new\nline"}),
    ("to", {"agent": "a", "to": "esc\x1b]0;title\x07"}),
    ("to", {"agent": "a", "to": "a b"}),
    ("payload.kind", {"agent": "a", "kind": "k\x1b[2J"}),
    ("event_id", {"agent": "a", "event_id": "id with spaces"}),
    ("run_id", {"agent": "a", "run_id": "run\n2"}),
])
def test_event_log_refuses_names_outside_the_grammar_before_anything_is_written(field, kwargs):
    backend = InMemoryLog()
    kind = kwargs.pop("kind", "k")
    with _log(backend) as log:
        with pytest.raises(InvalidEvent) as info:
            log.append(MESSAGE, {"kind": kind, "body": "x"}, **kwargs)
        assert info.value.field == field and "docs/edges.md" in str(info.value)
        assert log.append(MESSAGE, {"kind": "k", "body": "after"}, agent="a") == 0  # nothing was written
    assert len(backend.messages("names")) == 1
    with pytest.raises(InvalidEvent):
        EventLog(settings=SETTINGS, backend=backend, run_id="bad\trun")


def test_a_handler_that_sends_a_kind_outside_the_grammar_fails_there_and_the_kind_is_never_written():
    class Sender(Agent):
        @on("run.started")
        def start(self, ctx, event):
            ctx.send("b", "ok", "1")
            ctx.send("b", "forged\n   0  swarmlog run.started", "2")

    class Quiet(Agent):
        pass

    swarm = Swarm(name="names", agents=lambda: [Sender("a"), Quiet("b")])
    backend = InMemoryLog()
    backend.create_topic("names")
    start_run(settings=SETTINGS, swarm=swarm, run_id="n", seed=1, backend=backend)
    run_agents(settings=SETTINGS, swarm=swarm, until_quiet=0.2, backend=backend)
    decoder = Decoder(SchemaRegistry.load(SETTINGS.schema_dirs()))
    events = [decoder.decode(m.value(), m.offset()) for m in backend.messages("names")]
    kinds = [rec["payload"]["kind"] for w, rec in events if w.event_type == MESSAGE]
    failed = [rec["payload"] for w, rec in events if w.event_type == HANDLER_FAILED]
    assert kinds == ["ok"]  # what it sent before; the forged kind never reaches the log
    assert [f["error_type"] for f in failed] == ["InvalidEvent"] and "payload.kind" in failed[0]["message"]


def test_a_cause_that_cannot_be_one_is_refused_and_nothing_is_written():
    backend = InMemoryLog()
    with _log(backend) as log:
        first = log.append(MESSAGE, {"kind": "k", "body": "1"}, agent="a")
        log.produce_raw(b"not an event", key=None, headers=None)
        junk = log.flush()[-1]
        for cause, why in ((-5, "is negative"), (999_999_999, "at or past the end of the log"),
                           (junk, "not a readable event"), (junk + 1, "at or past the end")):
            with pytest.raises(InvalidCause, match=why) as info:
                log.append(MESSAGE, {"kind": "k", "body": "x"}, agent="a", causes=[first, cause])
            assert info.value.cause == cause and info.value.field == "causes"
        ok = log.append(MESSAGE, {"kind": "k", "body": "2"}, agent="a", causes=[first])
    assert [m.offset() for m in backend.messages("names")] == [first, junk, ok]


def test_an_event_id_this_log_appended_is_refused_a_second_time_even_in_one_batch():
    backend = InMemoryLog()
    with _log(backend) as log:
        at = log.append(MESSAGE, {"kind": "k", "body": "1"}, agent="a", event_id="dup-1")
        with pytest.raises(DuplicateEventId) as info:
            log.append(MESSAGE, {"kind": "k", "body": "again"}, agent="a", event_id="dup-1")
        assert (info.value.event_id, info.value.offset) == ("dup-1", at)
        log.produce(MESSAGE, {"kind": "k", "body": "2"}, agent="a", event_id="dup-2")
        with pytest.raises(DuplicateEventId, match="still queued"):
            log.produce(MESSAGE, {"kind": "k", "body": "2 again"}, agent="a", event_id="dup-2")
        log.flush()
    assert len(backend.messages("names")) == 2
