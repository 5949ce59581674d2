"""Settings are read without pydantic, and read exactly as pydantic reads them.

``Settings`` checks the plainest spellings itself and hands everything else to its pydantic
model (``swarmlog.settings._pydantic_settings``, what ``Settings`` was): these tests hold the two
paths to the same fields, and the settings to what the model shows (repr, JSON), so that reading
the environment without importing pydantic changed no value, no error and no message.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import SecretStr as PydanticSecret
from pydantic import ValidationError

from swarmlog import settings as settings_module
from swarmlog.errors import InvalidSetting
from swarmlog.redaction import SecretStr
from swarmlog.settings import _VARIABLES, Settings, _by_pydantic, _env_values, _plain, _pydantic_settings

from ..conftest import examples

_DIGITS = "0123456789"
_INTS = st.one_of(st.integers(-(10**20), 10**20).map(str), st.text(alphabet=_DIGITS + "-+_ .e", max_size=6),
                  st.integers(-(10**20), 10**20), st.booleans(), st.floats(allow_nan=False, width=16))
_FLOATS = st.one_of(st.floats().map(repr), st.text(alphabet=_DIGITS + ".-+e_ infa", max_size=8), st.floats(),
                    st.integers(-(2**60), 2**60), st.decimals(allow_nan=False, places=3).map(str))
_STRS = st.one_of(st.text(max_size=8), st.none(), st.integers(), st.binary(max_size=3))
_SECRETS = st.one_of(st.text(max_size=4), st.none(), st.builds(SecretStr, st.text(max_size=4)),
                     st.builds(PydanticSecret, st.text(max_size=4)), st.integers())
_PATHS = st.one_of(st.text(max_size=4), st.builds(Path, st.text(max_size=4)), st.none())
_URLS = st.one_of(st.sampled_from([
    "postgresql://app@db:5432/swarm", "postgresql://app:pw@db:5432/swarm", "postgres://app:p%2Fw@db/swarm",
    "postgresql://db/swarm?user=app&password=pw", "host=db user=app password=pw dbname=swarm",
    "host=db dbname=swarm", "password", "db.example.com/swarmlog", "",
]), _STRS)
_KAFKA = st.one_of(
    st.dictionaries(st.sampled_from(["sasl.password", "linger.ms", "ssl.key.pem", "sasl.username"]),
                    st.one_of(st.text(max_size=3), st.integers(), st.builds(SecretStr, st.text(max_size=3))),
                    max_size=3),
    st.lists(st.tuples(st.text(max_size=2), st.text(max_size=2)), max_size=2), st.none())
_FIELDS = {
    "bootstrap_servers": _STRS, "database_url": _URLS, "database_password": _SECRETS, "topic": _STRS,
    "schema_dir": _PATHS, "schema_path": st.one_of(st.lists(_PATHS, max_size=3).map(tuple),
                                                   st.lists(_PATHS, max_size=3), st.text(max_size=3)),
    "replication_factor": _INTS, "min_insync_replicas": st.one_of(_INTS, st.none()), "token_key": _SECRETS,
    "swarm": _STRS, "connect_timeout": _FLOATS, "state_digest_every": _INTS, "kafka": _KAFKA,
}
_VALUES = st.fixed_dictionaries({}, optional={**_FIELDS, "unknown_name": st.integers()})
# Values near the plain spellings (most of them plain, some just not), so that the plain path is taken.
_NEAR_INTS = st.one_of(st.integers(-(10**19), 10**19), st.integers(-(10**19), 10**19).map(str),
                       st.from_regex(r"-?[0-9]{1,3}", fullmatch=True))
_NEAR_FLOATS = st.one_of(st.floats(min_value=0, max_value=1e16).map(repr), st.integers(-5, 2**54),
                         st.floats(min_value=-1, max_value=1e16), st.from_regex(r"[0-9]{1,16}(\.[0-9]{1,16})?",
                                                                                fullmatch=True))
_NEAR = st.fixed_dictionaries({}, optional={
    "bootstrap_servers": st.text(max_size=8), "database_url": _URLS, "topic": st.text(max_size=8),
    "database_password": st.one_of(st.text(max_size=4), st.none(), st.builds(SecretStr, st.text(max_size=4))),
    "token_key": st.one_of(st.text(max_size=4), st.none()), "schema_dir": st.text(min_size=1, max_size=4),
    "schema_path": st.lists(st.text(min_size=1, max_size=3), max_size=3).map(tuple),
    "replication_factor": _NEAR_INTS, "min_insync_replicas": st.one_of(_NEAR_INTS, st.none()),
    "swarm": st.one_of(st.text(max_size=4), st.none()), "connect_timeout": _NEAR_FLOATS,
    "state_digest_every": _NEAR_INTS,
    "kafka": st.dictionaries(st.sampled_from(["sasl.password", "linger.ms", "ssl.key.pem", "sasl.username"]),
                             st.text(max_size=3), max_size=3),
})


def _shown(fields: dict[str, Any]) -> dict[str, Any]:
    """Fields comparable across the two paths: secrets by value and type, floats by their bits."""
    def one(value: Any) -> Any:
        if isinstance(value, SecretStr):
            return ("secret", value.get_secret_value())
        if isinstance(value, float):
            return ("float", value.hex())
        if isinstance(value, dict):
            return {k: one(v) for k, v in value.items()}
        return (type(value), value)
    return {k: one(v) for k, v in fields.items()}


@settings(max_examples=examples(800), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(_NEAR, _VALUES))
def test_what_settings_read_without_pydantic_is_what_pydantic_reads(values):
    plain = _plain(values)
    if plain is None:
        return  # the model decides, as it always did
    assert _shown(plain) == _shown(_by_pydantic(values))


@pytest.mark.parametrize("values", [
    {},
    {"bootstrap_servers": "kafka-0:9092,kafka-1:9092", "topic": "swarmlog.x", "replication_factor": "3",
     "min_insync_replicas": "2", "connect_timeout": "2.5", "state_digest_every": "0", "swarm": "m:s",
     "schema_path": ("a", "b"), "schema_dir": "/tmp"},
    {"database_url": "postgresql://app:pw@db:5432/swarm", "token_key": "k",
     "kafka": {"sasl.password": "p", "sasl.username": "u", "linger.ms": "5"}},
    {"replication_factor": -1, "connect_timeout": 10, "min_insync_replicas": None, "schema_path": [Path("x")]},
])
def test_the_plain_spellings_are_read_without_the_model(values):
    # What the environment and swarmlog's own code give: none of it should need pydantic.
    assert _plain(values) is not None


@pytest.mark.parametrize(("values", "field", "expected"), [
    ({"replication_factor": " 7"}, "replication_factor", 7),  # pydantic's lax spellings, still read
    ({"replication_factor": "1_000"}, "replication_factor", 1000),
    ({"connect_timeout": "1e3"}, "connect_timeout", 1000.0),
    ({"token_key": PydanticSecret("k")}, "token_key", SecretStr("k")),  # pydantic's own SecretStr
])
def test_what_only_the_model_reads_is_still_read(values, field, expected):
    assert _plain(values) is None
    assert getattr(Settings(**values), field) == expected


@pytest.mark.parametrize(("env", "variable"), [
    ({"SWARMLOG_REPLICATION_FACTOR": "three"}, "SWARMLOG_REPLICATION_FACTOR"),
    ({"SWARMLOG_MIN_INSYNC_REPLICAS": "0"}, "SWARMLOG_MIN_INSYNC_REPLICAS"),
    ({"SWARMLOG_CONNECT_TIMEOUT": "nan"}, "SWARMLOG_CONNECT_TIMEOUT"),
    ({"SWARMLOG_STATE_DIGEST_EVERY": "-1"}, "SWARMLOG_STATE_DIGEST_EVERY"),
])
def test_a_refused_value_is_the_models_error_and_message(env, variable):
    with pytest.raises(InvalidSetting) as caught:
        Settings.from_env(env)
    field = _VARIABLES[variable]
    with pytest.raises(ValidationError) as model:
        _pydantic_settings().model_validate({field: env[variable]})
    assert caught.value.variable == variable
    assert caught.value.problem == model.value.errors()[0]["msg"]
    with pytest.raises(ValidationError):  # built in code, the model's own error, as before
        Settings(**{field: env[variable]})


ENVS = [
    {},
    {"SWARMLOG_DATABASE_URL": "postgresql://app:s3cr%40t@db:1/swarm?sslmode=disable", "SWARMLOG_TOKEN_KEY": "tk",
     "SWARMLOG_KAFKA_SASL_PASSWORD": "pw", "SWARMLOG_KAFKA_SASL_USERNAME": "who", "SWARMLOG_CONNECT_TIMEOUT": "2.5",
     "SWARMLOG_SCHEMA_PATH": "/a:/b", "SWARMLOG_REPLICATION_FACTOR": "3", "SWARMLOG_SWARM": "m:s"},
]


@pytest.mark.parametrize("env", ENVS)
def test_settings_show_what_the_pydantic_model_showed(env):
    ours = Settings.from_env(env)
    model = _pydantic_settings().model_validate(_env_values(env, {}))
    assert repr(ours) == repr(model)
    assert str(ours) == str(model)
    assert ours.model_dump_json() == model.model_dump_json()
    assert json.loads(ours.model_dump_json()) == ours.model_dump(mode="json")


@pytest.mark.parametrize("env", ENVS)
def test_settings_stay_frozen_and_survive_copy_pickle_and_json(env):
    ours = Settings.from_env(env)
    with pytest.raises(AttributeError):
        ours.topic = "other"  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(ours)) == ours == copy.deepcopy(ours) == copy.copy(ours)
    moved = ours.model_copy(update={"topic": "other", "state_digest_every": 3})
    assert (moved.topic, moved.state_digest_every, moved.kafka) == ("other", 3, ours.kafka)
    assert ours.topic != "other"
    with pytest.raises(TypeError):
        ours.model_copy(update={"no_such_field": 1})
    again = Settings.model_validate_json(ours.model_dump_json())
    assert again.model_dump_json() == ours.model_dump_json()  # secrets masked both times, as with pydantic


def test_reading_the_settings_imports_no_pydantic():
    code = ("import sys\nfrom swarmlog.settings import Settings\n"
            f"for env in {ENVS!r}:\n"
            "    s = Settings.from_env(env)\n"
            "    s.kafka_config({'acks': 'all'}); repr(s); s.model_copy(update={'topic': 't'})\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pydantic'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"


# --- one row a setting ----------------------------------------------------------------------------

_ROWS = [row for row in dataclasses.fields(Settings) if row.name != "kafka"]
_TEXT = {"str": "x.y", "str | None": "m:s", "SecretStr | None": "s3cret-value", "Path": "/tmp",
         "tuple[Path, ...]": "/a:/b", "int": "3", "int | None": "2", "float": "2.5"}
_READ = {"SecretStr | None": SecretStr("s3cret-value"), "Path": Path("/tmp"),
         "tuple[Path, ...]": (Path("/a"), Path("/b")), "int": 3, "int | None": 2, "float": 2.5}


@pytest.mark.parametrize("row", _ROWS, ids=lambda r: r.name)
def test_each_row_is_read_from_its_variable_and_defaults_without_it(row):
    variable = row.metadata["variable"]
    assert _VARIABLES[variable] == row.name
    text = _TEXT[str(row.type)]
    read = Settings.from_env({variable: text})
    assert getattr(read, row.name) == _READ.get(str(row.type), text)
    default = row.default_factory() if callable(row.default_factory) else row.default
    assert getattr(Settings.from_env({}), row.name) == default == getattr(Settings(), row.name)
    assert f"``{variable}``" in (settings_module.__doc__ or "")  # the module's list of variables


@pytest.mark.parametrize("row", [r for r in _ROWS if str(r.type) in ("int", "int | None", "float")],
                         ids=lambda r: r.name)
def test_each_rows_refusal_names_its_variable_and_its_hint(row):
    variable = row.metadata["variable"]
    with pytest.raises(InvalidSetting) as caught:
        Settings.from_env({variable: "not-a-number"})
    assert caught.value.variable == variable and caught.value.hint == row.metadata["hint"]
    assert caught.value.value == "not-a-number"


@pytest.mark.parametrize("row", [r for r in _ROWS if r.metadata["secret"]], ids=lambda r: r.name)
def test_a_secret_rows_value_is_never_shown(row):
    variable, secret = row.metadata["variable"], "hunter2-secret"
    settings = Settings.from_env({variable: secret} if str(row.type) != "str" else
                                 {variable: f"postgresql://app:{secret}@db/x"})
    assert secret not in repr(settings) and secret not in str(settings) and secret not in settings.model_dump_json()
