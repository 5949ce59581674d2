"""``swarmlog step``'s view through Textual's own pilot, on a real run on the in-memory log (no service):
keys move the session's cursor, the screen shows what the stepper holds. The case study on the real
broker, and the command in a real terminal, are in tests/integration/test_debug_views.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

# textual (and the step view on it) is imported by the tests that use it: every xdist worker collects this
# module, only one runs them.
from swarmlog.debug import Session
from swarmlog.log.memory import InMemoryLog
from swarmlog.runtime import run_agents, start_run
from swarmlog.settings import Settings

from .. import swarms


@pytest.fixture(scope="module")
def relay_run() -> tuple[InMemoryLog, Settings]:
    backend = InMemoryLog()
    backend.create_topic("relay")
    settings = Settings(topic="relay", bootstrap_servers="127.0.0.1:1", database_url="postgresql://nobody@127.0.0.1:1/x")
    start_run(settings=settings, swarm=swarms.relay, run_id="view", seed=4, backend=backend)
    run_agents(settings=settings, swarm=swarms.relay, until_quiet=0.3, backend=backend)
    return backend, settings


async def press(app: Any, pilot: Any, *keys: str) -> None:
    for key in keys:
        await pilot.press(key)
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()


def test_the_arrows_move_one_event_and_the_screen_shows_the_steps_it_made(relay_run, registry):
    from textual.widgets import DataTable, Static

    from swarmlog.debug.stepview import StepApp
    backend, settings = relay_run
    session = Session(settings=settings, swarm=swarms.relay, backend=backend, registry=registry)
    expected = [s for s in session.steps() if s.agent == "r0"][:2]

    async def drive() -> None:
        app = StepApp(session=session)
        async with app.run_test(size=(160, 40)) as pilot:
            await press(app, pilot)
            await press(app, pilot, "right")
            assert app.stepper is not None and app.stepper.current is not None
            assert app.stepper.current.offset == 0  # run.started: every agent's start handler ran
            text = str(app.query_one("#step", Static).content)
            assert "r0 runs Relay.start (its handler run #1)" in text and "wrote agent.message hop" in text
            table = app.query_one("#events", DataTable)
            assert table.get_row_at(table.cursor_row)[:2] == ["▶", "0"]
            await press(app, pilot, "right", "left")
            assert app.stepper.current.offset == 0
            await press(app, pilot, "left")
            assert app.stepper.current is None and "nothing folded yet" in str(app.query_one("#step", Static).content)
            # A breakpoint on the agent of the current step, then continue: r0's next step, as the session says.
            await press(app, pilot, "right", "a", "c")
            assert app.stepper.current.offset == expected[1].offset
            assert "breakpoint (agent r0)" in str(app.query_one("#status", Static).content)
            await press(app, pilot, "x", "c")
            assert "no breakpoints" in str(app.query_one("#status", Static).content)
            await pilot.press("q")

    asyncio.run(drive())


def test_the_divergence_key_says_so_when_the_code_does_not_diverge(relay_run, registry):
    from textual.widgets import Static

    from swarmlog.debug.stepview import StepApp
    backend, settings = relay_run
    session = Session(settings=settings, swarm=swarms.relay, backend=backend, registry=registry)

    async def drive() -> None:
        app = StepApp(session=session)
        async with app.run_test(size=(160, 40)) as pilot:
            await press(app, pilot, "right", "d")
            assert "no divergence: code relay-1 does exactly what the log recorded" in \
                str(app.query_one("#status", Static).content)
            assert app.stepper is not None and app.stepper.current is not None and app.stepper.current.offset == 0
            await pilot.press("q")

    asyncio.run(drive())
