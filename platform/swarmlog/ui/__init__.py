"""``swarmlog ui``: a web console over the Postgres mirror — every run, its timeline, model calls as
conversations, state at any offset, replay reports and their divergences.

The public face:

* :func:`create_app` — the console as an ASGI application (Starlette), given a :class:`MirrorReader`
  (the mirror, read as the read-only ``swarmlog_reader`` role) and, for states, :class:`States`
  (the swarm's code folding the log, as ``swarmlog state`` does).
* :class:`MirrorReader` — the queries the pages make: runs with their status, keyset pages of a
  run's events, an event's causes both ways, replay reports, model calls (the ``llm_calls`` view).

Needs the optional extra ``swarmlog[ui]`` (Starlette, uvicorn, Jinja2); ``swarmlog ui`` says so
when it is missing. The machinery is private: ``app`` (routes and templates), ``_mirror``,
``_states``, ``command``.
"""

from typing import TYPE_CHECKING

from .._lazy import exports

if TYPE_CHECKING:
    from ..errors import StateUnavailable
    from ._mirror import MirrorReader, Report, RunRow
    from ._states import States
    from .app import create_app

__getattr__ = exports(globals(), {
    "MirrorReader": "._mirror",
    "Report": "._mirror",
    "RunRow": "._mirror",
    "States": "._states",
    "StateUnavailable": "..errors",
    "create_app": ".app",
})

__all__ = ["MirrorReader", "Report", "RunRow", "StateUnavailable", "States", "create_app"]
