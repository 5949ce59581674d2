"""ctx.http() in a handler of a process that has not imported httpx2 yet."""

from __future__ import annotations

import sys

from swarmlog import Agent, Swarm, on
from swarmlog.errors import UnmodelledEffect
from swarmlog.testing import Simulator


class _Browser(Agent):
    @on("run.started")
    def start(self, ctx, event):
        ctx.http().get("http://127.0.0.1:9/never-reached")


def test_the_first_ctx_http_of_a_process_imports_httpx2_outside_the_guard(monkeypatch):
    # As in a fresh process: httpx2 not imported yet, so ctx.http() imports it inside the handler
    # (its import reads its package metadata from disk, which the guard refuses of a handler).
    for name in [m for m in sys.modules if m == "httpx2" or m.startswith("httpx2.")]:
        monkeypatch.delitem(sys.modules, name)
    sim = Simulator(Swarm(name="http", agents=lambda: [_Browser("a")], code_version="1"))
    try:
        sim.run()
    except UnmodelledEffect as exc:  # the simulator refuses the exchange itself: the import went through
        assert exc.kind == "HTTP exchange"
    else:
        raise AssertionError("the simulated step reached neither the exchange nor a guard violation")
