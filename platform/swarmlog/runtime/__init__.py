"""The agent runtime: agents as exactly-once consumers and producers of the log, and replay of their code.

Public face: :func:`start_run`, :func:`run_agents`, :func:`load_swarm`,
:func:`replay_swarm_log` and their results.

The engine, public inside the package (the debugger, the simulator and the token drive it;
``tests/unit/test_layout.py`` holds that no module outside ``runtime/`` imports an underscored
one): ``engine`` (one agent's deterministic fold, no I/O: :class:`AgentCore`), ``history``
(the one seam through which every fold reads what an agent recorded: by a first pass, or ahead
of the fold, from offset zero or a checkpoint's position), ``digests`` (state digests in the
record), ``checkpoint`` (a fold captured and restored), ``resume`` (a live agent's checkpoints,
written in its transactions, and a restart from the latest one the log vouches for), ``versions``
(the code version snapshots and checkpoints are tagged with), ``sink`` (a live step's outputs into its
transaction), ``driven`` (an agent driven a step at a time: the simulator's).

The machinery, private: ``_statediff`` (what a state divergence shows; :class:`LiveStates` is the
seam for live states), ``_worker`` (a live agent on a channel of the log), ``_replayer`` (a whole
swarm's code against its log), ``_dispatch`` (its messages routed to the agents they concern),
``_processes`` (a replay's agents split across forked processes; :func:`available_cpus`, what a
process may use, is public: the regression replay sizes its pool by it).
"""

from typing import TYPE_CHECKING

from .._lazy import exports

if TYPE_CHECKING:
    from ._processes import available_cpus
    from ._replayer import SwarmReplayResult, replay_swarm_log
    from ._statediff import LiveStates, diff_states
    from ._worker import AgentWorker, WorkerResult
    from .outcomes import Divergence
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
    "Divergence": ".engine",
    "available_cpus": "._processes",
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
    "available_cpus",
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
