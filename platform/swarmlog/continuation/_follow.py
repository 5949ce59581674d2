"""Following a continued run's link: is the old topic's part the history the new topic was seeded from?

A swarm replay of a continued topic (``swarmlog replay --swarm``) verifies the new topic from its
seeds; :func:`check_link` verifies what the seeds stand on, through the link at the topic's start:

1. the old topic's bytes of ``[0, from_end)`` against the replay token the link holds (a copy
   restored from backup under the old name, or an old topic written to since, is told apart);
2. the swarm's code replayed over that part, from zero, every step checked as in any swarm
   replay: a divergence there is named with the old topic's offsets (a changed handler that
   departs from the run before the continuation);
3. each agent's state where the part ends equal to the state its seed holds;
4. and the old topic's own link, if it continued another topic in turn.

With the old topic gone (deleted, or its start deleted by retention), none of that can be done:
the check says so (``status`` ``gone`` or ``incomplete``) and is not a failure of the replay — the
new topic was still verified from its seeds, and its own token still covers the link, so the
seeds are what ``continue`` wrote. What is lost with the old topic is the re-verification of its
part from zero (docs/long-runs.md).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import HistoryIncomplete, TopicNotFound
from ..log.base import LogBackend, require_complete_history
from ..schema.registry import SchemaRegistry

if TYPE_CHECKING:
    from ..agent import Swarm
    from ..runtime import Divergence

logger = logging.getLogger(__name__)

__all__ = ["LINK_STATUSES", "ChainLink", "LinkCheck", "check_chain", "check_link"]

LINK_STATUSES = ("verified", "diverged", "altered", "gone", "incomplete")
"""``verified``: the old part replays to the seeds; ``diverged``: the code departs from it (or does not reach
a seed); ``altered``: its bytes are not the ones the link's token pins; ``gone``: the old topic does not exist
any more; ``incomplete``: its start was deleted (retention)."""


@dataclass(slots=True)
class LinkCheck:
    """What following a continued topic's link found."""

    topic: str
    """The continued (new) topic."""
    from_topic: str
    from_end: int
    status: str
    """One of :data:`LINK_STATUSES`."""
    detail: str
    divergences: list[Divergence] = field(default_factory=list)
    """The code's divergences in the old part, at the old topic's offsets."""
    seeds: dict[str, str] = field(default_factory=dict)
    """Agent -> ``same`` or why its seed is not what the old part's replay reaches."""
    events: int = 0
    """Events of the old part replayed."""
    earlier: LinkCheck | None = None
    """The old topic's own link, followed in turn (None: the old topic started the run, or could not be read)."""

    @property
    def ok(self) -> bool:
        """Nothing found wrong: the old part verified (or gone, which is said, not wrong), and so the links before."""
        return self.status in ("verified", "gone", "incomplete") and (self.earlier is None or self.earlier.ok)

    @property
    def diverged(self) -> bool:
        """The code departs from some part of the chain, or a part is not what its link pins."""
        return self.status in ("diverged", "altered") or (self.earlier is not None and self.earlier.diverged)

    @property
    def first_divergence(self) -> Divergence | None:
        from ..runtime import Divergence

        if self.earlier is not None and self.earlier.first_divergence is not None:
            return self.earlier.first_divergence  # an earlier part's comes first in the run
        return min(self.divergences, key=Divergence.sort_key) if self.divergences else None

    def chain(self) -> list[LinkCheck]:
        """This link and the ones before it, the latest first."""
        return [self, *(self.earlier.chain() if self.earlier is not None else [])]

    def to_json(self) -> dict[str, Any]:
        first = min(self.divergences, key=lambda d: d.sort_key()) if self.divergences else None
        return {"topic": self.topic, "from_topic": self.from_topic, "from_end": self.from_end,
                "status": self.status, "detail": self.detail, "events": self.events,
                "divergences": len(self.divergences), "first_divergence": first.to_json() if first else None,
                "seeds": dict(sorted(self.seeds.items())),
                "earlier": self.earlier.to_json() if self.earlier is not None else None}

    def lines(self) -> list[str]:
        """What the CLI prints of it, one line each."""
        out = []
        for link in self.chain():
            out.append(f"continues topic {link.from_topic} [0, {link.from_end}): {link.status.upper()}: "
                       f"{link.detail}")
            first = min(link.divergences, key=lambda d: d.sort_key()) if link.divergences else None
            if first is not None:
                out.append(f"  DIVERGED in {link.from_topic} first at offset {first.offset} (agent {first.agent}, "
                           f"{first.kind}): {first.detail}")
            out.extend(f"  seed of {agent}: {why}" for agent, why in sorted(link.seeds.items()) if why != "same")
        return out


def check_link(*, backend: LogBackend, swarm: Swarm, topic: str, registry: SchemaRegistry,
               token_key: bytes | None = None, workers: int | None = None) -> LinkCheck | None:
    """Follow the link ``topic`` starts with (None: it starts with none). See the module's docstring."""
    from ..runtime import replay_swarm_log
    from ..runtime.continued import read_link
    from ..runtime.digests import state_digest
    from ..token import ReplayTokenV2, parse_token, signature_status, verify_token

    link = read_link(backend=backend, topic=topic, registry=registry)
    if link is None:
        return None
    old, end = link.from_topic, link.from_end

    def checked(status: str, detail: str, **more: Any) -> LinkCheck:
        logger.log(logging.INFO if status == "verified" else logging.WARNING, "topic %s continues %s [0, %d): %s: %s",
                   topic, old, end, status, detail)
        return LinkCheck(topic=topic, from_topic=old, from_end=end, status=status, detail=detail, **more)

    seeded = ("its part was verified when it was continued; this topic was verified from its seeds, which its own "
              "token covers; the old part cannot be re-verified from zero any more")
    try:
        with backend.reader(old):
            pass
    except TopicNotFound:
        return checked("gone", f"topic {old!r} does not exist any more: {seeded}")
    try:
        require_complete_history(backend, old)
    except HistoryIncomplete as exc:
        return checked("incomplete", f"topic {old!r} starts at offset {exc.log_start} now (its start was deleted: "
                                     f"{exc.retention}): {seeded}")
    token = parse_token(link.token_doc, source=f"the link at the start of {topic}")
    if not isinstance(token, ReplayTokenV2):  # continue writes version 3: another is not a link it wrote
        return checked("altered", f"the link holds a version {token.version} token; `swarmlog continue` writes "
                                  f"version 3")
    # The link is covered by this topic's own token: the signature of the one it holds is not the root of trust.
    signature = signature_status(token, token_key)
    if signature == "invalid":
        return checked("altered", "the token the link holds does not match SWARMLOG_TOKEN_KEY's signature")
    match = verify_token(backend=backend, token=token, topic=old, registry=registry, signature=signature)
    if match.bad_segments or match.topic_end < end:
        where = "; ".join(match.lines()[1:3])
        return checked("altered", f"topic {old!r} is not the history the link's token pins ({where})")
    replayed = replay_swarm_log(backend=backend, swarm=swarm, topic=old, registry=registry, to=end, workers=workers)
    seeds: dict[str, str] = {}
    for agent in swarm.agent_names:
        seed = link.seeds.get(agent)
        if seed is None:
            seeds[agent] = "none: the agent joined the run on this topic"
            continue
        reached = state_digest(replayed.states[agent], agent=agent).hex()
        seeds[agent] = "same" if reached == seed.state_digest else (
            f"the old part's replay reaches state {reached[:16]}…, the seed holds {seed.state_digest[:16]}…")
    earlier = check_link(backend=backend, swarm=swarm, topic=old, registry=registry, token_key=token_key,
                         workers=workers) if link.from_link is not None else None
    more = {"divergences": list(replayed.divergences), "seeds": seeds, "events": replayed.events, "earlier": earlier}
    if replayed.divergences:
        first = replayed.first_divergence
        assert first is not None
        return checked("diverged", f"the code diverges from the old part first at offset {first.offset} of {old} "
                                   f"(agent {first.agent}, {first.kind})", **more)
    if any(why != "same" and not why.startswith("none") for why in seeds.values()):
        return checked("diverged", "the old part's replay does not reach the seeded states", **more)
    return checked("verified", f"replayed from zero ({replayed.events} events): every step as recorded, and every "
                               f"agent reaches its seed", **more)


@dataclass(frozen=True, slots=True)
class ChainLink:
    """One link of a token chain checked (:func:`check_chain`): the old topic's bytes against the token the
    link holds. ``status``: ``matches``, ``differs``, ``gone`` or ``incomplete``."""

    topic: str
    from_topic: str
    from_end: int
    status: str
    detail: str

    @property
    def ok(self) -> bool:
        return self.status != "differs"

    def line(self) -> str:
        return (f"link: {self.topic} continues {self.from_topic} [0, {self.from_end}): {self.status.upper()}: "
                f"{self.detail}")


def check_chain(*, backend: LogBackend, topic: str, registry: SchemaRegistry,
                token_key: bytes | None = None) -> list[ChainLink]:
    """The token chain from ``topic`` back (empty: ``topic`` continues no run): each link's old topic checked,
    byte for byte, against the token the link holds — what ``replay --verify`` adds once ``topic`` itself
    matches its token (which covers the link, and so the token in it). No code runs: the bytes only."""
    from ..runtime.continued import read_link
    from ..token import ReplayTokenV2, parse_token, signature_status, verify_token

    out: list[ChainLink] = []
    seen = {topic}
    link = read_link(backend=backend, topic=topic, registry=registry)
    while link is not None:
        old = link.from_topic

        def add(status: str, detail: str, link: Any = link) -> None:
            out.append(ChainLink(topic=link.topic, from_topic=link.from_topic, from_end=link.from_end, status=status,
                                 detail=detail))

        try:
            with backend.reader(old):
                pass
            require_complete_history(backend, old)
        except TopicNotFound:
            add("gone", "the topic does not exist any more: its bytes cannot be checked (the link's token still "
                        "says what they were)")
            break
        except HistoryIncomplete as exc:
            add("incomplete", f"the topic starts at offset {exc.log_start} now: its start cannot be checked")
            break
        token = parse_token(link.token_doc, source=f"the link at the start of {link.topic}")
        if not isinstance(token, ReplayTokenV2) or signature_status(token, token_key) == "invalid":
            add("differs", "the token the link holds is not one `swarmlog continue` wrote")
            break
        match = verify_token(backend=backend, token=token, topic=old, registry=registry,
                             signature=signature_status(token, token_key))
        if match.bad_segments or match.topic_end < link.from_end:
            add("differs", "; ".join(match.lines()[1:3]))
            break
        add("matches", f"every byte of its {token.events} events as the token in the link pins them")
        if old in seen:
            break
        seen.add(old)
        link = read_link(backend=backend, topic=old, registry=registry)
    return out
