"""What an operator sees of a running agent, sink or replay: Prometheus metrics and HTTP probes.

Public face: :class:`Metrics` (families read from the running objects at scrape time, so
the hot path pays nothing but a counter or a histogram bucket), :class:`LatencyHistogram`
(the one per-step cost), :class:`Health` (liveness and readiness from background checks
of Kafka and Postgres), and :func:`serve` (``/metrics``, ``/livez``, ``/readyz`` on one
port: ``--metrics-port``; :func:`serve_process` adds the Kafka check). ``prometheus_client`` is an optional extra
(``pip install 'swarmlog[metrics]'``); the probes work without it.

:mod:`swarmlog.observe.tracing` (imported by name, not re-exported) is the OpenTelemetry side:
one trace per run, one span per step, configured by the standard ``OTEL_*`` variables
(``pip install 'swarmlog[otel]'``).
"""

from typing import TYPE_CHECKING

from .._lazy import exports

if TYPE_CHECKING:
    from ._health import Health
    from ._metrics import Family, LatencyHistogram, Metrics
    from ._process import serve_process
    from ._server import ObservabilityServer, serve

# Every name is imported when first used (swarmlog._lazy): every command imports
# ``swarmlog.observe.tracing``, which imports this face first, and the probes' HTTP server
# (``http.server``, ``email``) is for the services alone (``cli_replay_3`` in bench/cli.py).
__getattr__ = exports(globals(), {
    "Health": "._health",
    "Family": "._metrics",
    "LatencyHistogram": "._metrics",
    "Metrics": "._metrics",
    "serve_process": "._process",
    "ObservabilityServer": "._server",
    "serve": "._server",
})

__all__ = ["Family", "Health", "LatencyHistogram", "Metrics", "ObservabilityServer", "serve", "serve_process"]
