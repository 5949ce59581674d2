"""An agent's state at an offset, and what changed between two, for the console: ``swarmlog state``'s fold.

States are not in the mirror: they are what the swarm's code makes of the log. The console
folds the log (Kafka) through :class:`swarmlog.debug.Session`, the engine of ``swarmlog state
--at/--diff``, so both show the same state for the same offset. It needs the swarm's code:
``swarmlog ui --swarm module:swarm`` (repeatable), matched to a run by the swarm's name its
``run.started`` recorded.

A run pinned to a string-hash seed other than this process's cannot have its handlers run
here (:class:`~swarmlog.errors.HashSeedMismatch`): the fold then runs in a child process,
``swarmlog state ... --json``, which re-executes itself under the run's seed as the command
always does. Sessions are kept per topic (a session keeps what it folded, and indexes an agent asked
about twice: :mod:`swarmlog.debug.index`), one fold at a time.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
from typing import Any

from ..errors import HashSeedMismatch, StateUnavailable
from ..settings import Settings

logger = logging.getLogger(__name__)

_CHILD_TIMEOUT_S = 600.0
INDEX_AFTER = 2
"""State or diff queries of one agent after which the console's session indexes it (:meth:`Session.index`)."""


class States:
    """States by fold of the log; ``swarms`` maps a swarm's name to its ``module:swarm`` spec."""

    def __init__(self, *, settings: Settings, swarms: dict[str, str]) -> None:
        self.settings = settings
        self.swarms = swarms
        self._sessions: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_specs(cls, *, settings: Settings, specs: list[str]) -> States:
        """Load each ``module:swarm`` once to learn its name (what ``run.started`` records)."""
        from ..runtime import load_swarm

        swarms: dict[str, str] = {}
        for spec in specs:
            swarm = load_swarm(spec)
            if swarm.name in swarms and swarms[swarm.name] != spec:
                logger.warning("two --swarm give the swarm %r (%s, %s): the first is used", swarm.name,
                               swarms[swarm.name], spec)
                continue
            swarms[swarm.name] = spec
        return cls(settings=settings, swarms=swarms)

    def spec_for(self, swarm: str | None) -> str:
        if swarm is None or swarm not in self.swarms:
            given = ", ".join(f"{n} ({s})" for n, s in self.swarms.items()) or "none"
            raise StateUnavailable(f"states need the code of the swarm {swarm!r}: start `swarmlog ui` with "
                                   f"--swarm module:swarm for it (given: {given})")
        return self.swarms[swarm]

    def state(self, *, topic: str, swarm: str | None, agent: str, at: int) -> dict[str, Any]:
        """``agent``'s state just before ``at``, as ``swarmlog state --at`` prints it with ``--json``."""
        return self._run(topic, swarm, lambda s: s.state(agent, at=at).to_json(),
                         ["state", agent, "--at", str(at)])

    def diff(self, *, topic: str, swarm: str | None, agent: str, start: int, end: int) -> dict[str, Any]:
        """What changed in ``agent``'s state from just before ``start`` to just before ``end``."""
        return self._run(topic, swarm, lambda s: s.diff(agent, start, end).to_json(),
                         ["state", agent, "--diff", str(start), str(end)])

    def _run(self, topic: str, swarm: str | None, body: Any, argv: list[str]) -> dict[str, Any]:
        spec = self.spec_for(swarm)
        with self._lock:  # one fold at a time: a session is not shared between threads
            try:
                result: dict[str, Any] = body(self._session(topic, spec))
                return result
            except HashSeedMismatch:
                logger.info("the run in %s is pinned to another string-hash seed: folding it in a child process",
                            topic)
        return self._child([*argv, "--swarm", spec, "--topic", topic, "--json"])

    def _session(self, topic: str, spec: str) -> Any:
        key = (topic, spec)
        session = self._sessions.get(key)
        if session is None:
            from ..debug import Session
            from ..runtime import load_swarm

            # A console is asked about the same agents again and again: the second question about one
            # indexes it (one fold from zero), and every later one folds a few dozen offsets.
            session = Session(settings=self.settings.model_copy(update={"topic": topic}), swarm=load_swarm(spec),
                              index_after=INDEX_AFTER)
            self._sessions[key] = session
        return session

    def _child(self, argv: list[str]) -> dict[str, Any]:
        done = subprocess.run([sys.executable, "-m", "swarmlog.cli", *argv], capture_output=True, text=True,
                              timeout=_CHILD_TIMEOUT_S, check=False)
        if done.returncode != 0:
            raise StateUnavailable(f"`swarmlog {' '.join(argv)}` failed: {done.stderr.strip()[-2000:]}")
        try:
            doc: dict[str, Any] = json.loads(done.stdout)
        except ValueError as exc:
            raise StateUnavailable(f"`swarmlog {' '.join(argv)}` printed no JSON: {exc}") from None
        return doc
