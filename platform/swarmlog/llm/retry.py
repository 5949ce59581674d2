"""One retry policy for what a handler sends to a model or a server: live only, never on replay.

Both :class:`~swarmlog.llm.OpenAIChat` (``ctx.llm``) and recorded HTTP (``ctx.http()``) retry the
same failures the same way:

* **what is retried**: a transport failure where the request may not have reached the server, or got
  no answer (a timeout, a network error, a connection the server broke, a failing proxy), and the
  HTTP statuses of rate limiting and server trouble (:data:`RETRY_STATUSES`). Any other status is the
  request's fault: sending it again would fail the same way.
* **when**: after a server's ``Retry-After`` (``retry-after-ms``, OpenAI's, first), when it asks
  for at most :data:`MAX_RETRY_AFTER` seconds; else after an exponential backoff with full jitter,
  ``uniform(0, min(max_backoff, backoff * 2**(attempt-1)))``, so agents that hit a rate limit together
  do not come back together.

Why retrying here is safe for determinism: a retry happens while the call runs live (inside
:func:`swarmlog.guard.allowed`); the log records only the outcome of the last attempt, and a replay
serves that outcome without calling anything. The jitter comes from a :class:`random.Random` of the
caller's own (seeded by the OS), never from the ``random`` module's shared stream that a program may
have seeded.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Generic, TypeVar

__all__ = ["MAX_RETRY_AFTER", "RETRY_STATUSES", "Attempt", "RetryPolicy", "retry_after"]

T = TypeVar("T")

RETRY_STATUSES = frozenset({408, 409, 429}) | frozenset(range(500, 600))
"""HTTP statuses worth retrying: request timeout, conflict, rate limiting, and server-side trouble."""
MAX_RETRY_AFTER = 60.0
"""A server's ``Retry-After`` is honoured up to this many seconds; a longer wait falls back to backoff."""


@dataclass(frozen=True, slots=True)
class Attempt(Generic[T]):
    """What one attempt came to: its ``value`` (a response, or None where none came), and, if it failed,
    why (``failure``, for the log and the error), whether that is worth another attempt (``retryable``)
    and what the server asked to wait first (``wait``, its ``Retry-After``)."""

    value: T
    failure: str | None = None
    retryable: bool = False
    wait: float | None = None


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How many extra attempts (``retries``) and how long between them (``backoff`` seconds doubling up
    to ``max_backoff``, with full jitter); the callers check the values they were given."""

    retries: int = 2
    backoff: float = 0.5
    max_backoff: float = 8.0

    def retryable_status(self, status: int) -> bool:
        return status in RETRY_STATUSES

    def retryable_error(self, exc: BaseException, library: ModuleType) -> bool:
        """``exc``, an exception of ``library`` (``httpx`` or ``httpx2``), is a transient transport failure."""
        return isinstance(exc, (library.TimeoutException, library.NetworkError, library.RemoteProtocolError,
                                library.ProxyError))

    def delay(self, attempt: int, retry_after: float | None, rng: random.Random) -> float:
        """Seconds to wait before attempt ``attempt + 1``, after ``attempt`` failed (1 = the first)."""
        if retry_after is not None and 0 <= retry_after <= MAX_RETRY_AFTER:
            return retry_after
        cap = min(self.max_backoff, self.backoff * (2 ** (attempt - 1)))
        return rng.uniform(0, cap)

    def run(self, attempt: Callable[[int], Attempt[T]], *, jitter: Callable[[], random.Random],
            log: logging.Logger, what: str) -> tuple[Attempt[T], int]:
        """Call ``attempt(n)`` (n = 1, 2, ...) until one succeeds, fails for good, or was the last the
        policy allows; return that one and how many were made. An attempt may also raise, which ends it.

        Between two attempts it logs (on ``log``, a warning naming ``what`` was sent and why it is sent
        again) and sleeps :meth:`delay`, jittered by ``jitter()``: the caller's own generator, asked for
        only when there is a retry to wait for (a caller makes it then, live: see the module's doc).
        """
        n = 0
        while True:
            n += 1
            outcome = attempt(n)
            if outcome.failure is None or not outcome.retryable or n > self.retries:
                return outcome, n
            delay = self.delay(n, outcome.wait, jitter())
            log.warning("%s: %s; retry %d/%d in %.2fs", what, outcome.failure, n, self.retries, delay)
            time.sleep(delay)


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds from ``retry-after-ms`` (OpenAI) or a numeric ``Retry-After``; dates are ignored."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is not None:
            try:
                return float(value) * scale
            except ValueError:
                continue
    return None
