"""One way to call each row of the guard's table (swarmlog.guard.COVERAGE), keyed by the row's case.

A refused row's case calls the row's function directly, as a handler would, so that the guard
names that row; it must work when called outside a handler (tests/unit/test_guard_table.py
checks both). Everything a case needs that a handler could not make for itself (a socket with
data waiting, an open file, a thread not yet started) is prepared outside the handler in
:class:`Env`.
"""

from __future__ import annotations

import _queue
import _random
import _socket
import _thread
import asyncio
import concurrent.futures
import contextlib
import ctypes
import dataclasses
import datetime
import enum
import filecmp
import fileinput
import gc
import getpass
import glob
import grp
import hashlib
import http.client
import importlib
import importlib.metadata
import inspect
import io
import linecache
import locale
import logging
import mimetypes
import multiprocessing
import os
import pathlib
import platform
import pty
import pwd
import queue
import random
import resource
import secrets
import select
import shutil
import signal
import socket
import sqlite3
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import typing
import urllib.request
import uuid
import warnings
import zoneinfo
from collections import namedtuple
from collections.abc import Callable, Iterator
from typing import Any

Case = Callable[["Env"], object]


def _noop() -> None:
    pass


class Env:
    """What the cases use, made outside any handler. ``close()`` undoes it."""

    def __init__(self, tmp: pathlib.Path, tcp: tuple[str, int], udp: tuple[str, int], http_url: str) -> None:
        self._cleanups: list[Callable[[], object]] = []
        self.tmp = tmp
        self.tcp, self.udp, self.http_url = tcp, udp, http_url
        self.file = tmp / "existing.txt"
        self.file.write_text("hello\nworld\n")
        self.other = tmp / "other.txt"
        self.other.write_text("hello\nworld\n")
        self.dir = tmp / "dir"
        self.dir.mkdir()
        (self.dir / "inside.txt").write_text("x")
        self.link = tmp / "link"
        self.link.symlink_to(self.file)
        self.new = tmp / "new"  # does not exist: cases that create something create it here
        self.pid, self.pgrp = os.getpid(), os.getpgrp()
        self.cwd = os.getcwd()
        self.cwd_fd = self.keep(os.open(self.cwd, os.O_RDONLY), os.close)
        self.umask = os.umask(0o022)
        os.umask(self.umask)
        self.nofile = resource.getrlimit(resource.RLIMIT_NOFILE)
        self.usr2 = signal.getsignal(signal.SIGUSR2)
        self.fd = self.keep(os.open(self.file, os.O_RDONLY), os.close)
        self.fileio = self.opened(open(self.file, "rb", buffering=0))
        self.buffered = self.opened(open(self.file, "rb"))
        self.random_access = self.opened(open(self.file, "r+b"))
        self.text = self.opened(open(self.file))
        r, w = os.pipe()
        os.write(w, b"piped")
        self.rwpair = self.opened(io.BufferedRWPair(io.FileIO(r, "r"), io.FileIO(w, "w")))
        a, b = socket.socketpair()
        self.pair = (self.opened(a), self.opened(b))
        a.sendall(b"0123456789")
        self.bound = self.opened(socket.socket())
        self.bound.bind(("127.0.0.1", 0))
        self.server = self.opened(socket.socket())
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(4)
        self.client = self.opened(socket.create_connection(self.server.getsockname()))
        self.udp_socket = self.opened(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # no CA certificates: nothing is verified here
        self.tls = context.wrap_bio(ssl.MemoryBIO(), ssl.MemoryBIO(), server_hostname="example.com")
        self.epoll = self.opened(select.epoll())
        self.thread = threading.Thread(target=_noop)  # started by the case, joined on close
        self.keep(self.thread, lambda t: t.is_alive() and t.join(5))
        self.finished = threading.Thread(target=_noop)
        self.finished.start()
        self.finished.join()
        self.event = threading.Event()
        self.condition = threading.Condition()
        self.semaphore = threading.Semaphore(1)
        self.barrier = threading.Barrier(1)
        self.queue: queue.Queue[int] = queue.Queue()
        self.queue.put(1)
        self.simple: _queue.SimpleQueue[int] = _queue.SimpleQueue()
        self.simple.put(1)
        self.lock, self.rlock = threading.Lock(), threading.RLock()
        self.threads = self.keep(concurrent.futures.ThreadPoolExecutor(1), lambda p: p.shutdown())
        self.processes = self.keep(concurrent.futures.ProcessPoolExecutor(1), lambda p: p.shutdown())
        self.loop = self.keep(asyncio.new_event_loop(), lambda loop: loop.close())
        (tmp / "guard_reloaded.py").write_text("VALUE = 1\n")
        sys.path.insert(0, str(tmp))
        self.keep(str(tmp), sys.path.remove)
        self.reloaded = importlib.import_module("guard_reloaded")
        self.keep("guard_reloaded", lambda name: sys.modules.pop(name, None))
        self.sqlite = tmp / "db.sqlite"

    def keep(self, value: Any, undo: Callable[[Any], object]) -> Any:
        self._cleanups.append(lambda: undo(value))
        return value

    def opened(self, value: Any) -> Any:
        return self.keep(value, lambda v: v.close())

    def later(self, undo: Callable[[], object]) -> None:
        self._cleanups.append(undo)

    def close(self) -> None:
        for undo in reversed(self._cleanups):
            with contextlib.suppress(Exception):
                undo()


def _reaped(pid: int) -> None:
    os.waitpid(pid, 0)


def _fork(env: Env) -> None:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    env.later(lambda: _reaped(pid))


def _forkpty(env: Env) -> None:
    pid, fd = os.forkpty()
    if pid == 0:
        os._exit(0)
    env.later(lambda: (os.close(fd), _reaped(pid)))


def _pty_fork(env: Env) -> None:
    pid, fd = pty.fork()
    if pid == 0:
        os._exit(0)
    env.later(lambda: (os.close(fd), _reaped(pid)))


def _process(env: Env) -> None:
    env.process.start()
    env.later(lambda: env.process.join(10))


def _pool(env: Env) -> None:
    pool = multiprocessing.Pool(1)
    env.later(lambda: (pool.close(), pool.join()))


def _manager(env: Env) -> None:
    manager = multiprocessing.Manager()
    env.later(manager.shutdown)


async def _coroutine() -> int:
    return 1


@contextlib.contextmanager
def _coro() -> Iterator[Any]:
    """A coroutine that is closed however its loop fares (a refused loop never awaits it)."""
    coro = _coroutine()
    try:
        yield coro
    finally:
        coro.close()


def _asyncio_run(env: Env) -> None:
    with _coro() as coro:
        asyncio.run(coro)


def _runner_run(env: Env) -> None:
    with _coro() as coro:
        env.runner.run(coro)


def _run_until_complete(env: Env) -> None:
    with _coro() as coro:
        env.loop.run_until_complete(coro)


def _quietly(call: Callable[[], object], *categories: type[Warning]) -> Case:
    def case(env: Env) -> object:
        with warnings.catch_warnings():
            for category in categories:
                warnings.simplefilter("ignore", category)
            return call()
    return case


def _run_forever(env: Env) -> None:
    env.loop.call_soon(env.loop.stop)
    env.loop.run_forever()


def _get_event_loop(env: Env) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            asyncio.get_event_loop()
        except RuntimeError:  # the main thread's loop was set to None (by an asyncio.run)
            pass


def _in_thread(env: Env) -> None:
    done = threading.Event()
    _thread.start_new_thread(done.set, ())
    done.wait(5)


def _timer(env: Env) -> None:
    threading.Timer(0, _noop)


def _mkstemp(env: Env) -> None:
    fd, path = tempfile.mkstemp()
    os.close(fd)
    os.unlink(path)


def _mkdtemp(env: Env) -> None:
    os.rmdir(tempfile.mkdtemp())


def _named_temporary(env: Env) -> None:
    tempfile.NamedTemporaryFile().close()


def _temporary_directory(env: Env) -> None:
    tempfile.TemporaryDirectory().cleanup()


def _fileinput(env: Env) -> None:
    with fileinput.input(files=[str(env.file)]) as lines:
        list(lines)


def _sqlite(env: Env) -> None:
    sqlite3.connect(env.sqlite).close()


def _popen(env: Env) -> None:
    subprocess.Popen(["true"]).wait()


def _posix_spawn(env: Env) -> None:
    os.waitpid(os.posix_spawn("/bin/true", ["true"], {}), 0)


def _posix_spawnp(env: Env) -> None:
    os.waitpid(os.posix_spawnp("true", ["true"], {"PATH": "/usr/bin:/bin"}), 0)


def _sendfile(env: Env) -> None:
    env.pair[0].sendfile(env.buffered)


def _bind(env: Env) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))


def _listen(env: Env) -> None:
    with socket.socket() as s:
        s.listen()


def _accept(env: Env) -> None:
    conn, _ = env.server.accept()
    conn.close()


def _raw_accept(env: Env) -> None:
    fd, _ = env.server._accept()
    os.close(fd)


def _connect(env: Env) -> None:
    with socket.socket() as s:
        s.connect(env.tcp)


def _connect_ex(env: Env) -> None:
    with socket.socket() as s:
        s.connect_ex(env.tcp)


def _condition_wait(env: Env) -> None:
    with env.condition:
        env.condition.wait(0)


def _condition_wait_for(env: Env) -> None:
    with env.condition:
        env.condition.wait_for(lambda: False, 0)


def _semaphore(env: Env) -> None:
    if env.semaphore.acquire(timeout=0):
        env.semaphore.release()


def _lock_timeout(env: Env) -> None:
    if env.lock.acquire(timeout=0):
        env.lock.release()


def _rlock_timeout(env: Env) -> None:
    if env.rlock.acquire(timeout=0):
        env.rlock.release()


def _signal(env: Env) -> None:
    signal.signal(signal.SIGUSR2, env.usr2)


def _wakeup(env: Env) -> None:
    previous = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(previous)


def _setprofile(env: Env) -> None:
    sys.setprofile(sys.getprofile())


def _test_tool() -> int:
    """A sys.monitoring tool id of the tests' own (3.12+): the optimizer's, which CPython leaves free."""
    mon = sys.monitoring  # type: ignore[attr-defined]
    if mon.get_tool(5) is None:
        mon.use_tool_id(5, "swarmlog guard tests")
    return 5


def _umask(env: Env) -> None:
    os.umask(env.umask)


def _putenv(env: Env) -> None:
    os.putenv("SWARMLOG_GUARD_TEST", "1")
    env.later(lambda: os.unsetenv("SWARMLOG_GUARD_TEST"))


def _environ_set(env: Env) -> None:
    os.environ["SWARMLOG_GUARD_TEST"] = "1"
    env.later(lambda: os.environ.pop("SWARMLOG_GUARD_TEST", None))


def _environ_del(env: Env) -> None:
    try:
        del os.environ["SWARMLOG_GUARD_ABSENT"]
    except KeyError:
        pass


def _mkdir(env: Env) -> None:
    os.mkdir(env.new)


def _rename_file(env: Env) -> None:
    env.other.rename(env.new)


def _copytree(env: Env) -> None:
    shutil.copytree(env.dir, env.new)


def _tls_handshake(env: Env) -> None:
    env.tls._sslobj.do_handshake()


def _tls_read(env: Env) -> None:
    env.tls._sslobj.read(1)


def _tls_write(env: Env) -> None:
    env.tls._sslobj.write(b"x")


# Refused rows: each case calls the row's own function, so the guard names that row.
REFUSED: dict[str, Case] = {
    "time.time()": lambda env: time.time(),
    "time.time_ns()": lambda env: time.time_ns(),
    "time.monotonic()": lambda env: time.monotonic(),
    "time.monotonic_ns()": lambda env: time.monotonic_ns(),
    "time.perf_counter()": lambda env: time.perf_counter(),
    "time.perf_counter_ns()": lambda env: time.perf_counter_ns(),
    "time.process_time()": lambda env: time.process_time(),
    "time.process_time_ns()": lambda env: time.process_time_ns(),
    "time.thread_time()": lambda env: time.thread_time(),
    "time.thread_time_ns()": lambda env: time.thread_time_ns(),
    "time.clock_gettime()": lambda env: time.clock_gettime(time.CLOCK_REALTIME),
    "time.clock_gettime_ns()": lambda env: time.clock_gettime_ns(time.CLOCK_REALTIME),
    "os.times()": lambda env: os.times(),
    "datetime.datetime.now()": lambda env: datetime.datetime.now(datetime.UTC),
    "datetime.datetime.utcnow()": lambda env: datetime.datetime.utcnow(),
    "datetime.datetime.today()": lambda env: datetime.datetime.today(),
    "datetime.date.today()": lambda env: datetime.date.today(),
    "time.localtime()": lambda env: time.localtime(),
    "time.gmtime()": lambda env: time.gmtime(None),
    "time.ctime()": lambda env: time.ctime(),
    "time.asctime()": lambda env: time.asctime(),
    "time.strftime(format)": lambda env: time.strftime("%H:%M"),
    "time.sleep()": lambda env: time.sleep(0),
    "threading.Event.wait(timeout)": lambda env: env.event.wait(0),
    "threading.Condition.wait(timeout)": _condition_wait,
    "threading.Condition.wait_for(predicate, timeout)": _condition_wait_for,
    "threading.Semaphore.acquire(timeout=t)": _semaphore,
    "threading.Barrier.wait(timeout)": lambda env: env.barrier.wait(0),
    "threading.Thread.join(timeout)": lambda env: env.finished.join(0),
    "queue.Queue.get(timeout=t)": lambda env: env.queue.get(timeout=0),
    "queue.Queue.put(item, timeout=t)": lambda env: env.queue.put(2, timeout=0),
    "queue.SimpleQueue.get(timeout=t)": lambda env: env.simple.get(timeout=0),
    "threading.Lock().acquire(timeout=t)": _lock_timeout,
    "threading.RLock().acquire(timeout=t)": _rlock_timeout,
    "select.select()": lambda env: select.select([], [], [], 0),
    "time.localtime(secs)": lambda env: time.localtime(0),
    "time.ctime(secs)": lambda env: time.ctime(0),
    "time.mktime()": lambda env: time.mktime((2024, 1, 1, 0, 0, 0, 0, 1, -1)),
    "time.tzset()": lambda env: time.tzset(),
    "datetime.datetime.fromtimestamp(ts)": lambda env: datetime.datetime.fromtimestamp(0),
    "datetime.date.fromtimestamp()": lambda env: datetime.date.fromtimestamp(0),
    "datetime.datetime.astimezone() / of a naive datetime":
        lambda env: datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC).astimezone(),
    "datetime.datetime.timestamp() of a naive datetime": lambda env: datetime.datetime(2024, 1, 1).timestamp(),
    "random.random()": lambda env: random.random(),
    "random.getrandbits()": lambda env: random.getrandbits(8),
    "random.randbytes()": lambda env: random.randbytes(4),
    "random.randint()": lambda env: random.randint(1, 6),
    "random.randrange()": lambda env: random.randrange(10),
    "random.choice()": lambda env: random.choice("abc"),
    "random.choices()": lambda env: random.choices("abc", k=2),
    "random.shuffle()": lambda env: random.shuffle([1, 2, 3]),
    "random.sample()": lambda env: random.sample("abc", 2),
    "random.uniform()": lambda env: random.uniform(0, 1),
    "random.triangular()": lambda env: random.triangular(),
    "random.gauss()": lambda env: random.gauss(0, 1),
    "random.normalvariate()": lambda env: random.normalvariate(0, 1),
    "random.lognormvariate()": lambda env: random.lognormvariate(0, 1),
    "random.expovariate()": lambda env: random.expovariate(1),
    "random.vonmisesvariate()": lambda env: random.vonmisesvariate(0, 1),
    "random.gammavariate()": lambda env: random.gammavariate(2, 1),
    "random.betavariate()": lambda env: random.betavariate(2, 3),
    "random.paretovariate()": lambda env: random.paretovariate(1),
    "random.weibullvariate()": lambda env: random.weibullvariate(1, 1),
    "random.binomialvariate()": lambda env: random.binomialvariate(3, 0.5),  # type: ignore[attr-defined]
    "random.getstate()": lambda env: random.getstate(),
    "random.setstate()": lambda env: random.setstate(env.random_state),
    "random.seed()": lambda env: random.seed(1234),
    "random.Random()": lambda env: random.Random(),
    "random.Random.seed()": lambda env: random.Random(7).seed(),
    "_random.Random.seed(None)": lambda env: _random.Random.seed(random.Random(1), None),
    "os.urandom()": lambda env: os.urandom(8),
    "os.getrandom()": lambda env: os.getrandom(8),
    "ssl.RAND_bytes()": lambda env: ssl.RAND_bytes(8),
    "secrets.token_bytes()": lambda env: secrets.token_bytes(),
    "secrets.token_hex()": lambda env: secrets.token_hex(),
    "secrets.token_urlsafe()": lambda env: secrets.token_urlsafe(),
    "secrets.randbelow()": lambda env: secrets.randbelow(10),
    "secrets.randbits()": lambda env: secrets.randbits(8),
    "secrets.choice()": lambda env: secrets.choice("abc"),
    "random.SystemRandom.random()": lambda env: env.system_random.random(),
    "random.SystemRandom.getrandbits()": lambda env: env.system_random.getrandbits(8),
    "random.SystemRandom.randbytes()": lambda env: env.system_random.randbytes(4),
    "uuid.uuid1()": lambda env: uuid.uuid1(),
    "uuid.uuid4()": lambda env: uuid.uuid4(),
    "uuid._generate_time_safe()": lambda env: uuid._generate_time_safe(),  # type: ignore[attr-defined]
    "os.environ.__getitem__()": lambda env: os.environ["PATH"],
    "os.environ.get()": lambda env: os.environ.get("HOME"),
    "os.environ.__iter__()": lambda env: [key for key in os.environ],
    "os.environ.__len__()": lambda env: len(os.environ),
    "os.environ.__contains__()": lambda env: "HOME" in os.environ,
    "os.environ.__repr__()": lambda env: repr(os.environ),
    "os.environ.copy()": lambda env: os.environ.copy(),
    "os.environ.keys()": lambda env: os.environ.keys(),
    "os.environ.items()": lambda env: os.environ.items(),
    "os.environ.values()": lambda env: os.environ.values(),
    "os.environ.setdefault()": lambda env: os.environ.setdefault("PATH", "/bin"),
    "os.environb.__getitem__()": lambda env: os.environb[b"PATH"],
    "os.environ.__setitem__()": _environ_set,
    "os.environ.__delitem__()": _environ_del,
    "os.environ.pop()": lambda env: os.environ.pop("SWARMLOG_GUARD_ABSENT", None),
    "os.environ.update()": lambda env: os.environ.update(),
    "os.environ.clear()": lambda env: os.environ.clear(),
    "os.putenv()": _putenv,
    "os.unsetenv()": lambda env: os.unsetenv("SWARMLOG_GUARD_ABSENT"),
    "os.getenv()": lambda env: os.getenv("HOME"),
    "os.getenvb()": lambda env: os.getenvb(b"HOME"),
    "os.get_exec_path()": lambda env: os.get_exec_path(),
    "os.path.expandvars()": lambda env: os.path.expandvars("$HOME"),
    "os.path.expanduser()": lambda env: os.path.expanduser("~"),
    "pathlib.Path.home()": lambda env: pathlib.Path.home(),
    "pathlib.Path.expanduser()": lambda env: pathlib.Path("~").expanduser(),
    "getpass.getuser()": lambda env: getpass.getuser(),
    "os.getlogin()": lambda env: os.getlogin(),
    "pwd.getpwuid()": lambda env: pwd.getpwuid(0),
    "pwd.getpwnam()": lambda env: pwd.getpwnam("root"),
    "pwd.getpwall()": lambda env: pwd.getpwall(),
    "grp.getgrgid()": lambda env: grp.getgrgid(0),
    "grp.getgrnam()": lambda env: grp.getgrnam("root"),
    "grp.getgrall()": lambda env: grp.getgrall(),
    "locale.setlocale()": lambda env: locale.setlocale(locale.LC_ALL),
    "locale.getlocale()": lambda env: locale.getlocale(),
    "locale.getdefaultlocale()": _quietly(locale.getdefaultlocale, DeprecationWarning),
    "locale.getpreferredencoding()": lambda env: locale.getpreferredencoding(False),
    "locale.getencoding()": lambda env: locale.getencoding(),
    "locale.localeconv()": lambda env: locale.localeconv(),
    "locale.nl_langinfo()": lambda env: locale.nl_langinfo(locale.CODESET),
    "locale.strxfrm()": lambda env: locale.strxfrm("a"),
    "locale.strcoll()": lambda env: locale.strcoll("a", "b"),
    "mimetypes.guess_type()": lambda env: mimetypes.guess_type("a.json"),
    "mimetypes.guess_extension()": lambda env: mimetypes.guess_extension("application/json"),
    "mimetypes.init()": lambda env: mimetypes.init(),
    "os.getpid()": lambda env: os.getpid(),
    "os.getppid()": lambda env: os.getppid(),
    "os.getuid()": lambda env: os.getuid(),
    "os.geteuid()": lambda env: os.geteuid(),
    "os.getgid()": lambda env: os.getgid(),
    "os.getegid()": lambda env: os.getegid(),
    "os.getgroups()": lambda env: os.getgroups(),
    "os.getresuid()": lambda env: os.getresuid(),
    "os.getresgid()": lambda env: os.getresgid(),
    "os.getpgrp()": lambda env: os.getpgrp(),
    "os.getpgid()": lambda env: os.getpgid(0),
    "os.getsid()": lambda env: os.getsid(0),
    "os.getpriority()": lambda env: os.getpriority(os.PRIO_PROCESS, 0),
    "os.getcwd()": lambda env: os.getcwd(),
    "os.getcwdb()": lambda env: os.getcwdb(),
    "pathlib.Path.cwd()": lambda env: pathlib.Path.cwd(),
    "os.path.abspath(relative path)": lambda env: os.path.abspath("relative"),
    "pathlib.Path.absolute() of a relative path": lambda env: pathlib.Path("relative").absolute(),
    "os.umask()": _umask,
    "os.nice()": lambda env: os.nice(0),
    "os.chdir()": lambda env: os.chdir(env.cwd),
    "os.fchdir()": lambda env: os.fchdir(env.cwd_fd),
    "os.register_at_fork()": lambda env: os.register_at_fork(after_in_child=_noop),
    "os.kill()": lambda env: os.kill(env.pid, 0),
    "os.killpg()": lambda env: os.killpg(env.pgrp, 0),
    "os.wait()": lambda env: os.wait(),
    "os.waitpid()": lambda env: os.waitpid(-1, os.WNOHANG),
    "os.waitid()": lambda env: os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG),
    "os.wait3()": lambda env: os.wait3(os.WNOHANG),
    "os.wait4()": lambda env: os.wait4(-1, os.WNOHANG),
    "resource.getrusage()": lambda env: resource.getrusage(resource.RUSAGE_SELF),
    "resource.getrlimit()": lambda env: resource.getrlimit(resource.RLIMIT_NOFILE),
    "resource.setrlimit()": lambda env: resource.setrlimit(resource.RLIMIT_NOFILE, env.nofile),
    "resource.prlimit()": lambda env: resource.prlimit(0, resource.RLIMIT_NOFILE),
    "signal.signal()": _signal,
    "signal.getsignal()": lambda env: signal.getsignal(signal.SIGINT),
    "signal.alarm()": lambda env: signal.alarm(0),
    "signal.setitimer()": lambda env: signal.setitimer(signal.ITIMER_VIRTUAL, 0),
    "signal.getitimer()": lambda env: signal.getitimer(signal.ITIMER_REAL),
    "signal.pause()": lambda env: signal.pause(),
    "signal.sigwait()": lambda env: signal.sigwait({signal.SIGUSR2}),
    "signal.sigtimedwait()": lambda env: signal.sigtimedwait({signal.SIGUSR2}, 0),
    "signal.sigwaitinfo()": lambda env: signal.sigwaitinfo({signal.SIGUSR2}),
    "signal.sigpending()": lambda env: signal.sigpending(),
    "signal.pthread_kill()": lambda env: signal.pthread_kill(threading.get_ident(), 0),
    "signal.pthread_sigmask()": lambda env: signal.pthread_sigmask(signal.SIG_BLOCK, []),
    "signal.raise_signal()": lambda env: signal.raise_signal(signal.SIGUSR2),
    "signal.set_wakeup_fd()": _wakeup,
    "signal.siginterrupt()": lambda env: signal.siginterrupt(signal.SIGUSR2, False),
    "threading.current_thread()": lambda env: threading.current_thread(),
    "threading.currentThread()": _quietly(threading.currentThread, DeprecationWarning),
    "threading.enumerate()": lambda env: threading.enumerate(),
    "threading.active_count()": lambda env: threading.active_count(),
    "threading.activeCount()": _quietly(threading.activeCount, DeprecationWarning),
    "threading.get_native_id()": lambda env: threading.get_native_id(),
    "multiprocessing.current_process()": lambda env: multiprocessing.current_process(),
    "multiprocessing.parent_process()": lambda env: multiprocessing.parent_process(),
    "multiprocessing.active_children()": lambda env: multiprocessing.active_children(),
    "sys._current_frames()": lambda env: sys._current_frames(),
    "sys._current_exceptions()": lambda env: sys._current_exceptions(),
    "sys.getrefcount()": lambda env: sys.getrefcount(env),
    "sys.getallocatedblocks()": lambda env: sys.getallocatedblocks(),
    "gc.collect()": lambda env: gc.collect(0),
    "gc.get_objects()": lambda env: gc.get_objects(0),
    "gc.get_count()": lambda env: gc.get_count(),
    "gc.get_stats()": lambda env: gc.get_stats(),
    "gc.get_referrers()": lambda env: gc.get_referrers(env.file),
    "traceback.extract_stack()": lambda env: traceback.extract_stack(),
    "traceback.format_stack()": lambda env: traceback.format_stack(),
    "traceback.print_stack()": lambda env: traceback.print_stack(file=io.StringIO()),
    "traceback.walk_stack()": lambda env: list(traceback.walk_stack(None)),
    "inspect.stack()": lambda env: inspect.stack(0),
    "inspect.getouterframes()": lambda env: inspect.getouterframes(sys._getframe(), 0),
    "sys.setprofile()": _setprofile,
    "sys.monitoring.set_events()": lambda env: sys.monitoring.set_events(_test_tool(), 0),  # type: ignore[attr-defined]
    "sys.monitoring.register_callback()": lambda env: sys.monitoring.register_callback(  # type: ignore[attr-defined]
        _test_tool(), sys.monitoring.events.CALL, None),  # type: ignore[attr-defined]
    "sys.monitoring.free_tool_id()": lambda env: sys.monitoring.free_tool_id(_test_tool()),  # type: ignore[attr-defined]
    "logging.makeLogRecord()": lambda env: logging.makeLogRecord({}).created,
    "importlib.reload()": lambda env: importlib.reload(env.reloaded),
    "os.cpu_count()": lambda env: os.cpu_count(),
    "multiprocessing.cpu_count()": lambda env: multiprocessing.cpu_count(),
    "os.sched_getaffinity()": lambda env: os.sched_getaffinity(0),
    "os.getloadavg()": lambda env: os.getloadavg(),
    "os.uname()": lambda env: os.uname(),
    "os.sysconf()": lambda env: os.sysconf("SC_PAGE_SIZE"),
    "os.confstr()": lambda env: os.confstr("CS_PATH"),
    "resource.getpagesize()": lambda env: resource.getpagesize(),
    "time.get_clock_info()": lambda env: time.get_clock_info("monotonic"),
    "time.clock_getres()": lambda env: time.clock_getres(time.CLOCK_MONOTONIC),
    "socket.gethostname()": lambda env: socket.gethostname(),
    "socket.if_nameindex()": lambda env: socket.if_nameindex(),
    "socket.if_nametoindex()": lambda env: socket.if_nametoindex("lo"),
    "socket.if_indextoname()": lambda env: socket.if_indextoname(1),
    "uuid.getnode()": lambda env: uuid.getnode(),
    "platform.node()": lambda env: platform.node(),
    "platform.system()": lambda env: platform.system(),
    "platform.release()": lambda env: platform.release(),
    "platform.version()": lambda env: platform.version(),
    "platform.machine()": lambda env: platform.machine(),
    "platform.processor()": lambda env: platform.processor(),
    "platform.uname()": lambda env: platform.uname(),
    "platform.platform()": lambda env: platform.platform(),
    "platform.architecture()": lambda env: platform.architecture(),
    "platform.libc_ver()": lambda env: platform.libc_ver(),
    "platform.freedesktop_os_release()": lambda env: platform.freedesktop_os_release(),
    "open()": lambda env: open(env.file).close(),
    "io.open_code()": lambda env: io.open_code(str(env.file)).close(),
    "os.open()": lambda env: os.close(os.open(env.file, os.O_RDONLY)),
    "os.listdir()": lambda env: os.listdir(env.dir),
    "os.scandir()": lambda env: list(os.scandir(env.dir)),
    "os.stat()": lambda env: os.stat(env.file),
    "os.lstat()": lambda env: os.lstat(env.link),
    "os.access()": lambda env: os.access(env.file, os.R_OK),
    "os.readlink()": lambda env: os.readlink(env.link),
    "os.statvfs()": lambda env: os.statvfs(env.dir),
    "os.walk()": lambda env: list(os.walk(env.dir)),
    "os.fwalk()": lambda env: list(os.fwalk(env.dir)),
    "os.path.exists()": lambda env: os.path.exists(env.file),
    "os.path.lexists()": lambda env: os.path.lexists(env.link),
    "os.path.isfile()": lambda env: os.path.isfile(env.file),
    "os.path.isdir()": lambda env: os.path.isdir(env.dir),
    "os.path.islink()": lambda env: os.path.islink(env.link),
    "os.path.ismount()": lambda env: os.path.ismount(env.dir),
    "os.path.getsize()": lambda env: os.path.getsize(env.file),
    "os.path.getmtime()": lambda env: os.path.getmtime(env.file),
    "os.path.getatime()": lambda env: os.path.getatime(env.file),
    "os.path.getctime()": lambda env: os.path.getctime(env.file),
    "os.path.samefile()": lambda env: os.path.samefile(env.file, env.link),
    "os.path.realpath()": lambda env: os.path.realpath(env.link),
    "os.mkdir()": _mkdir,
    "os.makedirs()": lambda env: os.makedirs(env.new / "a" / "b"),
    "os.rmdir()": lambda env: os.rmdir(env.empty_dir),
    "os.removedirs()": lambda env: os.removedirs(env.empty_dir),
    "os.remove()": lambda env: os.remove(env.other),
    "os.unlink()": lambda env: os.unlink(env.other),
    "os.rename()": lambda env: os.rename(env.other, env.new),
    "os.renames()": lambda env: os.renames(env.other, env.new / "x"),
    "os.replace()": lambda env: os.replace(env.other, env.new),
    "os.link()": lambda env: os.link(env.file, env.new),
    "os.symlink()": lambda env: os.symlink(env.file, env.new),
    "os.chmod()": lambda env: os.chmod(env.file, 0o644),
    "os.chown()": lambda env: os.chown(env.file, -1, -1),
    "os.lchown()": lambda env: os.lchown(env.link, -1, -1),
    "os.utime()": lambda env: os.utime(env.file),
    "os.truncate()": lambda env: os.truncate(env.other, 0),
    "os.mkfifo()": lambda env: os.mkfifo(env.new),
    "os.mknod()": lambda env: os.mknod(env.new),
    "pathlib.Path.open()": lambda env: env.file.open().close(),
    "pathlib.Path.read_text()": lambda env: env.file.read_text(),
    "pathlib.Path.write_text()": lambda env: env.new.write_text("x"),
    "pathlib.Path.read_bytes()": lambda env: env.file.read_bytes(),
    "pathlib.Path.write_bytes()": lambda env: env.new.write_bytes(b"x"),
    "pathlib.Path.exists()": lambda env: env.file.exists(),
    "pathlib.Path.is_file()": lambda env: env.file.is_file(),
    "pathlib.Path.is_dir()": lambda env: env.dir.is_dir(),
    "pathlib.Path.is_symlink()": lambda env: env.link.is_symlink(),
    "pathlib.Path.stat()": lambda env: env.file.stat(),
    "pathlib.Path.lstat()": lambda env: env.link.lstat(),
    "pathlib.Path.iterdir()": lambda env: list(env.dir.iterdir()),
    "pathlib.Path.glob()": lambda env: list(env.dir.glob("*")),
    "pathlib.Path.rglob()": lambda env: list(env.dir.rglob("*")),
    "pathlib.Path.resolve()": lambda env: env.link.resolve(),
    "pathlib.Path.samefile()": lambda env: env.file.samefile(env.link),
    "pathlib.Path.owner()": lambda env: env.file.owner(),
    "pathlib.Path.group()": lambda env: env.file.group(),
    "pathlib.Path.readlink()": lambda env: env.link.readlink(),
    "pathlib.Path.touch()": lambda env: env.new.touch(),
    "pathlib.Path.mkdir()": lambda env: env.new.mkdir(),
    "pathlib.Path.unlink()": lambda env: env.other.unlink(),
    "pathlib.Path.rmdir()": lambda env: env.empty_dir.rmdir(),
    "pathlib.Path.rename()": _rename_file,
    "pathlib.Path.replace()": lambda env: env.other.replace(env.new),
    "pathlib.Path.chmod()": lambda env: env.file.chmod(0o644),
    "pathlib.Path.symlink_to()": lambda env: env.new.symlink_to(env.file),
    "pathlib.Path.hardlink_to()": lambda env: env.new.hardlink_to(env.file),
    "glob.glob()": lambda env: glob.glob(str(env.dir / "*")),
    "glob.iglob()": lambda env: list(glob.iglob(str(env.dir / "*"))),
    "shutil.copyfile()": lambda env: shutil.copyfile(env.file, env.new),
    "shutil.copy()": lambda env: shutil.copy(env.file, env.new),
    "shutil.copy2()": lambda env: shutil.copy2(env.file, env.new),
    "shutil.copytree()": _copytree,
    "shutil.move()": lambda env: shutil.move(env.other, env.new),
    "shutil.rmtree()": lambda env: shutil.rmtree(env.dir),
    "shutil.chown()": lambda env: shutil.chown(env.file, user=0),
    "shutil.which()": lambda env: shutil.which("true"),
    "shutil.disk_usage()": lambda env: shutil.disk_usage(env.dir),
    "tempfile.mkstemp()": _mkstemp,
    "tempfile.mkdtemp()": _mkdtemp,
    "tempfile.mktemp()": lambda env: tempfile.mktemp(),
    "tempfile.TemporaryFile()": lambda env: tempfile.TemporaryFile().close(),
    "tempfile.NamedTemporaryFile()": _named_temporary,
    "tempfile.TemporaryDirectory()": _temporary_directory,
    "tempfile.gettempdir()": lambda env: tempfile.gettempdir(),
    "tempfile.gettempdirb()": lambda env: tempfile.gettempdirb(),
    "fileinput.input()": _fileinput,
    "filecmp.cmp()": lambda env: filecmp.cmp(env.file, env.other, shallow=False),
    "sqlite3.connect(path)": _sqlite,
    "importlib.metadata.version()": lambda env: importlib.metadata.version("pytest"),
    "importlib.metadata.distribution()": lambda env: importlib.metadata.distribution("pytest"),
    "ctypes.CDLL()": lambda env: ctypes.CDLL(None),
    "linecache.getline(a file that is not source code)": lambda env: linecache.getline(str(env.file), 1),
    "linecache.getlines(a file that is not source code)": lambda env: linecache.getlines(str(env.file)),
    "linecache.updatecache(a file that is not source code)": lambda env: linecache.updatecache(str(env.file)),
    "os.read()": lambda env: os.read(env.fd, 1),
    "os.pread()": lambda env: os.pread(env.fd, 1, 0),
    "os.readv()": lambda env: os.readv(env.fd, [bytearray(1)]),
    "os.fstat()": lambda env: os.fstat(env.fd),
    "os.fstatvfs()": lambda env: os.fstatvfs(env.fd),
    "_io.FileIO.read()": lambda env: env.fileio.read(1),
    "_io.FileIO.readall()": lambda env: env.fileio.readall(),
    "_io.FileIO.readinto()": lambda env: env.fileio.readinto(bytearray(1)),
    "_io._IOBase.readline()": lambda env: env.fileio.readline(),
    "_io._IOBase.readlines()": lambda env: env.text.readlines(),
    "_io.BufferedReader.read()": lambda env: env.buffered.read(1),
    "_io.BufferedReader.read1()": lambda env: env.buffered.read1(1),
    "_io.BufferedReader.readinto()": lambda env: env.buffered.readinto(bytearray(1)),
    "_io.BufferedReader.readline()": lambda env: env.buffered.readline(),
    "_io.BufferedReader.peek()": lambda env: env.buffered.peek(1),
    "_io.BufferedRandom.read()": lambda env: env.random_access.read(1),
    "_io.BufferedRandom.readline()": lambda env: env.random_access.readline(),
    "_io.BufferedRWPair.read()": lambda env: env.rwpair.read(1),
    "_io.TextIOWrapper.read()": lambda env: env.text.read(1),
    "_io.TextIOWrapper.readline()": lambda env: env.text.readline(),
    "input()": lambda env: input(),
    "os.isatty()": lambda env: os.isatty(env.fd),
    "os.ttyname()": lambda env: os.ttyname(env.fd),
    "os.ctermid()": lambda env: os.ctermid(),
    "os.get_terminal_size()": lambda env: os.get_terminal_size(env.fd),
    "shutil.get_terminal_size()": lambda env: shutil.get_terminal_size(),
    "_io.TextIOWrapper.isatty()": lambda env: env.text.isatty(),
    "_io.FileIO.isatty()": lambda env: env.fileio.isatty(),
    "getpass.getpass()": _quietly(lambda: getpass.getpass(stream=io.StringIO()), getpass.GetPassWarning),
    "socket.socket.connect()": _connect,
    "socket.socket.connect_ex()": _connect_ex,
    "socket.socket.bind()": _bind,
    "socket.socket.listen()": _listen,
    "socket.socket.accept()": _accept,
    "_socket.socket._accept()": _raw_accept,
    "socket.socket.recv()": lambda env: env.pair[1].recv(1),
    "socket.socket.recvfrom()": lambda env: env.pair[1].recvfrom(1),
    "socket.socket.recv_into()": lambda env: env.pair[1].recv_into(bytearray(1)),
    "socket.socket.recvfrom_into()": lambda env: env.pair[1].recvfrom_into(bytearray(1)),
    "socket.socket.recvmsg()": lambda env: env.pair[1].recvmsg(1),
    "socket.socket.recvmsg_into()": lambda env: env.pair[1].recvmsg_into([bytearray(1)]),
    "socket.socket.send()": lambda env: env.pair[0].send(b"x"),
    "socket.socket.sendall()": lambda env: env.pair[0].sendall(b"x"),
    "socket.socket.sendto()": lambda env: env.udp_socket.sendto(b"x", env.udp),
    "socket.socket.sendmsg()": lambda env: env.pair[0].sendmsg([b"x"]),
    "socket.socket.sendfile()": _sendfile,
    "socket.socket.getsockname()": lambda env: env.bound.getsockname(),
    "socket.socket.getpeername()": lambda env: env.client.getpeername(),
    "socket.create_connection()": lambda env: socket.create_connection(env.tcp, timeout=2).close(),
    "socket.create_server()": lambda env: socket.create_server(("127.0.0.1", 0)).close(),
    "socket.socketpair()": lambda env: [s.close() for s in socket.socketpair()],
    "socket.fromfd()": lambda env: socket.fromfd(env.bound.fileno(), socket.AF_INET, socket.SOCK_STREAM).close(),
    "socket.getaddrinfo()": lambda env: socket.getaddrinfo("localhost", 80),
    "_socket.getaddrinfo()": lambda env: _socket.getaddrinfo("localhost", 80),
    "socket.gethostbyname()": lambda env: socket.gethostbyname("localhost"),
    "socket.gethostbyname_ex()": lambda env: socket.gethostbyname_ex("localhost"),
    "socket.gethostbyaddr()": lambda env: socket.gethostbyaddr("127.0.0.1"),
    "socket.getnameinfo()": lambda env: socket.getnameinfo(("127.0.0.1", 80), 0),
    "socket.getfqdn()": lambda env: socket.getfqdn("localhost"),
    "socket.getservbyname()": lambda env: socket.getservbyname("http"),
    "socket.getservbyport()": lambda env: socket.getservbyport(80),
    "socket.getprotobyname()": lambda env: socket.getprotobyname("tcp"),
    "_ssl._SSLSocket.do_handshake()": _tls_handshake,
    "_ssl._SSLSocket.read()": _tls_read,
    "_ssl._SSLSocket.write()": _tls_write,
    "select.poll()": lambda env: select.poll(),
    "select.epoll.poll()": lambda env: env.epoll.poll(0),
    "urllib.request.urlopen()": lambda env: urllib.request.urlopen(env.http_url, timeout=5).close(),
    "http.client.HTTPConnection.connect()":
        lambda env: http.client.HTTPConnection(*env.tcp, timeout=2).connect(),
    "threading.Thread()": lambda env: threading.Thread(target=_noop),
    "threading.Timer()": _timer,
    "threading.Thread.start()": lambda env: env.thread.start(),
    "_thread.start_new_thread()": _in_thread,
    "concurrent.futures.ThreadPoolExecutor.submit()": lambda env: env.threads.submit(int).result(5),
    "concurrent.futures.Executor.map()": lambda env: list(env.threads.map(int, [1])),
    "concurrent.futures.ProcessPoolExecutor.submit()": lambda env: env.processes.submit(int).result(30),
    "multiprocessing.Process.start()": _process,
    "multiprocessing.Pool()": _pool,
    "multiprocessing.Manager()": _manager,
    "os.fork()": _fork,
    "os.forkpty()": _forkpty,
    "os.execv()": lambda env: os.execv("/bin/true", ["true"]),
    "os.execve()": lambda env: os.execve("/bin/true", ["true"], {}),
    "os.spawnv()": lambda env: os.spawnv(os.P_WAIT, "/bin/true", ["true"]),
    "os.popen()": lambda env: os.popen("true").close(),
    "os.system()": lambda env: os.system("true"),
    "os.posix_spawn()": _posix_spawn,
    "os.posix_spawnp()": _posix_spawnp,
    "subprocess.Popen()": _popen,
    "subprocess.run()": lambda env: subprocess.run(["true"], check=True),
    "subprocess.call()": lambda env: subprocess.call(["true"]),
    "subprocess.check_call()": lambda env: subprocess.check_call(["true"]),
    "subprocess.check_output()": lambda env: subprocess.check_output(["true"]),
    "subprocess.getoutput()": lambda env: subprocess.getoutput("true"),
    "subprocess.getstatusoutput()": lambda env: subprocess.getstatusoutput("true"),
    "pty.spawn()": lambda env: pty.spawn(["true"]),
    "pty.fork()": _pty_fork,
    "asyncio.run()": _asyncio_run,
    "asyncio.new_event_loop()": lambda env: asyncio.new_event_loop().close(),
    "asyncio.get_event_loop()": _get_event_loop,
    "asyncio.Runner.run()": _runner_run,
    "asyncio.base_events.BaseEventLoop.run_until_complete()": _run_until_complete,
    "asyncio.base_events.BaseEventLoop.run_forever()": _run_forever,
}

OUTSIDE_SKIPPED: dict[str, str] = {
    "os.execv()": "would replace the test process",
    "os.execve()": "would replace the test process",
    "os.wait()": "would wait for any child the test process has",
    "signal.pause()": "blocks until a signal arrives",
    "signal.sigwait()": "blocks until a signal arrives",
    "signal.sigwaitinfo()": "blocks until a signal arrives",
    "pty.spawn()": "copies the test process's terminal to the child until it exits",
    "input()": "reads the test process's stdin",
    "os.environ.clear()": "would empty the test process's environment",
}
"""Refused cases not run outside a handler, and why: the live test still shows each is refused."""


@dataclasses.dataclass
class _Point:
    x: int
    y: int


def _file_logger(env: Env) -> None:
    log = logging.getLogger("swarmlog.test.guard.file")
    handler = logging.FileHandler(env.tmp / "handler.log", delay=True)  # opened by the first record
    handler.setFormatter(logging.Formatter("%(asctime)s %(process)d %(threadName)s %(processName)s %(message)s"))
    log.addHandler(handler)
    env.later(lambda: (log.removeHandler(handler), handler.close()))


def _logging_to_a_file(env: Env) -> None:
    logging.getLogger("swarmlog.test.guard.file").warning("inside a handler: %s", "logged")


def _logging_an_exception(env: Env) -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("swarmlog.test.guard").exception("it failed")


def _format_exc(env: Env) -> str:
    try:
        raise ValueError("boom")
    except ValueError:
        text = traceback.format_exc()
    assert 'raise ValueError("boom")' in text  # the source line was read
    return text


def _warn(env: Env) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.warn("careful", UserWarning, stacklevel=1)
    assert caught and caught[0].message.args == ("careful",)
    assert linecache.getline(caught[0].filename, caught[0].lineno).strip().startswith("warnings.warn")


def _first_import(env: Env) -> None:
    (env.tmp / "guard_lazy_module.py").write_text("import os\nHOME = os.environ.get('HOME')\nVALUE = 3\n")
    env.later(lambda: sys.modules.pop("guard_lazy_module", None))
    importlib.invalidate_caches()
    env.lazy_module_ready = True


def _import_it(env: Env) -> None:
    assert importlib.import_module("guard_lazy_module").VALUE == 3


def _frames(env: Env) -> None:
    namedtuple("P", "x y")
    enum.Enum("Color", "red green")
    typing.TypeVar("T")
    repr(_Point(1, 2))  # dataclasses' recursion guard keys on the thread id


def _in_memory_io(env: Env) -> None:
    assert io.TextIOWrapper(io.BytesIO(b"a\nb\n")).readlines() == ["a\n", "b\n"]
    assert io.StringIO("a\nb\n").readlines() == ["a\n", "b\n"]
    assert io.BufferedReader(io.BytesIO(b"xy")).read(1) == b"x"


def _stepped_coroutine(env: Env) -> None:
    coro = _coroutine()
    try:
        coro.send(None)
    except StopIteration as done:
        assert done.value == 1


def _ctx_run(env: Env) -> None:
    async def twice(x: int) -> int:
        await asyncio.sleep(5)  # the step's virtual clock: no wall time passes
        return 2 * x

    assert env.ctx.run(twice(21)) == 42


def _get_event_loop_in_a_step(env: Env) -> None:
    async def loops() -> bool:
        return asyncio.get_event_loop() is asyncio.get_running_loop()

    assert env.ctx.run(loops())


def _to_thread_in_a_step(env: Env) -> None:
    async def inline() -> int:
        return await asyncio.to_thread(threading.get_ident)

    assert env.ctx.run(inline()) == threading.get_ident()  # the handler's own thread


def _locks(env: Env) -> None:
    lock, rlock = threading.Lock(), threading.RLock()
    assert lock.acquire() and rlock.acquire()
    lock.release()
    rlock.release()
    with lock, rlock:
        pass


def _queue_nowait(env: Env) -> None:
    q: queue.Queue[int] = queue.Queue()
    q.put(1)
    q.put(2)
    assert q.get_nowait() == 1 and q.get() == 2


def _zoneinfo(env: Env) -> None:
    paris = zoneinfo.ZoneInfo.no_cache("Europe/Paris")  # reads the database every time
    assert datetime.datetime(2024, 7, 1, 12, tzinfo=datetime.UTC).astimezone(paris).hour == 14


# Allowed rows: each must run, unrefused, inside a live handler.
ALLOWED: dict[str, Case] = {
    "time.gmtime(secs)": lambda env: time.gmtime(0),
    "time.asctime(t)": lambda env: time.asctime(time.gmtime(0)),
    "time.strftime(format, t)": lambda env: time.strftime("%Y-%m-%d", time.gmtime(86400)),
    "time.strptime(string, format)":
        lambda env: (time.strptime("2024-01-02", "%Y-%m-%d"), datetime.datetime.strptime("2024", "%Y")),
    "datetime arithmetic": lambda env: datetime.datetime(2024, 1, 1) + datetime.timedelta(days=1),
    "datetime.datetime.fromisoformat(s)": lambda env: datetime.datetime.fromisoformat("2024-01-02T03:04:05"),
    "threading.Lock().acquire()": _locks,
    "queue.Queue.get_nowait()": _queue_nowait,
    "datetime.datetime.fromtimestamp(ts, tz)":
        lambda env: (datetime.datetime.fromtimestamp(0, tz=datetime.UTC),
                     datetime.datetime.fromtimestamp(0, datetime.UTC)),
    "datetime.datetime.timestamp() of an aware datetime":
        lambda env: datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC).timestamp(),
    "datetime.datetime.astimezone(tz) of an aware datetime":
        lambda env: datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC).astimezone(
            datetime.timezone(datetime.timedelta(hours=2))),
    "zoneinfo.ZoneInfo(key)": _zoneinfo,
    "random.Random(seed)": lambda env: random.Random(7).random(),
    "random.Random(seed).seed(seed)": lambda env: random.Random(7).seed(8),
    "uuid.uuid5(namespace, name)": lambda env: uuid.uuid5(uuid.NAMESPACE_DNS, "x"),
    "uuid.uuid3(namespace, name)": lambda env: uuid.uuid3(uuid.NAMESPACE_DNS, "x"),
    "hashlib.sha256(data)": lambda env: hashlib.sha256(b"x").hexdigest(),
    "threading.get_ident()": lambda env: threading.get_ident(),
    "sys._getframe(depth)": _frames,
    "logging.Logger.info(...) and its siblings": _logging_to_a_file,
    "logging.Logger.exception(...)": _logging_an_exception,
    "traceback.format_exc()": _format_exc,
    "linecache.getline(source of a loaded module)": lambda env: linecache.getline(logging.__file__, 1),
    "warnings.warn(...)": _warn,
    "importlib.import_module(name)": _import_it,
    "sys.getsizeof(obj)": lambda env: sys.getsizeof(env),
    "platform.python_version()": lambda env: platform.python_version(),
    "os.path.join / basename / splitext / normpath":
        lambda env: os.path.normpath(os.path.join("a", "b", os.path.basename("/x/y.txt"), os.path.splitext("f.py")[0])),
    "os.path.relpath(path, start) of absolute paths": lambda env: os.path.relpath("/a/b/c", "/a"),
    "pathlib.PurePath operations":
        lambda env: (pathlib.Path("/a") / "b.txt").with_suffix(".md").relative_to("/a").as_posix(),
    "sqlite3.connect(\":memory:\")": lambda env: sqlite3.connect(":memory:").close(),
    "io.StringIO / io.BytesIO and text over them": _in_memory_io,
    "print(...)": lambda env: print("printing is fine"),
    "a coroutine stepped by the handler": _stepped_coroutine,
    "ctx.run(coro) (and an async def handler)": _ctx_run,
    "asyncio.get_event_loop() inside an async step": _get_event_loop_in_a_step,
    "asyncio.to_thread(fn) inside an async step": _to_thread_in_a_step,
}

PREPARE_ALLOWED: dict[str, Case] = {"importlib.import_module(name)": _first_import,
                                    "logging.Logger.info(...) and its siblings": _file_logger}
"""What an allowed case needs made outside the handler first."""


def prepared(env: Env) -> Iterator[Env]:
    env.random_state = random.getstate()
    env.system_random = random.SystemRandom()
    env.empty_dir = env.tmp / "empty"
    env.empty_dir.mkdir()
    env.runner = env.keep(asyncio.Runner(), lambda r: r.close())
    env.process = multiprocessing.Process(target=_noop)
    for prepare in PREPARE_ALLOWED.values():
        prepare(env)
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)  # raise_signal(SIGUSR2) must not kill the test process
    env.later(lambda: signal.signal(signal.SIGUSR2, env.usr2))
    yield env

