"""A run continued on a new topic: the link at the topic's start, and the folds it is seeded with.

Public inside the package. ``swarmlog continue`` (:mod:`swarmlog.continuation`) starts a new
topic with, in one Kafka transaction:

* ``run.continued`` at offset 0: the run (id, seed, code version, string-hash pin: what
  ``run.started`` says) and the **link** to the old topic: its name, the offset its part ends
  at (``from_end``), how many events the agents had counted there, and its replay token;
* one ``run.continued.seed`` per agent (``to`` = the agent): its fold at ``from_end``
  (:func:`.checkpoint.capture`) and the digest of its state there.

Every fold of the new topic — a live agent (``swarmlog run``), a swarm replay, the debugger —
reads the seed addressed to its agent and restores the fold from it (:func:`apply_seed`,
called by the engine), then goes on with the new topic's events. Both records are
bookkeeping, like state digests: no handler takes them and logical timers do not count them,
so an agent's event count goes on from the old topic's ``events_seen`` exactly as if the new
topic's events had been appended to the old one, and its timers come due where they would have.

**Rebasing.** What a fold holds of the old topic's offsets means nothing on the new one, so a
seed is rebased where it is read (:func:`rebase`): its position becomes the seed's own offset + 1;
the event ids it had taken are forgotten (ids name steps by offset: the new topic's ``a@5#0`` is
not the old one's); a timer still set counts from the seed (its ``timer.fired`` names the seed as
its cause, an offset the new topic holds); what it had recorded live lies in the old topic.
``continue`` refuses folds that carry more (a step waiting to be checked, a failure not retried,
a divergence, a parked input): those name old offsets and would mean nothing here.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from ..errors import RunContinuedElsewhere
from ..events import Event
from ..log.base import LogBackend
from ..log.protocol import RUN_CONTINUED, RUN_MOVED, RUN_SEEDED, Route
from ..schema.codec import Decoder
from ..schema.registry import SchemaRegistry
from . import interpreter
from .checkpoint import Core, restore

logger = logging.getLogger(__name__)

__all__ = ["Link", "Seed", "apply_seed", "read_link", "rebase", "take"]


@dataclass(frozen=True, slots=True)
class Seed:
    """One agent's seeded fold, as the new topic holds it."""

    agent: str
    offset: int
    fold: str
    """The captured fold, JSON (not rebased: as the old topic's fold left it)."""
    state_digest: str
    """Hex digest of the agent's state at the old topic's end."""


@dataclass(frozen=True, slots=True)
class Link:
    """A continued run's first record and its seeds: where the run came from."""

    topic: str
    """The new topic (the one that starts with the link)."""
    run_id: str
    seed: int
    swarm: str
    code_version: str
    agents: list[str]
    hash_seed: int | None
    hash_algorithm: str | None
    from_topic: str
    from_end: int
    """The old topic's part is its offsets ``[0, from_end)``."""
    events_seen: int
    token: str
    """The old topic's replay token of ``[0, from_end)``, JSON."""
    from_link: str | None
    """The topic the old topic itself continued (None: the old topic started the run)."""
    seeds: dict[str, Seed] = field(default_factory=dict)
    end: int = 1
    """The first offset after the link and its seeds: where the new topic's own events start."""

    @property
    def token_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(self.token)
        return doc


def read_link(*, backend: LogBackend, topic: str, registry: SchemaRegistry) -> Link | None:
    """The link at ``topic``'s start (None: the topic does not start with ``run.continued``).

    The link and its seeds are written in one transaction, so they are the topic's first
    records, one after the other; reading stops at the first record that is neither."""
    decoder = Decoder(registry)
    link: dict[str, Any] | None = None
    seeds: dict[str, Seed] = {}
    end = 0
    with backend.reader(topic) as reader:
        reader.assign(0)
        for batch in reader.batches():
            for m in batch:
                etype = decoder.route(m).event_type
                if link is None and etype != RUN_CONTINUED:
                    return None
                if link is not None and etype != RUN_SEEDED:
                    break
                _, rec = decoder.decode(m.value(), m.offset())
                if etype == RUN_CONTINUED:
                    link = {"run_id": rec["run_id"], **rec["payload"]}
                else:
                    p = rec["payload"]
                    seeds[p["agent"]] = Seed(agent=p["agent"], offset=m.offset(), fold=p["fold"],
                                             state_digest=p["state_digest"])
                end = m.offset() + 1
            else:
                continue
            break
    if link is None:
        return None
    return Link(topic=topic, run_id=link["run_id"], seed=link["seed"], swarm=link["swarm"],
                code_version=link["code_version"], agents=list(link["agents"]), hash_seed=link["hash_seed"],
                hash_algorithm=link["hash_algorithm"], from_topic=link["from_topic"], from_end=link["from_end"],
                events_seen=link["events_seen"], token=link["from_token"], from_link=link["from_link"],
                seeds=seeds, end=end)


def rebase(fold: dict[str, Any], *, at: int) -> dict[str, Any]:
    """``fold`` (captured at the old topic's end) as a fold of the new topic just after its seed at ``at``."""
    fold = dict(fold)
    fold["position"] = at + 1
    # Ids name steps by offset: the new topic's are not the old one's (Watch: none taken yet here).
    fold["watch"] = None
    # What the agent recorded live lies in the old topic; on this one it has recorded nothing yet.
    fold["last_recorded_step"] = -1
    fold["checked_from"] = 0
    # A timer set on the old topic counts from the seed: its firing names an offset this topic holds.
    fold["timers"] = [[name, at, due_count, due_wall_ms, firing] for name, _, due_count, due_wall_ms, firing
                      in fold["timers"]]
    return fold


def apply_seed(core: Core, event: Event) -> None:
    """Restore the fold a ``run.continued.seed`` carries into ``core`` (fresh: nothing folded before it).

    Why the engine calls this where it reads the seed, not the caller before the fold: every tool that
    folds a topic (the live worker, a swarm replay, the debugger, a snapshot's cursor) then starts a
    continued run's agents the same way, from the log alone."""
    restore(core, rebase(json.loads(event.payload["fold"]), at=event.offset))
    logger.debug("agent %s: fold seeded at offset %d (%d events counted on the topic it continues)", core.name,
                  event.offset, core.events_seen)


def take(core: Core, event: Event, route: Route) -> None:
    """The engine's fold of a ``run.continued`` (the run, as ``run.started`` gives it: for an agent that
    joins the run on this topic, without a seed) or of a ``run.continued.seed`` (the one to ``core``'s
    agent restores its fold). Neither counts as an event (see the module's docstring). ``core``: an
    :class:`~.engine.AgentCore` (this module does not import the engine, which imports it)."""
    etype, _, to, _ = route
    if etype == RUN_SEEDED:
        if to == core.name:
            apply_seed(core, event)
        return
    if etype == RUN_MOVED:
        # The end of the run's part on the topic it left. A live agent stops here, whichever life
        # reads it (one left running by mistake, one started later on the old topic): a step it ran
        # past the end would be in neither part of the run. A replay folds on, to nothing more.
        if core.live_sink is not None:
            raise RunContinuedElsewhere(topic=event.payload["from_topic"], to_topic=event.payload["to_topic"],
                                        end=event.payload["from_end"], agent=core.name)
        return
    # Before any handler runs, as for run.started: the run's handlers only run in an interpreter that
    # hashes strings as the one that recorded it (swarmlog.runtime.interpreter).
    core.run_pin = (event.payload.get("hash_seed"), event.payload.get("hash_algorithm"))
    interpreter.require(run_id=event.run_id, seed=core.run_pin[0], algorithm=core.run_pin[1])
    core.ctx.set_run(run_id=event.run_id, seed=event.payload["seed"])
