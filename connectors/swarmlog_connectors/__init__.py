"""Connectors that mirror a swarmlog topic into other systems.

``postgres_sink`` mirrors one topic into Postgres exactly once: run it as
``swarmlog sink``.
"""
