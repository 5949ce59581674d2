"""The log, runtime, state and fold contract suites on the in-memory log (no broker)."""

from __future__ import annotations

from ..contract.checkpoints import CheckpointContract
from ..contract.folds import FoldContract, debug_in_process
from ..contract.log import LogContract
from ..contract.runtime import RuntimeContract
from ..contract.state import StateDigestContract


class TestLogContractInMemory(LogContract):
    pass


class TestRuntimeContractInMemory(RuntimeContract):
    quiet = 0.3


class TestStateDigestContractInMemory(StateDigestContract):
    quiet = 0.3


class TestFoldContractInMemory(FoldContract):
    quiet = 0.3

    def debug_divergence(self, backend, settings, swarm):
        return debug_in_process(backend, settings, swarm)


class TestCheckpointContractInMemory(CheckpointContract):
    quiet = 0.3
    timeout_s = 0.75  # its agent dies in a fifth of that here, even on a loaded machine
