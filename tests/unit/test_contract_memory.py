"""The log and runtime contract suites on the in-memory log (no broker)."""

from __future__ import annotations

from ..contract.log import LogContract
from ..contract.runtime import RuntimeContract
from ..contract.state import StateDigestContract


class TestLogContractInMemory(LogContract):
    pass


class TestRuntimeContractInMemory(RuntimeContract):
    quiet = 0.3


class TestStateDigestContractInMemory(StateDigestContract):
    quiet = 0.3
