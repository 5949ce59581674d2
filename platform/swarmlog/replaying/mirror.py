"""Replay's records in the Postgres mirror, as the core reaches them: by name, through what the connectors register.

Everything the core keeps in or reads from the mirror is replay's: a replay's published report
(``replay --publish``), saved replay tokens (``token create --save``, ``--saved``), the recorded runs
a regression replays (``regress --from-mirror``). The mirror itself (its tables, migrations and
queries) lives with the connectors, and imports run one way: the core never imports
``swarmlog_connectors``. So the core asks for each by name, here, from the entry-point group
``swarmlog.mirror`` the connectors fill (``pyproject.toml``).
"""

from __future__ import annotations

from typing import Any

from ..errors import MissingDependency

__all__ = ["from_the_mirror"]


def from_the_mirror(name: str) -> Any:
    """What the mirror's package registers as ``name`` (entry points ``swarmlog.mirror``): the core names
    what it keeps in Postgres (``publish_report``, ``save_token``, ...), the connectors provide it."""
    from importlib.metadata import entry_points

    for ep in entry_points(group="swarmlog.mirror", name=name):
        return ep.load()
    raise MissingDependency(program=f"swarmlog's Postgres mirror ({name})", install_hint="It comes with "
                            "swarmlog (swarmlog_connectors): install swarmlog itself, not only its source folder")
