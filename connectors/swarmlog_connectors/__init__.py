"""Connectors that mirror a swarmlog topic into other systems: the Postgres mirror.

``postgres_sink`` mirrors one topic into Postgres exactly once (``pattern_sink`` every topic of a
pattern), ``postgres_rows`` builds its rows, ``postgres_migrations`` its schema; ``mirror`` reads it
back from Python, ``mirror_verify`` checks it against the log; ``token_store`` and ``replay_reports``
keep swarmlog's tokens and replay reports beside it; ``command`` adds ``swarmlog sink``, ``mirror``
and ``demo`` (a swarm, its mirror and its replay: ``demo``) to the command line. Imports run one way:
this package imports swarmlog, swarmlog never imports it (its commands and what swarmlog keeps in the
mirror come through entry points).
"""

__all__ = []
