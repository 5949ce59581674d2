"""Every fold of a recorded history finds the same first divergence: one seam, one contract.

Many tools run a swarm's code over its log, each driving the runtime's engine
(:class:`~swarmlog.runtime.engine.AgentCore`) and reading the agents' recorded history through one seam
(:mod:`swarmlog.runtime.history`): a live agent's restart (the worker's first pass), ``replay_swarm`` (strict or not, in
one process and split across processes), the debugger (``Session.first_divergence`` with and without
snapshots, ``swarmlog debug --divergence``, the stepper of ``swarmlog step``), and the simulator (a crashed
agent's next life, a :class:`~swarmlog.runtime.driven.DrivenAgent`). Given the same log and the same
changed code, each must say the same thing: where the code first departs from the log — offset, agent and
kind — or that it does not. (The issue behind this found the debugger, which read the log by a copy of
its own, blind to a state-only divergence that ``replay_swarm`` reported.)

The logs: the probes of :mod:`tests.contract.probes` (one per kind of divergence, and a clean one), each
recorded twice — by live agents on the backend under test, and by the simulator (whose run, ``q`` dying
after the world changed, reports the divergence itself) copied onto that backend offset for offset.

``tests/unit/test_contract_memory.py`` runs it on the in-memory log, ``tests/integration/
test_contract_kafka.py`` on the real broker (there the command line runs as a process of its own). A
subclass provides the fixtures ``backend``, ``run_settings`` and ``registry``, ``quiet``, and
:meth:`FoldContract.debug_divergence` (how it runs ``swarmlog debug --divergence``).
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import time
from typing import Any

import pytest

from swarmlog.agent import Swarm
from swarmlog.debug import Session, Stepper
from swarmlog.errors import EffectDiverged, NondeterminismError, StateDiverged
from swarmlog.log.protocol import agent_group
from swarmlog.replaying import replay_swarm
from swarmlog.runtime import run_agents, start_run
from swarmlog.runtime.driven import DrivenAgent
from swarmlog.schema.codec import Decoder
from swarmlog.settings import Settings
from swarmlog.testing import Schedule, SimRun, Simulator

from . import probes
from .runtime import events

Found = tuple[int, str, str] | None
"""What a fold reports: (offset, agent, kind) of the first divergence, or None."""

CRASH_Q_AFTER_DEPLOY = Schedule((0, 0, 0, 1))
"""p's start, q's first note, p's ack (the deploy), then q dies before committing its second note:
its next life rebuilds its history over a world that changed."""


def _kind(exc: NondeterminismError) -> str:
    return "state" if isinstance(exc, StateDiverged) else "effect" if isinstance(exc, EffectDiverged) else "output"


def _found(d: Any) -> Found:
    return None if d is None else (d.offset, d.agent, d.kind)


def _first(found: list[tuple[int, str, str]]) -> Found:
    order = ("output", "effect", "state")  # at one offset, in the order the runtime reports them
    return min(found, key=lambda f: (f[0], order.index(f[2]))) if found else None


class FoldContract:
    quiet: float = 1.0

    @pytest.fixture(autouse=True)
    def _fresh_salt(self) -> Any:
        yield
        probes.SALT = "replay"  # as a fresh import has it

    def debug_divergence(self, backend: Any, settings: Settings, swarm: str) -> tuple[int, str, str]:
        """Run ``swarmlog debug --divergence --swarm SWARM`` on ``settings.topic``: (status, stdout, stderr)."""
        raise NotImplementedError

    # -- the logs ---------------------------------------------------------------------------------

    def record_live(self, backend: Any, settings: Settings, swarm: Swarm) -> None:
        probes.SALT = "live"
        start_run(settings=settings, swarm=swarm, run_id="probe", seed=3, backend=backend)
        run_agents(settings=settings, swarm=swarm, until_quiet=self.quiet, backend=backend)
        assert probes.SALT == "replay"  # p's deploy ran, live, between q's two notes

    def record_simulated(self, backend: Any, settings: Settings, swarm: Swarm) -> tuple[Settings, SimRun]:
        probes.SALT = "live"
        run = Simulator(swarm, effects=probes.MODELS, crashes=1, run_id="probe-sim").run(CRASH_Q_AFTER_DEPLOY)
        assert [(s.kind, s.agent) for s in run.steps][:4] == [("step", "p"), ("step", "q"), ("step", "p"),
                                                              ("crash", "q")]
        assert probes.SALT == "replay"
        topic = f"{settings.topic}-sim"
        backend.create_copy(topic, run.log.messages(run.topic), end=run.log.watermarks(run.topic)[1])
        for agent in run.states:
            position = run.log.committed(agent_group(run.topic, agent), run.topic)
            if position is not None:
                backend.reset_group(agent_group(topic, agent), topic, position)
        return settings.model_copy(update={"topic": topic}), run

    # -- every fold, on one log -------------------------------------------------------------------

    def folds(self, backend: Any, settings: Settings, registry: Any, kind: str) -> dict[str, Found]:
        """What each fold of the swarm's (changed) code over ``settings.topic`` reports."""
        swarm = probes.PROBES[kind]
        found: dict[str, Found] = {}
        for workers in (1, 2):
            result = replay_swarm(settings=settings, swarm=swarm, registry=registry, backend=backend, workers=workers)
            found[f"replay_swarm(workers={workers})"] = _found(result.first_divergence)
            if workers == 1:
                replayed = result
        try:  # strict: raises the first divergence it finds
            replay_swarm(settings=settings, swarm=swarm, registry=registry, backend=backend, strict=True)
            found["replay_swarm(strict=True)"] = None
        except NondeterminismError as exc:
            found["replay_swarm(strict=True)"] = (exc.offset if exc.offset is not None else -1, exc.agent or "",
                                                  _kind(exc))
        plain = Session(settings=settings, swarm=swarm, registry=registry, backend=backend, snapshots=False)
        found["Session.first_divergence()"] = _found(plain.first_divergence())
        # Every agent's state at the end is the replay's (the fold of `state --at`).
        end = backend.watermarks(settings.topic)[1]
        assert {a: s.state for a, s in plain.states(at=end).items()} == replayed.states
        snapped = Session(settings=settings, swarm=swarm, registry=registry, backend=backend)
        snapped.snapshot(every=2)
        found["Session.first_divergence() after snapshots"] = _found(snapped.first_divergence())
        status, out, err = self.debug_divergence(backend, settings,
                                                 f"tests.contract.probes:probe_{kind.replace('+', '_')}")
        found["swarmlog debug --divergence"] = _cli_found(status, out, err)
        with Stepper(session=plain) as stepper:
            while stepper.forward():
                pass
            stepped = _found(min(stepper.cursor.divergences(), key=lambda d: d.sort_key(), default=None))
            found["Stepper (every event, forward)"] = stepped
            first = stepper.to_divergence()
            found["Stepper.to_divergence()"] = _found(first)
            if first is not None:
                assert stepper.current is not None and stepper.current.offset == first.offset
        found["DrivenAgent restarts (the simulator's agents)"] = _first(
            [f for a in swarm.agent_names if (f := _driven(backend, settings, registry, swarm, a)) is not None])
        # Last: a restart may record how far it read.
        found["run_agents restarts (live agents)"] = _first(
            [f for a in swarm.agent_names if (f := self._restart(backend, settings, swarm, a)) is not None])
        return found

    def _restart(self, backend: Any, settings: Settings, swarm: Swarm, agent: str) -> Found:
        try:
            run_agents(settings=settings, swarm=swarm, agents=[agent], until_quiet=self.quiet, backend=backend)
        except NondeterminismError as exc:
            return (exc.offset if exc.offset is not None else -1, exc.agent or agent, _kind(exc))
        return None

    # -- the contract ------------------------------------------------------------------------------

    def _expected(self, backend: Any, settings: Settings, registry: Any, kind: str) -> Found:
        """q's first note: where q's code, reading the changed global, first departs (None: clean)."""
        (note,) = [off for off, t, rec in events(backend, settings.topic, registry)
                   if t == "agent.message" and rec["to"] == "q" and rec["payload"]["body"] == "1"]
        return None if kind == "clean" else (note, "q", kind.split("+")[0])

    @pytest.mark.parametrize("kind", probes.KINDS)
    def test_every_fold_finds_the_same_first_divergence_of_each_kind(self, backend, run_settings, registry, kind):
        swarm = probes.PROBES[kind]
        self.record_live(backend, run_settings, swarm)
        sim_settings, run = self.record_simulated(backend, run_settings, swarm)
        simulated = None if run.error is None else (run.error.offset, run.error.agent, _kind(run.error))
        for settings, extra in ((run_settings, {}), (sim_settings, {"Simulator.run (q's next life)": simulated})):
            expected = self._expected(backend, settings, registry, kind)
            found = {**self.folds(backend, settings, registry, kind), **extra}
            assert found == dict.fromkeys(found, expected), settings.topic

    def test_the_state_only_probe_is_reported_at_q_offset_2_by_every_fold(self, backend, run_settings, registry):
        # The probe: q's state reads a module global that changes between the live run and its
        # replay, no output changes. Offset 2: q's first note (run.started and its marker, then p's note).
        self.record_live(backend, run_settings, probes.probe_state)
        found = self.folds(backend, run_settings, registry, "state")
        assert found == dict.fromkeys(found, (2, "q", "state"))


def _driven(backend: Any, settings: Settings, registry: Any, swarm: Swarm, agent: str) -> Found:
    """A later life of ``agent`` as the simulator makes one: a first pass, then its history rebuilt."""
    driven = DrivenAgent(backend=backend, topic=settings.topic, agent=swarm.agent(agent), decoder=Decoder(registry))
    deadline = time.monotonic() + 60
    try:
        while not driven.caught_up or driven.buffered:  # the log it found at its start, read
            driven.advance()
            if driven.due is not None:
                return None  # a live step is due: its history ends here
            assert time.monotonic() < deadline, f"{agent} never read up to {driven.start_end}"
            time.sleep(0.01)
        return None
    except NondeterminismError as exc:
        return (exc.offset if exc.offset is not None else -1, exc.agent or agent, _kind(exc))
    finally:
        driven.close()


_DIVERGED = re.compile(r"^DIVERGED first at offset (\d+) \(agent ([^,]+), (\w+)\)", re.M)


def _cli_found(status: int, out: str, err: str) -> Found:
    """What ``swarmlog debug --divergence`` said: exit 4 and the DIVERGED line, or exit 2 and no divergence."""
    if status == 2:
        assert "does not diverge from the log" in err, err
        return None
    assert status == 4, (status, out, err)
    m = _DIVERGED.search(out)
    assert m is not None, out
    # It stopped at that step (the debugger's note names it; no debugger attached under PYTHONBREAKPOINT=0).
    assert f"swarmlog debug: offset {m.group(1)}: {m.group(2)} runs" in err, err
    return int(m.group(1)), m.group(2), m.group(3)


def debug_in_process(backend: Any, settings: Settings, swarm: str) -> tuple[int, str, str]:
    """``swarmlog debug --divergence`` by the command line's own ``main``, in this process, its session on
    ``backend`` (an in-memory log no other process can read): the parser, the handler, what it prints and
    its exit status, as a process would run them."""
    from swarmlog import cli
    from swarmlog.debug import session

    out, err = io.StringIO(), io.StringIO()
    notes = logging.getLogger("swarmlog.debug")
    handlers = list(notes.handlers)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONBREAKPOINT", "0")  # no debugger attaches: the step runs, and the command says so
        mp.setattr(session, "backend_for", lambda _settings, given=None, **_: given or backend)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = cli.main(["debug", "--divergence", "--swarm", swarm, "--topic", settings.topic])
            finally:
                for h in notes.handlers[len(handlers):]:  # its `note:` handler writes to this call's stderr
                    notes.removeHandler(h)
    return status, out.getvalue(), err.getvalue()
