"""The one seam where librdkafka's errors become swarmlog's.

Every ``KafkaException`` (and every error event a consumer hands out) is
translated here, by error code, into a typed :mod:`swarmlog.errors` error with
the driver's code and description as fields. Nothing else in swarmlog inspects a
``KafkaError``; nothing anywhere decides by an error's text.
"""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

from ..errors import (
    AgentFenced,
    KafkaOperationFailed,
    ServiceUnavailable,
    SwarmlogError,
    TopicNotFound,
    TransactionAborted,
)

# The broker cannot be reached (or answered too late): the operator's problem, not the data's.
UNREACHABLE = frozenset({
    KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT, KafkaError._RESOLVE,
    KafkaError._AUTHENTICATION, KafkaError._SSL, KafkaError.SASL_AUTHENTICATION_FAILED,
})
FENCED = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH})
UNKNOWN_TOPIC = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC,
                           KafkaError._UNKNOWN_PARTITION})


def kafka_error(exc: KafkaException | KafkaError) -> KafkaError:
    return exc.args[0] if isinstance(exc, KafkaException) else exc


def translate(exc: KafkaException | KafkaError, *, operation: str, bootstrap: str, topic: str | None = None,
              agent: str | None = None) -> SwarmlogError:
    """The swarmlog error for a failed Kafka ``operation`` (a phrase: "appending to 'x'")."""
    err = kafka_error(exc)
    code = err.code()
    if code in UNREACHABLE:
        return ServiceUnavailable(service="Kafka", address=bootstrap, detail=f"{operation}: {err.str()}")
    if agent is not None and code in FENCED:
        return AgentFenced(agent=agent, detail=err.str())
    if agent is not None and (err.txn_requires_abort() or code == KafkaError._STATE):
        return TransactionAborted(agent=agent, detail=err.str())
    if topic is not None and code in UNKNOWN_TOPIC:
        return TopicNotFound(topic=topic)
    return KafkaOperationFailed(operation=operation, code=code, name=err.name(), detail=err.str(),
                                retriable=bool(err.retriable()))
