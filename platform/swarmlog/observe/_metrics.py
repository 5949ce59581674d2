"""Metrics as plain numbers kept by the running objects, turned into Prometheus families on scrape.

Why not ``prometheus_client.Counter``/``Histogram`` in the hot path: each observation takes
a lock and walks the buckets (about a microsecond). An agent step already counts its steps,
knows its position and whether it has caught up; those are read when Prometheus scrapes.
The only per-step cost is :meth:`LatencyHistogram.observe`: a bisect and two additions.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

DEFAULT_BOUNDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                  60.0)
"""Seconds. A step is usually sub-millisecond; one that waits for an LLM takes seconds."""


class LatencyHistogram:
    """A Prometheus histogram kept as plain ints: ``observe`` costs a bisect and two additions.

    Read without a lock: a scrape that races an observation may see a count one step ahead
    of its sum, which Prometheus' rate() over the next scrape absorbs.
    """

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...] = DEFAULT_BOUNDS) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(self.bounds, seconds)] += 1
        self.total += seconds

    @property
    def count(self) -> int:
        return sum(self.counts)

    def buckets(self) -> list[tuple[str, int]]:
        """Cumulative ``(le, count)`` pairs, ``+Inf`` last."""
        out = []
        running = 0
        counts = list(self.counts)
        for bound, n in zip(self.bounds, counts, strict=False):
            running += n
            out.append((repr(bound), running))
        out.append(("+Inf", running + counts[-1]))
        return out


@dataclass(slots=True)
class Family:
    """One metric family: ``kind`` is ``counter``, ``gauge`` or ``histogram``.

    ``samples`` are ``(labels, value)`` for counters and gauges, ``(labels, LatencyHistogram)``
    for histograms. Counter names are given without the ``_total`` suffix.
    """

    name: str
    kind: str
    help: str
    labels: tuple[str, ...] = ()
    samples: list[tuple[tuple[str, ...], Any]] = field(default_factory=list)


Source = Callable[[], Iterable[Family]]


class Metrics:
    """The metrics of one process: sources (functions returning families) read at scrape time."""

    def __init__(self) -> None:
        self._sources: list[Source] = []
        self._lock = threading.Lock()

    def add(self, source: Source) -> None:
        with self._lock:
            self._sources.append(source)

    def collect(self) -> list[Family]:
        with self._lock:
            sources = list(self._sources)
        families: dict[str, Family] = {}
        for source in sources:
            for fam in source():
                have = families.get(fam.name)
                if have is None:
                    families[fam.name] = Family(fam.name, fam.kind, fam.help, fam.labels, list(fam.samples))
                else:
                    have.samples.extend(fam.samples)
        return list(families.values())

    def exposition(self) -> bytes:
        """The families in Prometheus' text format, written by ``prometheus_client``."""
        from prometheus_client import CollectorRegistry, generate_latest
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        metrics = self

        class _Collector:
            def collect(self) -> Iterable[Any]:
                for fam in metrics.collect():
                    labels = list(fam.labels)
                    if fam.kind == "counter":
                        out: Any = CounterMetricFamily(fam.name, fam.help, labels=labels)
                        for values, v in fam.samples:
                            out.add_metric(list(values), v)
                    elif fam.kind == "gauge":
                        out = GaugeMetricFamily(fam.name, fam.help, labels=labels)
                        for values, v in fam.samples:
                            out.add_metric(list(values), v)
                    else:
                        out = HistogramMetricFamily(fam.name, fam.help, labels=labels)
                        for values, h in fam.samples:
                            out.add_metric(list(values), h.buckets(), h.total)
                    yield out

        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector())
        return bytes(generate_latest(registry))


def metrics_available() -> bool:
    """Whether ``prometheus_client`` (the ``metrics`` extra) is installed."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        return False
    return True
