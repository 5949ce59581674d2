"""Replay tokens: a small, signed, versioned record that pins a range of a swarm's log down.

A token (version 2, :class:`ReplayTokenV2`) holds where the range is (topic, real start
offset, end), a hash chain over its events with a checkpoint every K events, the writer
schemas in use, the run's seed, code version and string-hash pin, and each agent's
state digest. ``swarmlog token create`` makes one from the log alone (a run that ended
recorded every agent's final digest); ``swarmlog token verify`` checks a topic named
explicitly — the token's own, a copy, a restored backup — and names the first offset
whose bytes differ and the first step whose outputs or state differ; ``token show``
prints one; tokens can be saved beside the mirror and listed
(:mod:`swarmlog_connectors.token_store`). Version 1 tokens (one stream hash) are still
read and verified.

Public face: :func:`create_token`, :func:`verify_token`, :func:`load_token`,
:func:`parse_token`, :func:`check_signature`, the documents and the check's report.
Machinery: ``_chain`` (the hash chain), ``_document`` (versions, signatures, files),
``_create``, ``_verify``, ``_v1``.
"""

from typing import TYPE_CHECKING

from .._lazy import exports
from ..errors import InvalidToken, SignatureUnchecked

if TYPE_CHECKING:
    from ._chain import DEFAULT_EVERY, Checkpoint
    from ._create import create_token
    from ._document import (
        TOKEN_VERSION,
        AnyToken,
        ReplayTokenV2,
        check_signature,
        load_token,
        parse_token,
        signature_status,
    )
    from ._v1 import ReplayToken, mismatches, token_from
    from ._verify import FirstDifference, TokenCheck, verify_token

# Every name is imported when first used (swarmlog._lazy). Creating and verifying a token replays
# the swarm's code: the runtime and the determinism guard; and a plain ``swarmlog replay``, whose
# parser names the checkpoint default (``--checkpoint-every``), reads no token at all
# (``cli_replay_3`` in bench/cli.py).
__getattr__ = exports(globals(), {
    "DEFAULT_EVERY": "._chain",
    "Checkpoint": "._chain",
    "create_token": "._create",
    "TOKEN_VERSION": "._document",
    "AnyToken": "._document",
    "ReplayTokenV2": "._document",
    "check_signature": "._document",
    "load_token": "._document",
    "parse_token": "._document",
    "signature_status": "._document",
    "ReplayToken": "._v1",
    "mismatches": "._v1",
    "token_from": "._v1",
    "FirstDifference": "._verify",
    "TokenCheck": "._verify",
    "verify_token": "._verify",
})

__all__ = [
    "DEFAULT_EVERY",
    "TOKEN_VERSION",
    "AnyToken",
    "Checkpoint",
    "FirstDifference",
    "InvalidToken",
    "ReplayToken",
    "ReplayTokenV2",
    "SignatureUnchecked",
    "TokenCheck",
    "check_signature",
    "create_token",
    "load_token",
    "mismatches",
    "parse_token",
    "signature_status",
    "token_from",
    "verify_token",
]
