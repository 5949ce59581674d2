"""A local single-node Kafka + PostgreSQL for development and tests, without Docker.

``swarmlog dev up`` starts both (Kafka from Maven jars in KRaft combined mode, a
throwaway Postgres cluster), ``swarmlog dev env`` prints the variables that
point swarmlog at them, ``status`` and ``down`` do what they say.
"""

from .cluster import (
    ClusterInfo,
    ClusterStatus,
    ServiceStatus,
    down,
    env_lines,
    kafka_tool_argv,
    status,
    up,
)

__all__ = ["ClusterInfo", "ClusterStatus", "ServiceStatus", "down", "env_lines", "kafka_tool_argv",
           "status", "up"]
