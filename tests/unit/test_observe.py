"""Metrics and probes: what Prometheus and the kubelet read, with no service behind them."""

from __future__ import annotations

import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from swarmlog.errors import ConfigurationError, ServiceUnavailable
from swarmlog.observe import Family, Health, LatencyHistogram, Metrics, ObservabilityServer


def test_a_latency_histogram_counts_each_observation_in_the_first_bucket_that_holds_it():
    h = LatencyHistogram(bounds=(0.001, 0.01, 0.1))
    for seconds in (0.0005, 0.001, 0.002, 0.05, 3.0):
        h.observe(seconds)
    assert h.buckets() == [("0.001", 2), ("0.01", 3), ("0.1", 4), ("+Inf", 5)]
    assert h.count == 5 and h.total == pytest.approx(3.0535)


def test_metrics_are_read_from_their_sources_at_scrape_time_in_prometheus_text_format():
    state = {"steps": 3}
    h = LatencyHistogram()
    h.observe(0.002)
    metrics = Metrics()
    metrics.add(lambda: [Family("swarmlog_agent_steps", "counter", "Steps.", ("agent",), [(("a",), state["steps"])]),
                         Family("swarmlog_agent_step_seconds", "histogram", "Step time.", ("agent",), [(("a",), h)])])
    metrics.add(lambda: [Family("swarmlog_agent_steps", "counter", "Steps.", ("agent",), [(("b",), 1)])])
    state["steps"] = 7  # changed after add(): the scrape sees the value of now
    parsed = {f.name: f for f in text_string_to_metric_families(metrics.exposition().decode())}
    steps = {s.labels["agent"]: s.value for s in parsed["swarmlog_agent_steps"].samples if s.name.endswith("_total")}
    assert steps == {"a": 7.0, "b": 1.0}
    hist = {s.name: s.value for s in parsed["swarmlog_agent_step_seconds"].samples if "le" not in s.labels}
    assert hist["swarmlog_agent_step_seconds_count"] == 1.0


def _failing() -> None:
    raise ServiceUnavailable(service="Kafka", address="127.0.0.1:1", detail="connection refused")


def test_readiness_needs_every_dependency_and_the_components_own_verdict():
    verdict: list[str | None] = ["agent a: rebuilding, at offset 3 of 10"]
    health = Health(checks={"Kafka": lambda: None}, ready=lambda: verdict[0])
    assert health.readiness() == "Kafka: not checked yet"
    health.check_now()
    assert health.readiness() == verdict[0]
    verdict[0] = None
    assert health.readiness() is None
    assert health.liveness() is None


def test_an_unreachable_dependency_makes_a_process_unready_at_once_and_unlive_only_after_restart_after():
    health = Health(checks={"Kafka": _failing}, restart_after=0.2)
    health.check_now()
    assert "cannot reach Kafka" in (health.readiness() or "")
    assert health.liveness() is None  # a broker outage is not cured by restarting every pod at once
    time.sleep(0.3)
    health.check_now()
    assert "Kafka unreachable for" in (health.liveness() or "")


def test_the_server_answers_probes_from_cached_state_and_serves_metrics():
    metrics = Metrics()
    metrics.add(lambda: [Family("swarmlog_log_end_offset", "gauge", "End.", ("topic",), [(("t",), 42)])])
    ready: list[str | None] = ["waiting for the run to start"]
    health = Health(checks={}, ready=lambda: ready[0])
    server = ObservabilityServer(port=0, host="127.0.0.1", metrics=metrics, health=health).start()
    base = f"http://127.0.0.1:{server.port}"
    try:
        with pytest.raises(urllib.error.HTTPError) as unready:
            urllib.request.urlopen(f"{base}/readyz", timeout=5)
        assert unready.value.code == 503 and b"waiting for the run" in unready.value.read()
        ready[0] = None
        with urllib.request.urlopen(f"{base}/readyz", timeout=5) as r:
            assert r.status == 200
        with urllib.request.urlopen(f"{base}/livez", timeout=5) as r:
            assert r.status == 200
        with urllib.request.urlopen(f"{base}/metrics", timeout=5) as r:
            assert 'swarmlog_log_end_offset{topic="t"} 42.0' in r.read().decode()
    finally:
        server.close()


def test_a_metrics_port_in_use_is_a_configuration_error_naming_it():
    first = ObservabilityServer(port=0, host="127.0.0.1", metrics=Metrics(), health=Health(checks={}))
    try:
        with pytest.raises(ConfigurationError, match=f"--metrics-port {first.port}"):
            ObservabilityServer(port=first.port, host="127.0.0.1", metrics=Metrics(), health=Health(checks={}))
    finally:
        first.close()
