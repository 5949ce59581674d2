"""A live agent: a transactional Kafka consumer and producer around an :class:`AgentCore`.

Internal. Lifecycle of one agent process (or thread):

1. **Fence.** ``init_transactions`` with the agent's stable ``transactional.id``
   (``swarmlog.<topic>.<agent>``) aborts whatever a previous life left open and
   fences it off: a zombie of this agent can no longer commit anything.
2. **Index.** One pass over the log reads only this agent's own events (routed by
   header): the highest step that has recorded outputs, and the recorded effects.
3. **Rebuild, then live.** The agent joins its consumer group and always reads
   from offset zero (whatever the group's committed offset says: restart *is*
   rebuild). Steps up to the indexed one are replayed and checked against the
   log; later steps run live. Nothing an earlier life wrote is written again.
4. **One batch, one transaction.** Live outputs, recorded effects and LLM calls,
   and the consumer position (``send_offsets_to_transaction``) of a consumed
   batch commit together. A crash anywhere aborts the transaction: the next life
   re-runs those steps, and since their outputs never became visible
   (``read_committed`` everywhere), nothing is lost and nothing is duplicated.
5. **Timeouts** fire only once the agent has caught up with the log it found at
   start, so history is never pre-empted by a firing that already happened.

SIGTERM (via ``stop``) finishes the current batch's transaction and returns.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, Producer, TopicPartition

from ._core import AgentCore, OwnIndex, parse_step, route
from .agent import Agent, Swarm
from .codec import H_STEP, Decoder, Encoder
from .context import Output
from .errors import ServiceUnavailable, SwarmlogError
from .events import Event
from .log import PRODUCER_REQUIRED, PRODUCER_TUNING
from .reader import LogReader, make_consumer
from .schemas import SchemaRegistry
from .settings import Settings

_TXN_TIMEOUT_S = 30.0
_OFFSET_COMMIT_EVERY_S = 2.0


def transactional_id(topic: str, agent: str) -> str:
    return f"swarmlog.{topic}.{agent}"


def group_id(topic: str, agent: str) -> str:
    return f"swarmlog.{topic}.{agent}"


def build_index(*, settings: Settings, topic: str, agent: str, decoder: Decoder,
                end: int | None = None) -> tuple[OwnIndex, int]:
    """First pass: the agent's last recorded step and its recorded effects; and the log end."""
    index = OwnIndex()
    me = agent.encode()
    with LogReader(settings=settings, topic=topic) as reader:
        reader.assign(0)
        for batch in reader.batches(end=end):
            for m in batch:
                headers = m.headers()
                if not headers or (("sl.agent", me) not in headers):
                    continue
                try:
                    writer, rec = decoder.decode(m.value(), m.offset())
                except SwarmlogError:
                    continue
                parsed = parse_step(rec["event_id"])
                if parsed is None:
                    continue
                index.last_step = max(index.last_step, parsed[0])
                if writer.event_type in ("effect.recorded", "llm.call"):
                    ts = m.timestamp()
                    index.effects[rec["event_id"]] = Event.from_record(
                        m.offset(), writer.event_type, writer.version, rec, ts[1] if ts[0] else None)
        return index, reader.position.end_offset


class _LiveSink:
    """Live steps: outputs go into the agent's open Kafka transaction."""

    __slots__ = ("producer", "topic", "registry", "agent", "agent_b", "run_id", "in_txn", "_encoders", "_located",
                 "_errors")

    def __init__(self, *, producer: Producer, topic: str, registry: SchemaRegistry, agent: str,
                 run_id: Callable[[], str]) -> None:
        self.producer = producer
        self.topic = topic
        self.registry = registry
        self.agent = agent
        self.agent_b = agent.encode()
        self.run_id = run_id
        self.in_txn = False
        self._encoders: dict[str, Encoder] = {}
        self._located = -1
        self._errors: list[str] = []

    def write(self, out: Output, *, locate: bool) -> int | None:
        if not self.in_txn:
            self.producer.begin_transaction()
            self.in_txn = True
        enc = self._encoders.get(out.event_type)
        if enc is None:
            enc = self._encoders[out.event_type] = Encoder(self.registry.latest(out.event_type))
        value = enc.encode_event(out.event_id, self.run_id(), self.agent, out.to, out.causes, out.payload)
        headers = enc.headers(self.agent_b, None if out.to is None else out.to.encode())
        step = parse_step(out.event_id)
        if step is not None:
            headers.append((H_STEP, str(step[0]).encode()))
        if locate:
            self.producer.produce(self.topic, value, self.agent_b, partition=0, headers=headers,
                                  on_delivery=self._locate)
            self.producer.flush(_TXN_TIMEOUT_S)
            self._raise_errors()
            return self._located
        self.producer.produce(self.topic, value, self.agent_b, partition=0, headers=headers,
                              on_delivery=self._delivered)
        return None

    def recorded(self, event_id: str) -> Event | None:
        return None

    def _locate(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            self._errors.append(err.str())
        else:
            self._located = msg.offset()

    def _delivered(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            self._errors.append(err.str())

    def _raise_errors(self) -> None:
        if self._errors:
            errors, self._errors = self._errors, []
            raise SwarmlogError(f"agent {self.agent}: producing its outputs failed: {'; '.join(errors)}")


@dataclass(slots=True)
class WorkerResult:
    agent: str
    state_hash: str
    position: int
    steps: int
    state: dict[str, Any]


class AgentWorker:
    """Runs one agent of a swarm live against the swarm's topic."""

    def __init__(self, *, settings: Settings, swarm: Swarm, agent: str | Agent, registry: SchemaRegistry | None = None,
                 topic: str | None = None, batch_size: int = 500) -> None:
        self.settings = settings
        self.topic = topic or settings.topic
        self.swarm = swarm
        self.agent = agent if isinstance(agent, Agent) else swarm.agent(agent)
        self.registry = registry or SchemaRegistry.load(settings.schema_dir)
        self.decoder = Decoder(self.registry)
        self.batch_size = batch_size
        self.stop_event = threading.Event()
        self.caught_up = threading.Event()
        """Set once the agent has rebuilt up to the end of the log it found at start."""
        self.core: AgentCore | None = None
        self._sink: _LiveSink | None = None
        self.eof_at = -1
        """The log end (exclusive) the agent last read up to; transaction markers make it differ
        from the last event's offset + 1."""

    def stop(self) -> None:
        self.stop_event.set()

    @property
    def in_transaction(self) -> bool:
        """A transaction is open: outputs may be written but not yet on the broker (a
        coordinator still loading holds them back) or a commit is in flight."""
        sink = self._sink
        return sink is not None and sink.in_txn

    def run(self) -> WorkerResult:
        name = self.agent.name
        producer = Producer(self.settings.kafka_config(
            {**PRODUCER_REQUIRED, "transactional.id": transactional_id(self.topic, name),
             "transaction.timeout.ms": 60_000},
            tuning={**PRODUCER_TUNING, "linger.ms": 1}))
        try:
            producer.init_transactions(_TXN_TIMEOUT_S)
        except KafkaException as exc:
            raise ServiceUnavailable(service="Kafka", address=self.settings.bootstrap_servers,
                                     detail=f"init_transactions for agent {name}: {exc}") from None
        index, start_end = build_index(settings=self.settings, topic=self.topic, agent=name, decoder=self.decoder)
        sink = self._sink = _LiveSink(producer=producer, topic=self.topic, registry=self.registry, agent=name,
                         run_id=lambda: core.ctx.run_id)
        core = self.core = AgentCore(agent=self.agent, decoder=self.decoder, index=index, live_sink=sink,
                                     llm_client=self.swarm.llm, strict=True)
        # A crashed agent's replacement cannot consume until the group has evicted the dead
        # member; a short session (the broker's default minimum) bounds that wait to seconds.
        consumer = make_consumer(self.settings, group=group_id(self.topic, name),
                                 extra={"client.id": f"swarmlog-agent-{name}", "session.timeout.ms": 6000,
                                        "heartbeat.interval.ms": 1500})

        def on_assign(c: Any, partitions: list[TopicPartition]) -> None:
            # Restart is rebuild: a new life reads from offset zero, whatever the group's
            # committed offset says. A later re-assignment (a rebalance after a missed
            # heartbeat) resumes where this life's fold is, never rewinds it.
            for p in partitions:
                p.offset = core.position if core.position > 0 else OFFSET_BEGINNING
            c.assign(partitions)

        consumer.subscribe([self.topic], on_assign=on_assign)
        last_commit = time.monotonic()
        committed_position = -1
        try:
            while not self.stop_event.is_set():
                wait = 0.1
                due = core.next_wall_due_ms()
                # Offsets end in transaction markers, so "read up to the end" is what the last
                # end-of-partition event says, not the last event's offset + 1.
                read_to = max(core.position, self.eof_at)
                if due is not None and read_to >= start_end:
                    wait = max(0.0, min(wait, (due - time.time() * 1000) / 1000))
                msgs = consumer.consume(self.batch_size, wait)
                for m in msgs:
                    err = m.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            self.eof_at = m.offset()
                            continue
                        if err.fatal():
                            raise SwarmlogError(f"agent {name}: consumer failed: {err.str()}")
                        continue
                    core.process(m, *route(m.headers()))
                read_to = max(core.position, self.eof_at)
                if read_to >= start_end:
                    self.caught_up.set()
                    for timer in core.due_wall_timers(int(time.time() * 1000)):
                        timer.firing = True
                        sink.write(Output(f"{name}@timer{timer.set_offset}", "timer.fired",
                                          {"name": timer.name, "set_offset": timer.set_offset, "clock": "wallclock"},
                                          name, [timer.set_offset]), locate=False)
                now = time.monotonic()
                if not sink.in_txn and core.position != committed_position \
                        and now - last_commit > _OFFSET_COMMIT_EVERY_S and read_to >= start_end:
                    producer.begin_transaction()  # offsets only: keeps the group's lag honest
                    sink.in_txn = True
                if sink.in_txn:
                    # Past any transaction markers we read over, so a caught-up agent shows no lag.
                    self._commit(producer, consumer, sink, read_to)
                    committed_position = core.position
                    last_commit = now
            # A clean stop records how far this life read, so the group's lag (and replay's
            # notion of how far the live agent got) is exact.
            read_to = max(core.position, self.eof_at)
            if read_to > 0 and core.position != committed_position:
                producer.begin_transaction()
                sink.in_txn = True
                self._commit(producer, consumer, sink, read_to)
        except BaseException:
            if sink.in_txn:
                try:
                    producer.abort_transaction(_TXN_TIMEOUT_S)
                except KafkaException:
                    pass  # the next life's init_transactions aborts it anyway
            raise
        finally:
            consumer.close()
        producer.flush(_TXN_TIMEOUT_S)
        return WorkerResult(agent=name, state_hash=core.state_hash(), position=core.position, steps=core.steps,
                            state=self.agent.state)

    def _commit(self, producer: Producer, consumer: Any, sink: _LiveSink, position: int) -> None:
        try:
            producer.send_offsets_to_transaction([TopicPartition(self.topic, 0, position)],
                                                 consumer.consumer_group_metadata(), _TXN_TIMEOUT_S)
            producer.commit_transaction(_TXN_TIMEOUT_S)
        except KafkaException as exc:
            err = exc.args[0]
            if err.txn_requires_abort():
                producer.abort_transaction(_TXN_TIMEOUT_S)
            raise SwarmlogError(f"agent {self.agent.name}: transaction failed ({err.str()}); the batch was "
                                f"aborted and will re-run when the agent restarts") from None
        finally:
            sink.in_txn = False
        sink._raise_errors()


def log_stderr(message: str) -> None:
    print(f"swarmlog: {message}", file=sys.stderr, flush=True)
