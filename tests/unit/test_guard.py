"""The determinism guard's mechanism: import styles, subclasses, scopes, threads, re-arming, the
arguments it reads, and both sides of every rule that lets code act for a handler (logging,
linecache, imports, finalizers, trusted libraries). The table itself, row by row in live
handlers, is tests/unit/test_guard_table.py."""

from __future__ import annotations

import datetime
import importlib
import logging
import os
import pathlib
import random
import socket
import subprocess
import sys
import threading
import time
import time as clock
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
from time import monotonic as wall_monotonic
from time import time  # noqa: F811 - the import style under test
from uuid import uuid4

import httpx
import pytest

from swarmlog import guard
from swarmlog.errors import NondeterminismError
from swarmlog.guard import ForbiddenCall, _hook, allowed, guarded, is_guarded, trust_library

# Every test here runs under each of the guard's hooks (tests/conftest.py GUARD_HOOKS).
pytestmark = pytest.mark.usefixtures("guard_hook")

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


def test_a_python_row_is_refused_at_its_first_line_even_when_its_result_is_cached() -> None:
    with pytest.raises(ForbiddenCall) as caught:
        with guarded(agent="a", offset=1):
            uuid.uuid4()
    assert (caught.value.call, caught.value.intercepted, caught.value.use) == ("uuid.uuid4", None, "ctx.uuid()")
    uuid.getnode()  # caches the hardware address: no C call happens the second time
    with pytest.raises(ForbiddenCall, match=r"uuid\.getnode\(\) .* hardware address"):
        with guarded(agent="a", offset=1):
            uuid.getnode()


def test_the_outermost_row_on_the_stack_names_the_call() -> None:
    with pytest.raises(ForbiddenCall) as caught:
        with guarded(agent="a", offset=1):
            subprocess.run(["true"])  # Popen, then fork_exec, are under it
    assert caught.value.call == "subprocess.run"


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
    (lambda: io_open(os.devnull), "open"),  # io.open is open
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
    assert _hook.getprofile() is None and not is_guarded()


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
    assert not is_guarded() and _hook.getprofile() is None
    time()


def test_the_guard_is_removed_after_an_exception_inside_the_handler() -> None:
    with pytest.raises(ValueError):
        with guarded(agent="a", offset=1):
            raise ValueError("handler failed")
    assert not is_guarded() and _hook.getprofile() is None
    with pytest.raises(ForbiddenCall):
        with guarded(agent="a", offset=2):
            time()
    assert not is_guarded()
    assert _hook.getprofile() is None and sys.gettrace() is None
    time()
    uuid.uuid4()


def test_a_swallowed_violation_leaves_the_guard_on_and_still_fails_the_handler() -> None:
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
    assert _hook.getprofile() is None and sys.gettrace() is None


def test_a_swallowed_violation_is_what_fails_the_handler_when_it_then_raises_something_else() -> None:
    # Else the other error would be recorded as the handler's own failure (handler.failed) and replayed as one.
    def handler() -> None:
        try:
            time()
        except Exception:  # noqa: BLE001 - the mistake under test
            raise ValueError("no clock") from None

    with pytest.raises(ForbiddenCall, match="time.time") as raised:
        with guarded(agent="a", offset=1):
            handler()
    assert isinstance(raised.value.__cause__, ValueError)


def test_a_swallowed_violation_leaves_the_guard_on_under_a_debugger_too() -> None:
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


def test_the_guard_yields_to_a_profiler_only_where_both_are_profile_functions(monkeypatch: pytest.MonkeyPatch) -> None:
    # A thread has one profile function: where the guard's hook is one, a profiler installed first
    # keeps it and the guard is off (with a warning). Under sys.monitoring the guard has a tool id of
    # its own, and both run.
    monkeypatch.setattr(guard._scope, "_warned_profiler", False)
    events: list[str] = []

    def profiler(frame: object, event: str, arg: object) -> None:
        events.append(event)

    sys.setprofile(profiler)
    try:
        if _hook.hook_in_use().api == "profile":
            with pytest.warns(RuntimeWarning, match="guard is off"):
                with guarded(agent="a", offset=1):
                    time()  # not caught: a profiler owns sys.setprofile on this thread
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                with pytest.raises(ForbiddenCall, match=r"time\.time\(\)"):
                    with guarded(agent="a", offset=1):
                        time()
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

    threshold = gc.get_threshold()
    gc.callbacks.append(timing_callback)
    gc.set_threshold(1)  # the handler's next allocation starts a collection (gc.collect() is a row)
    try:
        with guarded(agent="a", offset=1):
            garbage = [[] for _ in range(10)]
        assert len(garbage) == 10
        with pytest.raises(ForbiddenCall):
            with guarded(agent="a", offset=2):
                time.perf_counter()  # the handler itself still may not
    finally:
        gc.set_threshold(*threshold)
        gc.callbacks.remove(timing_callback)
    assert len(seen) >= 2  # the callback ran, start and stop, inside the guarded block


# --- what the guard reads of a C function's arguments ---------------------------------------------


class _Stamp:
    when: float | None = None  # a class attribute the guard reads without running code

    def __init__(self, when: float | None) -> None:
        self.when = when

    def seconds(self) -> float | None:
        return self.when


_NO_STAMP = _Stamp(None)


@pytest.mark.parametrize("call", [
    lambda: clock.gmtime(),
    lambda: clock.gmtime(None),
    lambda: (lambda secs=None: clock.gmtime(secs))(),  # a local that is None
    lambda: (lambda stamp=_NO_STAMP: clock.gmtime(stamp.when))(),  # an attribute that is None
    lambda: clock.strftime("%Y"),
    lambda: datetime.datetime.fromtimestamp(0),
    lambda: datetime.datetime.fromtimestamp(0, tz=None),
    lambda: datetime.datetime.fromtimestamp(0, None),
], ids=["gmtime()", "gmtime(None)", "gmtime(local None)", "gmtime(attr None)", "strftime(fmt)",
        "fromtimestamp(ts)", "fromtimestamp(ts, tz=None)", "fromtimestamp(ts, None)"])
def test_a_call_that_reads_the_clock_or_the_zone_is_refused_whatever_spells_its_missing_argument(
        call: Callable[[], object]) -> None:
    with pytest.raises(ForbiddenCall):
        with guarded(agent="a", offset=1):
            call()


def test_the_same_calls_given_what_they_need_are_allowed() -> None:
    stamp, utc, secs = _Stamp(86400.0), datetime.timezone.utc, 86400
    with guarded(agent="a", offset=1):
        clock.gmtime(secs)
        clock.gmtime(secs / 2)
        clock.gmtime(stamp.when)
        clock.strftime("%Y", clock.gmtime(0))
        datetime.datetime.fromtimestamp(0, tz=utc)
        datetime.datetime.fromtimestamp(0, datetime.timezone.utc)
        datetime.datetime(2024, 1, 1, tzinfo=utc).timestamp()


def test_an_argument_the_guard_cannot_evaluate_passes_as_the_readme_says() -> None:
    """clock.gmtime(f()) where f() returns None reads the clock; the guard does not call f to
    find out (docs/agents.md lists this among what it cannot see)."""
    stamp = _Stamp(None)
    with guarded(agent="a", offset=1):
        clock.gmtime(stamp.seconds())
        clock.gmtime(*[])


# --- logging: its own reads pass under a Logger call, nothing else ---------------------------------


class _ClockHandler(logging.Handler):
    """A handler from outside the standard library (as pytest's, sentry's, a JSON formatter's)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append((clock.time(), self.format(record)))


class _Clocky:
    def __str__(self) -> str:
        return f"rendered at {clock.time()}"


@pytest.fixture
def clock_logger() -> Iterator[tuple[logging.Logger, _ClockHandler]]:
    log = logging.getLogger("swarmlog.test.guard.clock")
    handler = _ClockHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(process)d %(thread)d %(threadName)s %(processName)s "
                                           "%(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    yield log, handler
    log.removeHandler(handler)


def test_a_logger_call_may_stamp_and_ship_its_record(clock_logger, caplog: pytest.LogCaptureFixture) -> None:
    log, handler = clock_logger
    with guarded(agent="a", offset=1):
        log.info("step %d", 7)
        try:
            raise ValueError("boom")
        except ValueError:
            log.exception("it failed")
    assert [text.split()[-1] for _, text in handler.seen[:1]] == ["7"]
    assert 'raise ValueError("boom")' in handler.seen[1][1]  # the traceback's source lines
    assert "it failed" in caplog.text


def test_logging_opens_no_door_to_the_handler(clock_logger) -> None:
    log, _ = clock_logger
    with pytest.raises(ForbiddenCall, match=r"logging\.makeLogRecord\(\)"):
        with guarded(agent="a", offset=1):
            assert logging.makeLogRecord({}).created
    with pytest.raises(ForbiddenCall, match=r"time\.time(_ns)?\(\)"):  # time_ns from 3.13
        with guarded(agent="a", offset=1):  # its thread and pid reads pass only after this clock read
            logging.LogRecord("x", logging.INFO, __file__, 1, "made by the handler", None, None)
    record = logging.makeLogRecord({"msg": "made outside", "created": 0.0})
    with pytest.raises(ForbiddenCall, match=r"time\.localtime\(\)"):
        with guarded(agent="a", offset=1):
            logging.Formatter("%(asctime)s").format(record)  # no Logger call: the handler gets the text
    with pytest.raises(ForbiddenCall, match=r"time\.time\(\)"):
        with guarded(agent="a", offset=1):
            log.info("%s", _Clocky())  # the handler's own object, rendered into the message


class _ClockyError(Exception):
    def __str__(self) -> str:
        return f"failed at {clock.time()}"


class _Harmless:
    def __str__(self) -> str:
        return "harmless"


def test_the_full_guard_is_back_once_a_logger_call_returns(clock_logger) -> None:
    # While Logger._log runs, a lighter profile function stands in (it refuses nothing and
    # watches for _log's return and for the handler's code being rendered): it must give way.
    log, _ = clock_logger
    with pytest.raises(ForbiddenCall, match=r"time\.time\(\)"):
        with guarded(agent="a", offset=1):
            log.info("plain")
            clock.time()
    with pytest.raises(ForbiddenCall, match=r"time\.time\(\)"):
        with guarded(agent="a", offset=1):
            log.info("%s", _Harmless())  # in and out of rendering the message
            clock.time()
    with pytest.raises(ForbiddenCall, match=r"time\.time\(\)"):
        with guarded(agent="a", offset=1):
            log.debug("below the logger's level: no Logger._log at all")
            clock.time()
    with pytest.raises(ForbiddenCall, match=r"time\.time\(\)"):
        with guarded(agent="a", offset=1):
            try:
                log.info("%s", _Clocky())  # refused while rendering, and swallowed by the handler
            except ForbiddenCall:
                pass
            clock.time()  # re-armed: still refused (and the swallowed one fails the handler anyway)

    def raising(record: logging.LogRecord) -> bool:
        raise LookupError("a filter that fails")

    log.addFilter(raising)
    try:
        with pytest.raises(ForbiddenCall, match=r"time\.time\(\)"):
            with guarded(agent="a", offset=1):
                with pytest.raises(LookupError):
                    log.info("leaves Logger._log by an exception")
                clock.time()
    finally:
        log.removeFilter(raising)


def test_an_exceptions_text_rendered_by_a_logger_call_is_the_handlers_code(clock_logger) -> None:
    log, _ = clock_logger
    with pytest.raises(ForbiddenCall, match=r"time\.time\(\)"):
        with guarded(agent="a", offset=1):
            try:
                raise _ClockyError()
            except _ClockyError:
                log.exception("it failed")


def test_a_guard_entered_inside_a_logger_call_is_a_full_guard(clock_logger) -> None:
    # A log handler that runs agents (a test harness's): its guard must not inherit the Logger call's ease.
    log, _ = clock_logger
    refused: list[str] = []

    class Nested(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            try:
                with guarded(agent="inner", offset=2):
                    clock.time()
            except ForbiddenCall as exc:
                refused.append(exc.agent or "")

    nested = Nested()
    log.addHandler(nested)
    try:
        with pytest.raises(ForbiddenCall, match="agent 'inner'"):  # a violation fails every guard open around it
            with guarded(agent="a", offset=1):
                log.info("runs a guard")
    finally:
        log.removeHandler(nested)
    assert refused == ["inner"]


# --- linecache: the program's source, nothing else -------------------------------------------------


def test_linecache_reads_source_code_inside_a_handler(tmp_path: pathlib.Path) -> None:
    script = tmp_path / "generated_code.py"  # code compiled from a file that is no module
    script.write_text("def fail():\n    raise KeyError('from generated code')\n")
    namespace: dict[str, object] = {}
    exec(compile(script.read_text(), str(script), "exec"), namespace)
    with guarded(agent="a", offset=1):
        assert "import" in "".join(linecache_lines(logging.__file__))
        try:
            namespace["fail"]()  # type: ignore[operator]
        except KeyError:
            text = traceback.format_exc()
    assert "raise KeyError('from generated code')" in text


def linecache_lines(path: str) -> list[str]:
    import linecache

    return linecache.getlines(path)[:40]


def test_linecache_serves_no_other_file_even_from_its_cache(env: Env) -> None:
    import linecache

    assert linecache.getline(str(env.file), 1) == "hello\n"  # cached, outside the handler
    with pytest.raises(ForbiddenCall, match=r"linecache\.getline\(\)"):
        with guarded(agent="a", offset=1):
            linecache.getline(str(env.file), 1)
    with pytest.raises(ForbiddenCall, match=r"linecache\.getline\(\)"):
        with guarded(agent="a", offset=1):
            assert traceback.FrameSummary(str(env.file), 1, "x").line


# --- library setup: pydantic discovering its plugins, nothing else of it ---------------------------


def test_a_model_built_inside_a_handler_may_look_up_pydantic_plugins() -> None:
    # The SDKs build their response models' validators lazily, on the first response parsed,
    # which is inside a handler: pydantic's plugin lookup reads PYDANTIC_DISABLE_PLUGINS.
    import pydantic
    from pydantic.plugin import _loader

    with guarded(agent="a", offset=1):
        class Reply(pydantic.BaseModel):
            text: str

        assert Reply(text="hi").text == "hi"
        assert list(_loader.get_plugins()) == list(_loader.get_plugins())


def test_pydantic_may_look_up_its_plugins_in_a_process_whose_first_model_is_built_inside_a_handler() -> None:
    # A fresh process (a restarted agent, a replay): pydantic's plugin loader is imported inside the
    # handler, and the import's own calls reach the guard while the loader's function does not exist
    # yet; it must still be recognised once it does.
    code = ("import pydantic, sys\n"
            "assert 'pydantic.plugin._loader' not in sys.modules\n"
            "from swarmlog.guard import guarded\n"
            "with guarded(agent='a', offset=0):\n"
            "    class Reply(pydantic.BaseModel):\n"
            "        text: str\n"
            "    print(Reply(text='hi').text)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, "hi"), done.stderr


def test_pydantic_opens_no_other_door() -> None:
    import pydantic

    with pytest.raises(ForbiddenCall, match=r"os\.getenv\(\)"):
        with guarded(agent="a", offset=1):
            os.getenv("PYDANTIC_DISABLE_PLUGINS")  # the handler's own read of the same variable
    with pytest.raises(ForbiddenCall, match=r"uuid\.uuid4\(\)"):
        with guarded(agent="a", offset=1):
            class Stamped(pydantic.BaseModel):
                id: uuid.UUID = pydantic.Field(default_factory=uuid.uuid4)

            Stamped()  # a default factory pydantic calls for the handler is the handler's


# --- a first import runs as it would outside; nothing above the guard excuses a call ------------------


def test_a_first_import_inside_a_handler_behaves_as_an_import_outside(tmp_path: pathlib.Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "guard_import_time.py").write_text(
        "import os, time\nSTARTED = time.time()\nHOME = os.environ.get('HOME')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "guard_import_time", raising=False)
    with guarded(agent="a", offset=1):
        module = importlib.import_module("guard_import_time")
    assert module.STARTED > 0
    with pytest.raises(ForbiddenCall, match=r"importlib\.reload\(\)"):
        with guarded(agent="a", offset=1):
            importlib.reload(module)  # runs the top-level code again, now inside the handler


def test_a_guard_entered_during_an_import_is_not_excused_by_it(tmp_path: pathlib.Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "guard_runs_at_import.py").write_text(
        "import time\nfrom swarmlog.guard import guarded\nwith guarded(agent='a', offset=1):\n    time.time()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "guard_runs_at_import", raising=False)
    with pytest.raises(ForbiddenCall, match=r"time\.time\(\)"):
        importlib.import_module("guard_runs_at_import")


# --- finalizers and trusted libraries ---------------------------------------------------------------


class _Finalized:
    def __init__(self, seen: list[float]) -> None:
        self.seen = seen

    def __del__(self) -> None:
        self.seen.append(clock.time())


def test_a_finalizer_that_reads_the_clock_is_not_blamed_on_the_handler() -> None:
    seen: list[float] = []
    made = _Finalized(seen)
    with guarded(agent="a", offset=1):
        del made  # the last reference dies inside the handler
    assert len(seen) == 1
    with pytest.raises(ForbiddenCall):
        with guarded(agent="a", offset=1):
            _Finalized(seen).__init__(seen) or clock.time()  # the handler itself still may not


def test_a_trusted_library_reads_the_clock_and_environment_but_not_for_the_handlers_callbacks(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, env: Env) -> None:
    (tmp_path / "guard_trusted_sdk.py").write_text(
        "import os, platform, socket, time, uuid\n"
        "def bookkeeping():\n"
        "    return time.monotonic(), os.environ.get('HOME'), uuid.uuid4(), platform.system(), platform.machine()\n"
        "def calls_back(hook):\n    return hook()\n"
        "def connects(address):\n    socket.create_connection(address, timeout=1).close()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import guard_trusted_sdk  # type: ignore[import-not-found]

    with pytest.raises(ForbiddenCall):
        with guarded(agent="a", offset=1):
            guard_trusted_sdk.bookkeeping()  # not trusted yet
    monkeypatch.setattr(guard, "TRUSTED_LIBRARIES", guard.TRUSTED_LIBRARIES)  # restored below
    trust_library("guard_trusted_sdk")
    try:
        with guarded(agent="a", offset=1):
            guard_trusted_sdk.bookkeeping()
        with pytest.raises(ForbiddenCall, match=r"time\.time\(\)"):
            with guarded(agent="a", offset=1):
                guard_trusted_sdk.calls_back(lambda: clock.time())  # the handler's callback is the handler's
        with pytest.raises(ForbiddenCall, match="socket"):
            with guarded(agent="a", offset=1):
                guard_trusted_sdk.connects(env.tcp)  # never the network
    finally:
        guard.TRUSTED_LIBRARIES.discard("guard_trusted_sdk")
