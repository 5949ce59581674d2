"""Which values are secrets, and how they are kept out of sight: swarmlog's one home of redaction.

**Settings.** Secrets reach swarmlog through its settings: librdkafka properties under
``SWARMLOG_KAFKA_*`` (``sasl.password``, ``ssl.key.password``, ...) and the
password of the Postgres URL. :class:`swarmlog.settings.Settings` holds each as a
:class:`SecretStr`; they are unwrapped in exactly two places, at the moment a client is
built: :meth:`Settings.kafka_config` (the librdkafka dict, a :class:`ClientConfig`
whose ``repr`` masks them) and :meth:`Settings.database_conninfo` (handed to
psycopg). Everything else — ``repr(settings)``, error messages, logs, tokens —
only ever sees the masked form (:data:`MASK`).

**What is recorded.** A handler's requests carry credentials too: recorded HTTP (``ctx.http()``)
records every exchange in the log, and :class:`~swarmlog.llm.OpenAIChat` quotes what a server
answered in its errors. The values of credential headers and query parameters (:class:`Redaction`
says which: built-in patterns, and names a swarm adds) are recorded as :data:`REDACTED`, and a
:class:`Scrubber` takes every credential it was given out of everything else recorded or shown
(a URL, a body, a server's error text that echoes the key it rejected).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

__all__ = ["MASK", "REDACTED", "ClientConfig", "Redaction", "Scrubber", "SecretStr", "is_secret_kafka_property",
           "redact_headers", "redact_url", "split_database_password"]

MASK = "**********"

# librdkafka's own list (properties flagged _RK_SENSITIVE in rdkafka_conf.c) that are secrets;
# `sasl.username`, `ssl.key.location` (a path) and `ssl.ca.pem` (a public certificate) are
# flagged too, but they say who and what, which an error message needs.
_SECRET_KAFKA_PROPERTIES = frozenset({
    "sasl.password",
    "ssl.key.password",
    "ssl.key.pem",
    "ssl.keystore.password",
    "sasl.oauthbearer.config",
    "sasl.oauthbearer.client.secret",
})
# ... and any property named like one, such as the OIDC assertion's private key passphrase.
_SECRET_WORDS = ("password", "secret", "passphrase", "private.key")


class SecretStr:
    """A secret string: masked by ``repr``, ``str`` and formatting; its value by :meth:`get_secret_value` only.

    pydantic's ``SecretStr`` as the settings used it — the same ``repr`` (``SecretStr('**********')``),
    ``str``, equality, hash and :meth:`get_secret_value` — without importing pydantic: every command
    reads its settings at start, and pydantic's import alone cost a short command more than its own
    work (``cli_replay_3`` in bench/cli.py). :class:`~swarmlog.settings.Settings` also accepts
    pydantic's ``SecretStr`` and holds it as this one.
    """

    __slots__ = ("_secret_value",)

    def __init__(self, secret_value: str) -> None:
        self._secret_value = secret_value

    def get_secret_value(self) -> str:
        return self._secret_value

    def _display(self) -> str:
        return MASK if self._secret_value else ""

    def __repr__(self) -> str:
        return f"SecretStr({self._display()!r})"

    def __str__(self) -> str:
        return self._display()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SecretStr) and self._secret_value == other._secret_value

    def __hash__(self) -> int:
        return hash(self._secret_value)

    def __len__(self) -> int:
        return len(self._secret_value)


def is_secret_kafka_property(name: str) -> bool:
    """True if the librdkafka property ``name`` holds a secret (its value must never be shown)."""
    name = name.lower()
    return name in _SECRET_KAFKA_PROPERTIES or any(word in name for word in _SECRET_WORDS)


class ClientConfig(dict[str, Any]):
    """A librdkafka configuration. To librdkafka a plain dict; printed, its secrets are masked.

    The clear values must be in it (librdkafka needs them), so what is kept out
    of sight is its text: ``repr``/``str`` (a log line, a debugger, an error that
    formats it) show :data:`MASK` for every secret property.
    """

    def __repr__(self) -> str:
        return repr({k: MASK if is_secret_kafka_property(k) else v for k, v in self.items()})

    __str__ = __repr__


def split_database_password(conninfo: str) -> tuple[str, str | None]:
    """``conninfo`` (a libpq URL or ``key=value`` string) without its password, and the password.

    ``postgresql://app:s3cr%40t@db:5432/swarm`` -> (``postgresql://app@db:5432/swarm``, ``s3cr@t``);
    a ``password=`` query parameter or ``key=value`` entry is taken out the same way.
    """
    if conninfo.startswith(("postgresql://", "postgres://")):
        parts = urlsplit(conninfo)
        password = unquote(parts.password) if parts.password is not None else None
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, _, hostinfo = netloc.rpartition("@")
            user = userinfo.split(":", 1)[0]
            netloc = f"{user}@{hostinfo}" if user else hostinfo
        query = parse_qsl(parts.query, keep_blank_values=True)
        kept = [(k, v) for k, v in query if k != "password"]
        if len(kept) != len(query):
            password = next(v for k, v in query if k == "password")
        return urlunsplit((parts.scheme, netloc, parts.path, urlencode(kept), parts.fragment)), password
    if "password" not in conninfo:
        return conninfo, None
    from psycopg import ProgrammingError
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    try:
        params = conninfo_to_dict(conninfo)
    except ProgrammingError:
        # Not shown: it may hold the password it failed to parse.
        raise ValueError("the database URL is neither a postgresql:// URL nor a libpq key=value string") from None
    found = params.pop("password", None)
    return make_conninfo("", **{k: str(v) for k, v in params.items() if v is not None}), (
        None if found is None else str(found))


# --- credentials in what is recorded: recorded HTTP, the LLM client's errors ---------------------

REDACTED = "<redacted>"
"""What is recorded in a credential's place (a header's value, a query parameter's, a URL's password)."""

# A header whose name says it carries a credential. Matched on the whole lower-cased name,
# so gateways' own names (x-portkey-api-key, helicone-auth, x-goog-api-key) are caught too.
_SECRET_HEADER = re.compile(r"auth|api[-_]?key|token|secret|passw|cookie|session|signature|credential")
# A query parameter that carries a credential (?key=... is Google's, ?api-key=... Azure's).
_SECRET_PARAM = re.compile(r"^(key|sig|code)$|api[-_]?key|token|secret|passw|signature|credential")
# Shorter values found in headers and URLs are not scrubbed from bodies: replacing "1" everywhere
# would wreck them.
_MIN_SCRUB = 8


@dataclass(frozen=True, slots=True)
class Redaction:
    """Which header and query-parameter names carry credentials (beyond the built-in patterns)."""

    headers: frozenset[str] = frozenset()
    params: frozenset[str] = frozenset()

    def secret_header(self, name: str) -> bool:
        lower = name.lower()
        return lower in self.headers or _SECRET_HEADER.search(lower) is not None

    def secret_param(self, name: str) -> bool:
        lower = name.lower()
        return lower in self.params or _SECRET_PARAM.search(lower) is not None


class Scrubber:
    """Credentials (those of one request, an LLM client's key), and their removal from whatever is
    recorded or shown about them."""

    __slots__ = ("secrets",)

    def __init__(self) -> None:
        self.secrets: list[str] = []

    def keep(self, value: str, *, min_length: int = _MIN_SCRUB) -> None:
        """Scrub ``value`` (and, for ``"Bearer sk-..."``, ``sk-...``) from now on, unless shorter than
        ``min_length``: a short value found in a header or URL may be anything."""
        value = value.strip()
        for part in (value, value.partition(" ")[2].strip()):  # "Bearer sk-..." -> also "sk-..."
            if part and len(part) >= min_length and part not in self.secrets:
                self.secrets.append(part)
        self.secrets.sort(key=len, reverse=True)  # a longer secret first: it may contain a shorter one

    def text(self, value: str) -> str:
        for s in self.secrets:
            value = value.replace(s, REDACTED)
        return value

    def data(self, value: bytes) -> bytes:
        for s in self.secrets:
            value = value.replace(s.encode(), REDACTED.encode())
        return value


def redact_url(url: str, redaction: Redaction, scrub: Scrubber) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:  # user:password@host
        userinfo, _, host = netloc.rpartition("@")
        scrub.keep(userinfo.partition(":")[2] or userinfo)
        netloc = f"{REDACTED}@{host}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(redaction.secret_param(k) for k, _ in pairs):
            for k, v in pairs:
                if redaction.secret_param(k):
                    scrub.keep(v)
            query = urlencode([(k, REDACTED if redaction.secret_param(k) else v) for k, v in pairs])
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_headers(headers: Iterable[tuple[str, str]], redaction: Redaction,
                    scrub: Scrubber | None) -> list[dict[str, str]]:
    out = []
    for name, value in headers:
        if redaction.secret_header(name):
            if scrub is not None:
                scrub.keep(value)
            value = REDACTED
        out.append({"name": name.lower(), "value": value})
    return out
