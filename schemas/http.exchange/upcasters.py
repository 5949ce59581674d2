"""Upcasters of ``http.exchange``: each turns a record of version N into one of version N+1.

Found by ``swarmlog.upcasting`` and run by the decoder on every event written before the version
they lead to; the contract is ``schemas/agent.message/upcasters.py``'s (pure, whole record in,
whole record out, ``schema_version`` kept).
"""

from __future__ import annotations

from typing import Any


def v1_to_v2(record: dict[str, Any]) -> dict[str, Any]:
    """v2 adds ``call`` and ``delivered_at`` (an async step's concurrent call): a v1 exchange was made
    synchronously, so both are null.

    A pure addition, which Avro resolution would express by the new fields' defaults; but resolving
    v1 into v2 (fastavro's, the only resolver the decoder has) reads a body written in the ``bytes``
    branch of ``["null", "string", "bytes"]`` as the reader's ``string`` branch (a promotion it tries
    before the exact match), and a binary body does not decode as UTF-8. Upcasting instead, a v1
    event is read with v1's own schema, its bodies as written.
    """
    return {**record, "payload": {**record["payload"], "call": None, "delivered_at": None}}
