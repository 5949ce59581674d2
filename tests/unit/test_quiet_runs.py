"""A run on the in-memory log knows when nothing is left to do: ``run_agents(until_quiet=...)`` stops
then, not after seconds of a still log; a pending wall-clock timeout still keeps it going; waiting for
a run's start ends at its timeout or at the append; and a run gives the caller its signal handlers back.
(On Kafka the same calls wait for the log to stay still: tests/contract/runtime.py runs on both.)"""

from __future__ import annotations

import signal
import threading
import time
from typing import Any

import pytest

from swarmlog import Agent, Swarm, on, on_message, on_timer
from swarmlog.errors import RunNotStarted
from swarmlog.log.protocol import TIMER_FIRED
from swarmlog.runtime import run_agents, start_run, wait_for_run

from .. import swarms
from ..contract.runtime import events

LONG = 60.0
"""A stillness no test here waits out: an in-memory run that waited for it would take a minute."""


def test_an_in_memory_run_stops_once_every_agent_waits_with_nothing_left_to_do(backend, run_settings, registry):
    start_run(settings=run_settings, swarm=swarms.relay, run_id="quiet", seed=3, backend=backend)
    started = time.monotonic()
    results = run_agents(settings=run_settings, swarm=swarms.relay, until_quiet=LONG, backend=backend)
    assert time.monotonic() - started < LONG / 4
    last = backend.messages(run_settings.topic)[-1].offset()
    assert all(r.position == last + 1 for r in results)  # every agent folded the whole log: it was done
    again = run_agents(settings=run_settings, swarm=swarms.relay, until_quiet=LONG, backend=backend)
    assert [r.state_hash for r in again] == [r.state_hash for r in results]  # nothing was left undone
    assert backend.messages(run_settings.topic)[-1].offset() == last


class _Sleeper(Agent):
    def initial_state(self) -> dict[str, Any]:
        return {"woke": False}

    @on("run.started")
    def start(self, ctx, event):
        ctx.timeout("nap", seconds=0.3)

    @on_timer("nap")
    def wake(self, ctx, event):
        self.state["woke"] = True


def test_a_pending_wall_clock_timeout_keeps_an_in_memory_run_going_until_it_fires(backend, run_settings, registry):
    swarm = Swarm(name="nap", agents=lambda: [_Sleeper("s")], code_version="1")
    start_run(settings=run_settings, swarm=swarm, run_id="nap", seed=1, backend=backend)
    (result,) = run_agents(settings=run_settings, swarm=swarm, until_quiet=LONG, backend=backend)
    assert result.state == {"woke": True}
    assert [t for _, t, _ in events(backend, run_settings.topic, registry)].count(TIMER_FIRED) == 1


def test_waiting_for_a_run_ends_at_its_timeout_not_at_the_next_look(backend, run_settings, registry):
    started = time.monotonic()
    with pytest.raises(RunNotStarted) as err:
        wait_for_run(settings=run_settings, timeout=0.3, registry=registry, backend=backend)
    assert 0.3 <= err.value.waited_s < 1.5 and time.monotonic() - started < 1.5


def test_waiting_for_a_run_ends_when_its_start_is_appended(backend, run_settings, registry):
    starter = threading.Timer(0.2, lambda: start_run(settings=run_settings, swarm=swarms.relay, run_id="late",
                                                     seed=2, backend=backend))
    started = time.monotonic()
    starter.start()
    try:
        run = wait_for_run(settings=run_settings, timeout=LONG, registry=registry, backend=backend)
    finally:
        starter.join()
    assert run is not None and run.run_id == "late" and time.monotonic() - started < LONG / 4


class _Echo(Agent):
    @on_message("ping")
    def ping(self, ctx, event):
        pass


def test_a_run_gives_the_caller_its_signal_handlers_back(backend, run_settings):
    swarm = Swarm(name="signals", agents=lambda: [_Echo("e")], code_version="1")
    start_run(settings=run_settings, swarm=swarm, run_id="sig", seed=1, backend=backend)

    def mine(signum: int, frame: object) -> None:
        pass

    before = {sig: signal.signal(sig, mine) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        run_agents(settings=run_settings, swarm=swarm, until_quiet=LONG, backend=backend)
        assert signal.getsignal(signal.SIGINT) is mine and signal.getsignal(signal.SIGTERM) is mine
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
