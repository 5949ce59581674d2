"""The one place swarmlog reads its environment.

Every command and library entry point takes a :class:`Settings`; nothing else
calls ``os.environ``. The same code therefore runs against the local dev
cluster (``eval "$(swarmlog dev env)"``) and against a production cluster with
SASL/TLS and a managed Postgres, by changing variables only.

Variables:

``SWARMLOG_BOOTSTRAP_SERVERS``   Kafka bootstrap servers.
``SWARMLOG_DATABASE_URL``        libpq URL of the Postgres mirror.
``SWARMLOG_TOPIC``               the swarm's topic (one single-partition topic per swarm).
``SWARMLOG_SCHEMA_DIR``          where the Avro schemas live (default: the repo's ``schemas/``).
``SWARMLOG_REPLICATION_FACTOR``  replication factor for topics swarmlog creates
                                 (default -1: the broker's ``default.replication.factor``).
``SWARMLOG_MIN_INSYNC_REPLICAS`` ``min.insync.replicas`` for topics swarmlog creates (default: broker's).
``SWARMLOG_TOKEN_KEY``           key that signs and checks replay tokens (HMAC-SHA256); optional.
``SWARMLOG_SWARM``               the swarm's code, ``module:swarm``, for the commands that run it over the
                                 log (``state``, ``debug``, ``step``, ``snapshot``, ``timeline``) when
                                 ``--swarm`` is not given.
``SWARMLOG_KAFKA_<KEY>``         any librdkafka property, ``_`` standing for ``.``:
                                 ``SWARMLOG_KAFKA_SECURITY_PROTOCOL=SASL_SSL``,
                                 ``SWARMLOG_KAFKA_SASL_MECHANISM=SCRAM-SHA-512``,
                                 ``SWARMLOG_KAFKA_SSL_CA_LOCATION=/etc/kafka/ca.pem``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr

DEFAULT_BOOTSTRAP_SERVERS = "127.0.0.1:19092"
DEFAULT_DATABASE_URL = "postgresql://swarmlog@127.0.0.1:15432/swarmlog"
DEFAULT_TOPIC = "swarmlog.events"

_KAFKA_PREFIX = "SWARMLOG_KAFKA_"
# Variables under the Kafka prefix that are swarmlog's own, not librdkafka's.
_NOT_LIBRDKAFKA: frozenset[str] = frozenset()


def _repo_schema_dir() -> Path:
    # platform/swarmlog/settings.py -> <repo>/schemas
    return Path(__file__).resolve().parents[2] / "schemas"


class Settings(BaseModel):
    """Connection and topic settings, frozen once read."""

    model_config = ConfigDict(frozen=True)

    bootstrap_servers: str = DEFAULT_BOOTSTRAP_SERVERS
    database_url: str = DEFAULT_DATABASE_URL
    topic: str = DEFAULT_TOPIC
    schema_dir: Path = Field(default_factory=_repo_schema_dir)
    replication_factor: int = -1
    min_insync_replicas: int | None = None
    token_key: SecretStr | None = None
    swarm: str | None = None
    """``module:swarm`` of the swarm's code, the default of ``--swarm``."""
    kafka: Mapping[str, str] = Field(default_factory=dict)
    """Extra librdkafka properties (security, SASL, TLS, tuning) applied to every client."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: object) -> Settings:
        """Read settings from ``environ`` (default ``os.environ``); ``overrides`` win."""
        env = os.environ if environ is None else environ
        values: dict[str, object] = {}
        simple = {
            "SWARMLOG_BOOTSTRAP_SERVERS": "bootstrap_servers",
            "SWARMLOG_DATABASE_URL": "database_url",
            "SWARMLOG_TOPIC": "topic",
            "SWARMLOG_SCHEMA_DIR": "schema_dir",
            "SWARMLOG_REPLICATION_FACTOR": "replication_factor",
            "SWARMLOG_MIN_INSYNC_REPLICAS": "min_insync_replicas",
            "SWARMLOG_TOKEN_KEY": "token_key",
            "SWARMLOG_SWARM": "swarm",
        }
        for var, field in simple.items():
            if env.get(var):
                values[field] = env[var]
        values["kafka"] = {
            var[len(_KAFKA_PREFIX):].lower().replace("_", "."): value
            for var, value in env.items()
            if var.startswith(_KAFKA_PREFIX) and var not in _NOT_LIBRDKAFKA
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls.model_validate(values)

    def token_key_bytes(self) -> bytes | None:
        return self.token_key.get_secret_value().encode() if self.token_key else None

    def kafka_config(
        self,
        required: Mapping[str, object] | None = None,
        *,
        tuning: Mapping[str, object] | None = None,
    ) -> dict[str, object]:
        """librdkafka configuration for one client.

        Layered so that the user can tune but not break guarantees: ``tuning``
        (swarmlog's performance defaults) < the user's ``SWARMLOG_KAFKA_*`` <
        ``required`` (what exactly-once and ordering depend on, e.g.
        ``isolation.level=read_committed``, ``enable.idempotence=true``).
        """
        config: dict[str, object] = {"bootstrap.servers": self.bootstrap_servers}
        config.update(tuning or {})
        config.update(self.kafka)
        config.update(required or {})
        return config
