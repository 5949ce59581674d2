"""``/metrics``, ``/livez`` and ``/readyz`` on one port (``--metrics-port``), on a daemon thread.

A probe is answered from cached state (:class:`~swarmlog.observe.Health`), never by asking
Kafka or Postgres on the spot, so a slow broker cannot make the probe itself time out.
"""

from __future__ import annotations

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ..errors import ConfigurationError
from ._health import Health
from ._metrics import Metrics, metrics_available

logger = logging.getLogger(__name__)


class ObservabilityServer:
    """The HTTP endpoints of one process; ``close()`` stops them."""

    def __init__(self, *, port: int, host: str = "0.0.0.0", metrics: Metrics, health: Health) -> None:
        self.metrics = metrics
        self.health = health
        self._have_prometheus = metrics_available()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    if not server._have_prometheus:
                        self._reply(501, b"prometheus_client is not installed: pip install 'swarmlog[metrics]'\n")
                        return
                    self._reply(200, server.metrics.exposition(), "text/plain; version=0.0.4; charset=utf-8")
                elif path in ("/livez", "/readyz"):
                    why = server.health.liveness() if path == "/livez" else server.health.readiness()
                    self._reply(200 if why is None else 503, b"ok\n" if why is None else f"{why}\n".encode())
                else:
                    self._reply(404, b"/metrics, /livez or /readyz\n")

            def _reply(self, status: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                logger.debug("%s " + format, self.address_string(), *args)

        try:
            self._http = ThreadingHTTPServer((host, port), Handler)
        except OSError as exc:
            raise ConfigurationError(f"--metrics-port {port}: cannot listen on {host}:{port}: {exc.strerror}; "
                                     f"choose a free port") from None
        self._http.daemon_threads = True
        self.port = self._http.server_address[1]
        self._thread = threading.Thread(target=self._http.serve_forever, name="swarmlog-http", daemon=True)

    def start(self) -> ObservabilityServer:
        self._thread.start()
        if not self._have_prometheus:
            logger.warning("prometheus_client is not installed (pip install 'swarmlog[metrics]'): /metrics "
                           "answers 501; /livez and /readyz are served on port %d", self.port)
        else:
            logger.info("serving /metrics, /livez and /readyz on port %d", self.port)
        return self

    def close(self) -> None:
        self.health.stop()
        if self._thread.is_alive():  # shutdown() waits for serve_forever, which must be running
            self._http.shutdown()
        self._http.server_close()


def serve(*, port: int, metrics: Metrics, health: Health, host: str = "0.0.0.0") -> ObservabilityServer:
    """Start the health checks and the endpoints; returns the running server."""
    health.start()
    return ObservabilityServer(port=port, host=host, metrics=metrics, health=health).start()
