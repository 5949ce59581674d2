"""The one place swarmlog reads its environment.

Every command and library entry point takes a :class:`Settings`; nothing else
calls ``os.environ``. The same code therefore runs against the local dev
cluster (``eval "$(swarmlog dev env)"``) and against a production cluster with
SASL/TLS and a managed Postgres, by changing variables only.

Variables:

``SWARMLOG_BOOTSTRAP_SERVERS``   Kafka bootstrap servers.
``SWARMLOG_DATABASE_URL``        libpq URL of the Postgres mirror; a password in it is taken out into
                                 ``database_password`` (the URL is then safe to show). Checked by libpq
                                 where Postgres is first used (:meth:`Settings.check_database_url`).
``SWARMLOG_DATABASE_PASSWORD``   the mirror's password, if not in the URL.
``SWARMLOG_TOPIC``               the swarm's topic (one single-partition topic per swarm).
``SWARMLOG_SCHEMA_PATH``         directories of your own event types, ``:``-separated, layered over
                                 the built-in ones (a type defined twice is an error naming both files).
``SWARMLOG_SCHEMA_DIR``          replaces the built-in schemas' directory (default: the ones installed
                                 with swarmlog, ``swarmlog.schema.builtin``); for tests and forks.
``SWARMLOG_CONNECT_TIMEOUT``     seconds to wait for Kafka (and Postgres) to answer a first request
                                 before reporting it unreachable (default 10).
``SWARMLOG_REPLICATION_FACTOR``  replication factor for topics swarmlog creates
                                 (default -1: the broker's ``default.replication.factor``).
``SWARMLOG_MIN_INSYNC_REPLICAS`` ``min.insync.replicas`` for topics swarmlog creates (default: broker's).
``SWARMLOG_TOKEN_KEY``           key that signs and checks replay tokens (HMAC-SHA256); optional.
``SWARMLOG_SWARM``               the swarm's code, ``module:swarm``, for the commands that run it over the
                                 log (``state``, ``debug``, ``step``, ``snapshot``, ``timeline``) when
                                 ``--swarm`` is not given.
``SWARMLOG_STATE_DIGEST_EVERY``  K: a live agent records its state's digest every K-th step and at
                                 the end of every transaction (default 1: every step; 0: none).
``SWARMLOG_KAFKA_<KEY>``         any librdkafka property, ``_`` standing for ``.``:
                                 ``SWARMLOG_KAFKA_SECURITY_PROTOCOL=SASL_SSL``,
                                 ``SWARMLOG_KAFKA_SASL_MECHANISM=SCRAM-SHA-512``,
                                 ``SWARMLOG_KAFKA_SSL_CA_LOCATION=/etc/kafka/ca.pem``.

Read by the module they concern, for the whole process rather than for one :class:`Settings`:
``PYTHONHASHSEED`` (:mod:`swarmlog.interpreter`), ``OTEL_*`` (:mod:`swarmlog.observe.tracing`) and
``SWARMLOG_GUARD_HOOK`` (``python``: the determinism guard's Python profile hook instead of its C one;
:mod:`swarmlog.guard._hook`, read when the guard is imported).

Secrets (the database password, ``sasl.password`` and the other secret librdkafka
properties, the token key) are ``SecretStr``: ``repr(settings)`` shows them
masked, and they are unwrapped only where a client is built
(:meth:`Settings.kafka_config`, :meth:`Settings.database_conninfo`); see
``swarmlog.redaction``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from .errors import InvalidSetting
from .redaction import ClientConfig, is_secret_kafka_property, split_database_password

DEFAULT_BOOTSTRAP_SERVERS = "127.0.0.1:19092"
DEFAULT_DATABASE_URL = "postgresql://swarmlog@127.0.0.1:15432/swarmlog"
DEFAULT_TOPIC = "swarmlog.events"

_KAFKA_PREFIX = "SWARMLOG_KAFKA_"
# Variables under the Kafka prefix that are swarmlog's own, not librdkafka's.
_NOT_LIBRDKAFKA: frozenset[str] = frozenset()


def _builtin_schema_dir() -> Path:
    from .schema.registry import builtin_schema_dir  # the schema package imports fastavro: only when needed

    return builtin_schema_dir()


# Each variable swarmlog reads, and what to tell someone who set it wrongly.
_HINTS: dict[str, str] = {
    "SWARMLOG_BOOTSTRAP_SERVERS": "a comma-separated list of host:port, e.g. kafka-0.kafka:9092,kafka-1.kafka:9092",
    "SWARMLOG_DATABASE_URL": "a libpq URL, e.g. postgresql://swarmlog@db.example.com:5432/swarmlog?sslmode=require",
    "SWARMLOG_TOPIC": "the swarm's topic name, e.g. swarmlog.my-swarm",
    "SWARMLOG_SCHEMA_DIR": "a directory of <event_type>/v<N>.avsc files",
    "SWARMLOG_SCHEMA_PATH": "directories of <event_type>/v<N>.avsc files, separated by ':'",
    "SWARMLOG_REPLICATION_FACTOR": "an integer: the replication factor of topics swarmlog creates (production: 3), "
                                   "or -1 for the broker's default.replication.factor",
    "SWARMLOG_MIN_INSYNC_REPLICAS": "an integer of at least 1: min.insync.replicas of topics swarmlog creates "
                                    "(production: 2), or unset for the broker's default",
    "SWARMLOG_TOKEN_KEY": "a secret string that signs replay tokens",
    "SWARMLOG_CONNECT_TIMEOUT": "seconds, a number above 0, e.g. 10",
    "SWARMLOG_SWARM": "the swarm's code as module:swarm, e.g. mypkg.swarms:swarm",
}


class Settings(BaseModel):
    """Connection and topic settings, frozen once read."""

    model_config = ConfigDict(frozen=True)

    bootstrap_servers: str = DEFAULT_BOOTSTRAP_SERVERS
    database_url: str = DEFAULT_DATABASE_URL
    """The mirror's libpq URL, without its password (that is ``database_password``)."""
    database_password: SecretStr | None = None
    topic: str = DEFAULT_TOPIC
    schema_dir: Path = Field(default_factory=_builtin_schema_dir)
    """The built-in schemas' directory (package data); ``SWARMLOG_SCHEMA_DIR`` replaces it."""
    schema_path: tuple[Path, ...] = ()
    """Directories of the user's own event types, layered over the built-ins."""
    replication_factor: int = -1
    min_insync_replicas: int | None = Field(default=None, ge=1)
    token_key: SecretStr | None = None
    swarm: str | None = None
    """``module:swarm`` of the swarm's code, the default of ``--swarm``."""
    connect_timeout: float = Field(default=10.0, gt=0)
    """Seconds a first request to Kafka or Postgres may take before it counts as unreachable."""
    state_digest_every: int = Field(default=1, ge=0)
    kafka: Mapping[str, str | SecretStr] = Field(default_factory=dict)
    """Extra librdkafka properties (security, SASL, TLS, tuning) applied to every client; the secret
    ones (``sasl.password``, ...) as ``SecretStr``."""

    @model_validator(mode="before")
    @classmethod
    def _password_out_of_the_url(cls, values: object) -> object:
        # Before validation, so that the password never sits in a str field, even briefly.
        if isinstance(values, Mapping) and isinstance(values.get("database_url"), str):
            url, password = split_database_password(values["database_url"])
            values = {**values, "database_url": url}
            if password is not None and not values.get("database_password"):
                values["database_password"] = password
        return values

    @field_validator("kafka", mode="after")
    @classmethod
    def _kafka_secrets_hidden(cls, kafka: Mapping[str, str | SecretStr]) -> Mapping[str, str | SecretStr]:
        return {k: SecretStr(v) if isinstance(v, str) and is_secret_kafka_property(k) else v
                for k, v in kafka.items()}

    def check_database_url(self) -> None:
        """Raise :class:`~swarmlog.errors.InvalidSetting` unless libpq accepts ``database_url``.

        The one check of the mirror's URL, made where Postgres is first used: by
        :meth:`database_conninfo` (every connection to the mirror goes through it), and up front by
        whatever will need Postgres before it does anything else (the sink, ``swarmlog mirror``,
        ``replay --publish``, ...), so that a bad URL is one line and exit 2 before any Kafka work.
        Not a validator of the settings: libpq's parser comes with psycopg, whose import costs a
        short command a fifth of a second, and most commands (``replay``, ``log``, ``state``,
        ``token verify``) never touch the mirror (``cli_replay_3`` in bench/cli.py).
        """
        problem = _libpq_problem(self.database_url)
        if problem is not None:
            raise InvalidSetting(variable="SWARMLOG_DATABASE_URL", value=None,  # a URL may hold a password
                                 problem=problem, hint=_HINTS["SWARMLOG_DATABASE_URL"])

    def schema_dirs(self) -> tuple[Path, ...]:
        """Every schema layer, the built-ins first: what :meth:`SchemaRegistry.load` takes."""
        return (self.schema_dir, *self.schema_path)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: object) -> Settings:
        """Read settings from ``environ`` (default ``os.environ``); ``overrides`` win."""
        env = os.environ if environ is None else environ
        values: dict[str, object] = {}
        simple = {
            "SWARMLOG_BOOTSTRAP_SERVERS": "bootstrap_servers",
            "SWARMLOG_DATABASE_URL": "database_url",
            "SWARMLOG_DATABASE_PASSWORD": "database_password",
            "SWARMLOG_TOPIC": "topic",
            "SWARMLOG_SCHEMA_DIR": "schema_dir",
            "SWARMLOG_REPLICATION_FACTOR": "replication_factor",
            "SWARMLOG_MIN_INSYNC_REPLICAS": "min_insync_replicas",
            "SWARMLOG_TOKEN_KEY": "token_key",
            "SWARMLOG_SWARM": "swarm",
            "SWARMLOG_CONNECT_TIMEOUT": "connect_timeout",
            "SWARMLOG_STATE_DIGEST_EVERY": "state_digest_every",
        }
        for var, field in simple.items():
            if env.get(var):
                values[field] = env[var]
        if env.get("SWARMLOG_SCHEMA_PATH"):
            values["schema_path"] = tuple(p for p in env["SWARMLOG_SCHEMA_PATH"].split(os.pathsep) if p)
        values["kafka"] = {
            var[len(_KAFKA_PREFIX):].lower().replace("_", "."): value
            for var, value in env.items()
            if var.startswith(_KAFKA_PREFIX) and var not in _NOT_LIBRDKAFKA
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            raise _invalid_setting(exc, env, simple, overrides) from None

    def token_key_bytes(self) -> bytes | None:
        return self.token_key.get_secret_value().encode() if self.token_key else None

    def kafka_config(
        self,
        required: Mapping[str, object] | None = None,
        *,
        tuning: Mapping[str, object] | None = None,
    ) -> ClientConfig:
        """librdkafka configuration for one client: pass it straight to the client's constructor.

        Layered so that the user can tune but not break guarantees: ``tuning``
        (swarmlog's performance defaults) < the user's ``SWARMLOG_KAFKA_*`` <
        ``required`` (what exactly-once and ordering depend on, e.g.
        ``isolation.level=read_committed``, ``enable.idempotence=true``).

        The one place the Kafka secrets are unwrapped: librdkafka needs them in
        clear, so the dict holds them, and its ``repr`` masks them.
        """
        config = ClientConfig({"bootstrap.servers": self.bootstrap_servers})
        config.update(tuning or {})
        config.update({k: v.get_secret_value() if isinstance(v, SecretStr) else v for k, v in self.kafka.items()})
        config.update(required or {})
        return config

    def database_conninfo(self) -> str:
        """The libpq connection string with the password: for ``psycopg.connect`` and nothing else.

        :class:`~swarmlog.errors.InvalidSetting` if libpq refuses the URL (:meth:`check_database_url`).
        """
        self.check_database_url()
        if self.database_password is None:
            return self.database_url
        from psycopg.conninfo import make_conninfo

        # The one place the database password is unwrapped.
        return make_conninfo(self.database_url, password=self.database_password.get_secret_value())


def _libpq_problem(url: str) -> str | None:
    """What libpq finds wrong with ``url``, or None.

    Parsed by libpq's own parser (through psycopg), so what passes here is what psycopg.connect()
    will accept; ports are only checked by libpq at connect time, so they are checked here.
    """
    from psycopg import ProgrammingError
    from psycopg.conninfo import conninfo_to_dict

    try:
        info = conninfo_to_dict(url)
    except ProgrammingError as exc:
        return str(exc).strip()
    for port in str(info.get("port") or "").split(","):
        if port and not port.isdigit():
            return f"port {port!r} is not a number"
    return None


def _invalid_setting(exc: ValidationError, env: Mapping[str, str], variables: Mapping[str, str],
                     overrides: Mapping[str, object]) -> InvalidSetting:
    """The first problem pydantic found, named by the variable the user set (never a traceback)."""
    err = exc.errors()[0]
    field = str(err["loc"][0]) if err["loc"] else ""
    by_field = {f: v for v, f in variables.items()} | {"schema_path": "SWARMLOG_SCHEMA_PATH"}
    variable = by_field.get(field, field)
    value = str(overrides[field]) if overrides.get(field) is not None else env.get(variable, "")
    secret = variable in ("SWARMLOG_TOKEN_KEY", "SWARMLOG_DATABASE_URL",  # a URL may hold a password
                          "SWARMLOG_DATABASE_PASSWORD") or is_secret_kafka_property(
        variable.removeprefix("SWARMLOG_KAFKA_").lower().replace("_", "."))
    return InvalidSetting(variable=variable, value=None if secret else value,
                          problem=str(err["msg"]).removeprefix("Value error, "), hint=_HINTS.get(variable, ""))
