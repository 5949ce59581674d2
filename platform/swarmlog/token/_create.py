"""Making a version 2 token from a log, in one pass: ``swarmlog token create``.

The pass reads ``[start, end)`` once: the chain over every message, the writer
fingerprints in use, the run's ``run.started``, and each agent's latest state digest
record (:mod:`swarmlog.runtime.digests`). The agents' states therefore come from the
log alone: a run that ended recorded every agent's final digest, so a token can be made
afterwards by anyone who can read the topic, without the swarm's code. With the code
(``swarm=``), the states come from a replay instead, and a replay that diverges from
the log makes no token: a token pins down a history, not a disagreement about one.
"""

from __future__ import annotations

from typing import Any

from ..agent import Swarm
from ..errors import NondeterminismError, SwarmlogError
from ..log.base import LogBackend
from ..log.protocol import H_TYPE, RUN_CONTINUED, RUN_STARTED_HEADER, STATE_DIGEST_TYPE
from ..runtime import SwarmReplayResult, interpreter, replay_swarm_log
from ..runtime.digests import DigestRecord
from ..schema.codec import FINGERPRINT_LEN, MAGIC, Decoder
from ..schema.registry import SchemaRegistry
from ._chain import DEFAULT_EVERY, WHOLE, ChainBuilder
from ._document import ReplayTokenV2

_FP = slice(len(MAGIC), len(MAGIC) + FINGERPRINT_LEN)
_RUN_FIRST = frozenset({RUN_STARTED_HEADER, (H_TYPE, RUN_CONTINUED.encode())})
"""The run's first record: its ``run.started``, or a continued run's ``run.continued`` (which says the same)."""


def schema_name(registry: SchemaRegistry, fingerprint: bytes) -> str:
    """``<type>/v<N>`` of a writer fingerprint, or ``unknown/<hex>``."""
    writer = registry.by_fingerprint(fingerprint)
    return f"{writer.event_type}/v{writer.version}" if writer is not None else f"unknown/{fingerprint.hex()}"


class LogFacts:
    """What one pass over a range of the log learns for a token (also used to check one)."""

    def __init__(self, *, registry: SchemaRegistry) -> None:
        self.decoder = Decoder(registry)
        self.registry = registry
        self.fingerprints: set[bytes] = set()
        self.run: dict[str, Any] | None = None
        self.digests: dict[str, DigestRecord] = {}
        """Agent -> its state digest record with the greatest position (the latest, on a tie)."""

    def update_batch(self, msgs: list[Any]) -> None:
        fps = self.fingerprints
        for m in msgs:
            value = m.value() or b""
            fps.add(value[_FP])
            headers = m.headers()
            if not headers:
                continue
            for k, v in headers:
                if k == H_TYPE and v == STATE_DIGEST_TYPE:
                    self._digest(m)
                elif (k, v) in _RUN_FIRST and self.run is None:
                    self._run(m)

    def _decode(self, m: Any) -> dict[str, Any] | None:
        try:
            return self.decoder.decode(m.value(), m.offset())[1]
        except SwarmlogError:
            return None  # not an event: the chain still covers its bytes

    def _digest(self, m: Any) -> None:
        rec = self._decode(m)
        if rec is None:
            return
        record = DigestRecord.from_payload(rec["payload"])
        last = self.digests.get(rec["agent_id"])
        if last is None or record.position >= last.position:
            self.digests[rec["agent_id"]] = record

    def _run(self, m: Any) -> None:
        rec = self._decode(m)
        if rec is not None:
            self.run = {"run_id": rec["run_id"], **rec["payload"]}

    def schemas(self) -> dict[str, str]:
        return {schema_name(self.registry, fp): fp.hex() for fp in sorted(self.fingerprints)}


def create_token(*, backend: LogBackend, topic: str, registry: SchemaRegistry, to: int | None = None,
                 every: int = DEFAULT_EVERY, swarm: Swarm | None = None,
                 replayed: SwarmReplayResult | None = None) -> ReplayTokenV2:
    """A version 3 token of ``topic`` from its real start up to ``to`` (exclusive; default: its end).

    The agents' states come from the digests the run recorded, or — with ``swarm``, or
    ``replayed``, a replay of the same range already made — from the swarm's code.
    """
    low, _ = backend.watermarks(topic)
    chain = ChainBuilder(start_offset=low, every=every, covers=WHOLE)  # version 3: whole messages
    facts = LogFacts(registry=registry)
    with backend.reader(topic) as reader:
        reader.assign(low)
        for batch in reader.batches(end=to):
            chain.update_batch(batch)
            facts.update_batch(batch)
        end = reader.position.end_offset if to is None else max(to, low)
    checkpoints = chain.finish(end)
    run = facts.run or {}
    if swarm is not None and replayed is None:
        replayed = replay_swarm_log(backend=backend, swarm=swarm, topic=topic, registry=registry, to=end)
    if replayed is not None:
        first = replayed.first_divergence
        if first is not None:
            raise NondeterminismError(offset=first.offset, agent=first.agent,
                                      detail=f"the swarm's code diverges from the log here ({first.kind}: "
                                             f"{first.detail}); a token pins a history down, so none is made from "
                                             f"a replay that disagrees with it",
                                      recorded=first.recorded, replayed=first.replayed)
        agents, positions = dict(replayed.agents), {a: end for a in replayed.agents}
        source = f"replay:{replayed.swarm}"
    else:
        agents = {a: r.state.hex() for a, r in sorted(facts.digests.items())}
        positions = {a: r.position for a, r in sorted(facts.digests.items())}
        source = "log"
    return ReplayTokenV2(
        topic=topic, run_id=run.get("run_id"), seed=run.get("seed"), code_version=run.get("code_version"),
        interpreter=interpreter.as_recorded(run) if run else {}, start_offset=low, end_offset=end, events=chain.events,
        chain_every=every, checkpoints=checkpoints, schemas=facts.schemas(), agents=agents,
        agent_positions=positions, agents_from=source)
