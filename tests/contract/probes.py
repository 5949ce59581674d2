"""The probes of the fold contract (:mod:`tests.contract.folds`): two-agent swarms whose agent ``q`` departs,
in one way each, from what it recorded, because its code reads a module global that changes between the
live run and its replay.

``p`` sends ``q`` a note at the run's start; ``q`` handles it and acks; on that ack ``p`` calls the
``deploy`` effect — the world changing under the swarm: it sets :data:`SALT` to ``"replay"`` — and sends
``q`` a second note. A test starts the live run with ``SALT = "live"``; every replay afterwards (in this
process or another: a fresh import says ``"replay"``) sees ``"replay"``, and so does ``q``'s second note,
live. So ``q``'s first note is where its code departs from the log, by what it reads of :data:`SALT`:

* ``state``: ``q``'s state records the salt (no output changes): the issue's probe;
* ``output``: ``q``'s ack carries it (the state does not);
* ``effect``: ``q`` looks something up (an effect) only under the ``"replay"`` salt;
* ``output+state``: both its ack and its state carry it: the output divergence is the one reported
  first (at one offset: output, effect, state), by strict folds too;
* ``clean``: nothing of ``q`` reads it.

Importable by ``--swarm tests.contract.probes:probe_state`` (and the other three), so the command line
runs them in a process of its own.
"""

from __future__ import annotations

from typing import Any

from swarmlog import Agent, Swarm, on, on_message

KINDS = ("output", "effect", "state", "output+state", "clean")

SALT = "replay"
"""What ``q`` reads: ``"live"`` while a test's live run starts, ``"replay"`` from ``p``'s deploy on."""


def deploy() -> dict[str, Any]:
    """The ``deploy`` effect: run live (or as the simulator's model of it), it changes the module global."""
    global SALT
    SALT = "replay"
    return {"deployed": True}


def lookup(body: str) -> dict[str, Any]:
    return {"found": body}


class Pinger(Agent):
    """``p``: the first note at the start, then the deploy and the second note on ``q``'s first ack."""

    def initial_state(self) -> dict[str, Any]:
        return {"acks": []}

    @on("run.started")
    def start(self, ctx, event):
        ctx.send("q", "note", "1")

    @on_message("ack")
    def ack(self, ctx, event):
        self.state["acks"].append(event.body[:1])
        if event.body.startswith("1"):
            ctx.effect("deploy", deploy)
            ctx.send("q", "note", "2")


class Noter(Agent):
    """``q``: handles a note, acks it; what of it reads :data:`SALT` depends on ``kind``."""

    kind = "clean"

    def initial_state(self) -> dict[str, Any]:
        return {"notes": []}

    @on_message("note")
    def note(self, ctx, event):
        salted = f"{event.body}:{SALT}"
        if self.kind == "effect" and SALT == "replay":
            ctx.effect("lookup", lookup, event.body)
        self.state["notes"].append(salted if self.kind in ("state", "output+state") else event.body)
        ctx.send("p", "ack", salted if self.kind in ("output", "output+state") else event.body)


def _probe(kind: str) -> Swarm:
    noter = type(f"Noter_{kind.replace('+', '_')}", (Noter,), {"kind": kind})
    return Swarm(name=f"probe-{kind.replace('+', '-')}", agents=lambda: [Pinger("p"), noter("q")], code_version="1")


probe_output = _probe("output")
probe_effect = _probe("effect")
probe_state = _probe("state")
probe_output_state = _probe("output+state")
probe_clean = _probe("clean")
PROBES = {"output": probe_output, "effect": probe_effect, "state": probe_state, "output+state": probe_output_state,
          "clean": probe_clean}

MODELS = {"deploy": lambda: deploy(), "lookup": lookup}
"""The simulator's models of the two effects: the same functions the live run calls."""
