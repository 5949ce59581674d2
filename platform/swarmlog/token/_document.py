"""The replay token as a document: version 2, reading version 1, signatures, files.

A version 2 token pins a range of a swarm's log down:

* where it is: ``topic``, the **real** ``start_offset`` (the log's first offset when the
  token was made: a topic whose older events were deleted, or a backup restored from
  a later point, does not start at zero) and ``end_offset`` (exclusive);
* what it holds: ``events``, the hash chain over their bytes with a checkpoint every
  ``chain_every`` events (:mod:`._chain`), and the writer ``schemas`` in use (type,
  version, fingerprint);
* what made it: ``run_id``, ``seed``, ``code_version`` and the ``interpreter`` the run was
  pinned to (``run.started`` v2's string-hash seed and algorithm,
  :func:`swarmlog.runtime.interpreter.as_recorded`);
* what it must give: each agent's state digest (``agents``) as of ``agent_positions``,
  from the digests the run recorded in the log or from a replay of the swarm's code
  (``agents_from``).

Signatures: HMAC-SHA256 of the canonical JSON of everything but the signature, with
``SWARMLOG_TOKEN_KEY``. :func:`check_signature` is the one policy: a wrong signature
is refused; an unsigned token is refused when a key is set; a signed token with no
key set is refused (:class:`~swarmlog.errors.SignatureUnchecked`) unless the caller
asks to check the contents alone, and then it says so loudly — never silently
accepted, because a stale signature is exactly what a forger leaves.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ..errors import InvalidToken, SignatureUnchecked
from ._chain import Checkpoint
from ._v1 import ReplayToken

logger = logging.getLogger(__name__)

TOKEN_VERSION = 2
READABLE_VERSIONS = (1, 2)


@dataclass(frozen=True)
class ReplayTokenV2:
    topic: str
    run_id: str | None
    seed: int | None
    code_version: str | None
    interpreter: dict[str, str]
    start_offset: int
    end_offset: int
    events: int
    chain_every: int
    checkpoints: list[Checkpoint]
    schemas: dict[str, str]
    """``<event type>/v<N>`` -> the writer schema's fingerprint (hex), for every writer in the range."""
    agents: dict[str, str]
    """Agent -> sha256 of its state (canonical JSON), as of ``agent_positions``."""
    agent_positions: dict[str, int]
    agents_from: str
    """``log`` (the digests the live run recorded) or ``replay:<swarm>`` (a replay of the code)."""
    version: int = TOKEN_VERSION
    signature: str | None = field(default=None, compare=False)

    @property
    def chain_hash(self) -> str:
        """The chain's last link: equal for two logs only if every byte at every offset is."""
        return self.checkpoints[-1].link if self.checkpoints else ""

    @property
    def token_id(self) -> str:
        """A short name for the token: the start of the sha256 of its body."""
        return hashlib.sha256(self.body()).hexdigest()[:16]

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["checkpoints"] = [c.to_json() for c in self.checkpoints]
        return doc

    def body(self) -> bytes:
        doc = self.to_json()
        doc.pop("signature")
        return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()

    def signed(self, key: bytes | None) -> ReplayTokenV2:
        if not key:
            return self
        return replace(self, signature=hmac.new(key, self.body(), hashlib.sha256).hexdigest())

    def save(self, path: Path | str) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=1, sort_keys=True) + "\n")

    @classmethod
    def from_json(cls, doc: dict[str, Any], *, source: str) -> ReplayTokenV2:
        try:
            doc = dict(doc)
            doc["checkpoints"] = [Checkpoint.from_json(c) for c in doc["checkpoints"]]
            return cls(**doc)
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidToken(source=source, problem=f"malformed version 2 token: {exc}") from None


AnyToken = ReplayToken | ReplayTokenV2


def parse_token(doc: Any, *, source: str) -> AnyToken:
    """A token of any readable version from its JSON document."""
    if not isinstance(doc, dict):
        raise InvalidToken(source=source, problem="not a JSON object")
    version = doc.get("version")
    if version == 2:
        return ReplayTokenV2.from_json(doc, source=source)
    if version == 1:
        try:
            return ReplayToken(**doc)
        except TypeError as exc:
            raise InvalidToken(source=source, problem=f"malformed version 1 token: {exc}") from None
    raise InvalidToken(source=source, problem=f"version {version!r}; this swarmlog reads versions "
                                              f"{', '.join(map(str, READABLE_VERSIONS))}")


def load_token(path: Path | str) -> AnyToken:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise InvalidToken(source=str(path), problem=f"cannot read it: {exc}") from None
    return parse_token(doc, source=str(path))


def signature_status(token: AnyToken, key: bytes | None) -> str:
    """``valid``, ``invalid``, ``unsigned`` or ``unchecked`` (signed, no key to check it with)."""
    if token.signature is None:
        return "unsigned"
    if not key:
        return "unchecked"
    expected = hmac.new(key, token.body(), hashlib.sha256).hexdigest()
    return "valid" if hmac.compare_digest(expected, token.signature) else "invalid"


def check_signature(token: AnyToken, key: bytes | None, *, source: str, allow_unchecked: bool = False) -> str:
    """Apply the signature policy (see the module's docstring); return :func:`signature_status`."""
    status = signature_status(token, key)
    if status == "invalid":
        raise InvalidToken(source=source, problem="its signature does not match SWARMLOG_TOKEN_KEY: it was altered "
                                                  "or signed with another key")
    if status == "unsigned" and key:
        raise InvalidToken(source=source, problem="it is not signed, but SWARMLOG_TOKEN_KEY is set: refusing an "
                                                  "unsigned token")
    if status == "unchecked":
        if not allow_unchecked:
            raise SignatureUnchecked(source=source)
        logger.warning("replay token %s is signed but its signature was NOT checked (no SWARMLOG_TOKEN_KEY): "
                       "only its contents are checked, which proves nothing about who made it", source)
    return status
