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
``SWARMLOG_CHECKPOINT_EVERY``    N: a live agent keeps its whole fold beside the log every N steps, in
                                 the transaction of those steps, and a restart resumes from the latest
                                 one the log's state digests vouch for (default 0: none; rebuild from 0).
``SWARMLOG_KAFKA_<KEY>``         any librdkafka property, ``_`` standing for ``.``:
                                 ``SWARMLOG_KAFKA_SECURITY_PROTOCOL=SASL_SSL``,
                                 ``SWARMLOG_KAFKA_SASL_MECHANISM=SCRAM-SHA-512``,
                                 ``SWARMLOG_KAFKA_SSL_CA_LOCATION=/etc/kafka/ca.pem``.

Read by the module they concern, for the whole process rather than for one :class:`Settings`:
``PYTHONHASHSEED`` (:mod:`swarmlog.runtime.interpreter`), ``OTEL_*`` (:mod:`swarmlog.observe.tracing`) and
``SWARMLOG_GUARD_HOOK`` (``python``: the determinism guard's Python profile hook instead of its C one;
:mod:`swarmlog.guard._hook`, read when the guard is imported).

Secrets (the database password, ``sasl.password`` and the other secret librdkafka
properties, the token key) are ``SecretStr`` (:class:`swarmlog.redaction.SecretStr`): ``repr(settings)`` shows them
masked, and they are unwrapped only where a client is built
(:meth:`Settings.kafka_config`, :meth:`Settings.database_conninfo`); see
``swarmlog.redaction``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from pathlib import Path, PosixPath
from typing import TYPE_CHECKING, Any

from .errors import InvalidSetting
from .redaction import ClientConfig, SecretStr, is_secret_kafka_property, split_database_password

if TYPE_CHECKING:
    from pydantic import ValidationError

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

# The variables read as one field each, and the field.
_VARIABLES: dict[str, str] = {
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
    "SWARMLOG_CHECKPOINT_EVERY": "checkpoint_every",
}

_UNSET: Any = object()


class Settings:
    """Connection and topic settings, frozen once read.

    **Validation.** The specification of every field — its type, its bounds, what it accepts and
    the message for what it refuses — is a pydantic model, :func:`_pydantic_settings` (what
    ``Settings`` itself was). But every command reads its settings at start, and importing
    pydantic and building that model cost a short command more than its own work
    (``cli_replay_3`` in bench/cli.py, bench/README.md "Start-up"). So the values are first
    checked here (:func:`_plain`) for their plainest spellings only — a ``str`` for a string, an
    ``int`` or decimal digits for an integer within its bounds, a ``str`` or ``Path`` for a path, ... —
    which pydantic reads as the same values; anything else (a bad value, a value out of
    bounds, pydantic's laxer spellings such as ``" 7"`` or ``"1e3"``, pydantic's own
    ``SecretStr``) is handed to the model, which accepts it as it always did or refuses it with
    the same error. ``test_settings_validation.py`` holds the two paths to the same result.

    pydantic's methods that swarmlog and its users call on settings are kept with the same
    meaning: :meth:`model_copy`, :meth:`model_dump`, :meth:`model_dump_json`,
    :meth:`model_validate`, :meth:`model_validate_json`.
    """

    __slots__ = ("bootstrap_servers", "database_url", "database_password", "topic", "schema_dir", "schema_path",
                 "replication_factor", "min_insync_replicas", "token_key", "swarm", "connect_timeout",
                 "state_digest_every", "checkpoint_every", "kafka")

    bootstrap_servers: str
    database_url: str
    """The mirror's libpq URL, without its password (that is ``database_password``)."""
    database_password: SecretStr | None
    topic: str
    schema_dir: Path
    """The built-in schemas' directory (package data); ``SWARMLOG_SCHEMA_DIR`` replaces it."""
    schema_path: tuple[Path, ...]
    """Directories of the user's own event types, layered over the built-ins."""
    replication_factor: int
    min_insync_replicas: int | None
    token_key: SecretStr | None
    swarm: str | None
    """``module:swarm`` of the swarm's code, the default of ``--swarm``."""
    connect_timeout: float
    """Seconds a first request to Kafka or Postgres may take before it counts as unreachable."""
    state_digest_every: int
    checkpoint_every: int
    """Live steps between two checkpoints of an agent (:mod:`swarmlog.runtime.resume`; 0: none)."""
    kafka: Mapping[str, str | SecretStr]
    """Extra librdkafka properties (security, SASL, TLS, tuning) applied to every client; the secret
    ones (``sasl.password``, ...) as :class:`~swarmlog.redaction.SecretStr`."""

    def __init__(
        self,
        *,
        bootstrap_servers: str = DEFAULT_BOOTSTRAP_SERVERS,
        database_url: str = DEFAULT_DATABASE_URL,
        database_password: SecretStr | str | None = None,
        topic: str = DEFAULT_TOPIC,
        schema_dir: Path | str = _UNSET,
        schema_path: Sequence[Path | str] = (),
        replication_factor: int = -1,
        min_insync_replicas: int | None = None,
        token_key: SecretStr | str | None = None,
        swarm: str | None = None,
        connect_timeout: float = 10.0,
        state_digest_every: int = 1,
        checkpoint_every: int = 0,
        kafka: Mapping[str, str | SecretStr] = _UNSET,
    ) -> None:
        values = {
            "bootstrap_servers": bootstrap_servers, "database_url": database_url,
            "database_password": database_password, "topic": topic, "schema_dir": schema_dir,
            "schema_path": schema_path, "replication_factor": replication_factor,
            "min_insync_replicas": min_insync_replicas, "token_key": token_key, "swarm": swarm,
            "connect_timeout": connect_timeout, "state_digest_every": state_digest_every,
            "checkpoint_every": checkpoint_every, "kafka": kafka,
        }
        _set(self, _validated({k: v for k, v in values.items() if v is not _UNSET}))

    @classmethod
    def _of(cls, fields: Mapping[str, Any]) -> Settings:
        """Settings holding ``fields``, already validated (every field)."""
        settings = object.__new__(cls)
        _set(settings, fields)
        return settings

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Settings are frozen: {name} cannot be set (model_copy(update=...) makes new ones)")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"Settings are frozen: {name} cannot be deleted")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Settings):
            return NotImplemented
        return type(other) is type(self) and self._fields() == other._fields()

    __hash__ = None  # type: ignore[assignment]  # as pydantic's frozen model: ``kafka`` is a dict

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restore, (self._fields(),))

    def __repr__(self) -> str:
        return f"Settings({', '.join(f'{k}={v!r}' for k, v in self._fields().items())})"

    def __str__(self) -> str:
        return " ".join(f"{k}={v!r}" for k, v in self._fields().items())

    def _fields(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}

    def model_dump(self, *, mode: str = "python") -> dict[str, Any]:
        """The fields as a dict; ``mode="json"``: as JSON has them (paths as strings, secrets masked)."""
        fields = self._fields()
        if mode != "json":
            return fields
        shown: dict[str, Any] = json.loads(self.model_dump_json())
        return shown

    def model_dump_json(self) -> str:
        """The fields as compact JSON, secrets masked (``**********``), as pydantic wrote them."""
        def shown(value: object) -> object:
            if isinstance(value, (SecretStr, Path)):
                return str(value)
            raise TypeError(f"{type(value).__name__} is not JSON")

        return json.dumps(self._fields(), default=shown, separators=(",", ":"), ensure_ascii=False)

    def model_copy(self, *, update: Mapping[str, Any] | None = None) -> Settings:
        """New settings: these with ``update``'s fields replaced (validated, unlike pydantic's copy)."""
        if not update:
            return self
        unknown = set(update) - set(self.__slots__)
        if unknown:
            raise TypeError(f"Settings have no field {', '.join(sorted(unknown))}")
        return Settings._of(_validated({**self._fields(), **update}))

    @classmethod
    def model_validate(cls, obj: Settings | Mapping[str, Any]) -> Settings:
        """Settings from a mapping of fields, validated (a ``pydantic.ValidationError`` if refused)."""
        if isinstance(obj, Settings):
            return obj
        return cls._of(_validated(dict(obj)))

    @classmethod
    def model_validate_json(cls, text: str | bytes) -> Settings:
        return cls.model_validate(json.loads(text))

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
        values = _env_values(env, overrides)
        return cls._of(_validated(values, refused=lambda exc: _invalid_setting(exc, env, _VARIABLES, overrides)))

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


def _env_values(env: Mapping[str, str], overrides: Mapping[str, object]) -> dict[str, object]:
    """The fields ``env`` sets (as strings), ``overrides`` over them: what :meth:`Settings.from_env` validates."""
    values: dict[str, object] = {}
    for var, field in _VARIABLES.items():
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
    return values


def _set(settings: Settings, fields: Mapping[str, Any]) -> None:
    for name in Settings.__slots__:
        object.__setattr__(settings, name, fields[name])


def _restore(fields: Mapping[str, Any]) -> Settings:
    return Settings._of(fields)


# --- validation: the plain spellings here, everything else by the pydantic model --------------------------


def _validated(values: Mapping[str, Any], *,
               refused: Callable[[ValidationError], Exception] | None = None) -> dict[str, Any]:
    """Every field of settings given ``values`` (field -> value; missing fields take their defaults).

    :func:`_plain` where it can tell, else the pydantic model; a value the model refuses raises its
    ``pydantic.ValidationError``, or what ``refused`` makes of it.
    """
    fields = _plain(values)
    return fields if fields is not None else _by_pydantic(values, refused=refused)


def _by_pydantic(values: Mapping[str, Any], *,
                 refused: Callable[[ValidationError], Exception] | None = None) -> dict[str, Any]:
    """Every field as the pydantic model reads ``values``, its secrets as swarmlog's SecretStr."""
    from pydantic import ValidationError

    try:
        model = _pydantic_settings().model_validate(_for_pydantic(values))
    except ValidationError as exc:
        if refused is None:
            raise
        raise refused(exc) from None
    return {name: _from_pydantic(getattr(model, name)) for name in Settings.__slots__}


_NO: Any = object()
"""What a plain check returns for a value it leaves to the pydantic model."""
_INT = re.compile(r"-?(?:0|[1-9][0-9]{0,17})")
_FLOAT = re.compile(r"(?:0|[1-9][0-9]{0,14})(?:\.[0-9]{1,15})?")


def _str(value: object) -> object:
    return value if type(value) is str else _NO


def _str_or_none(value: object) -> object:
    return value if value is None or type(value) is str else _NO


def _secret(value: object) -> object:
    if value is None or type(value) is SecretStr:
        return value
    return SecretStr(value) if type(value) is str else _NO


def _path(value: object) -> object:
    if type(value) is PosixPath:
        return value
    return Path(value) if type(value) is str and value else _NO


def _paths(value: object) -> object:
    if type(value) not in (tuple, list):
        return _NO
    paths = tuple(map(_path, value))  # type: ignore[call-overload]
    return _NO if _NO in paths else paths


def _int(value: object, low: int | None = None) -> object:
    if type(value) is str and _INT.fullmatch(value):
        value = int(value)
    if type(value) is not int or (low is not None and value < low):
        return _NO
    return value


def _float_above_0(value: object) -> object:
    if type(value) is str and _FLOAT.fullmatch(value):
        value = float(value)
    elif type(value) is int and 0 < value < 2**53:
        value = float(value)
    if type(value) is not float or not 0 < value < float("inf"):
        return _NO
    return value


def _kafka(value: object) -> object:
    if type(value) is not dict:
        return _NO
    if any(type(k) is not str or type(v) not in (str, SecretStr) for k, v in value.items()):
        return _NO
    return _kafka_secrets_hidden(value, SecretStr)


def _kafka_secrets_hidden(kafka: Mapping[str, Any], secret: Callable[[str], Any]) -> dict[str, Any]:
    """The librdkafka properties, each secret one given as a plain string wrapped by ``secret``
    (swarmlog's SecretStr here, pydantic's in the model)."""
    return {k: secret(v) if isinstance(v, str) and is_secret_kafka_property(k) else v for k, v in kafka.items()}


def _password_out_of_the_url(values: Mapping[str, Any]) -> Mapping[str, Any]:
    """``values`` with a password in ``database_url`` moved to ``database_password`` (unless that is
    set), so that it never sits in a str field; ValueError for a URL it cannot take apart."""
    url = values.get("database_url")
    if not isinstance(url, str):
        return values
    url, password = split_database_password(url)
    values = {**values, "database_url": url}
    if password is not None and not values.get("database_password"):
        values["database_password"] = password
    return values


_PLAIN: dict[str, tuple[Callable[[Any], object], Callable[[], Any]]] = {
    # field: (its plain check, its default)
    "bootstrap_servers": (_str, lambda: DEFAULT_BOOTSTRAP_SERVERS),
    "database_url": (_str, lambda: DEFAULT_DATABASE_URL),
    "database_password": (_secret, lambda: None),
    "topic": (_str, lambda: DEFAULT_TOPIC),
    "schema_dir": (_path, _builtin_schema_dir),
    "schema_path": (_paths, tuple),
    "replication_factor": (_int, lambda: -1),
    "min_insync_replicas": (lambda v: None if v is None else _int(v, 1), lambda: None),
    "token_key": (_secret, lambda: None),
    "swarm": (_str_or_none, lambda: None),
    "connect_timeout": (_float_above_0, lambda: 10.0),
    "state_digest_every": (lambda v: _int(v, 0), lambda: 1),
    "checkpoint_every": (lambda v: _int(v, 0), lambda: 0),
    "kafka": (_kafka, dict),
}


def _plain(values: Mapping[str, Any]) -> dict[str, Any] | None:
    """Every field, if every value given is spelt as :func:`_pydantic_settings` reads it with no doubt
    (and to the same value); else None. Also takes a password out of the URL, as the model does."""
    if any(name not in _PLAIN for name in values):
        return None  # the model ignores unknown names: it decides
    try:
        values = _password_out_of_the_url(values)
    except ValueError:
        return None  # the model says what is wrong with it
    fields: dict[str, Any] = {}
    for name, (check, default) in _PLAIN.items():
        value = check(values[name]) if name in values else default()
        if value is _NO:
            return None
        fields[name] = value
    return fields


def _for_pydantic(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` with swarmlog's SecretStr as pydantic's, which the model's fields take."""
    from pydantic import SecretStr as PydanticSecret

    def theirs(value: object) -> object:
        return PydanticSecret(value.get_secret_value()) if isinstance(value, SecretStr) else value

    converted = {k: theirs(v) for k, v in values.items()}
    kafka = converted.get("kafka")
    if isinstance(kafka, Mapping):
        converted["kafka"] = {k: theirs(v) for k, v in kafka.items()}
    return converted


def _from_pydantic(value: object) -> object:
    """A field's value from the model, its secrets as swarmlog's SecretStr."""
    if hasattr(value, "get_secret_value"):
        return SecretStr(value.get_secret_value())
    if isinstance(value, Mapping):
        return {k: _from_pydantic(v) for k, v in value.items()}
    return value


@cache
def _pydantic_settings() -> Any:
    """The specification of :class:`Settings`' fields: a pydantic model, built on first use.

    What ``Settings`` was, field for field; used for the values :func:`_plain` cannot vouch for.
    """
    from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
    from pydantic import SecretStr as PydanticSecret

    class Settings(BaseModel):
        model_config = ConfigDict(frozen=True)

        bootstrap_servers: str = DEFAULT_BOOTSTRAP_SERVERS
        database_url: str = DEFAULT_DATABASE_URL
        database_password: PydanticSecret | None = None
        topic: str = DEFAULT_TOPIC
        schema_dir: Path = Field(default_factory=_builtin_schema_dir)
        schema_path: tuple[Path, ...] = ()
        replication_factor: int = -1
        min_insync_replicas: int | None = Field(default=None, ge=1)
        token_key: PydanticSecret | None = None
        swarm: str | None = None
        connect_timeout: float = Field(default=10.0, gt=0)
        state_digest_every: int = Field(default=1, ge=0)
        checkpoint_every: int = Field(default=0, ge=0)
        kafka: Mapping[str, str | PydanticSecret] = Field(default_factory=dict)

        @model_validator(mode="before")
        @classmethod
        def _password_out_of_the_url(cls, values: object) -> object:
            # Before validation, so that the password never sits in a str field, even briefly.
            return _password_out_of_the_url(values) if isinstance(values, Mapping) else values

        @field_validator("kafka", mode="after")
        @classmethod
        def _kafka_secrets_hidden(cls, kafka: Mapping[str, str | PydanticSecret]) -> Mapping[str, str | PydanticSecret]:
            return _kafka_secrets_hidden(kafka, PydanticSecret)

    return Settings


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
