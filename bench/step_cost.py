"""What observing an agent costs per step: the step-latency histogram, before and after.

The same recorded log (a 5-agent relay, run live on the in-memory log first) is folded by
every agent's :class:`~swarmlog.runtime._core.AgentCore`, once with ``step_latency=None`` (no
histogram: before) and once with a :class:`~swarmlog.observe.LatencyHistogram` (after),
repetitions interleaved, medians of the process's **CPU time** per step (wall time on a shared
machine moves by more than the difference). Then the histogram's own cost alone: two
``perf_counter`` calls and an ``observe``. Every other metric is read at scrape time and costs
a step nothing. No service needed::

    .venv/bin/python -m bench.step_cost
"""

from __future__ import annotations

import statistics
import time

from swarmlog import InMemoryLog, Swarm
from swarmlog.observe import LatencyHistogram
from swarmlog.protocol import route
from swarmlog.runtime import run_agents, start_run
from swarmlog.runtime._core import AgentCore
from swarmlog.runtime._index import index_log
from swarmlog.schema.codec import Decoder
from swarmlog.schema.registry import SchemaRegistry
from swarmlog.settings import Settings
from tests import swarms

REPS = 30


class _Long(swarms.Relay):
    ttl = 400


def main() -> None:
    swarm = Swarm(name="step-cost", agents=lambda: [_Long(n) for n in swarms._names()], code_version="1")
    log = InMemoryLog()
    log.create_topic("step-cost")
    settings = Settings(topic="step-cost", bootstrap_servers="127.0.0.1:1")
    registry = SchemaRegistry.load(settings.schema_dirs())
    start_run(settings=settings, swarm=swarm, run_id="cost", seed=1, backend=log, registry=registry)
    run_agents(settings=settings, swarm=swarm, until_quiet=0.5, backend=log, registry=registry)
    msgs = log.messages("step-cost")
    routes = [route(m.headers()) for m in msgs]
    decoder = Decoder(registry)
    indexes, _ = index_log(backend=log, topic="step-cost", decoder=decoder, agents=swarm.agent_names)

    def fold(histogram: bool) -> float:
        cores = [AgentCore(agent=a, decoder=decoder, index=indexes[a.name], live_sink=None, strict=False)
                 for a in swarm.agents()]
        for core in cores:
            core.step_latency = LatencyHistogram() if histogram else None
        started = time.process_time()
        for m, r in zip(msgs, routes, strict=True):
            for core in cores:
                core.process(m, r)
        return (time.process_time() - started) / sum(c.steps for c in cores) * 1e6

    samples: dict[bool, list[float]] = {False: [], True: []}
    for i in range(REPS):
        for histogram in (False, True) if i % 2 == 0 else (True, False):
            samples[histogram].append(fold(histogram))
    before, after = statistics.median(samples[False]), statistics.median(samples[True])
    print(f"{len(msgs)} messages; CPU per step, median of {REPS}: without the histogram {before:.1f} us, "
          f"with it {after:.1f} us ({after - before:+.2f} us)")
    h = LatencyHistogram()
    n = 1_000_000
    started = time.process_time()
    for _ in range(n):
        t = time.perf_counter()
        h.observe(time.perf_counter() - t)
    with_observe = time.process_time() - started
    started = time.process_time()
    for _ in range(n):
        pass
    empty = time.process_time() - started
    print(f"the histogram alone (two perf_counter() and observe()): {(with_observe - empty) / n * 1e9:.0f} ns "
          f"of CPU per step")


if __name__ == "__main__":
    main()
