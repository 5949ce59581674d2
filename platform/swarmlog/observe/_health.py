"""Liveness and readiness of one swarmlog process, for Kubernetes' probes.

* **Ready**: every dependency answered its last check (Kafka; Postgres for the sink and
  replay) and the component says it is ready (an agent: caught up with the log it found at
  start, i.e. live; the sink: running).
* **Live**: the component's loop is still turning, and no dependency has been unreachable
  for longer than ``restart_after`` seconds. A broker that is down is not cured by a restart,
  so a short outage only makes the pod unready; a long one restarts it, which re-resolves
  the bootstrap addresses and rebuilds every client.

The checks run on a background thread every ``interval`` seconds and their results are
cached: a probe answers at once and never waits on a broker.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

logger = logging.getLogger(__name__)

Check = Callable[[], None]
"""Raises when the dependency cannot be reached."""
Verdict = Callable[[], str | None]
"""None when fine, else the reason (shown in the probe's response body)."""


@dataclass(slots=True)
class _Result:
    ok: bool = False
    detail: str = "not checked yet"
    failing_since: float | None = None


class Health:
    """Cached dependency checks plus the component's own verdicts."""

    def __init__(self, *, checks: Mapping[str, Check], ready: Verdict | None = None, live: Verdict | None = None,
                 interval: float = 5.0, restart_after: float = 300.0) -> None:
        self._checks = dict(checks)
        self._ready = ready
        self._live = live
        self.interval = interval
        self.restart_after = restart_after
        self._results = {name: _Result(failing_since=time.monotonic()) for name in self._checks}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Health:
        self._thread = threading.Thread(target=self._loop, name="swarmlog-health", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.check_now()
            self._stop.wait(self.interval)

    def check_now(self) -> None:
        for name, check in self._checks.items():
            result = self._results[name]
            try:
                check()
            except Exception as exc:  # any failure means "unreachable"; the text is only shown
                if result.ok or result.failing_since is None:
                    logger.warning("%s is unreachable: %s", name, exc)
                    result.failing_since = time.monotonic()
                result.ok, result.detail = False, str(exc)
            else:
                if not result.ok and result.detail != "not checked yet":
                    logger.info("%s is reachable again", name)
                result.ok, result.detail, result.failing_since = True, "ok", None

    def readiness(self) -> str | None:
        """None when ready, else why not."""
        for name, result in self._results.items():
            if not result.ok:
                return f"{name}: {result.detail}"
        return self._ready() if self._ready is not None else None

    def liveness(self) -> str | None:
        """None when alive, else why the process should be restarted."""
        now = time.monotonic()
        for name, result in self._results.items():
            if result.failing_since is not None and result.detail != "not checked yet" \
                    and now - result.failing_since > self.restart_after:
                return f"{name} unreachable for {now - result.failing_since:.0f} s: {result.detail}"
        if self._thread is not None and not self._thread.is_alive() and not self._stop.is_set():
            return "the health checker stopped"
        return self._live() if self._live is not None else None
