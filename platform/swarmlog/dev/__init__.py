"""A local Kafka + PostgreSQL for development and tests, without Docker.

``swarmlog dev up`` starts both (Kafka from Maven jars in KRaft combined mode, a
throwaway Postgres cluster), ``swarmlog dev env`` prints the variables that
point swarmlog at them, ``status`` and ``down`` do what they say. One broker by
default; ``--brokers 3`` runs three (replication 3, ``min.insync.replicas`` 2),
``--sasl`` adds a SASL_PLAINTEXT (SCRAM-SHA-512) listener and a user for it.
"""

from typing import TYPE_CHECKING

from .._lazy import exports

if TYPE_CHECKING:
    from .cluster import ClusterInfo, ClusterStatus, ServiceStatus, down, env_lines, kafka_tool_argv, status, up

# Imported when first used: the cluster's module imports psycopg, and ``swarmlog --help`` lists
# ``swarmlog dev`` (dev/command.py) without starting anything.
__getattr__ = exports(globals(), dict.fromkeys(["ClusterInfo", "ClusterStatus", "ServiceStatus", "down", "env_lines",
                                                 "kafka_tool_argv", "status", "up"], ".cluster"))

__all__ = ["ClusterInfo", "ClusterStatus", "ServiceStatus", "down", "env_lines", "kafka_tool_argv",
           "status", "up"]
