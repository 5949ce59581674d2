"""The agent runtime: agents as exactly-once consumers and producers of the log, and replay of their code.

Public face: :func:`start_run`, :func:`run_agents`, :func:`load_swarm`,
:func:`replay_swarm_log` and their results. The machinery is private:
``_core`` (one agent's deterministic fold, no I/O), ``_index`` (an agent's first pass
over a log), ``_digests`` (state digests in the record), ``_statediff`` (what a
state divergence shows; :class:`LiveStates` is the seam for live states),
``_worker`` (a live agent on a channel of the log), ``_replayer`` (a whole swarm's
code against its log), ``_lookahead`` (the replay's one read of the log, ahead of its fold
as far as a step needs), ``_processes`` (a replay's agents split across forked processes).
"""

from typing import TYPE_CHECKING

from .._lazy import exports

if TYPE_CHECKING:
    from ._core import Divergence
    from ._replayer import SwarmReplayResult, replay_swarm_log
    from ._statediff import LiveStates, diff_states
    from ._worker import AgentWorker, WorkerResult
    from .runner import (
        RunInfo,
        code_version,
        find_run,
        load_swarm,
        pin_interpreter,
        result_json,
        run_agents,
        start_run,
        wait_for_run,
    )

# Imported when first used: ``swarmlog run``'s parser (runtime/command.py) and the interpreter's
# pinning (runtime/interpreter.py) live in this wing, and neither may import the engine and the
# determinism guard for a command that runs no agent code (swarmlog --help, swarmlog token create).
__getattr__ = exports(globals(), {
    "Divergence": "._core",
    "SwarmReplayResult": "._replayer",
    "replay_swarm_log": "._replayer",
    "LiveStates": "._statediff",
    "diff_states": "._statediff",
    "AgentWorker": "._worker",
    "WorkerResult": "._worker",
    **dict.fromkeys(["RunInfo", "code_version", "find_run", "load_swarm", "pin_interpreter", "result_json",
                     "run_agents", "start_run", "wait_for_run"], ".runner"),
})

__all__ = [
    "AgentWorker",
    "Divergence",
    "LiveStates",
    "RunInfo",
    "SwarmReplayResult",
    "WorkerResult",
    "code_version",
    "diff_states",
    "find_run",
    "load_swarm",
    "pin_interpreter",
    "replay_swarm_log",
    "result_json",
    "run_agents",
    "start_run",
    "wait_for_run",
]
