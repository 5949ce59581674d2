"""The determinism guard: inside a handler every deny-list entry raises ForbiddenCall naming the
call and the ctx method to use; outside handlers, and on other threads, everything works."""

from __future__ import annotations

import _random
import datetime
import importlib
import io
import logging
import os
import pathlib
import random
import secrets
import socket
import subprocess
import sys
import threading
import time
import traceback
import urllib.request
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass

# Alias imports, bound before the guard exists for the handler: patching module attributes
# would miss every one of these.
from datetime import date as Date
from datetime import datetime as DateTime
from io import open as io_open
from os import urandom
from random import randint
from socket import create_connection
from time import monotonic as wall_monotonic
from time import time  # noqa: F811 - the import style under test
from uuid import uuid4

import httpx
import pytest

from swarmlog import guard
from swarmlog.errors import NondeterminismError
from swarmlog.guard import DENY_LIST, ForbiddenCall, allowed, guarded, is_guarded

STASHED = {"clock": time, "today": datetime.date.today}  # references captured at import time


@dataclass
class Env:
    file: pathlib.Path  # exists, readable
    new_file: pathlib.Path  # does not exist
    tcp: tuple[str, int]  # a listening TCP socket (connects complete from the backlog)
    udp: tuple[str, int]


@pytest.fixture(scope="module")
def listeners() -> Iterator[tuple[tuple[str, int], tuple[str, int]]]:
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(128)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    yield tcp.getsockname(), udp.getsockname()
    tcp.close()
    udp.close()


@pytest.fixture
def env(tmp_path: pathlib.Path, listeners: tuple[tuple[str, int], tuple[str, int]]) -> Env:
    file = tmp_path / "existing.txt"
    file.write_text("hello")
    return Env(file=file, new_file=tmp_path / "new.txt", tcp=listeners[0], udp=listeners[1])


def _connect(env: Env) -> None:
    with socket.socket() as s:
        s.connect(env.tcp)


def _connect_ex(env: Env) -> None:
    with socket.socket() as s:
        assert s.connect_ex(env.tcp) == 0


def _sendto(env: Env) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(b"x", env.udp)


def _create_connection(env: Env) -> None:
    create_connection(env.tcp, timeout=2).close()


def _read_open(env: Env) -> None:
    with open(env.file) as f:
        f.read()


def _read_io_open(env: Env) -> None:
    with io.open(env.file) as f:
        f.read()


def _os_open(env: Env) -> None:
    os.close(os.open(env.file, os.O_RDONLY))


def _path_open(env: Env) -> None:
    with env.file.open() as f:
        f.read()


def _popen(env: Env) -> None:
    subprocess.Popen(["true"]).wait()


def _posix_spawn(env: Env) -> None:
    os.waitpid(os.posix_spawn("/bin/true", ["true"], dict(os.environ)), 0)


def _posix_spawnp(env: Env) -> None:
    os.waitpid(os.posix_spawnp("true", ["true"], dict(os.environ)), 0)


# Every deny-list entry and a way to call it. Internal entries (`_random.Random.seed`,
# `uuid._generate_time_safe`, ...) are reached through the public call a handler would make;
# the message then names both.
CASES: dict[str, Callable[[Env], object]] = {
    "time.time": lambda env: time(),
    "time.time_ns": lambda env: __import__("time").time_ns(),
    "time.monotonic": lambda env: wall_monotonic(),
    "time.monotonic_ns": lambda env: __import__("time").monotonic_ns(),
    "time.perf_counter": lambda env: __import__("time").perf_counter(),
    "time.perf_counter_ns": lambda env: __import__("time").perf_counter_ns(),
    "time.process_time": lambda env: __import__("time").process_time(),
    "time.process_time_ns": lambda env: __import__("time").process_time_ns(),
    "time.thread_time": lambda env: __import__("time").thread_time(),
    "time.thread_time_ns": lambda env: __import__("time").thread_time_ns(),
    "time.clock_gettime": lambda env: __import__("time").clock_gettime(0),
    "time.clock_gettime_ns": lambda env: __import__("time").clock_gettime_ns(0),
    "datetime.datetime.now": lambda env: DateTime.now(),
    "datetime.datetime.utcnow": lambda env: datetime.datetime.utcnow(),
    "datetime.datetime.today": lambda env: datetime.datetime.today(),
    "datetime.date.today": lambda env: Date.today(),
    "time.sleep": lambda env: __import__("time").sleep(0),
    "random.random": lambda env: random.random(),
    "random.getrandbits": lambda env: random.getrandbits(8),
    "random.randbytes": lambda env: random.randbytes(4),
    "random.randint": lambda env: randint(1, 6),
    "random.randrange": lambda env: random.randrange(10),
    "random.choice": lambda env: random.choice("abc"),
    "random.choices": lambda env: random.choices("abc", k=2),
    "random.shuffle": lambda env: random.shuffle([1, 2, 3]),
    "random.sample": lambda env: random.sample("abc", 2),
    "random.uniform": lambda env: random.uniform(0, 1),
    "random.triangular": lambda env: random.triangular(),
    "random.gauss": lambda env: random.gauss(0, 1),
    "random.normalvariate": lambda env: random.normalvariate(0, 1),
    "random.lognormvariate": lambda env: random.lognormvariate(0, 1),
    "random.expovariate": lambda env: random.expovariate(1),
    "random.vonmisesvariate": lambda env: random.vonmisesvariate(0, 1),
    "random.gammavariate": lambda env: random.gammavariate(2, 1),
    "random.betavariate": lambda env: random.betavariate(2, 3),
    "random.paretovariate": lambda env: random.paretovariate(1),
    "random.weibullvariate": lambda env: random.weibullvariate(1, 1),
    "random.seed": lambda env: random.seed(1234),
    "random.Random": lambda env: random.Random(),
    "_random.Random.seed": lambda env: _random.Random.seed(random.Random(1), None),
    "os.urandom": lambda env: urandom(8),
    "os.getrandom": lambda env: os.getrandom(8),
    "secrets.token_bytes": lambda env: secrets.token_bytes(),
    "secrets.token_hex": lambda env: secrets.token_hex(),
    "secrets.token_urlsafe": lambda env: secrets.token_urlsafe(),
    "secrets.randbelow": lambda env: secrets.randbelow(10),
    "secrets.randbits": lambda env: secrets.randbits(8),
    "secrets.choice": lambda env: secrets.choice("abc"),
    "uuid.uuid1": lambda env: uuid.uuid1(),
    "uuid.uuid4": lambda env: uuid4(),
    "uuid._generate_time_safe": lambda env: uuid.uuid1(),
    "socket.socket.connect": _connect,
    "socket.socket.connect_ex": _connect_ex,
    "socket.socket.sendto": _sendto,
    "socket.create_connection": _create_connection,
    "socket.getaddrinfo": lambda env: socket.getaddrinfo("localhost", 80),
    "_socket.getaddrinfo": lambda env: socket.getaddrinfo("localhost", 80),
    "socket.gethostbyname": lambda env: socket.gethostbyname("localhost"),
    "socket.gethostbyname_ex": lambda env: socket.gethostbyname_ex("localhost"),
    "socket.gethostbyaddr": lambda env: socket.gethostbyaddr("127.0.0.1"),
    "open": _read_open,
    "io.open": _read_io_open,
    "os.open": _os_open,
    "pathlib.Path.open": _path_open,
    "pathlib.Path.read_text": lambda env: env.file.read_text(),
    "pathlib.Path.write_text": lambda env: env.new_file.write_text("x"),
    "pathlib.Path.read_bytes": lambda env: env.file.read_bytes(),
    "pathlib.Path.write_bytes": lambda env: env.new_file.write_bytes(b"x"),
    "os.system": lambda env: os.system("true"),
    "os.posix_spawn": _posix_spawn,
    "os.posix_spawnp": _posix_spawnp,
    "subprocess.Popen": _popen,
    "_posixsubprocess.fork_exec": _popen,
}


def _present(entry: guard.Forbidden) -> bool:
    try:
        return guard.resolve(entry.call) is not None
    except LookupError:
        return False


# Optional entries absent on this platform have nothing to call (their public callers are
# still covered by the other rows); every entry that exists is tested.
PRESENT = [entry for entry in DENY_LIST if _present(entry)]


def test_every_deny_list_entry_has_a_case_and_every_case_an_entry() -> None:
    calls = [entry.call for entry in DENY_LIST]
    assert len(calls) == len(set(calls)), "duplicate deny-list entries"
    assert set(calls) == set(CASES)


@pytest.mark.parametrize("entry", DENY_LIST, ids=lambda e: e.call)
def test_every_deny_list_entry_resolves_to_a_real_callable(entry: guard.Forbidden) -> None:
    if entry.optional and not _present(entry):
        return  # may be missing on this platform, by declaration
    assert callable(guard.resolve(entry.call)), entry.call


def test_the_entries_this_platform_must_have_are_present() -> None:
    assert [e for e in DENY_LIST if not e.optional and not _present(e)] == []
    if sys.platform == "linux":
        assert {e.call for e in DENY_LIST if e.optional} <= {e.call for e in PRESENT}


@pytest.mark.parametrize("entry", PRESENT, ids=lambda e: e.call)
def test_each_entry_raises_inside_a_handler(entry: guard.Forbidden, env: Env) -> None:
    with pytest.raises(ForbiddenCall) as caught:
        with guarded(agent="planner", offset=42):
            CASES[entry.call](env)
    message = str(caught.value)
    assert entry.call in message
    assert entry.use in message
    assert caught.value.agent == "planner" and caught.value.offset == 42
    assert not is_guarded()


@pytest.mark.parametrize("entry", PRESENT, ids=lambda e: e.call)
def test_each_entry_works_outside_a_handler(entry: guard.Forbidden, env: Env) -> None:
    CASES[entry.call](env)


# --- the error ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("call", "expected", "use"), [
    (lambda: time(), "time.time()", "ctx.now()"),
    (lambda: __import__("time").sleep(0), "time.sleep()", "ctx.timer("),
    (lambda: DateTime.now(), "datetime.datetime.now()", "ctx.now()"),
    (lambda: random.random(), "random.random()", "ctx.random()"),
    (lambda: uuid4(), "uuid.uuid4()", "ctx.uuid()"),
    (lambda: socket.getaddrinfo("localhost", 80), "socket.getaddrinfo()", "ctx.effect("),
    (lambda: open(os.devnull), "open", "ctx.effect("),
])
def test_the_message_names_the_call_and_the_ctx_method(call: Callable[[], object], expected: str,
                                                       use: str) -> None:
    with pytest.raises(ForbiddenCall) as caught:
        with guarded(agent="planner", offset=7):
            call()
    assert isinstance(caught.value, NondeterminismError)
    assert str(caught.value).startswith("agent 'planner' at offset 7: ")
    assert expected in str(caught.value) and use in str(caught.value)


def test_a_python_level_entry_is_named_not_its_innards() -> None:
    with pytest.raises(ForbiddenCall) as caught:
        with guarded(agent="a", offset=1):
            uuid.uuid4()
    assert caught.value.call == "uuid.uuid4"
    assert caught.value.intercepted == "os.urandom"
    assert caught.value.use == "ctx.uuid()"


# --- import styles ------------------------------------------------------------------------------


@pytest.mark.parametrize(("call", "name"), [
    (lambda: time(), "time.time"),  # from time import time
    (lambda: wall_monotonic(), "time.monotonic"),  # from time import monotonic as ...
    (lambda: DateTime.now(), "datetime.datetime.now"),  # from datetime import datetime
    (lambda: DateTime.utcnow(), "datetime.datetime.utcnow"),
    (lambda: Date.today(), "datetime.date.today"),  # from datetime import date as Date
    (lambda: randint(1, 2), "random.randint"),  # from random import randint
    (lambda: uuid4(), "uuid.uuid4"),
    (lambda: urandom(1), "os.urandom"),
    (lambda: io_open(os.devnull), "io.open"),
    (lambda: STASHED["clock"](), "time.time"),  # a reference stashed at import time
    (lambda: STASHED["today"](), "datetime.date.today"),
    (lambda: getattr(importlib.import_module("time"), "time")(), "time.time"),
])
def test_alias_imports_are_caught(call: Callable[[], object], name: str) -> None:
    with pytest.raises(ForbiddenCall, match=name.replace(".", r"\.")):
        with guarded(agent="a", offset=1):
            call()


def test_subclasses_of_guarded_types_are_caught(env: Env) -> None:
    class MyDateTime(datetime.datetime):
        pass

    class MySocket(socket.socket):
        def connect(self, address: object) -> None:
            super().connect(address)

    with pytest.raises(ForbiddenCall, match="datetime.datetime.now"):
        with guarded(agent="a", offset=1):
            MyDateTime(2024, 1, 1).replace(year=2025)  # seen as an instance first: still caught
            MyDateTime.now()
    with MySocket() as s, pytest.raises(ForbiddenCall, match="socket.socket.connect"):
        with guarded(agent="a", offset=1):
            s.connect(env.tcp)


@pytest.mark.parametrize("get", [
    lambda url: httpx.get(url, timeout=2),
    lambda url: urllib.request.urlopen(url, timeout=2),
], ids=["httpx", "urllib"])
def test_http_clients_fail_through_the_socket_entries(get: Callable[[str], object],
                                                      env: Env) -> None:
    with pytest.raises(ForbiddenCall):
        with guarded(agent="a", offset=1):
            get(f"http://{env.tcp[0]}:{env.tcp[1]}/")


def test_a_forbidden_call_does_not_happen(env: Env) -> None:
    with pytest.raises(ForbiddenCall):
        with guarded(agent="a", offset=1):
            env.new_file.write_text("x")
    with pytest.raises(ForbiddenCall):
        with guarded(agent="a", offset=1):
            os.system(f"touch {env.new_file}")
    assert not env.new_file.exists()


# --- what stays allowed --------------------------------------------------------------------------


def test_deterministic_relatives_stay_allowed() -> None:
    with guarded(agent="a", offset=1):
        assert random.Random(7).random() == random.Random(7).random()
        rng = random.Random(7)
        rng.seed(8)
        assert uuid.uuid5(uuid.NAMESPACE_DNS, "x") == uuid.uuid5(uuid.NAMESPACE_DNS, "x")
        datetime.datetime(2024, 1, 1) + datetime.timedelta(days=1)
        datetime.datetime.fromtimestamp(0, tz=datetime.timezone.utc)
        __import__("time").strftime("%Y", (2024, 1, 1, 0, 0, 0, 0, 1, 0))
        print("printing is fine")


def test_logging_tracebacks_and_warnings_work_inside_a_handler(
        caplog: pytest.LogCaptureFixture) -> None:
    with guarded(agent="a", offset=1):
        logging.getLogger("swarmlog.test").warning("inside a handler")
        try:
            raise ValueError("boom")
        except ValueError:
            formatted = traceback.format_exc()
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            warnings.warn("careful", UserWarning)
    assert "raise ValueError" in formatted
    assert "inside a handler" in caplog.text


def test_a_lazy_import_inside_a_handler_works(tmp_path: pathlib.Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "guard_lazy_module.py").write_text("VALUE = 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with guarded(agent="a", offset=1):
        assert importlib.import_module("guard_lazy_module").VALUE == 3


def test_allowed_lets_an_effect_through(env: Env) -> None:
    with pytest.raises(ForbiddenCall, match="time.time"):
        with guarded(agent="a", offset=1):
            with allowed():
                assert not is_guarded()
                time()
                _connect(env)
                env.file.read_text()
                with allowed():  # nests
                    uuid.uuid4()
                random.random()
            assert is_guarded()
            time()  # guarded again once the effect is done


def test_allowed_outside_a_handler_changes_nothing() -> None:
    with allowed():
        time()
    assert sys.getprofile() is None and not is_guarded()


# --- scope: threads, nesting, exceptions --------------------------------------------------------


def test_another_thread_is_unaffected_while_a_handler_is_guarded(env: Env) -> None:
    go, done = threading.Event(), threading.Event()
    results: list[object] = []

    def other_thread() -> None:
        go.wait(5)
        try:
            results.append(time())
            results.append(random.random())
            results.append(uuid.uuid4())
            results.append(env.file.read_text())
            _connect(env)
            __import__("time").sleep(0)
        except BaseException as exc:  # noqa: BLE001 - report anything to the main thread
            results.append(exc)
        done.set()

    worker = threading.Thread(target=other_thread)
    worker.start()
    with pytest.raises(ForbiddenCall):
        with guarded(agent="a", offset=1):
            go.set()  # the other thread does its I/O while this one is inside the handler
            assert done.wait(5)
            time()  # and this thread is still guarded
    worker.join(5)
    assert len(results) == 4 and not any(isinstance(r, BaseException) for r in results), results


def test_nested_guards_name_the_innermost_and_restore_the_outer() -> None:
    with pytest.raises(ForbiddenCall) as inner:
        with guarded(agent="outer", offset=1):
            with guarded(agent="inner", offset=2):
                time()
    with pytest.raises(ForbiddenCall) as outer:
        with guarded(agent="outer", offset=1):
            with guarded(agent="inner", offset=2):
                assert is_guarded()
            assert is_guarded()
            with allowed():
                with guarded(agent="handler-inside-an-effect", offset=3):
                    assert is_guarded()
                assert not is_guarded()
            assert is_guarded()
            time()
    assert (inner.value.agent, inner.value.offset) == ("inner", 2)
    assert (outer.value.agent, outer.value.offset) == ("outer", 1)
    assert not is_guarded() and sys.getprofile() is None
    time()


def test_the_guard_is_removed_after_an_exception_inside_the_handler() -> None:
    with pytest.raises(ValueError):
        with guarded(agent="a", offset=1):
            raise ValueError("handler failed")
    assert not is_guarded() and sys.getprofile() is None
    with pytest.raises(ForbiddenCall):
        with guarded(agent="a", offset=2):
            time()
    assert not is_guarded()
    assert sys.getprofile() is None and sys.gettrace() is None
    time()
    uuid.uuid4()


def test_a_swallowed_violation_rearms_the_guard_and_still_fails_the_handler() -> None:
    attempts: list[str] = []

    def handler() -> None:
        try:
            time()
        except Exception:  # noqa: BLE001 - the mistake under test
            attempts.append("first")
        try:
            time()  # same frame, no call in between: the re-armed hook must catch this one too
        except ForbiddenCall:
            attempts.append("second")
        try:
            uuid.uuid4()
        except ForbiddenCall:
            attempts.append("third")

    with pytest.raises(ForbiddenCall, match="time.time"):
        with guarded(agent="a", offset=1):
            handler()
    assert attempts == ["first", "second", "third"]
    assert sys.getprofile() is None and sys.gettrace() is None


def test_a_swallowed_violation_rearms_the_guard_under_a_debugger_too() -> None:
    previous = sys.gettrace()  # coverage's tracer, if the suite runs under coverage
    traced: list[str] = []

    def debugger(frame: object, event: str, arg: object) -> object:
        traced.append(event)
        return debugger

    attempts: list[int] = []

    def handler() -> None:
        for attempt in (1, 2):
            try:
                time()  # the frame has the debugger's trace function; the guard must re-arm
            except ForbiddenCall:
                attempts.append(attempt)

    sys.settrace(debugger)
    try:
        with pytest.raises(ForbiddenCall) as caught:
            with guarded(agent="a", offset=1):
                handler()
        assert sys.gettrace() is debugger
    finally:
        sys.settrace(previous)
    assert attempts == [1, 2]
    assert "time.time" in str(caught.value) and "line" in traced


def test_the_guard_yields_to_an_installed_profiler(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(guard, "_warned_profiler", False)
    events: list[str] = []

    def profiler(frame: object, event: str, arg: object) -> None:
        events.append(event)

    sys.setprofile(profiler)
    try:
        with pytest.warns(RuntimeWarning, match="guard is off"):
            with guarded(agent="a", offset=1):
                time()  # not caught: a profiler owns sys.setprofile on this thread
        assert sys.getprofile() is profiler
    finally:
        sys.setprofile(None)
    assert "c_call" in events


def test_a_gc_callback_that_reads_the_clock_is_not_blamed_on_the_handler() -> None:
    """Libraries (hypothesis, profilers) time garbage collections from gc callbacks, which run
    inside whatever handler allocated at that moment. That is not the handler reading the clock."""
    import gc
    import time

    seen = []

    def timing_callback(phase, info):
        seen.append(time.perf_counter())

    gc.callbacks.append(timing_callback)
    try:
        with guarded(agent="a", offset=1):
            gc.collect()
        with pytest.raises(ForbiddenCall):
            with guarded(agent="a", offset=2):
                time.perf_counter()  # the handler itself still may not
    finally:
        gc.callbacks.remove(timing_callback)
    assert len(seen) >= 2  # the callback ran, start and stop, inside the guarded block
