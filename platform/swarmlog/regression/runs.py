"""Which recorded runs a regression replay takes: topics by pattern, or the runs the mirror lists.

One topic holds one run, so a run is named by its topic. Two ways to choose them:

* :func:`topics_matching`: every topic of the cluster whose whole name matches a regular
  expression (Kafka's internal topics, ``__consumer_offsets`` and the like, never);
* :func:`runs_in_mirror`: the runs the Postgres mirror holds, by swarm and start time
  (``swarmlog_connectors.recorded_runs``: one indexed row per run).

:func:`shard` splits the chosen runs across the pods of an Indexed Job: by a hash of the topic's
name, not by its place in the list, so that pods which list the topics at slightly different
moments (a topic created in between) still agree on where every run they both see goes.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import zlib
from typing import TYPE_CHECKING

from ..errors import UsageError

if TYPE_CHECKING:
    from ..settings import Settings

__all__ = ["parse_since", "runs_in_mirror", "shard", "topics_matching"]

logger = logging.getLogger(__name__)


def topics_matching(settings: Settings, pattern: str) -> list[str]:
    """The cluster's single-partition topics whose whole name matches ``pattern``, sorted: the sink's
    pattern (:class:`~swarmlog.kafka.discovery.TopicPattern`), side and internal topics left out."""
    from ..kafka.config import admin_client
    from ..kafka.discovery import TopicPattern, discover

    found = discover(settings, TopicPattern(pattern), client=admin_client(settings))
    for topic, partitions in sorted(found.refused.items()):
        logger.warning("topic %s matches %r but has %d partitions: not a swarm's log, not replayed", topic,
                       pattern, partitions)
    return sorted(found.topics | found.unsettled)  # an unsettled one is reported as the replay finds it


def runs_in_mirror(settings: Settings, *, swarm: str | None, since: dt.datetime | None) -> list[str]:
    """The topics of the runs the mirror lists (of ``swarm``, started since ``since``), oldest first."""
    from ..replaying.mirror import from_the_mirror

    return [r.topic for r in from_the_mirror("recorded_runs")(settings, swarm=swarm, since=since)]


_DURATION = re.compile(r"^(\d+)([smhdw])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_since(text: str, *, now: dt.datetime | None = None) -> dt.datetime:
    """``7d``, ``36h``, ``90m`` (before now) or an ISO 8601 time (UTC unless it says otherwise)."""
    now = now or dt.datetime.now(dt.UTC)
    if m := _DURATION.match(text.strip()):
        return now - dt.timedelta(**{_UNITS[m.group(2)]: int(m.group(1))})
    try:
        when = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(f"--since {text!r}: give a duration before now (7d, 36h, 90m) or an ISO 8601 time "
                         f"(2026-12-01T00:00:00Z)") from None
    return when if when.tzinfo else when.replace(tzinfo=dt.UTC)


def shard(topics: list[str], *, index: int, count: int) -> list[str]:
    """The topics of shard ``index`` of ``count`` (crc32 of the name: stable across processes and hosts)."""
    if count < 1 or not 0 <= index < count:
        raise UsageError(f"shard {index} of {count}: the index must be in 0..{count - 1} (JOB_COMPLETION_INDEX "
                         f"of an Indexed Job with {count} completions)")
    return [t for t in topics if zlib.crc32(t.encode()) % count == index]
