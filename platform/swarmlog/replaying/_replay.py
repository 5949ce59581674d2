"""Replay: rebuild every agent's state by consuming the log from offset zero.

Two replays, one public face:

* :func:`replay` folds the log with a reducer (the ledger by default): what can be
  rebuilt from the log alone, with no swarm code.
* :func:`replay_swarm` re-runs a swarm's handlers against the log, serving every
  input and effect from it, and reports where the code now diverges from the run.

Two ways in for :func:`replay`:

* a fresh reader that starts at the log start (no group, nothing to reset, nothing
  committed);
* ``group=G``: the way it runs on Kubernetes. The group's offset is reset to the log
  start — which Kafka only allows while the group has no active members, so a replay
  never yanks the position from under a running consumer — then the replay joins G,
  consumes, and commits where it stopped.

Messages that do not decode are reported with their offsets, never silently skipped.

A log that no longer starts at offset 0 (finite retention, DeleteRecords) cannot rebuild
the run: both replays refuse it with :class:`~swarmlog.errors.HistoryIncomplete`.
``replay(from_log_start=True)`` folds what is left anyway, loudly, and its result (and
token) records the offset it really started at.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import HistoryHoles, UsageError
from ..kafka.backend import backend_for
from ..log.base import History, LogBackend, read_from_log_start, require_complete_history, warn_if_history_deletes
from ..log.protocol import agent_group, replay_group
from ..schema.registry import SchemaRegistry
from ..settings import Settings
from .fold import Fold, Reducer, ReplayResult

if TYPE_CHECKING:
    from ..agent import Swarm
    from ..runtime import LiveStates, SwarmReplayResult

logger = logging.getLogger(__name__)

__all__ = ["replay", "replay_swarm"]


def replay(
    *,
    settings: Settings,
    topic: str | None = None,
    to: int | None = None,
    group: str | None = None,
    reset: bool = True,
    reducer: Reducer | None = None,
    registry: SchemaRegistry | None = None,
    progress: Callable[[int, int], None] | None = None,
    backend: LogBackend | None = None,
    from_log_start: bool = False,
) -> ReplayResult:
    """Rebuild every agent's state from the start of the log, up to ``to`` (exclusive).

    With ``group``, reset that consumer group to the log start first (refused
    while it has active members); with ``reset=False`` the group must already
    be at the log start (e.g. reset by ``kafka-consumer-groups --reset-offsets
    --to-earliest --execute``).

    A log that no longer starts at offset 0 is refused (:class:`~swarmlog.errors.HistoryIncomplete`)
    unless ``from_log_start``: then what is left is folded, with a warning, and the result's
    ``start_offset`` says where it began.
    """
    topic = topic or settings.topic
    registry = registry or SchemaRegistry.load(settings.schema_dirs())
    backend = backend_for(settings, backend)
    fold = Fold(registry=registry, reducer=reducer)
    with backend.reader(topic, group=group) as reader:
        low, high = backend.watermarks(topic)
        fold.base = low
        if from_log_start:
            history = backend.history(topic)
            warn_if_history_deletes(history, topic)
            if low != 0:
                logger.warning("topic %r starts at offset %d, not 0 (%s): replaying what is left, which is not "
                               "the whole run", topic, history.log_start, history.describe())
        else:
            require_complete_history(backend, topic, log_start=low)
        total = (min(high, to) if to is not None else high) - low
        read_from_log_start(backend, reader, topic=topic, group=group, low=low, reset=reset)
        for batch in reader.batches(end=to):
            fold.apply_batch(batch)
            if progress is not None:
                progress(reader.position.end_offset - low, total)
        end = reader.position.end_offset
        if fold.holes and not from_log_start:
            # Causes are checked when written: one naming an offset that holds nothing is an event the
            # log lost since. The states folded from the rest are not the run's: stop, and say where.
            raise HistoryHoles(topic=topic, holes=fold.holes, remedy=History.remedy(topic))
        if group is not None:
            reader.commit(end)
    result = fold.result(end, start_offset=low)
    if result.holes:
        logger.warning("topic %r has lost events: %d offset(s) hold nothing though later events name them as causes "
                       "(the first: %d); replayed what is left", topic, len(result.holes), result.holes[0].offset)
    return result


def replay_swarm(
    *,
    settings: Settings,
    swarm: Swarm,
    topic: str | None = None,
    to: int | None = None,
    strict: bool = False,
    group: str | None = None,
    reset: bool = True,
    registry: SchemaRegistry | None = None,
    progress: Callable[[int, int], None] | None = None,
    backend: LogBackend | None = None,
    live_states: LiveStates | None = None,
    workers: int | None = None,
    from_checkpoints: bool = False,
    follow_link: bool = True,
) -> SwarmReplayResult:
    """Re-run ``swarm``'s handlers over the recorded log (writing nothing to it).

    With ``group``, read as that consumer group (the replay's own: never an agent's, whose
    group says how far the live agent got): reset it to the log start first, or with
    ``reset=False`` require it to be there already; it commits where the replay ended.

    Returns a :class:`SwarmReplayResult`: per-agent hashes of ``agent.state``, the
    stream hash, and every divergence between what the code does now and what the
    log recorded (``first_divergence`` says where a changed program first departs
    from the run). Every step's resulting state is compared with the digest the live
    agent recorded for it: a state that departs with no output departing is a divergence
    of kind ``state`` at that step, with a diff of the two states when ``live_states``
    can give the live one (else the two digests). ``strict=True`` raises
    :class:`~swarmlog.errors.NondeterminismError` at the first divergence instead.

    ``workers``: how many processes fold the agents, each some of them over the whole log (an
    agent's fold reads only the log, never another agent's): None, one per CPU this process may
    use (its affinity and cgroup quota), at most one per agent. The result is the same however
    many; a short log, a strict replay and one with ``live_states`` or tracing use one process.

    ``from_checkpoints=True``: each agent starts from its latest verified checkpoint
    (``SWARMLOG_CHECKPOINT_EVERY``, docs/checkpoints.md) and the steps before it are not re-run
    (``result.resumed_from`` says where each started): the replay costs what the log's tail does,
    and checks only the tail. The default re-runs and checks everything from the log start.

    A topic that continues a run (``swarmlog continue``) is replayed from the agents' seeds; with
    ``follow_link`` (the default) the old topic's part is replayed too, up to the link, and checked
    against the seeds (``result.link``: :class:`~swarmlog.continuation.LinkCheck`, which says so when
    the old topic is gone). docs/long-runs.md.
    """
    from ..runtime import replay_swarm_log

    topic = topic or settings.topic
    if group is not None:
        for name in swarm.agent_names:
            if group == agent_group(topic, name):
                raise UsageError(f"consumer group {group!r} is agent {name!r}'s own: its committed offset says how "
                                 f"far the live agent got. Give the replay a group of its own (the chart's default "
                                 f"is {replay_group(topic)!r})")
    registry = registry or SchemaRegistry.load(settings.schema_dirs())
    backend = backend_for(settings, backend)
    with backend.reader(topic):
        pass  # refuses a missing or multi-partition topic with a clear error
    require_complete_history(backend, topic)  # the agents' code replays from offset 0 or not at all
    result = replay_swarm_log(backend=backend, swarm=swarm, topic=topic, registry=registry, to=to, strict=strict,
                              group=group, reset=reset, progress=progress, live_states=live_states, workers=workers,
                              from_checkpoints=from_checkpoints)
    if follow_link and result.continued:  # told by the replay's own read: the log is read once
        from ..continuation import check_link

        result.link = check_link(backend=backend, swarm=swarm, topic=topic, registry=registry,
                                 token_key=settings.token_key_bytes(), workers=workers)
    return result
