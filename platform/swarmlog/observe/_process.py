"""Everything one swarmlog process exposes on ``--metrics-port``, with Kafka checked in the background."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ..kafka.backend import KafkaBackend
from ..settings import Settings
from ._health import Check, Health, Verdict
from ._metrics import Family, Metrics
from ._server import ObservabilityServer, serve


def serve_process(*, port: int, settings: Settings, metrics: Metrics, checks: Mapping[str, Check] | None = None,
                  ready: Verdict | None = None, live: Verdict | None = None,
                  on_log_end: Callable[[int], None] | None = None) -> ObservabilityServer:
    """``/metrics``, ``/livez``, ``/readyz`` on ``port``; Kafka (and ``checks``) checked every few seconds.

    The Kafka check asks for the topic's high watermark: it proves the partition's leader
    answers, and it is the log end that lag is measured against (``swarmlog_log_end_offset``,
    and ``on_log_end`` for a component that reports its own lag).
    """
    backend = KafkaBackend(settings)
    topic = settings.topic
    seen: dict[str, int] = {}

    def kafka() -> None:
        end = backend.watermarks(topic)[1]
        seen["end"] = end
        if on_log_end is not None:
            on_log_end(end)

    metrics.add(lambda: [Family("swarmlog_log_end_offset", "gauge", "The topic's high watermark at the last check.",
                                ("topic",), [((topic,), seen["end"])] if "end" in seen else [])])
    health = Health(checks={"Kafka": kafka, **(checks or {})}, ready=ready, live=live)
    return serve(port=port, metrics=metrics, health=health)
