"""Every bad setting is a one-line SwarmlogError with a hint; exit statuses say which kind of error;
librdkafka's lines stay off the terminal unless -v; an unreachable broker's error says why.

The same behaviours as processes against a real broker: tests/integration/test_cli_errors.py.
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys

import pytest
from confluent_kafka import KafkaError

from swarmlog import cli
from swarmlog.errors import (
    ConfigurationError,
    InvalidSetting,
    KafkaHandshakeFailed,
    KafkaUnavailable,
    NondeterminismError,
    SchemaError,
    ServiceUnavailable,
    TopicNotSinglePartition,
    UsageError,
)
from swarmlog.kafka.config import settings_variable
from swarmlog.kafka.errors import connect_failure, error_recorder
from swarmlog.settings import Settings

from ..conftest import REPO


@pytest.mark.parametrize(("env", "variable", "says"), [
    ({"SWARMLOG_REPLICATION_FACTOR": "three"}, "SWARMLOG_REPLICATION_FACTOR", "valid integer"),
    ({"SWARMLOG_MIN_INSYNC_REPLICAS": "0"}, "SWARMLOG_MIN_INSYNC_REPLICAS", "greater than or equal to 1"),
    ({"SWARMLOG_CONNECT_TIMEOUT": "soon"}, "SWARMLOG_CONNECT_TIMEOUT", "valid number"),
    ({"SWARMLOG_CONNECT_TIMEOUT": "-1"}, "SWARMLOG_CONNECT_TIMEOUT", "greater than 0"),
])
def test_a_bad_setting_is_an_invalid_setting_naming_the_variable_with_a_hint(env, variable, says):
    with pytest.raises(InvalidSetting) as caught:
        Settings.from_env(env)
    _assert_names_the_variable_with_a_hint(caught.value, variable, says)


def _assert_names_the_variable_with_a_hint(err: InvalidSetting, variable: str, says: str) -> None:
    assert isinstance(err, ConfigurationError)
    assert err.variable == variable and says in err.problem and err.hint
    assert str(err).startswith(variable) and "expected" in str(err)


BAD_DATABASE_URLS = [
    ("db.example.com/swarmlog", 'missing "="'),
    ("postgresql://u@db:fivefour/x", "port 'fivefour'"),
    ("postgresql://u@db/x?sslmod=require", "sslmod"),
]


@pytest.mark.parametrize(("url", "says"), BAD_DATABASE_URLS)
def test_a_bad_database_url_is_an_invalid_setting_where_postgres_is_first_used(url, says):
    settings = Settings.from_env({"SWARMLOG_DATABASE_URL": url})  # read, not yet checked: see below
    for first_use in (settings.check_database_url, settings.database_conninfo):
        with pytest.raises(InvalidSetting) as caught:
            first_use()
        _assert_names_the_variable_with_a_hint(caught.value, "SWARMLOG_DATABASE_URL", says)


def test_reading_the_settings_does_not_import_psycopg_however_the_database_url_looks():
    # libpq's parser comes with psycopg (a fifth of a second): a command that never touches the
    # mirror (replay, log, state) must not pay it, nor fail on a URL it does not use.
    code = ("import sys\nfrom swarmlog.settings import Settings\n"
            "for url in ('postgresql://u@db:5432/x', 'postgresql://u:pw@db/x', 'db.example.com/swarmlog'):\n"
            "    Settings.from_env({'SWARMLOG_DATABASE_URL': url})\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('psycopg', 'psycopg_binary')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"


def test_a_good_database_url_passes_the_check():
    settings = Settings.from_env({"SWARMLOG_DATABASE_URL": "postgresql://u:pw@db:5432/x?sslmode=require"})
    settings.check_database_url()
    assert "password=pw" in settings.database_conninfo()


def test_a_bad_database_url_is_reported_without_its_password():
    settings = Settings.from_env({"SWARMLOG_DATABASE_URL": "postgresql://swarm:hunter2@db:5432/x?bogus=1"})
    with pytest.raises(InvalidSetting) as caught:
        settings.check_database_url()
    assert caught.value.value is None and "hunter2" not in str(caught.value)


def test_the_environment_maps_librdkafka_properties_both_ways():
    s = Settings.from_env({"SWARMLOG_KAFKA_SASL_MECHANISM": "PLAIN", "SWARMLOG_KAFKA_LINGER_MS": "5"})
    assert s.kafka == {"sasl.mechanism": "PLAIN", "linger.ms": "5"}
    assert [settings_variable(k) for k in s.kafka] == ["SWARMLOG_KAFKA_SASL_MECHANISM", "SWARMLOG_KAFKA_LINGER_MS"]
    assert Settings.from_env({}).connect_timeout == 10.0
    assert Settings.from_env({"SWARMLOG_CONNECT_TIMEOUT": "2.5"}).connect_timeout == 2.5


def test_the_cli_reports_a_bad_setting_in_one_line_with_exit_2(monkeypatch, capsys):
    monkeypatch.setenv("SWARMLOG_REPLICATION_FACTOR", "three")
    assert cli.main(["topic", "create"]) == cli.EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("swarmlog: error: SWARMLOG_REPLICATION_FACTOR='three'")


# --- exit statuses: usage apart from run time, by the error's type ------------------------------


def test_exit_statuses_are_decided_by_the_errors_type():
    assert cli.exit_code(UsageError("x")) == cli.EXIT_USAGE == 2
    assert cli.exit_code(InvalidSetting(variable="V", value="x", problem="p")) == cli.EXIT_USAGE
    assert cli.exit_code(SchemaError("x")) == cli.EXIT_USAGE
    assert cli.exit_code(ServiceUnavailable(service="Kafka", address="a", detail="d")) == cli.EXIT_UNAVAILABLE
    assert cli.exit_code(KafkaHandshakeFailed(address="a", stage="TLS", detail="d")) == cli.EXIT_UNAVAILABLE
    assert cli.exit_code(TopicNotSinglePartition(topic="t", partitions=3)) == cli.EXIT_FAILED
    assert cli.exit_code(NondeterminismError(offset=1, agent="a", detail="d")) == cli.EXIT_FAILED
    assert len(set(cli.EXIT_CODES)) == len(cli.EXIT_CODES)


def test_the_exit_statuses_are_documented_in_help_and_the_docs(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    help_text = capsys.readouterr().out
    page = (REPO / "docs" / "exit-codes.md").read_text()
    documented = {int(code) for code in re.findall(r"^\| `(\d+)` \|", page, flags=re.M)}
    assert documented == set(cli.EXIT_CODES)
    for code in cli.EXIT_CODES:
        assert re.search(rf"^\s+{code}\s+\S", help_text, flags=re.M), code


def test_a_usage_error_from_argparse_exits_2(capsys):
    with pytest.raises(SystemExit) as caught:
        cli.main(["replay", "--to", "ten"])
    assert caught.value.code == cli.EXIT_USAGE


# --- what reaches the terminal ------------------------------------------------------------------


@pytest.mark.parametrize(("argv", "verbosity"), [
    (["replay"], 0), (["-v", "replay"], 1), (["replay", "-v"], 1), (["-v", "replay", "-v"], 2),
    (["-vv", "dev", "status"], 2), (["--verbose", "schema", "list"], 1),
])
def test_verbosity_is_read_before_and_after_the_command(argv, verbosity, monkeypatch):
    seen = []
    monkeypatch.setattr(cli, "configure_logging", lambda v, service=False: seen.append(v))
    monkeypatch.setattr("swarmlog.replaying.command.cmd_replay", lambda args: 0)
    monkeypatch.setattr("swarmlog.dev.command.run", lambda argv: 0)
    monkeypatch.setattr("swarmlog.schema.check.run", lambda argv: 0)
    assert cli.main(argv) == 0
    assert seen == [verbosity]


def _levels(verbosity: int, *, service: bool = False, host_handler: bool = False) -> dict[str, object]:
    """What configure_logging does in a fresh process (pytest's own log handlers would make it an embedded one)."""
    code = f"""
import json, logging
from swarmlog import cli
from swarmlog.kafka.config import LIBRDKAFKA_LOGGER
if {host_handler!r}:
    logging.getLogger().addHandler(logging.NullHandler())
cli.configure_logging({verbosity}, service={service!r})
cli.configure_logging({verbosity}, service={service!r})
root = logging.getLogger()
print(json.dumps({{
    "handlers": len(root.handlers),
    "librdkafka": logging.getLogger(LIBRDKAFKA_LOGGER).getEffectiveLevel(),
    "swarmlog": logging.getLogger("swarmlog.runtime._worker").getEffectiveLevel(),
    "connectors": logging.getLogger("swarmlog_connectors.postgres_sink").getEffectiveLevel(),
}}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    return json.loads(out.stdout)


def test_librdkafka_lines_are_hidden_unless_verbose():
    quiet = _levels(0)
    assert quiet["librdkafka"] > logging.CRITICAL  # not even its errors: they come back as swarmlog's
    assert quiet["swarmlog"] == logging.WARNING and quiet["handlers"] == 1  # configured twice, one handler
    assert _levels(1) == {"handlers": 1, "librdkafka": logging.INFO, "swarmlog": logging.INFO,
                          "connectors": logging.INFO}
    assert _levels(2)["librdkafka"] == logging.DEBUG and _levels(2)["swarmlog"] == logging.DEBUG


def test_a_service_logs_its_lifecycle_without_v_and_librdkafka_still_only_with_it():
    service = _levels(0, service=True)
    assert service["swarmlog"] == logging.INFO and service["connectors"] == logging.INFO
    assert service["librdkafka"] > logging.CRITICAL


def test_a_host_programs_logging_configuration_wins():
    hosted = _levels(2, host_handler=True)
    assert hosted["handlers"] == 1 and hosted["swarmlog"] == logging.WARNING  # the root's default, untouched


# --- why a broker could not be reached ------------------------------------------------------------


def _seen(bootstrap: str, *errors: KafkaError) -> None:
    record = error_recorder(bootstrap)
    for err in errors:
        record(err)


def test_a_refused_connection_is_reported_with_librdkafkas_reason_and_the_timeout():
    _seen("10.0.0.1:9092", KafkaError(KafkaError._TRANSPORT, "10.0.0.1:9092/bootstrap: Connect to ipv4#10.0.0.1:9092 "
                                      "failed: Connection refused (after 0ms in state CONNECT)"),
          KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    err = connect_failure("10.0.0.1:9092", operation="describing topic 't'", timeout_s=10)
    assert type(err) is KafkaUnavailable and err.address == "10.0.0.1:9092"
    assert "no answer within 10 s" in err.detail and "Connection refused" in err.detail
    assert "brokers are down" not in err.detail


def test_a_failed_tls_handshake_is_named_with_a_tls_hint():
    _seen("10.0.0.2:9093", KafkaError(KafkaError._TRANSPORT, "ssl://10.0.0.2:9093/bootstrap: SSL handshake failed: "
                                      "Disconnected (after 3ms in state SSL_HANDSHAKE)"))
    err = connect_failure("10.0.0.2:9093", operation="reading", timeout_s=10)
    assert isinstance(err, KafkaHandshakeFailed) and err.stage == "TLS"
    assert "SWARMLOG_KAFKA_SSL_CA_LOCATION" in str(err) and "10.0.0.2:9093" in str(err)


def test_a_failed_sasl_handshake_is_named_with_a_sasl_hint():
    _seen("10.0.0.3:9094", KafkaError(KafkaError._TRANSPORT, "x: Connect failed (after 0ms in state CONNECT)"),
          KafkaError(KafkaError._AUTHENTICATION, "sasl_ssl://10.0.0.3:9094/bootstrap: SASL authentication error: "
                                                 "Authentication failed (after 5ms in state AUTH_REQ)"))
    err = connect_failure("10.0.0.3:9094", operation="reading", timeout_s=10)
    assert isinstance(err, KafkaHandshakeFailed) and err.stage == "SASL"
    assert "SWARMLOG_KAFKA_SASL_PASSWORD" in str(err)


def test_errors_of_another_cluster_do_not_explain_this_one():
    _seen("10.0.0.4:9092", KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error"))
    err = connect_failure("10.0.0.5:9092", operation="reading", timeout_s=10)
    assert type(err) is KafkaUnavailable and "SASL" not in err.detail
