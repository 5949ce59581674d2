"""The dev cluster's SASL listener: SASL_PLAINTEXT with one SCRAM-SHA-512 user (``dev up --sasl``).

It is there to run swarmlog the way a production cluster is reached (security
protocol, mechanism, user and password all from ``SWARMLOG_KAFKA_*``), so that
the passthrough of credentials is tested for real, including that they never
show up in an output, a log line, an error or a token.

The user is created through the admin API on the broker's PLAINTEXT listener
(which stays: the brokers replicate over it, and the dev tools use it). Its
password is generated once, kept in ``<home>/kafka-sasl.json`` (mode 600), and
handed out only by ``swarmlog dev env``.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

from ..errors import ConfigurationError, KafkaUnavailable
from ..redaction import SecretStr

__all__ = ["Credentials", "MECHANISM", "SECURITY_PROTOCOL", "USERNAME", "credentials_file", "ensure_user", "load",
           "load_or_create", "wait_authenticated"]

USERNAME = "swarmlog"
MECHANISM = "SCRAM-SHA-512"
SECURITY_PROTOCOL = "SASL_PLAINTEXT"
_ITERATIONS = 8192  # Kafka's minimum for SCRAM-SHA-512 is 4096
_FILE = "kafka-sasl.json"

# Failed attempts while the credential propagates are expected; librdkafka would log each one.
_QUIET = logging.getLogger("swarmlog.dev.sasl.probe")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False


@dataclass(frozen=True, kw_only=True)
class Credentials:
    """The dev cluster's SASL user. ``repr`` shows no password (``SecretStr``)."""

    username: str
    password: SecretStr

    def client_config(self) -> dict[str, Any]:
        """The librdkafka properties that log in as this user (for the dev cluster's own probes)."""
        return {"security.protocol": SECURITY_PROTOCOL, "sasl.mechanism": MECHANISM,
                "sasl.username": self.username, "sasl.password": self.password.get_secret_value()}


def credentials_file(home: Path) -> Path:
    return home / _FILE


def load(home: Path) -> Credentials | None:
    """The credentials ``up --sasl`` created in ``home``, or None."""
    try:
        data = json.loads(credentials_file(home).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not data.get("username") or not data.get("password"):
        return None
    return Credentials(username=str(data["username"]), password=SecretStr(str(data["password"])))


def load_or_create(home: Path) -> tuple[Credentials, bool]:
    """The home's credentials, generating them on first use; True if they were just created."""
    found = load(home)
    if found is not None:
        return found, False
    creds = Credentials(username=USERNAME, password=SecretStr(secrets.token_urlsafe(24)))
    path = credentials_file(home)
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    # Created private (0600) rather than chmod-ed after: the password is never readable by others.
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"username": creds.username, "password": creds.password.get_secret_value()}, f)
    os.replace(partial, path)
    return creds, True


def ensure_user(*, bootstrap_servers: str, credentials: Credentials, replace: bool, timeout: float = 30.0) -> None:
    """Create the SCRAM user through the PLAINTEXT listener unless it exists (``replace``: always)."""
    config: dict[str, Any] = {"bootstrap.servers": bootstrap_servers, "logger": _QUIET}
    admin = AdminClient(config)
    if not replace and _has_user(admin, credentials.username, timeout, address=bootstrap_servers):
        return
    upsert = UserScramCredentialUpsertion(
        credentials.username, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, _ITERATIONS),
        credentials.password.get_secret_value().encode())
    try:
        admin.alter_user_scram_credentials([upsert], request_timeout=timeout)[credentials.username].result()
    except KafkaException as exc:
        raise KafkaUnavailable(address=bootstrap_servers,
                                 detail=f"creating the SASL user {credentials.username!r} failed: "
                                        f"{exc.args[0].str()}") from None


def wait_authenticated(*, bootstrap_servers: str, credentials: Credentials, timeout: float = 60.0) -> None:
    """Block until the user can log in on the SASL listener: a new credential reaches each broker
    through the metadata log, a moment after the admin call returned."""
    config = {"bootstrap.servers": bootstrap_servers, "logger": _QUIET, **credentials.client_config()}
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        admin = AdminClient(config)
        try:
            if admin.list_topics(timeout=3).brokers:
                return
        except KafkaException as exc:
            last = exc.args[0].str()
        time.sleep(0.25)
    raise ConfigurationError(
        f"the dev cluster's SASL listener ({bootstrap_servers}) did not accept user "
        f"{credentials.username!r} within {timeout:.0f} s ({last or 'no answer'}); check the broker "
        f"log, or `swarmlog dev down` and `swarmlog dev up --sasl`")


def _has_user(admin: AdminClient, username: str, timeout: float, *, address: str) -> bool:
    try:
        futures: dict[str, Any] = admin.describe_user_scram_credentials([username], request_timeout=timeout)  # type: ignore[assignment]
        description = futures[username].result()
    except KafkaException as exc:
        if exc.args[0].code() == KafkaError.RESOURCE_NOT_FOUND:
            return False
        raise KafkaUnavailable(address=address,
                                 detail=f"describing the SASL user {username!r} failed: {exc.args[0].str()}") from None
    return any(info.mechanism == ScramMechanism.SCRAM_SHA_512 for info in description.scram_credential_infos)
