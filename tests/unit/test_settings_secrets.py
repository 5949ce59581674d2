"""Secrets in the settings are SecretStr: shown masked everywhere, unwrapped only for the client.

Pure tests: nothing here needs Kafka or Postgres (a failed connection is in integration/test_sasl_passthrough.py).
"""

from __future__ import annotations

import pytest
from psycopg.conninfo import conninfo_to_dict

from swarmlog.redaction import MASK, is_secret_kafka_property, split_database_password
from swarmlog.settings import Settings

DB_PASSWORD = "db-s3cr@t-Zq81"
KAFKA_PASSWORD = "kafka-pw-Xy72"
ENV = {
    "SWARMLOG_BOOTSTRAP_SERVERS": "broker-1:9093",
    "SWARMLOG_DATABASE_URL": "postgresql://app:db-s3cr%40t-Zq81@127.0.0.1:1/swarm?sslmode=disable",
    "SWARMLOG_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
    "SWARMLOG_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
    "SWARMLOG_KAFKA_SASL_USERNAME": "research",
    "SWARMLOG_KAFKA_SASL_PASSWORD": KAFKA_PASSWORD,
    "SWARMLOG_KAFKA_SSL_KEY_PASSWORD": "key-pass-Qw11",
    "SWARMLOG_TOKEN_KEY": "token-key-Er55",
}
SECRETS = (DB_PASSWORD, "db-s3cr%40t-Zq81", KAFKA_PASSWORD, "key-pass-Qw11", "token-key-Er55")


def _assert_hidden(text: str) -> None:
    assert not [s for s in SECRETS if s in text], text


def test_settings_show_no_password_in_repr_str_or_json() -> None:
    settings = Settings.from_env(ENV)
    for text in (repr(settings), str(settings), settings.model_dump_json(), repr(settings.model_dump()),
                 repr(settings.model_copy(update={"topic": "other"}))):
        _assert_hidden(text)
    assert settings.database_url == "postgresql://app@127.0.0.1:1/swarm?sslmode=disable"
    assert "research" in repr(settings)  # who, not the secret: an error needs to say which user


def test_the_librdkafka_config_masks_its_secrets_when_shown_and_holds_them_for_the_client() -> None:
    config = Settings.from_env(ENV).kafka_config({"acks": "all"})
    _assert_hidden(repr(config))
    _assert_hidden(str(config))
    _assert_hidden(f"{config}")
    assert MASK in repr(config)
    # librdkafka reads the dict itself: there the values are in clear.
    assert config["sasl.password"] == KAFKA_PASSWORD and config["ssl.key.password"] == "key-pass-Qw11"
    assert config["sasl.username"] == "research" and config["acks"] == "all"
    assert isinstance(config, dict)


def test_the_database_password_reaches_only_the_conninfo_for_psycopg() -> None:
    settings = Settings.from_env(ENV)
    assert settings.database_password is not None
    params = conninfo_to_dict(settings.database_conninfo())
    assert params["password"] == DB_PASSWORD
    assert (params["user"], params["host"], params["dbname"]) == ("app", "127.0.0.1", "swarm")
    # A separate variable (a Kubernetes Secret beside a plain URL) works the same.
    apart = Settings.from_env({"SWARMLOG_DATABASE_URL": "postgresql://app@db/swarm",
                               "SWARMLOG_DATABASE_PASSWORD": DB_PASSWORD})
    assert conninfo_to_dict(apart.database_conninfo())["password"] == DB_PASSWORD
    _assert_hidden(repr(apart))


@pytest.mark.parametrize(("given", "url", "password"), [
    ("postgresql://app:pw@db:5432/swarm", "postgresql://app@db:5432/swarm", "pw"),
    ("postgres://app:p%2Fw%40x@db/swarm", "postgres://app@db/swarm", "p/w@x"),
    ("postgresql://db/swarm?user=app&password=pw&sslmode=require",
     "postgresql://db/swarm?user=app&sslmode=require", "pw"),
    ("postgresql://app@db/swarm", "postgresql://app@db/swarm", None),
    ("host=db user=app password=pw dbname=swarm", "host=db user=app dbname=swarm", "pw"),
    ("host=db dbname=passwords", "host=db dbname=passwords", None),
])
def test_a_password_is_taken_out_of_every_form_of_database_url(given: str, url: str, password: str | None) -> None:
    got_url, got_password = split_database_password(given)
    assert got_password == password
    assert conninfo_to_dict(got_url) == conninfo_to_dict(url)


def test_secret_kafka_properties_are_the_passwords_keys_and_secrets_not_names_or_paths() -> None:
    secret = ["sasl.password", "ssl.key.password", "ssl.keystore.password", "ssl.key.pem",
              "sasl.oauthbearer.client.secret", "sasl.oauthbearer.config",
              "sasl.oauthbearer.assertion.private.key.passphrase"]
    shown = ["sasl.username", "sasl.mechanism", "security.protocol", "ssl.ca.location", "ssl.key.location",
             "bootstrap.servers", "linger.ms"]
    assert [p for p in secret if not is_secret_kafka_property(p)] == []
    assert [p for p in shown if is_secret_kafka_property(p)] == []
