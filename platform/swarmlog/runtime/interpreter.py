"""What in the interpreter is pinned for a run: the string-hash seed.

**Why.** CPython salts the hash of every ``str`` and ``bytes`` with a seed drawn at
start-up (``PYTHONHASHSEED`` unset means random). The iteration order of a set of
strings follows those hashes, so the same handler iterating the same set does things
in a different order in another process. A restarted agent (a pod restart) then finds
its history "differs from the log" and stops — in Kubernetes, a crash loop — and a
replay in another process reports a divergence that the code never had.

**What is pinned.** The seed, and the hash algorithm it keys (``sys.hash_info``:
``siphash13``, 64-bit, on CPython 3.11+). The process that starts a run records both
in ``run.started`` (version 2); every process that runs the swarm's handlers — a live
agent, its restarts, ``replay --swarm`` — must hash strings the same way:

* the command line re-executes itself with the recorded ``PYTHONHASHSEED`` before it
  runs a handler (:func:`reexec_with`), so a pod, a shell or a CI job may start with
  any seed; a new run gets the seed the starting process has, else
  :data:`DEFAULT_HASH_SEED`; the image and the chart set ``PYTHONHASHSEED`` so that no
  re-exec is needed;
* a library caller (``run_agents``, ``replay_swarm`` in its own process) cannot be
  re-executed: the runtime refuses to run a pinned run's handlers with another seed
  (:class:`~swarmlog.errors.HashSeedMismatch`, saying which seed to start with).

A run started in a process whose seed is random (a library caller without
``PYTHONHASHSEED``, or a log written before version 2) is *unpinned*: it is recorded as
such, runs anywhere as before, and a set-order dependence shows up as a divergence.

**What cannot be pinned**, and is caught by comparing outputs and state instead: order
by object identity (a set of objects that hash by ``id()``, sorting by ``id``), and
anything a handler reads from outside ``ctx`` (which the determinism guard refuses).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import HashSeedMismatch

__all__ = ["DEFAULT_HASH_SEED", "HASH_SEED_ENV", "REEXEC_ENV", "HashPin", "UNPINNED", "as_recorded", "current",
           "hash_algorithm", "reexec_with", "require", "seed_for_new_run"]

logger = logging.getLogger(__name__)

HASH_SEED_ENV = "PYTHONHASHSEED"
DEFAULT_HASH_SEED = 0
"""A new run's seed when the process that starts it has none: 0, which CPython documents as
"hash randomisation disabled"; any fixed value would do, 0 is the one operators recognise."""
_MAX_SEED = 4_294_967_295
REEXEC_ENV = "SWARMLOG_REEXEC_HASH_SEED"
"""Set on a re-executed process: a second re-exec for the same seed would loop."""


@dataclass(frozen=True, slots=True)
class HashPin:
    """How an interpreter hashes strings: the seed (None: random per process) and the algorithm."""

    seed: int | None
    algorithm: str


def hash_algorithm() -> str:
    """``sys.hash_info``'s algorithm and width, e.g. ``siphash13/64``."""
    return f"{sys.hash_info.algorithm}/{sys.hash_info.width}"


def current(environ: Mapping[str, str] | None = None) -> HashPin:
    """How this interpreter hashes strings.

    The seed is ``PYTHONHASHSEED`` as this process started with it: read from the
    environment and checked against what the interpreter says it did with it
    (``sys.flags``), so an environment changed after start-up, or ignored (``-E``, ``-I``),
    is not mistaken for the interpreter's seed.
    """
    env = os.environ if environ is None else environ
    return HashPin(seed=_seed_from(env.get(HASH_SEED_ENV)), algorithm=hash_algorithm())


def _seed_from(raw: str | None) -> int | None:
    if raw is None or sys.flags.ignore_environment:
        return None
    try:
        seed = int(raw)
    except ValueError:
        return None  # "random", or garbage CPython would have refused at start-up
    if not 0 <= seed <= _MAX_SEED:
        return None
    # PYTHONHASHSEED=0 is the one value that turns randomisation off; anything else leaves it on.
    if (seed == 0) != (sys.flags.hash_randomization == 0):
        return None
    return seed


UNPINNED = "unpinned"
"""A replay token's ``hash_seed`` for a run recorded without one (random per process, or run.started v1)."""


def as_recorded(run_started: Mapping[str, object]) -> dict[str, str]:
    """What a ``run.started`` payload says of the interpreter, as a replay token carries it.

    The seed and the algorithm, as strings (``unpinned`` / empty when not recorded): a token
    made of a run and checked against another topic says when the two were hashed differently.
    """
    seed = run_started.get("hash_seed")
    return {"hash_seed": UNPINNED if seed is None else str(seed),
            "hash_algorithm": str(run_started.get("hash_algorithm") or "")}


def seed_for_new_run(environ: Mapping[str, str] | None = None) -> int:
    """The seed a new run started from this process should have: this process's, else the default."""
    seed = current(environ).seed
    return DEFAULT_HASH_SEED if seed is None else seed


def require(*, run_id: str, seed: int | None, algorithm: str | None) -> None:
    """Refuse to run a pinned run's handlers in an interpreter that hashes strings differently.

    ``seed`` and ``algorithm`` are what ``run.started`` recorded (None: an unpinned run).
    """
    if seed is None:
        return
    here = current()
    if here.seed != seed or (algorithm is not None and here.algorithm != algorithm):
        raise HashSeedMismatch(run_id=run_id, recorded_seed=seed, recorded_algorithm=algorithm or here.algorithm,
                               current_seed=here.seed, current_algorithm=here.algorithm)


def reexec_with(seed: int, *, run_id: str) -> None:
    """Replace this process by the same command line under ``PYTHONHASHSEED=seed``; never returns.

    Only the command line calls this, before it runs any handler, with the run's recorded
    seed. ``sys.orig_argv`` repeats the interpreter's own options and how it was started
    (the ``swarmlog`` script, or ``-m swarmlog.cli``), so the new process imports exactly
    what this one would have.
    """
    env = dict(os.environ)
    if env.get(REEXEC_ENV) == str(seed):
        # Re-executed once already and still not pinned: the interpreter ignores the variable.
        here = current()
        raise HashSeedMismatch(run_id=run_id, recorded_seed=seed, recorded_algorithm=here.algorithm,
                               current_seed=here.seed, current_algorithm=here.algorithm)
    env[HASH_SEED_ENV] = str(seed)
    env[REEXEC_ENV] = str(seed)
    logger.info("run %s: re-executing with %s=%d, the seed the run's string hashes were recorded with",
                run_id, HASH_SEED_ENV, seed)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
