"""One producer of the leader-SIGKILL fault case (test_leader_faults.py), as its own process
(``python -m tests.faults.fault_producer``).

It appends numbered events (``agent.message`` from agent ``p<N>``, body
``p<N>:<seq>``) through an :class:`EventLog` (idempotent, ``acks=all``), a batch at
a time, until SIGTERM; then it finishes the batch in hand and exits 0.

What it counts as acknowledged is written down as it happens, one line per event
in ``--acked FILE``, after the flush that covers it has returned:

* ``<seq> <offset> <monotonic time>``: the broker acknowledged it at that offset;
* ``? <seq>``: the flush raised, so its fate is unknown (it may or may not be in
  the log, see issue 11's "a flush timeout lies"). It is not retried, since a
  retry of an event that did land would write it twice; the checker counts it
  neither as lost nor as acknowledged.

``time.monotonic`` is the system-wide CLOCK_MONOTONIC on Linux, so the test can
compare it with the moment it killed the leader.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time

from swarmlog.errors import AppendFailed, ServiceUnavailable
from swarmlog.log.append import EventLog
from swarmlog.settings import Settings


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--producer", type=int, required=True)
    parser.add_argument("--acked", required=True)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--pause", type=float, default=0.05)
    args = parser.parse_args()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    name = f"p{args.producer}"
    seq = 0
    with open(args.acked, "a", buffering=1) as acked, EventLog(settings=Settings.from_env(), run_id="failover") as log:
        while not stop.is_set():
            batch = list(range(seq, seq + args.batch))
            seq += args.batch
            for n in batch:
                log.produce("agent.message", {"kind": "load", "body": f"{name}:{n}"}, agent=name,
                            event_id=f"{name}-{n}")
            try:
                offsets = log.flush(timeout=60.0)
            except (AppendFailed, ServiceUnavailable) as exc:
                print(f"{name}: batch {batch[0]}..{batch[-1]} has an unknown fate: {exc}", file=sys.stderr)
                acked.write("".join(f"? {n}\n" for n in batch))
                continue
            now = time.monotonic()
            if len(offsets) != len(batch):
                # Events of an earlier, "failed" flush were delivered after all and their offsets
                # came back with these: nothing here can be paired with certainty.
                print(f"{name}: {len(offsets)} offsets for {len(batch)} events", file=sys.stderr)
                acked.write("".join(f"? {n}\n" for n in batch))
                continue
            acked.write("".join(f"{n} {off} {now:.3f}\n" for n, off in zip(batch, offsets, strict=True)))
            time.sleep(args.pause)
    return 0


if __name__ == "__main__":
    sys.exit(main())
