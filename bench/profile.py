"""Profiles of the per-event paths with pyinstrument: where a microsecond per event goes.

    PYTHONPATH=platform:connectors .venv/bin/python -m bench.profile [--events N] [--out bench/profile.md]

Paths profiled (each on its own, the I/O-free ones over messages already in memory):

* ``append``: ``EventLog.produce`` x N + ``flush`` (what ``append.swarmlog`` times);
* ``replay``: ``swarmlog.replay()`` over a topic of N events;
* ``replay fold``: ``Fold.apply_batch`` over N consumed messages (hash, decode, fold; no I/O);
* ``sink rows``: ``RowBuilder.build_copy`` over the same messages (decode, JSON, binary COPY bytes; no I/O);
* ``sink``: ``PostgresSink.run(until_end=True)`` over the topic.

pyinstrument samples Python frames: time inside a C extension (fastavro's
Cython reader and writer, librdkafka, psycopg's C dumpers) shows as the
``[self]`` time of the Python function that called it. The report lists, per
path, the functions with the most self time, then the call tree.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyinstrument import Profiler
from pyinstrument.renderers import ConsoleRenderer

from swarmlog.kafka.reader import LogReader
from swarmlog.log.append import EventLog
from swarmlog.replaying import Fold, replay
from swarmlog.schema.codec import Decoder
from swarmlog.schema.registry import SchemaRegistry
from swarmlog_connectors.postgres_rows import RowBuilder
from swarmlog_connectors.postgres_sink import PostgresSink

from . import common
from .sink import forget_topic_rows

BENCH_DIR = Path(__file__).resolve().parent


def profiled(fn: Callable[[], Any], *, interval: float = 0.0005) -> tuple[str, str]:
    """(self-time list, call tree) of one call of ``fn``."""
    profiler = Profiler(interval=interval)
    profiler.start()
    fn()
    profiler.stop()
    session = profiler.last_session
    assert session is not None
    root = session.root_frame()
    assert root is not None
    total = root.time or 1.0
    selfs: dict[str, float] = {}

    def walk(frame: Any, parent: str) -> None:
        # A "[self]" child is its parent's own time: credit it to the parent.
        name = parent if frame.identifier.startswith("[self]") else \
            f"{frame.function}  {frame.file_path_short}:{frame.line_no}"
        own = frame.time - sum(c.time for c in frame.children)
        if own > 0:
            selfs[name] = selfs.get(name, 0.0) + own
        for child in frame.children:
            walk(child, name)

    walk(root, "?")
    flat = "\n".join(f"{t:7.3f} s {100 * t / total:5.1f}%  {name}"
                     for name, t in sorted(selfs.items(), key=lambda kv: -kv[1]))
    tree = ConsoleRenderer(show_all=False).render(session)
    lines = tree.splitlines()
    start = next((i for i, line in enumerate(lines) if "CPU time" in line), -1) + 2
    return flat, "\n".join(line for line in lines[start:] if line.strip())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--top", type=int, default=15, help="entries of the flat list per path")
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "profile.md")
    args = parser.parse_args(argv)
    n = args.events

    s = common.settings()
    registry = SchemaRegistry.load(s.schema_dirs())
    stream = common.make_stream(registry)
    topic = common.fresh_topic(s, "profile")
    sections: list[tuple[str, str, str]] = []
    try:
        def append() -> None:
            scratch = common.fresh_topic(s, "profile-append")
            with EventLog(settings=s, registry=registry, topic=scratch, run_id=common.RUN_ID) as el:
                produce, event = el.produce, stream.event
                for i in range(n):
                    payload, agent, to = event(i)
                    produce(common.EVENT_TYPE, payload, agent=agent, to=to)
                el.flush()

        sections.append(("append: EventLog.produce x N + flush", *profiled(append)))
        common.populate(s, registry, stream, topic, n)
        sections.append(("replay: swarmlog.replay()",
                         *profiled(lambda: replay(settings=s, topic=topic, registry=registry))))

        msgs: list[Any] = []
        with LogReader(settings=s, topic=topic) as reader:
            reader.assign(0)
            for batch in reader.batches():
                msgs.extend(batch)
        fold = Fold(registry=registry)
        sections.append(("replay fold: Fold.apply_batch over messages in memory",
                         *profiled(lambda: [fold.apply_batch(b) for b in common.chunks(msgs, 5000)])))
        builder = RowBuilder(topic=topic, decoder=Decoder(registry))
        sections.append(("sink rows: RowBuilder.build_copy over messages in memory",
                         *profiled(lambda: [builder.build_copy(list(b)) for b in common.chunks(msgs, 5000)])))
        try:
            sections.append(("sink: PostgresSink.run(until_end=True)",
                             *profiled(lambda: PostgresSink(settings=s, topic=topic, registry=registry)
                                       .run(until_end=True))))
        finally:
            forget_topic_rows(s, [topic])
    finally:
        common.delete_topics(s)

    out = [f"# Profiles of the per-event paths ({n:,} events each)\n",
           "Made by `python -m bench.profile` (pyinstrument). Time inside C extensions (fastavro, "
           "librdkafka, psycopg) is the `[self]` time of the Python function that calls them.\n"]
    for title, flat, tree in sections:
        top = "\n".join(flat.splitlines()[: args.top])
        out.append(f"## {title}\n\nTop {args.top} by self time:\n\n```\n{top}\n```\n\n"
                   f"<details><summary>call tree</summary>\n\n```\n{tree}\n```\n</details>\n")
        print(f"== {title}\n{top}\n")
    args.out.write_text("\n".join(out))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
