"""swarmlog: a clock-free, Kafka-backed event log that gives agent swarms deterministic replay.

The public surface: the agent API (``Agent``, ``Swarm``, the handler decorators and
``ctx``), running and replaying a swarm, work in and out of a running swarm (``Client``,
``AsyncClient``), appending events, the settings and the errors (every one of :mod:`swarmlog.errors`).
Subpackages have faces of their own (``swarmlog.debug``, ``swarmlog.kafka``, ``swarmlog.llm``,
``swarmlog.log``, ``swarmlog.replaying``, ``swarmlog.runtime``, ``swarmlog.schema``, ``swarmlog.testing``);
modules whose names start with ``_`` are machinery. ``swarmlog.debug`` is the debugging API (the log decoded, state at
any offset, a debugger at a step, snapshots, forks); ``swarmlog.testing`` the simulator and the stubs
swarms are tested with. ``tests/unit/test_layout.py`` pins this list.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import errors
from ._lazy import exports
from .errors import *  # noqa: F403  # every error: only classes, and every command imports them anyway

if TYPE_CHECKING:  # what _LAZY gives, for type checkers (``X as X``: re-exported)
    from .agent import Agent as Agent
    from .agent import Swarm as Swarm
    from .agent import on as on
    from .agent import on_message as on_message
    from .agent import on_timer as on_timer
    from .client import AsyncClient as AsyncClient
    from .client import Client as Client
    from .client import Sent as Sent
    from .context import Context as Context
    from .events import Event as Event
    from .llm import HTTPRequestDiverged as HTTPRequestDiverged
    from .log.append import EventLog as EventLog
    from .log.memory import InMemoryLog as InMemoryLog
    from .replaying import Divergence as Divergence
    from .replaying import ReplayResult as ReplayResult
    from .replaying import SwarmReplayResult as SwarmReplayResult
    from .replaying import replay as replay
    from .replaying import replay_swarm as replay_swarm
    from .runtime import run_agents as run_agents
    from .runtime import start_run as start_run
    from .settings import Settings as Settings

# Every other public name is imported when first used (PEP 562): a command that needs no agent
# API (``swarmlog replay``, ``swarmlog log``) must not pay for importing the determinism guard,
# the runtime and the HTTP recorder at every start (``cli_replay_3`` in bench/cli.py).
_LAZY: dict[str, str] = {
    **dict.fromkeys(["Agent", "Swarm", "on", "on_message", "on_timer"], ".agent"),
    **dict.fromkeys(["AsyncClient", "Client", "Sent"], ".client"),
    "Context": ".context",
    "Event": ".events",
    "HTTPRequestDiverged": ".llm",
    "EventLog": ".log.append",
    "InMemoryLog": ".log.memory",
    **dict.fromkeys(["Divergence", "ReplayResult", "SwarmReplayResult", "replay", "replay_swarm"], ".replaying"),
    **dict.fromkeys(["run_agents", "start_run"], ".runtime"),
    "Settings": ".settings",
}

__getattr__ = exports(globals(), _LAZY)

__all__ = [*_LAZY, *errors.__all__]
