"""``swarmlog continue``: go on with a run on a new topic, seeded with every agent's fold.

A run whose topic grows without end (retention, compaction, the cost of re-reading it) goes on on a
new topic; the old one stays readable until retention retires it. :func:`continue_run`:

1. **A well-defined end.** The old topic's part ends at its high watermark ``E``, read once at the
   start. The swarm must be stopped on it (scaled to zero) and every message on it handled: the old
   topic is replayed with the swarm's code up to ``E``, and a fold that is not clean there refuses the
   continuation (:class:`~swarmlog.errors.ContinueRefused`) — a message the live agent never handled
   (in flight: its outputs would be lost), a failed step not retried, a divergence, an input parked.
   Nothing is then waiting anywhere: every message of ``[0, E)`` has been handled and what its
   handler wrote lies in ``[0, E)``.
2. **Verified folds.** Each agent's fold at ``E`` comes from that replay (from its latest verified
   checkpoint, or from zero without one), whose every step is checked against the log; its state's
   digest must also equal the digest the live agent recorded when it last stopped cleanly, when that
   is its last record.
3. **One transaction.** The new topic gets ``run.continued`` (the run, the link: old topic, ``E``, its
   replay token) and one ``run.continued.seed`` per agent, and the old topic ``run.continued.to``
   (where the run went), in one Kafka transaction under a transactional id of the new topic's own
   (``@continue``), after the old topic's watermark is read again: if it moved (an agent still
   running there), the transaction is aborted and nothing is written. Either the link, every seed and
   the old topic's last word are visible (to ``read_committed`` readers, which every swarmlog reader
   is), or none is. A live agent that reads ``run.continued.to`` stops there (parked: up, not ready,
   saying where the run went).

**A retry** (after a SIGKILL, a crash, a refusal fixed) first fences the transactional id, which
aborts whatever an earlier attempt left open, then reads the new topic: if it holds the same link
already (an earlier attempt committed), it returns that link and writes nothing; if it holds
nothing, it does everything again — same end, same folds, same records. So however often
``continue`` is killed and retried, the new topic holds the link and its seeds exactly once.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import ContinueRefused, TopicNotFound
from ..kafka.backend import backend_for
from ..log.base import LogBackend, require_complete_history
from ..log.protocol import (
    H_TYPE,
    RUN_CONTINUED,
    RUN_MOVED,
    RUN_SEEDED,
    RUN_WRITER,
    run_continued_id,
    run_moved_id,
    run_seed_id,
)
from ..schema.codec import Encoder
from ..schema.registry import SchemaRegistry
from ..settings import Settings

if TYPE_CHECKING:
    from ..agent import Swarm
    from ..runtime.continued import Link

logger = logging.getLogger(__name__)

__all__ = ["CONTINUE_CHANNEL", "TOKEN_LINKS", "Continued", "continue_run"]

CONTINUE_CHANNEL = "@continue"
"""The name ``continue`` opens its transactional channel under on the new topic: one transactional id
per new topic, so a retry fences (and aborts) whatever an earlier attempt left open."""

TOKEN_LINKS = 1000
"""At most this many links in the old topic's token the link carries (its chain every ``E / 1000``
events, at least the default): the link is one Kafka message, and a token of every 1,000 events of a
long run would outgrow one."""


@dataclass(frozen=True, slots=True)
class Continued:
    """What :func:`continue_run` did."""

    from_topic: str
    to_topic: str
    from_end: int
    """The old topic's part: offsets ``[0, from_end)``."""
    created: bool
    """False: the new topic held this link already (a retry after the commit): nothing was written."""
    agents: dict[str, str] = field(default_factory=dict)
    """Agent -> the digest (hex) of its seeded state."""
    resumed_from: dict[str, int] = field(default_factory=dict)
    """Agent -> the offset of the verified checkpoint its fold was replayed from (the others: from zero)."""
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"from_topic": self.from_topic, "to_topic": self.to_topic, "from_end": self.from_end,
                "created": self.created, "agents": dict(sorted(self.agents.items())),
                "resumed_from": dict(sorted(self.resumed_from.items())), "seconds": round(self.seconds, 3)}


def continue_run(*, settings: Settings, swarm: Swarm, from_topic: str, to_topic: str,
                 backend: LogBackend | None = None, registry: SchemaRegistry | None = None,
                 from_checkpoints: bool = True,
                 progress: Callable[[int, int], None] | None = None) -> Continued:
    """Continue the run of ``from_topic`` on ``to_topic`` (made if missing; it must hold nothing else).

    ``from_checkpoints``: each agent's fold at the old topic's end is replayed from its latest
    verified checkpoint (the default; an agent without one replays from zero); False replays every
    agent from zero. Raises :class:`~swarmlog.errors.ContinueRefused` when the old topic's part is not
    one to continue from (see the module's docstring); nothing is written then.
    """
    from ..runtime import find_run, replay_swarm_log
    from ..runtime.continued import read_link

    started = time.monotonic()
    registry = registry or SchemaRegistry.load(settings.schema_dirs())
    backend = backend_for(settings, backend)

    def refuse(reason: str, remedy: str) -> ContinueRefused:
        return ContinueRefused(from_topic=from_topic, to_topic=to_topic, reason=reason, remedy=remedy)

    if from_topic == to_topic:
        raise refuse("they are the same topic", "name a new topic with --to")
    try:
        with backend.reader(from_topic):
            pass
    except TopicNotFound:
        raise refuse(f"topic {from_topic!r} does not exist", "name the run's topic with --from") from None
    require_complete_history(backend, from_topic)  # its part is replayed from offset 0
    run = find_run(settings, from_topic, registry, backend=backend)
    if run is None:
        raise refuse(f"topic {from_topic!r} holds no run (no run.started)", "start the run first")
    if run.swarm and run.swarm != swarm.name:
        raise refuse(f"the run is of swarm {run.swarm!r}, the code given is swarm {swarm.name!r}",
                     "give the swarm the run was started with (--swarm MODULE:SWARM)")

    backend.create_topic(to_topic)
    channel = backend.agent_channel(to_topic, CONTINUE_CHANNEL)
    try:
        # Whatever an earlier attempt left open is aborted here, and from here on it cannot commit:
        # what the read below sees is all an earlier attempt will ever have written.
        channel.fence()
        existing = _what_is_there(backend, to_topic, registry, read_link)
        if existing is not None:
            if existing.from_topic != from_topic:
                raise refuse(f"topic {to_topic!r} continues topic {existing.from_topic!r} already",
                             "name a new topic with --to")
            logger.info("topic %s already continues %s up to offset %d: nothing to do", to_topic, from_topic,
                        existing.from_end)
            return Continued(from_topic=from_topic, to_topic=to_topic, from_end=existing.from_end, created=False,
                             agents={a: s.state_digest for a, s in existing.seeds.items()},
                             seconds=time.monotonic() - started)

        _, end = backend.watermarks(from_topic)
        logger.info("continuing run %s of %s on %s: replaying %s up to offset %d", run.run_id, from_topic, to_topic,
                    from_topic, end)
        replayed = replay_swarm_log(backend=backend, swarm=swarm, topic=from_topic, registry=registry, to=end,
                                    from_checkpoints=from_checkpoints, folds=True, progress=progress)
        _require_clean(replayed, refuse=refuse, end=end)
        digests = _check_recorded_digests(backend=backend, topic=from_topic, registry=registry, end=end,
                                          replayed=replayed, refuse=refuse)
        token = _token(settings=settings, backend=backend, topic=from_topic, registry=registry, end=end)
        old_link = read_link(backend=backend, topic=from_topic, registry=registry)
        events_seen = {fold["events_seen"] for fold in replayed.folds.values()}
        if len(events_seen) > 1:  # every fold counts every event: one number, or the folds are not of one log
            raise refuse(f"the agents' folds counted different numbers of events ({sorted(events_seen)})",
                         "report this as a bug")
        payload = {"swarm": swarm.name, "seed": run.seed, "code_version": run.code_version,
                   "agents": list(swarm.agent_names), "hash_seed": run.hash_seed,
                   "hash_algorithm": run.hash_algorithm, "from_topic": from_topic, "from_end": end,
                   "events_seen": events_seen.pop() if events_seen else 0, "from_token": token,
                   "from_link": old_link.from_topic if old_link is not None else None}
        link_enc = Encoder(registry.latest(RUN_CONTINUED))
        seed_enc = Encoder(registry.latest(RUN_SEEDED))
        moved_enc = Encoder(registry.latest(RUN_MOVED))
        key = RUN_WRITER.encode()
        channel.begin()
        try:
            channel.send_located(link_enc.encode_event(run_continued_id(run.run_id), run.run_id, RUN_WRITER, None, [],
                                                       link_enc.schema.validate_payload(payload)),
                                 key, link_enc.headers(key, None))
            for agent in swarm.agent_names:
                seed = {"agent": agent, "fold": json.dumps(replayed.folds[agent], separators=(",", ":"),
                                                           ensure_ascii=False),
                        "state_digest": digests[agent]}
                channel.send_located(seed_enc.encode_event(run_seed_id(run.run_id, agent), run.run_id, RUN_WRITER,
                                                           agent, [], seed_enc.schema.validate_payload(seed)),
                                     key, seed_enc.headers(key, agent.encode()))
            # The end is the end only if nothing was appended since it was read: an agent still
            # running on the old topic would write past it, and what it wrote would be in neither part.
            _, now = backend.watermarks(from_topic)
            if now != end:
                raise refuse(f"topic {from_topic!r} moved during the continuation (its end was {end}, now {now}): "
                             f"an agent still runs on it", "stop the swarm on the old topic (scale its agents to "
                             "zero) and run `swarmlog continue` again")
            # And the old topic's part ends with where the run went, in the same transaction (it spans both
            # topics): an agent left running there, or started there later, reads it and stops (parked, not
            # ready), instead of going on with a run that is now the new topic's.
            moved = {"from_topic": from_topic, "to_topic": to_topic, "from_end": end}
            channel.send_beside(from_topic, moved_enc.encode_event(run_moved_id(run.run_id), run.run_id, RUN_WRITER,
                                                                   None, [], moved_enc.schema.validate_payload(moved)),
                                key, moved_enc.headers(key, None))
            channel.commit(None)  # outputs only: nothing is consumed
        except BaseException:
            channel.abort()
            raise
    finally:
        channel.close()
    logger.info("run %s continued on %s: the link and %d seed(s) at offsets 0-%d, the old part [0, %d) of %s",
                run.run_id, to_topic, len(swarm.agent_names), len(swarm.agent_names), end, from_topic)
    return Continued(from_topic=from_topic, to_topic=to_topic, from_end=end, created=True, agents=digests,
                     resumed_from=dict(replayed.resumed_from), seconds=time.monotonic() - started)


def _what_is_there(backend: LogBackend, topic: str, registry: SchemaRegistry,
                   read_link: Callable[..., Link | None]) -> Link | None:
    """The link ``topic`` starts with, None if it holds nothing; refused if it holds something else."""
    link = read_link(backend=backend, topic=topic, registry=registry)
    if link is not None:
        return link
    with backend.reader(topic) as reader:
        reader.assign(0)
        for batch in reader.batches():
            if batch:
                raise ContinueRefused(from_topic="?", to_topic=topic,
                                      reason=f"topic {topic!r} holds events already (offset {batch[0].offset()} on)",
                                      remedy="continue on a new, empty topic")
    return None


def _require_clean(replayed: Any, *, refuse: Callable[[str, str], ContinueRefused], end: int) -> None:
    """Every agent's fold at the end is one a new topic can start from (see the module's docstring)."""
    first = replayed.first_divergence
    if first is not None:
        raise refuse(f"the swarm's code diverges from the log at offset {first.offset} (agent {first.agent}, "
                     f"{first.kind}: {first.detail})", "continue with the code that made the run (`swarmlog "
                     "replay --swarm` shows the divergence)")
    for agent, offset in sorted(replayed.unverified_from.items()):
        raise refuse(f"agent {agent!r} has not handled the old topic up to its end {end}: its step at offset "
                     f"{offset} never ran live (a message in flight, or a parked input)",
                     "run the swarm on the old topic until it is quiet (`swarmlog run --until-quiet`), stop "
                     "it, and run `swarmlog continue` again")
    for agent, fold in sorted(replayed.folds.items()):
        if fold["failures"]:
            offsets = ", ".join(str(f[0]) for f in fold["failures"])
            raise refuse(f"agent {agent!r} has failed steps not retried (at offset {offsets})",
                         "deploy the fix and `swarmlog retry` them on the old topic first (docs/evolution.md)")
        if fold["pending"] or fold["stopped"] or fold["divergences"] or fold["unverified"] is not None:
            raise refuse(f"agent {agent!r}'s fold at the end is not clean", "replay the old topic with `swarmlog "
                         "replay --swarm` to see why")
        if fold["watch"] and fold["watch"].get("parked"):
            raise refuse(f"agent {agent!r} is parked at an input it cannot read (offset "
                         f"{fold['watch']['parked'][0]})", "upgrade the agent's schemas and run it to the end first")


def _check_recorded_digests(*, backend: LogBackend, topic: str, registry: SchemaRegistry, end: int, replayed: Any,
                            refuse: Callable[[str, str], ContinueRefused]) -> dict[str, str]:
    """Each agent's state digest at the end (hex); where the live agent's last record is the digest it wrote
    when it stopped cleanly, the replayed state must digest to it (the replay checked every step's digest
    already: this is the live agent's own last word)."""
    from ..runtime.digests import state_digest
    from ..token._create import LogFacts

    facts = LogFacts(registry=registry)
    moved = (H_TYPE, RUN_MOVED.encode())
    with backend.reader(topic) as reader:
        reader.assign(0)
        for batch in reader.batches(end=end):
            facts.update_batch(batch)
            for m in batch:
                if moved in (m.headers() or ()):
                    _, rec = facts.decoder.decode(m.value(), m.offset())
                    raise refuse(f"its run went on on topic {rec['payload']['to_topic']!r} already (the part on "
                                 f"{topic!r} ends at offset {rec['payload']['from_end']})",
                                 f"continue that topic instead (--from {rec['payload']['to_topic']})")
    digests: dict[str, str] = {}
    for agent, state in replayed.states.items():
        digest = state_digest(state, agent=agent).hex()
        record = facts.digests.get(agent)
        if record is not None and record.final and record.state.hex() != digest:
            raise refuse(f"agent {agent!r}'s state at the end digests to {digest[:16]}…, the digest its live agent "
                         f"recorded when it stopped (at offset {record.position}) is {record.state.hex()[:16]}…",
                         "replay the old topic with `swarmlog replay --swarm` to see where they part")
        digests[agent] = digest
    return digests


def _token(*, settings: Settings, backend: LogBackend, topic: str, registry: SchemaRegistry, end: int) -> str:
    """The old topic's token of ``[0, end)`` as JSON (signed with SWARMLOG_TOKEN_KEY when set), its chain
    coarse enough to fit the link (:data:`TOKEN_LINKS`)."""
    from ..token import DEFAULT_EVERY, create_token

    every = max(DEFAULT_EVERY, math.ceil(end / TOKEN_LINKS))
    token = create_token(backend=backend, topic=topic, registry=registry, to=end, every=every)
    return json.dumps(token.signed(settings.token_key_bytes()).to_json(), separators=(",", ":"), sort_keys=True)
