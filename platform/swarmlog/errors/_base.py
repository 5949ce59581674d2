"""The root of the tree and the two axes that cross it: :class:`SwarmlogError`, :class:`Retriable` (the
same operation may succeed later) and :class:`ServiceUnavailable` (Kafka or Postgres did not answer: the CLI's
exit 69). Every branch of :mod:`swarmlog.errors` imports these, and nothing else of swarmlog."""

from __future__ import annotations

__all__ = ["SwarmlogError", "Retriable", "ServiceUnavailable"]


class SwarmlogError(Exception):
    """Base of every error swarmlog raises on purpose."""

    retriable = False
    """Whether the same operation may succeed later, nothing changed (see :class:`Retriable`)."""


class Retriable(SwarmlogError):
    """The retriable axis: nothing is wrong with the request or the settings, and the same operation may
    succeed later (a service came back, a rate limit passed, the mirror caught up). Mixed into the
    errors that are so by their nature; :class:`KafkaOperationFailed` says so per error
    (``retriable``, librdkafka's verdict)."""

    retriable = True


class ServiceUnavailable(SwarmlogError):
    """Kafka or Postgres could not be reached."""

    def __init__(self, *, service: str, address: str, detail: str, hint: str | None = None) -> None:
        self.service = service
        self.address = address
        self.detail = detail
        self.hint = hint or (
            "Start the local cluster with `swarmlog dev up` and `eval \"$(swarmlog dev env)\"`, "
            "or point SWARMLOG_BOOTSTRAP_SERVERS / SWARMLOG_DATABASE_URL at a running one "
            "(SWARMLOG_CONNECT_TIMEOUT sets how long to wait).")
        super().__init__(f"cannot reach {service} at {address}: {detail}. {self.hint}")
