"""What observing an agent costs per step: the step-latency histogram and the tracing hooks, before and after.

The same recorded log (a 5-agent relay, run live on the in-memory log first) is folded by
every agent's :class:`~swarmlog.runtime.engine.AgentCore`: with nothing observed (before), with a
:class:`~swarmlog.observe.LatencyHistogram` (after), and with a step tracer that builds every
step's OpenTelemetry span and hands it to a processor that drops it (tracing on, export aside);
repetitions interleaved, medians of the process's **CPU time** per step (wall time on a shared
machine moves by more than the difference). Then the costs alone: the histogram's (two
``perf_counter`` calls and an ``observe``) and, with tracing off, the tracing hooks' (the two
``core.tracer is not None`` of a step). Every metric but the histogram is read at scrape time and
costs a step nothing. No service needed::

    .venv/bin/python -m bench.step_cost
"""

from __future__ import annotations

import statistics
import time

from swarmlog import InMemoryLog, Swarm
from swarmlog.log.protocol import route
from swarmlog.observe import LatencyHistogram, tracing
from swarmlog.runtime import run_agents, start_run
from swarmlog.runtime.engine import AgentCore
from swarmlog.runtime.history import LogHistory
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
    history = LogHistory(backend=log, topic="step-cost", decoder=decoder, agents=swarm.agent_names)
    history.read_to_end()

    traced = tracing.configure(processor=_Drop())

    def fold(mode: str) -> float:
        cores = [AgentCore(agent=a, decoder=decoder, history=history.agent(a.name), live_sink=None,
                           strict=False)
                 for a in swarm.agents()]
        replay = traced.start_replay()
        for core in cores:
            core.step_latency = LatencyHistogram() if mode == "histogram" else None
            if mode == "traced":
                core.tracer = traced.step_tracer(topic="step-cost", agent=core.name, replay=replay)
        started = time.process_time()
        for m, r in zip(msgs, routes, strict=True):
            for core in cores:
                core.process(m, r)
        return (time.process_time() - started) / sum(c.steps for c in cores) * 1e6

    modes = ["off", "histogram", "traced"]
    samples: dict[str, list[float]] = {m: [] for m in modes}
    for i in range(REPS):
        for mode in modes if i % 2 == 0 else modes[::-1]:
            samples[mode].append(fold(mode))
    before, after, on = (statistics.median(samples[m]) for m in modes)
    print(f"{len(msgs)} messages; CPU per step, median of {REPS}: without the histogram {before:.1f} us, "
          f"with it {after:.1f} us ({after - before:+.2f} us)")
    print(f"tracing on (every step's span built and handed to a processor that drops it): {on:.1f} us "
          f"({on - before:+.2f} us)")
    tracing.shutdown()
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
    core = AgentCore(agent=swarm.agents()[0], decoder=decoder, history=history.agent(swarms._names()[0]),
                     live_sink=None)
    started = time.process_time()
    for _ in range(n):
        tracer = core.tracer
        if tracer is not None:
            pass
        if tracer is not None:
            pass
    hooks = time.process_time() - started
    print(f"the tracing hooks alone, tracing off (core.tracer read, two 'is not None'): "
          f"{(hooks - empty) / n * 1e9:.0f} ns of CPU per step")


class _Drop:
    """A span processor that drops every span: what tracing costs the step, export aside."""

    def on_end(self, span: object) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True

    def shutdown(self) -> None:
        pass


if __name__ == "__main__":
    main()
