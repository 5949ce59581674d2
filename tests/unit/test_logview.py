"""``swarmlog log``'s lines and JSON for records whose payload holds bytes (a state digest's sha256)."""

from __future__ import annotations

import hashlib
import json

from swarmlog.debug.logview import LoggedEvent
from swarmlog.events import Event
from swarmlog.log.protocol import STATE_DIGEST, state_digest_id


def _digest_event() -> LoggedEvent:
    d = hashlib.sha256(b"state").digest()
    payload = {"steps": [4, 9], "digests": [hashlib.sha256(b"4").digest(), d], "position": 10, "state": d,
               "final": True, "every": 1}
    return LoggedEvent(12, Event(12, STATE_DIGEST, 1, state_digest_id("reviewer", 9), "r1", "reviewer", "reviewer",
                                 [], payload, 0))


def test_a_state_digest_line_names_its_steps_and_a_hex_digest_not_python_bytes():
    line = _digest_event().line(width=100)
    assert "after steps 4,9: state " + hashlib.sha256(b"state").hexdigest()[:12] in line
    assert "read to 10" in line and "final" in line and "b'" not in line and "\\x" not in line


def test_log_json_prints_digests_as_hex_strings():
    doc = json.loads(json.dumps(_digest_event().to_json()))
    assert doc["payload"]["state"] == hashlib.sha256(b"state").hexdigest()
    assert doc["payload"]["digests"] == [hashlib.sha256(b"4").hexdigest(), hashlib.sha256(b"state").hexdigest()]
