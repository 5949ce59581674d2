"""A simulated run handed over to the real runtime: its log written to a Kafka topic, with its replay token.

The run's in-memory log is copied with the backend's offset-exact copy
(:meth:`~swarmlog.log.base.LogBackend.create_copy`, what ``swarmlog fork`` writes with): every
event at its offset with its bytes, headers and timestamp, the gaps — transaction
markers, the aborted transactions of agents that died before a commit — rebuilt with
records no ``read_committed`` reader sees. Each agent's consumer group is set to the
position the simulated agent committed. The topic then reads as what a live run of the
swarm would have written had its agents interleaved that way: ``swarmlog replay --swarm``
replays it, and the debugger's commands (``swarmlog log``, ``state``, ``timeline``,
``debug``) open it, as any other run.

The replay token (:mod:`swarmlog.token`) is made from the run's own log, replayed in
memory with the runtime's swarm replayer, before Kafka is touched; ``verify`` then
replays the exported topic on the broker and checks it gives the same token.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import CopyFailed
from ..log.protocol import agent_group
from ..settings import Settings
from ..token import ReplayToken, mismatches, token_from

if TYPE_CHECKING:
    from ._run import SimRun

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Exported:
    """Where a run was exported: the topic, its replay token, and where the token was saved."""

    topic: str
    token: ReplayToken
    token_path: Path | None
    swarm: str

    def __str__(self) -> str:
        saved = f" (token in {self.token_path})" if self.token_path else ""
        verify = f" --verify {self.token_path}" if self.token_path else ""
        return (f"exported to Kafka topic {self.topic}{saved}: {self.token.events} events, offsets "
                f"[{self.token.start_offset}, {self.token.end_offset}); replay it with swarm {self.swarm!r}'s code:\n"
                f"  SWARMLOG_TOPIC={self.topic} swarmlog replay --swarm MODULE:SWARM{verify}")


def export(run: SimRun, *, settings: Settings, topic: str | None = None, token_path: Path | str | None = None,
           verify: bool = True) -> Exported:
    """Write ``run``'s log into a new Kafka topic (default: ``<settings.topic>.sim-<stream hash>-<random>``)
    and make its replay token (saved to ``token_path`` if given, signed with
    ``SWARMLOG_TOKEN_KEY`` if set). With ``verify``, the exported topic is replayed on the
    broker and must give the same token (else :class:`~swarmlog.errors.CopyFailed`)."""
    from ..kafka.backend import KafkaBackend
    from ..replaying import replay_swarm
    from ..runtime import find_run

    swarm = run.swarm
    registry = run.decoder.registry
    local = run.replay()
    if topic is None:
        topic = f"{settings.topic}.sim-{local.stream_hash[:12]}-{os.urandom(3).hex()}"
    if local.divergences:  # the simulator wrote something the runtime would not have: never hand that over
        first = local.divergences[0]
        raise CopyFailed(topic=topic, detail=f"the simulated log does not replay (agent {first.agent} at offset "
                                             f"{first.offset}: {first.detail}); nothing was written")
    backend = KafkaBackend(settings)
    try:
        backend.create_copy(topic, run.log.messages(run.topic), end=run.log.watermarks(run.topic)[1])
        for a in run.states:
            position = run.log.committed(agent_group(run.topic, a), run.topic)
            if position is not None:
                backend.reset_group(agent_group(topic, a), topic, position)
        info = find_run(settings, run.topic, registry, backend=run.log)
        version = info.code_version if info else None
        reducer = f"swarm:{swarm.name}"
        token = token_from(local, topic=topic, run=info, code_version=version, reducer=reducer)
        if verify:
            remote = replay_swarm(settings=settings.model_copy(update={"topic": topic}), swarm=swarm,
                                  registry=registry, backend=backend)
            diff = mismatches(token, token_from(remote, topic=topic, run=info, code_version=version, reducer=reducer))
            if diff:
                raise CopyFailed(topic=topic, detail="the exported topic replays otherwise than the simulated log: "
                                                     + "; ".join(diff))
    finally:
        backend.close()
    token = token.signed(settings.token_key_bytes())
    path = Path(token_path) if token_path is not None else None
    if path is not None:
        token.save(path)
    exported = Exported(topic=topic, token=token, token_path=path, swarm=swarm.name)
    logger.info("%s", exported)
    return exported
