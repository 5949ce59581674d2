"""The one seam where librdkafka's errors become swarmlog's.

Every ``KafkaException`` (and every error event a consumer hands out) is
translated here, by error code, into a typed :mod:`swarmlog.errors` error with
the driver's code and description as fields. Nothing else in swarmlog inspects a
``KafkaError``; nothing anywhere decides by an error's text.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import deque
from collections.abc import Callable

from confluent_kafka import KafkaError, KafkaException

from ..errors import (
    AgentFenced,
    KafkaHandshakeFailed,
    KafkaOperationFailed,
    KafkaUnavailable,
    ServiceUnavailable,
    SwarmlogError,
    TopicNotFound,
    TransactionAborted,
)

__all__ = ["FENCED", "UNKNOWN_TOPIC", "UNREACHABLE", "connect_failure", "error_recorder", "kafka_error", "translate"]

logger = logging.getLogger(__name__)

# The broker cannot be reached (or answered too late): the operator's problem, not the data's.
UNREACHABLE = frozenset({
    KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT, KafkaError._RESOLVE,
    KafkaError._AUTHENTICATION, KafkaError._SSL, KafkaError.SASL_AUTHENTICATION_FAILED,
})
FENCED = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH})
UNKNOWN_TOPIC = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC,
                           KafkaError._UNKNOWN_PARTITION})


_SASL = frozenset({KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED})
# librdkafka says in which state of the connection a broker failed only in its message,
# "(after <N>ms in state SSL_HANDSHAKE)": the one piece of its text read here, to tell a
# TLS handshake that failed from a connection that was refused.
_BROKER_STATE = re.compile(r"in state ([A-Z_]+)\)")


def kafka_error(exc: KafkaException | KafkaError) -> KafkaError:
    return exc.args[0] if isinstance(exc, KafkaException) else exc


# --- why a broker could not be reached ----------------------------------------------------------
#
# A request to an unreachable cluster fails with a generic "Broker transport failure"; the
# reason (connection refused, name not resolved, TLS or SASL handshake failed) arrives
# separately, as error events. Every client records its events here (``error_cb``), per
# bootstrap address, so that the error for the failed request can say why.

_RECENT: dict[str, deque[tuple[float, KafkaError]]] = {}
_RECENT_LOCK = threading.Lock()


def error_recorder(bootstrap: str) -> Callable[[KafkaError], None]:
    """An ``error_cb`` for a client of the cluster at ``bootstrap``."""
    with _RECENT_LOCK:
        recent = _RECENT.setdefault(bootstrap, deque(maxlen=16))

    def record(err: KafkaError) -> None:
        recent.append((time.monotonic(), err))
        logger.debug("librdkafka error event: %s: %s", err.name(), err.str())

    return record


def connect_failure(bootstrap: str, *, operation: str, timeout_s: float | None = None) -> ServiceUnavailable:
    """The error for ``operation`` failing because the cluster at ``bootstrap`` did not answer."""
    with _RECENT_LOCK:
        recent = list(_RECENT.get(bootstrap, ()))
    horizon = time.monotonic() - (timeout_s or 30.0) - 5.0
    events = [e for t, e in recent if t >= horizon and e.code() != KafkaError._ALL_BROKERS_DOWN]
    waited = f"no answer within {timeout_s:g} s (SWARMLOG_CONNECT_TIMEOUT)" if timeout_s else "no answer"
    for err in reversed(events):
        if err.code() in _SASL:
            return KafkaHandshakeFailed(address=bootstrap, stage="SASL", detail=f"{operation}: {err.str()}")
    for err in reversed(events):
        state = _BROKER_STATE.search(err.str())
        if err.code() == KafkaError._SSL or (state is not None and state.group(1) == "SSL_HANDSHAKE"):
            return KafkaHandshakeFailed(address=bootstrap, stage="TLS", detail=f"{operation}: {err.str()}")
    reason = f": {events[-1].str()}" if events else ""
    return KafkaUnavailable(address=bootstrap, detail=f"{operation}: {waited}{reason}")


def translate(exc: KafkaException | KafkaError, *, operation: str, bootstrap: str, topic: str | None = None,
              agent: str | None = None, timeout_s: float | None = None) -> SwarmlogError:
    """The swarmlog error for a failed Kafka ``operation`` (a phrase: "appending to 'x'")."""
    err = kafka_error(exc)
    code = err.code()
    if code in UNREACHABLE:
        return connect_failure(bootstrap, operation=operation, timeout_s=timeout_s)
    if agent is not None and code in FENCED:
        return AgentFenced(agent=agent, detail=err.str())
    if agent is not None and (err.txn_requires_abort() or code == KafkaError._STATE):
        return TransactionAborted(agent=agent, detail=err.str())
    if topic is not None and code in UNKNOWN_TOPIC:
        return TopicNotFound(topic=topic)
    return KafkaOperationFailed(operation=operation, code=code, name=err.name(), detail=err.str(),
                                retriable=bool(err.retriable()))
