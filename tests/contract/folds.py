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
after the world changed, reports the divergence itself) copied onto that backend offset for offset. And
the clean probe's log with what the engine names instead of handling (:mod:`swarmlog.runtime.anomalies`,
issue 28): a copy of an event re-sent by another producer (a repeated id: taken once, named, no
divergence), and an event whose cause names an offset that holds nothing (a hole: every fold stops there).

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
from collections.abc import Callable
from typing import Any

import pytest

from swarmlog.agent import Swarm
from swarmlog.cli import EXIT_FAILED
from swarmlog.debug import Session, Stepper
from swarmlog.errors import EffectDiverged, HistoryHoles, NondeterminismError, StateDiverged
from swarmlog.log.append import EventLog
from swarmlog.log.protocol import MESSAGE, agent_group, parse_step
from swarmlog.replaying import replay_swarm
from swarmlog.runtime import run_agents, start_run
from swarmlog.runtime.anomalies import REPEATED
from swarmlog.runtime.driven import DrivenAgent
from swarmlog.schema.codec import Decoder
from swarmlog.settings import Settings
from swarmlog.testing import Schedule, SimRun, Simulator

from ..conftest import unchecked_event
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

    # -- what every fold names instead of handling (issue 28) ---------------------------------------

    def _first_note(self, backend: Any, settings: Settings, registry: Any) -> int:
        (note,) = [off for off, t, rec in events(backend, settings.topic, registry)
                   if t == MESSAGE and rec["to"] == "q" and rec["payload"]["body"] == "1"]
        return note

    def test_every_fold_takes_a_repeated_event_id_once_names_it_and_finds_no_divergence(self, backend, run_settings,
                                                                                         registry):
        # p's first note to q, re-sent byte for byte by another producer (a copy tool). Before issue 28, q
        # handled it a second time, and every fold of p (a restart too) stopped at "the log has an output
        # this step no longer writes", blaming the code.
        self.record_live(backend, run_settings, probes.probe_clean)
        note = self._first_note(backend, run_settings, registry)
        copy = _resend(backend, run_settings, note)
        found = self.folds(backend, run_settings, registry, "clean")
        assert found == dict.fromkeys(found, None)
        named = {(copy, "p", REPEATED, note), (copy, "q", REPEATED, note)}  # its writer's and its recipient's fold
        said: dict[str, set[tuple[int, str, str, int | None]]] = {}
        for workers in (1, 2):
            result = replay_swarm(settings=run_settings, swarm=probes.probe_clean, registry=registry, backend=backend,
                                  workers=workers)
            said[f"replay_swarm(workers={workers})"] = {(a.offset, a.agent, a.kind, a.first) for a in result.anomalies}
        for snapshots in (False, True):
            replayed = Session(settings=run_settings, swarm=probes.probe_clean, registry=registry, backend=backend,
                               snapshots=snapshots).replay()
            said[f"Session.replay(snapshots={snapshots})"] = {(a.offset, a.agent, a.kind, a.first)
                                                              for a in replayed.anomalies}
        for agent in ("p", "q"):
            driven = DrivenAgent(backend=backend, topic=run_settings.topic, agent=probes.probe_clean.agent(agent),
                                 decoder=Decoder(registry))
            try:
                _read_history(driven)
                said[f"DrivenAgent {agent}"] = {(a.offset, a.agent, a.kind, a.first)
                                                for a in driven.core.watch.anomalies}
            finally:
                driven.close()
        said["DrivenAgent p"] |= said.pop("DrivenAgent q")
        assert said == dict.fromkeys(said, named)
        # Never handled twice, by the live agents' restarts either: no step of any agent at the copy.
        steps = {parse_step(rec["event_id"]) for _, _, rec in events(backend, run_settings.topic, registry)}
        assert not any(s is not None and s[0] == copy for s in steps)

    def holes(self, backend: Any, settings: Settings, registry: Any, swarm: Swarm, agent: str) -> dict[str, Any]:
        """What each fold of ``swarm`` over ``settings.topic`` says of the log's holes: the offsets that hold
        nothing -> the event naming each (None: it went on). ``agent``: the one whose input names them."""
        said: dict[str, Any] = {}

        def attempt(name: str, fold: Callable[[], Any]) -> None:
            try:
                fold()
            except HistoryHoles as exc:
                said[name] = exc.holes
            else:
                said[name] = None

        for workers in (1, 2):
            attempt(f"replay_swarm(workers={workers})", lambda n=workers: replay_swarm(
                settings=settings, swarm=swarm, registry=registry, backend=backend, workers=n))
        attempt("replay_swarm(strict=True)", lambda: replay_swarm(settings=settings, swarm=swarm, registry=registry,
                                                                  backend=backend, strict=True))
        attempt("Session.first_divergence()", lambda: Session(settings=settings, swarm=swarm, registry=registry,
                                                              backend=backend, snapshots=False).first_divergence())
        attempt("Session.snapshot()", lambda: Session(settings=settings, swarm=swarm, registry=registry,
                                                      backend=backend).snapshot(every=2))
        # The snapshots it kept up to the hole: a fold from one asks the log about causes before it.
        attempt("Session.first_divergence() from a snapshot", lambda: Session(
            settings=settings, swarm=swarm, registry=registry, backend=backend).first_divergence())

        def stepped() -> None:
            with Stepper(session=Session(settings=settings, swarm=swarm, registry=registry, backend=backend,
                                         snapshots=False)) as stepper:
                while stepper.forward():
                    pass

        attempt("Stepper (every event, forward)", stepped)
        status, _, err = self.debug_divergence(backend, settings, "tests.contract.probes:probe_clean")
        lost = _LOST.search(err)
        said["swarmlog debug --divergence"] = {int(o): int(by) for o, by in _NAMED.findall(lost.group(1))} \
            if status == EXIT_FAILED and f"topic {settings.topic!r} has lost events" in err and lost is not None \
            else (status, err)

        def driven() -> None:
            one = DrivenAgent(backend=backend, topic=settings.topic, agent=swarm.agent(agent),
                              decoder=Decoder(registry))
            try:
                _read_history(one)
            finally:
                one.close()

        attempt("DrivenAgent restart (the simulator's agent)", driven)
        attempt("run_agents restart (the live agent)", lambda: run_agents(
            settings=settings, swarm=swarm, agents=[agent], until_quiet=self.quiet, backend=backend))
        return said

    def test_every_fold_stops_at_a_cause_the_log_lost_naming_the_offset(self, backend, run_settings, registry):
        # A note to q whose cause is an offset that holds no message (its run.started's transaction marker):
        # causes are checked at write, so the log lost that event since (what compaction does). What a fold
        # would rebuild from the rest is not the run: every fold stops, naming the hole and who names it.
        self.record_live(backend, run_settings, probes.probe_clean)
        held = {off for off, _, _ in events(backend, run_settings.topic, registry)}
        gap = min(o for o in range(max(held)) if o not in held)
        value, key, headers = unchecked_event(registry, MESSAGE, {"kind": "note", "body": "3"}, agent="tester",
                                              to="q", causes=[gap], run_id="probe")
        with EventLog(settings=run_settings, backend=backend) as log:
            log.produce_raw(value, key=key, headers=headers)
            (at,) = log.flush()
        said = self.holes(backend, run_settings, registry, probes.probe_clean, "q")
        assert said == dict.fromkeys(said, {gap: at}), said


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


def _read_history(driven: DrivenAgent) -> None:
    """Let ``driven`` read the log it found at its start (its history), as a restart does, up to a live
    step due (not run: it would write)."""
    deadline = time.monotonic() + 60
    while not driven.caught_up or driven.buffered:
        driven.advance()
        if driven.due is not None:
            return
        assert time.monotonic() < deadline, f"{driven.core.name} never read up to {driven.start_end}"
        time.sleep(0.01)


def _resend(backend: Any, settings: Settings, offset: int) -> int:
    """Another producer re-sends the message at ``offset`` byte for byte (a copy tool): the copy's offset."""
    with backend.reader(settings.topic) as reader:
        reader.assign(offset)
        m = next(m for batch in reader.batches() for m in batch if m.offset() == offset)
    with EventLog(settings=settings, backend=backend) as log:
        log.produce_raw(m.value(), key=m.key(), headers=m.headers())
        (copy,) = log.flush()
    return int(copy)


_LOST = re.compile(r"has lost events: offset\(s\) (.*?) hold nothing")
_NAMED = re.compile(r"(\d+) \(named by (\d+)\)")
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
