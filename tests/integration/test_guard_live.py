"""The guard on the real broker: a row of each kind of the guard's table (swarmlog.guard.COVERAGE)
refused in a live handler of an agent running on Kafka, as tests/unit/test_guard_table.py refuses
every row on the in-memory log — the same runtime, with Kafka's clients, transactions and threads
in the process (their own calls must stay allowed while the handler's are refused); under each of
the guard's hooks this CPython offers (tests/conftest.py GUARD_HOOKS)."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator

import pytest

from swarmlog import Agent, Swarm, on
from swarmlog.guard import COVERAGE, ForbiddenCall, Row, resolve
from swarmlog.kafka.topic import create_topic
from swarmlog.runtime import run_agents, start_run
from swarmlog.testing import StubServer

from ..unit.guard_cases import REFUSED, Env, prepared
from .conftest import new_topic_name


def _present(row: Row) -> bool:
    try:
        return resolve(row.call) is not None
    except LookupError:
        return False


def _first_of_each_kind() -> list[Row]:
    rows: dict[str, Row] = {}
    for row in COVERAGE:
        if row.refused and _present(row):
            rows.setdefault(row.kind, row)
    return list(rows.values())


ROWS = _first_of_each_kind()


class _Trap(Agent):
    def __init__(self, name: str, action: Callable[[], object]) -> None:
        self._action = action
        super().__init__(name)

    @on("run.started")
    def start(self, ctx, event):
        self._action()


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(16)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    with StubServer() as http:
        made = Env(tmp_path_factory.mktemp("guard"), tcp.getsockname(), udp.getsockname(), http.base_url)
        try:
            yield from prepared(made)
        finally:
            made.close()
    tcp.close()
    udp.close()


def test_the_table_has_a_row_of_every_kind_to_try():
    assert len(ROWS) == len({row.kind for row in COVERAGE if row.refused})


@pytest.mark.usefixtures("guard_hook")
@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r.kind}:{r.case}")
def test_a_row_of_each_kind_is_refused_in_a_live_handler_on_kafka(row: Row, env: Env, base_settings, registry):
    settings = base_settings.model_copy(update={"topic": new_topic_name("guard")})
    create_topic(settings, settings.topic)
    swarm = Swarm(name="guard", agents=lambda: [_Trap("trap", lambda: REFUSED[row.case](env))], code_version="1")
    start_run(settings=settings, swarm=swarm, run_id="guard", seed=1, registry=registry)
    with pytest.raises(ForbiddenCall) as caught:
        run_agents(settings=settings, swarm=swarm, registry=registry, until_quiet=1.0)
    error = caught.value
    assert (error.case, error.call, error.kind, error.agent, error.offset) == (row.case, row.call, row.kind, "trap", 0)
    assert row.use in str(error)
