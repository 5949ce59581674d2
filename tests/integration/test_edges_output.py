"""What the CLI prints of a log on the real broker, as processes (issue 28, items 7 and 8): names that
hold escape sequences, bells and newlines (written by a producer that checks nothing) reach no
terminal raw and forge no line, ``--json`` keeps them exact; ten thousand unreadable messages are a
summary with offset ranges, in full with ``-v`` or ``--json``; ``check`` keeps unreadable messages
apart from causality violations."""

from __future__ import annotations

import json
import subprocess
import sys

from swarmlog.log.append import EventLog

from ..conftest import unchecked_event
from .conftest import subprocess_env

HOSTILE = ["esc\x1b[2J\x1b]0;owned\x07", "bob\n      9  mallory          agent.message    → bob", "rtl\u202eevil",
           "c1\x9b31m"]
RAW = set("\x1b\x07\u202e\x9b")


def _cli(settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "swarmlog.cli", *args], env=subprocess_env(settings),
                          capture_output=True, text=True, timeout=300)


def test_nothing_from_the_log_reaches_a_terminal_raw_and_json_stays_exact(settings, registry):
    with EventLog(settings=settings) as log:
        log.append("agent.message", {"kind": "k", "body": "before"}, agent="alice", to="bob")
        for name in HOSTILE:
            value, key, headers = unchecked_event(registry, "agent.message", {"kind": name, "body": name},
                                                  agent=name, to=name, event_id=f"id-{name}")
            log.produce_raw(value, key=key, headers=headers)
        hostile_offsets = log.flush()
        log.append("agent.message", {"kind": "k", "body": "after"}, agent="alice", to="bob")
    outputs = {args: _cli(settings, *args) for args in
               [("log",), ("show", str(hostile_offsets[1])), ("timeline",), ("replay",), ("check", "causality"),
                ("log", "--agent", HOSTILE[0])]}
    for args, done in outputs.items():
        assert done.returncode in (0, 1), (args, done.stderr)
        assert not RAW & set(done.stdout + done.stderr), (args, done.stdout, done.stderr)
    lines = outputs[("log",)].stdout.splitlines()
    assert len(lines) == 2 + len(HOSTILE)  # one line per message: the newline in a name forged none
    assert "bob\\x0a      9  mallory" in lines[2] and lines[2].lstrip().startswith(str(hostile_offsets[1]))
    assert len(outputs[("timeline",)].stdout.splitlines()) == 2 + 2 + len(HOSTILE)
    exact = [json.loads(line) for line in _cli(settings, "log", "--json").stdout.splitlines()]
    assert [(d["agent"], d["to"], d["payload"]["kind"]) for d in exact[1:-1]] == [(n, n, n) for n in HOSTILE]
    shown = json.loads(_cli(settings, "show", str(hostile_offsets[1]), "--json").stdout)
    assert shown["event"]["agent"] == HOSTILE[1]


def test_ten_thousand_unreadable_messages_are_a_summary_and_in_full_with_json_or_v(settings):
    n = 10_000
    with EventLog(settings=settings) as log:
        log.append("agent.message", {"kind": "k", "body": "before"}, agent="alice", to="bob")
        for i in range(n):
            log.produce_raw(b"garbage %d" % i if i % 2 else b"\xc3\x01" + b"\x00" * 8 + b"unknown writer")
        log.flush()
        log.append("agent.message", {"kind": "k", "body": "after"}, agent="alice", to="bob")
    replayed = _cli(settings, "replay")
    assert replayed.returncode == 0
    warnings = [line for line in replayed.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 2, replayed.stderr  # one per kind: a summary, not ten thousand lines
    assert any(f"{n // 2:,} × not readable events (SchemaNotFound), at offsets 1, 3, 5" in w for w in warnings)
    assert any(f"{n // 2:,} × not readable events (UndecodableMessage)" in w for w in warnings)
    assert "replayed 2 events" in replayed.stdout
    assert _cli(settings, "replay", "--strict").returncode == 3
    full = _cli(settings, "replay", "-v")
    assert sum(line.startswith("warning: offset ") for line in full.stderr.splitlines()) == n
    doc = json.loads(_cli(settings, "replay", "--json").stdout)
    assert len(doc["undecodable"]) == n and {u["kind"] for u in doc["undecodable"]} == {"SchemaNotFound",
                                                                                       "UndecodableMessage"}
    checked = _cli(settings, "check", "causality")
    assert checked.returncode == 1
    out = checked.stdout.splitlines()
    assert out[0] == f"unreadable messages ({n}):" and len(out) == 3, checked.stdout
    assert out[-1] == "checked 2 events: 0 causality violation(s); 0 history problems, 10000 unreadable messages, " \
                      "0 repeated event ids"
    assert len(_cli(settings, "check", "causality", "-v").stdout.splitlines()) == n + 2
    found = json.loads(_cli(settings, "check", "causality", "--json").stdout)
    assert found["counts"] == {"history": 0, "unreadable": n, "duplicate": 0, "causality": 0}
    assert len(found["findings"]) == n
