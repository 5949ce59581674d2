"""Upcasters of ``agent.message``: each turns a record of version N into one of version N+1.

Found by ``swarmlog.upcasting`` (imported by file path, not as a package) and run by
the decoder whenever it reads an event written before the version they lead to.

The contract every upcaster in ``schemas/*/upcasters.py`` follows:

* It is named ``v<N>_to_v<N+1>`` and takes the **whole decoded record** (envelope and
  ``payload``, as a dict in version N's shape) and returns the whole record in version
  N+1's shape. The whole record rather than only the payload, because a change of
  meaning may depend on the envelope (who sent it, to whom); in practice an upcaster
  rewrites ``payload`` only and returns the envelope as it came: ``schema_version``
  stays the writer's version, a fact about the bytes in the log.
* It is a pure function of its argument: no I/O, no clock, no randomness, no state.
  Replay runs it on every old event forever, and must get the same answer each time.
* Only public functions named ``v<N>_to_v<N+1>`` may be defined here; helpers are
  private (``_name``). Anything else is a SchemaError when the schemas load.
"""

from __future__ import annotations

from typing import Any


def v2_to_v3(record: dict[str, Any]) -> dict[str, Any]:
    """v2's ``priority: int`` becomes v3's ``urgency`` enum.

    The ranges are the ones v2's schema documents for ``priority``: below 0 can wait
    (``low``), 0 is ``normal`` (so every v1 message, read as v2 with priority 0,
    becomes ``normal``), 1 to 9 ``high``, 10 or more ``critical``.
    """
    payload = dict(record["payload"])
    payload["urgency"] = _urgency(payload.pop("priority"))
    return {**record, "payload": payload}


def _urgency(priority: int) -> str:
    if priority < 0:
        return "low"
    if priority == 0:
        return "normal"
    if priority < 10:
        return "high"
    return "critical"
