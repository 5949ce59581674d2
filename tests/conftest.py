"""What every test may use: the repository's paths and its schemas, with no service behind them.

Tests are split by what they need:

* ``tests/unit``: nothing but the package. No Kafka, no Postgres, no service
  (``tests/unit/conftest.py`` makes any attempt to reach them fail); 25 s on 2 cores (the
  figure is in CONTRIBUTING.md), with Hypothesis's ``dev`` profile (below).
* ``tests/integration``: the real Kafka and Postgres (``tests/integration/conftest.py``
  says where they come from); a service that cannot be reached fails the session.
* ``tests/contract``: behaviour suites that every log backend must pass; ``unit`` runs
  them on the in-memory log, ``integration`` on Kafka.
"""

from __future__ import annotations

import gc
import os
import sys
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

import pytest
from hypothesis import settings as hypothesis_settings

from swarmlog.schema.registry import SchemaRegistry
from swarmlog.settings import Settings

REPO = Path(__file__).resolve().parents[1]

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
"""CI (``CI=true``) has everything a test can need: nothing there may be skipped."""


# --- Hypothesis: a few examples a property on a developer's machine, every one in CI ---------------------
#
# HYPOTHESIS_PROFILE names the profile; without it, "ci" under CI=true and "dev" otherwise. A property that
# names its count (`@settings(max_examples=examples(300))`) runs that many under "ci" and a tenth (at least
# ten) under "dev"; one that names none runs the profile's (100, or 10). Every assertion runs either way:
# "dev" finds less, quickly, and CI (`bash .ci/run`) still runs them all.
hypothesis_settings.register_profile("ci", max_examples=100, print_blob=True)
hypothesis_settings.register_profile("dev", max_examples=10)
HYPOTHESIS_PROFILE = os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if IN_CI else "dev")
hypothesis_settings.load_profile(HYPOTHESIS_PROFILE)


def examples(n: int) -> int:
    """How many examples a property test that asks for ``n`` runs under the profile loaded."""
    return n if HYPOTHESIS_PROFILE == "ci" else max(10, n // 10)


def exhaustive() -> bool:
    """Whether a test that enumerates a space (every byte value at every position) goes through all
    of it ("ci"), or through a sample that keeps its boundaries ("dev")."""
    return HYPOTHESIS_PROFILE == "ci"


def cannot_run_here(reason: str) -> NoReturn:
    """A test this machine cannot run (no compiler for the guard's C hook, no fork): skipped on a
    developer's machine, a failure in CI, where a missing install step must not pass unseen."""
    if IN_CI:
        pytest.fail(f"{reason} (CI=true: nothing is skipped in CI)")
    pytest.skip(reason)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Every module and test is loaded now and lives as long as the session: a full garbage collection
    (a test's own ``gc.collect()``, CPython's oldest generation) need not walk them each time."""
    global _MODULES_FROZEN
    gc.freeze()
    _MODULES_FROZEN = len(sys.modules)


_MODULES_FROZEN = 0


def pytest_runtest_logfinish(nodeid: str, location: tuple[str, int | None, str]) -> None:
    """The same for what a test imported: an agent framework or an LLM SDK imported by the first test that
    uses it (not at collection, so that one worker imports them: tests/unit/conftest.py) lives as long as the
    session too, and every full collection of that worker would walk its hundreds of thousands of objects
    again. Frozen after the test's fixtures are gone; anything else the test left alive then is frozen with
    the imports (never collected: a few times per session, a bounded leak)."""
    global _MODULES_FROZEN
    if len(sys.modules) > _MODULES_FROZEN + 20:
        gc.freeze()
        _MODULES_FROZEN = len(sys.modules)


@pytest.fixture(scope="session")
def registry() -> SchemaRegistry:
    return SchemaRegistry.load(Settings().schema_dirs())


def new_topic_name(prefix: str = "test") -> str:
    return f"swarmlog.{prefix}-{uuid.uuid4().hex[:12]}"


def subprocess_env(settings: Settings) -> dict[str, str]:
    """Environment for a `swarmlog` subprocess pointed at the same cluster and topic."""
    env = dict(os.environ)
    env.update({
        "SWARMLOG_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "SWARMLOG_DATABASE_URL": settings.database_url,
        "SWARMLOG_TOPIC": settings.topic,
        "SWARMLOG_SCHEMA_DIR": str(settings.schema_dir),
        "PYTHONPATH": os.pathsep.join([str(REPO / "platform"), str(REPO / "connectors"), str(REPO),
                                       env.get("PYTHONPATH", "")]),
    })
    if settings.database_password is not None:  # taken out of the URL by Settings
        env["SWARMLOG_DATABASE_PASSWORD"] = settings.database_password.get_secret_value()
    return env


def unchecked_event(registry: SchemaRegistry, event_type: str, payload: dict[str, Any], *, agent: str,
                    to: str | None = None, causes: Sequence[int] = (), run_id: str = "",
                    event_id: str | None = None) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
    """``(value, key, headers)`` of an event as swarmlog's writers would produce it, with none of their
    checks (names, causes, ids): what another producer, an older writer or a copy tool may put in a
    log, for ``EventLog.produce_raw``. Readers must take whatever is in the log."""
    from swarmlog.schema.codec import Encoder

    enc = Encoder(registry.latest(event_type))
    value = enc.encode_event(event_id or f"unchecked-{uuid.uuid4().hex[:12]}", run_id, agent, to, list(causes),
                             enc.schema.validate_payload(payload))
    return value, agent.encode(), list(enc.headers(agent.encode(), None if to is None else to.encode()))


def newer_schemas(into: Path) -> Path:
    """A copy of the built-in schemas with ``agent.message`` v4: v3 and one more field with a default
    (``trace``), a compatible change ``schema check`` passes. Point ``SWARMLOG_SCHEMA_DIR`` at it for a
    process upgraded before (a writer) or after (a reader) the others: a rolling upgrade."""
    import json
    import shutil

    from swarmlog.schema.registry import builtin_schema_dir

    target = into / "schemas-v4"
    shutil.copytree(builtin_schema_dir(), target, ignore=shutil.ignore_patterns("__pycache__"))
    v3 = json.loads((target / "agent.message" / "v3.avsc").read_text())
    payload = next(f for f in v3["fields"] if f["name"] == "payload")["type"]
    payload["fields"].append({"name": "trace", "type": "string", "default": "",
                              "doc": "v4: where the message came from (tests: a rolling upgrade)"})
    v3["doc"] = "v4: v3 and a trace (a test's newer schema)"
    (target / "agent.message" / "v4.avsc").write_text(json.dumps(v3, indent=2))
    return target


GUARD_HOOKS = ("native", "python") if sys.version_info < (3, 12) else ("native", "python", "python-profile")
"""The determinism guard's hooks (swarmlog.guard._hook) a process can get on this Python: the C one and the
Python one, through the API this version uses (a profile function on 3.11, sys.monitoring from 3.12); from
3.12 also the Python one as a profile function, which the guard falls back to when no sys.monitoring tool
id is free."""


@pytest.fixture(params=GUARD_HOOKS)
def guard_hook(request: pytest.FixtureRequest) -> Iterator[str]:
    """The test runs once under each of the guard's hooks (the native one is skipped where it is not
    built; tests/unit/test_guard_native.py fails if a compiler was there to build it)."""
    from swarmlog.guard import _hook

    native = request.param == "native"
    if native and _hook._native is None:
        cannot_run_here(_hook._NOT_BUILT)
    api = _hook.PROFILE if request.param == "python-profile" else _hook._API
    before = _hook.hook_in_use()
    _hook._select(_hook.GuardHook(native=native, why=f"tests: {request.param}", api=api))
    try:
        yield request.param
    finally:
        _hook._select(before)
