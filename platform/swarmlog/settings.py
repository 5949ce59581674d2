"""The one place swarmlog reads its environment.

Every command and library entry point takes a :class:`Settings`; nothing else
calls ``os.environ``. The same code therefore runs against the local dev
cluster (``eval "$(swarmlog dev env)"``) and against a production cluster with
SASL/TLS and a managed Postgres, by changing variables only.

Each setting is one row, a field of :class:`Settings`: its type, its variable, its default, its
bounds, what to tell someone who set it wrongly, and whether it is a secret. The rows drive
everything else: reading the environment, checking values (the plain spellings here, the rest by
a pydantic model built from the same rows), defaults, the hints of :class:`~swarmlog.errors.InvalidSetting`,
which values an error may show, and the list of variables below. A new setting is a new row.

Variables:

{variables}

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
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from functools import cache
from pathlib import Path, PosixPath
from typing import TYPE_CHECKING, Any

from .errors import InvalidSetting
from .redaction import ClientConfig, SecretStr, is_secret_kafka_property, split_database_password

if TYPE_CHECKING:
    from pydantic import ValidationError

__all__ = ["DEFAULT_BOOTSTRAP_SERVERS", "DEFAULT_DATABASE_URL", "DEFAULT_TOPIC", "Settings"]

DEFAULT_BOOTSTRAP_SERVERS = "127.0.0.1:19092"
DEFAULT_DATABASE_URL = "postgresql://swarmlog@127.0.0.1:15432/swarmlog"
DEFAULT_TOPIC = "swarmlog.events"

_KAFKA_PREFIX = "SWARMLOG_KAFKA_"


def _builtin_schema_dir() -> Path:
    from .schema.registry import builtin_schema_dir  # the schema package imports fastavro: only when needed

    return builtin_schema_dir()


def _paths_of(value: str) -> tuple[str, ...]:
    return tuple(p for p in value.split(os.pathsep) if p)


def setting(variable: str, default: Any = MISSING, *, factory: Callable[[], Any] | None = None, doc: str,
            hint: str = "", secret: bool = False, ge: int | None = None, gt: float | None = None,
            read: Callable[[str], Any] | None = None) -> Any:
    """One row of the settings: a :class:`Settings` field and everything about its variable.

    ``variable`` is the environment variable (``read`` turns its text into the field's value, when
    that is not the text itself); ``default`` or ``factory`` the value when it is unset; ``doc`` what
    it is (the module's list of variables); ``hint`` what to set, shown when a value is refused;
    ``secret``: its value is never shown (in an error, a log line); ``ge``/``gt`` its bounds.
    """
    return field(default=default, default_factory=factory if factory is not None else MISSING,
                 metadata={"variable": variable, "doc": doc, "hint": hint, "secret": secret, "ge": ge, "gt": gt,
                           "read": read})


@dataclass(frozen=True, kw_only=True, slots=True)
class Settings:
    """Connection and topic settings, frozen once read: one field a setting, each a row (:func:`setting`).

    **Validation.** Every command reads its settings at start, and importing pydantic cost a short
    command more than its own work (``cli_replay_3`` in bench/cli.py). So the values are first
    checked here (:func:`_plain`) for their plainest spellings only — a ``str`` for a string, an
    ``int`` or decimal digits for an integer within its bounds, a ``str`` or ``Path`` for a path, ... —
    which pydantic reads as the same values; anything else (a bad value, a value out of bounds,
    pydantic's laxer spellings such as ``" 7"`` or ``"1e3"``, pydantic's own ``SecretStr``) is handed
    to a pydantic model built from the same rows (:func:`_pydantic_settings`), which accepts it as
    ``Settings`` always did or refuses it with the same error. ``test_settings_validation.py`` holds
    the two paths to the same result.

    pydantic's methods that swarmlog and its users call on settings are kept with the same
    meaning: :meth:`model_copy`, :meth:`model_dump`, :meth:`model_dump_json`,
    :meth:`model_validate`, :meth:`model_validate_json`.
    """

    bootstrap_servers: str = setting(
        "SWARMLOG_BOOTSTRAP_SERVERS", DEFAULT_BOOTSTRAP_SERVERS, doc="Kafka bootstrap servers.",
        hint="a comma-separated list of host:port, e.g. kafka-0.kafka:9092,kafka-1.kafka:9092")
    database_url: str = setting(
        "SWARMLOG_DATABASE_URL", DEFAULT_DATABASE_URL, secret=True,  # a URL may hold a password
        doc="libpq URL of the Postgres mirror; a password in it is taken out into ``database_password`` (the URL "
            "is then safe to show). Checked by libpq where Postgres is first used "
            "(:meth:`Settings.check_database_url`).",
        hint="a libpq URL, e.g. postgresql://swarmlog@db.example.com:5432/swarmlog?sslmode=require")
    database_password: SecretStr | None = setting(
        "SWARMLOG_DATABASE_PASSWORD", None, secret=True, doc="the mirror's password, if not in the URL.")
    topic: str = setting(
        "SWARMLOG_TOPIC", DEFAULT_TOPIC, doc="the swarm's topic (one single-partition topic per swarm).",
        hint="the swarm's topic name, e.g. swarmlog.my-swarm")
    schema_dir: Path = setting(
        "SWARMLOG_SCHEMA_DIR", factory=_builtin_schema_dir,
        doc="replaces the built-in schemas' directory (default: the ones installed with swarmlog, "
            "``swarmlog.schema.builtin``); for tests and forks.", hint="a directory of <event_type>/v<N>.avsc files")
    schema_path: tuple[Path, ...] = setting(
        "SWARMLOG_SCHEMA_PATH", (), read=_paths_of,
        doc="directories of your own event types, ``:``-separated, layered over the built-in ones (a type defined "
            "twice is an error naming both files).",
        hint="directories of <event_type>/v<N>.avsc files, separated by ':'")
    replication_factor: int = setting(
        "SWARMLOG_REPLICATION_FACTOR", -1,
        doc="replication factor for topics swarmlog creates (default -1: the broker's "
            "``default.replication.factor``).",
        hint="an integer: the replication factor of topics swarmlog creates (production: 3), or -1 for the broker's "
             "default.replication.factor")
    min_insync_replicas: int | None = setting(
        "SWARMLOG_MIN_INSYNC_REPLICAS", None, ge=1,
        doc="``min.insync.replicas`` for topics swarmlog creates (default: broker's).",
        hint="an integer of at least 1: min.insync.replicas of topics swarmlog creates (production: 2), or unset "
             "for the broker's default")
    token_key: SecretStr | None = setting(
        "SWARMLOG_TOKEN_KEY", None, secret=True,
        doc="key that signs and checks replay tokens (HMAC-SHA256); optional.",
        hint="a secret string that signs replay tokens")
    swarm: str | None = setting(
        "SWARMLOG_SWARM", None,
        doc="the swarm's code, ``module:swarm``, for the commands that run it over the log (``state``, ``debug``, "
            "``step``, ``snapshot``, ``timeline``) when ``--swarm`` is not given.",
        hint="the swarm's code as module:swarm, e.g. mypkg.swarms:swarm")
    connect_timeout: float = setting(
        "SWARMLOG_CONNECT_TIMEOUT", 10.0, gt=0,
        doc="seconds to wait for Kafka (and Postgres) to answer a first request before reporting it unreachable "
            "(default 10).", hint="seconds, a number above 0, e.g. 10")
    state_digest_every: int = setting(
        "SWARMLOG_STATE_DIGEST_EVERY", 1, ge=0,
        doc="K: a live agent records its state's digest every K-th step and at the end of every transaction "
            "(default 1: every step; 0: none).")
    checkpoint_every: int = setting(
        "SWARMLOG_CHECKPOINT_EVERY", 0, ge=0,
        doc="N: a live agent keeps its whole fold beside the log every N steps, in the transaction of those "
            "steps, and a restart resumes from the latest one the log's state digests vouch for (default 0: "
            "none; a restart rebuilds from offset 0). See docs/checkpoints.md.")
    kafka: Mapping[str, str | SecretStr] = setting(
        f"{_KAFKA_PREFIX}<KEY>", factory=dict,
        doc="any librdkafka property, ``_`` standing for ``.``: ``SWARMLOG_KAFKA_SECURITY_PROTOCOL=SASL_SSL``, "
            "``SWARMLOG_KAFKA_SASL_MECHANISM=SCRAM-SHA-512``, ``SWARMLOG_KAFKA_SSL_CA_LOCATION=/etc/kafka/ca.pem``; "
            "the secret ones (``sasl.password``, ...) are held as :class:`~swarmlog.redaction.SecretStr`.")

    def __post_init__(self) -> None:
        _set(self, _validated(self._fields()))

    @classmethod
    def _of(cls, fields: Mapping[str, Any]) -> Settings:
        """Settings holding ``fields``, already validated (every field)."""
        settings = object.__new__(cls)
        _set(settings, fields)
        return settings

    __hash__ = None  # type: ignore[assignment]  # as pydantic's frozen model: ``kafka`` is a dict

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restore, (self._fields(),))

    def __str__(self) -> str:
        return " ".join(f"{k}={v!r}" for k, v in self._fields().items())

    def _fields(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _NAMES}

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
        unknown = set(update) - set(_NAMES)
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
        short command more than its own work, and most commands (``replay``, ``log``, ``state``,
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
        return cls._of(_validated(values, refused=lambda exc: _invalid_setting(exc, env, overrides)))

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


# --- what the rows give ---------------------------------------------------------------------------

_ROWS = fields(Settings)
_NAMES = tuple(row.name for row in _ROWS)
_VARIABLES: dict[str, str] = {row.metadata["variable"]: row.name for row in _ROWS if row.name != "kafka"}
"""Each variable read as one field, and the field (``SWARMLOG_KAFKA_*`` are read together into ``kafka``)."""
_HINTS: dict[str, str] = {row.metadata["variable"]: row.metadata["hint"] for row in _ROWS if row.metadata["hint"]}
"""What to tell someone who set a variable wrongly."""
_SECRET_VARIABLES = frozenset(row.metadata["variable"] for row in _ROWS if row.metadata["secret"])
"""Variables whose value an error never shows."""

__doc__ = (__doc__ or "").replace("{variables}", "\n".join(
    f"``{row.metadata['variable']}``  {row.metadata['doc']}" for row in _ROWS))


def _env_values(env: Mapping[str, str], overrides: Mapping[str, object]) -> dict[str, object]:
    """The fields ``env`` sets (as its rows read them), ``overrides`` over them: what
    :meth:`Settings.from_env` validates."""
    values: dict[str, object] = {}
    for row in _ROWS:
        text = env.get(row.metadata["variable"])
        if text:
            read = row.metadata["read"]
            values[row.name] = read(text) if read is not None else text
    values["kafka"] = {var[len(_KAFKA_PREFIX):].lower().replace("_", "."): value
                       for var, value in env.items() if var.startswith(_KAFKA_PREFIX)}
    values.update({k: v for k, v in overrides.items() if v is not None})
    return values


def _set(settings: Settings, fields: Mapping[str, Any]) -> None:
    for name in _NAMES:
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
    return {name: _from_pydantic(getattr(model, name)) for name in _NAMES}


_NO: Any = object()
"""What a plain check returns for a value it leaves to the pydantic model."""
_INT = re.compile(r"-?(?:0|[1-9][0-9]{0,17})")
_FLOAT = re.compile(r"(?:0|[1-9][0-9]{0,14})(?:\.[0-9]{1,15})?")


def _str(value: object, bound: Any = None) -> object:
    return value if type(value) is str else _NO


def _str_or_none(value: object, bound: Any = None) -> object:
    return value if value is None or type(value) is str else _NO


def _secret(value: object, bound: Any = None) -> object:
    if value is None or type(value) is SecretStr:
        return value
    return SecretStr(value) if type(value) is str else _NO


def _path(value: object, bound: Any = None) -> object:
    if type(value) is PosixPath:
        return value
    return Path(value) if type(value) is str and value else _NO


def _paths(value: object, bound: Any = None) -> object:
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


def _int_or_none(value: object, low: int | None = None) -> object:
    return None if value is None else _int(value, low)


def _float(value: object, above: float | None = None) -> object:
    if above != 0:
        return _NO  # only the bound swarmlog's settings have is spelt here; the model checks any other
    if type(value) is str and _FLOAT.fullmatch(value):
        value = float(value)
    elif type(value) is int and 0 < value < 2**53:
        value = float(value)
    if type(value) is not float or not 0 < value < float("inf"):
        return _NO
    return value


def _kafka(value: object, bound: Any = None) -> object:
    if type(value) is not dict:
        return _NO
    if any(type(k) is not str or type(v) not in (str, SecretStr) for k, v in value.items()):
        return _NO
    return _kafka_secrets_hidden(value, SecretStr)


_PLAIN_BY_TYPE: dict[str, Callable[[Any, Any], object]] = {
    "str": _str, "str | None": _str_or_none, "SecretStr | None": _secret, "Path": _path, "tuple[Path, ...]": _paths,
    "int": _int, "int | None": _int_or_none, "float": _float, "Mapping[str, str | SecretStr]": _kafka,
}
"""A field's type (as its row writes it) -> the plain check of a value given for it, with its bound."""

_PLAIN = {row.name: (_PLAIN_BY_TYPE[str(row.type)], row.metadata["ge"] if row.metadata["ge"] is not None
                     else row.metadata["gt"], row) for row in _ROWS}


def _default(row: Any) -> Any:
    return row.default_factory() if row.default is MISSING else row.default


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
    for name, (check, bound, row) in _PLAIN.items():
        value = check(values[name], bound) if name in values else _default(row)
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
    """The rows as a pydantic model, built on first use: what ``Settings`` was, field for field, for
    the values :func:`_plain` cannot vouch for (its types with pydantic's ``SecretStr``, its defaults
    and bounds, and the two rules of the settings: no password in the URL, secret librdkafka
    properties held as secrets)."""
    from typing import get_type_hints

    from pydantic import ConfigDict, Field, create_model, field_validator, model_validator
    from pydantic import SecretStr as PydanticSecret

    types = get_type_hints(Settings, localns={"SecretStr": PydanticSecret})  # the rows' types, pydantic's secret

    def spec(row: Any) -> tuple[Any, Any]:
        bounds = {k: row.metadata[k] for k in ("ge", "gt") if row.metadata[k] is not None}
        default = {"default": row.default} if row.default is not MISSING else {"default_factory": row.default_factory}
        return types[row.name], Field(**default, **bounds)

    def password_out_of_the_url(cls: Any, values: object) -> object:
        # Before validation, so that the password never sits in a str field, even briefly.
        return _password_out_of_the_url(values) if isinstance(values, Mapping) else values

    def kafka_secrets_hidden(cls: Any, kafka: Mapping[str, Any]) -> Mapping[str, Any]:
        return _kafka_secrets_hidden(kafka, PydanticSecret)

    validators = {"_password_out_of_the_url": model_validator(mode="before")(password_out_of_the_url),
                  "_kafka_secrets_hidden": field_validator("kafka", mode="after")(kafka_secrets_hidden)}
    return create_model(  # type: ignore[call-overload]
        "Settings", __config__=ConfigDict(frozen=True), __validators__=validators,
        **{row.name: spec(row) for row in _ROWS})


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


def _invalid_setting(exc: ValidationError, env: Mapping[str, str], overrides: Mapping[str, object]) -> InvalidSetting:
    """The first problem pydantic found, named by the variable the user set (never a traceback)."""
    err = exc.errors()[0]
    field = str(err["loc"][0]) if err["loc"] else ""
    by_field = {row.name: row.metadata["variable"] for row in _ROWS}
    variable = by_field.get(field, field)
    value = str(overrides[field]) if overrides.get(field) is not None else env.get(variable, "")
    secret = variable in _SECRET_VARIABLES or is_secret_kafka_property(
        variable.removeprefix(_KAFKA_PREFIX).lower().replace("_", "."))
    return InvalidSetting(variable=variable, value=None if secret else value,
                          problem=str(err["msg"]).removeprefix("Value error, "), hint=_HINTS.get(variable, ""))
