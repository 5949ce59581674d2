"""Background processes of the dev cluster: start detached, recognise, stop, read their logs.

The dev cluster outlives the command that started it, so a process is known
only by a pid in a file. A pid file can outlive its process (a reboot, a
``kill -9``) and its pid can be reused by an unrelated program, so every check
here asks the kernel both "is it alive?" and "is it still the program we
started?" before trusting the file.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

__all__ = ["cmdline", "cwd", "is_alive", "live_pid", "pids_in", "read_pid", "spawn_detached", "tail", "terminate"]


def spawn_detached(argv: Sequence[str], *, env: Mapping[str, str], log: Path) -> int:
    """Start ``argv`` in a new session with stdout and stderr appended to ``log``; return its pid.

    A new session keeps the process alive when the terminal or the pytest run
    that started it goes away, and keeps Ctrl-C in that terminal from reaching it.
    ``posix_spawn`` rather than ``subprocess.Popen``: there is no Popen object
    to warn "still running" when it is garbage-collected, and no fork of a
    process that may hold librdkafka threads. The child inherits the caller's
    working directory (posix_spawn cannot change it), so ``argv`` must not
    depend on it.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, str(log), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644),
        (os.POSIX_SPAWN_DUP2, 1, 2),
    ]
    return os.posix_spawn(argv[0], list(argv), dict(env), file_actions=actions, setsid=True)


def is_alive(pid: int) -> bool:
    """True if ``pid`` is a running (not zombie) process."""
    try:
        # Reap it first if it is our own child that already exited (the test
        # that ran `up` and `down` in one process); otherwise a zombie would
        # look alive to kill(0). Not our child: ChildProcessError, ignored.
        reaped, _ = os.waitpid(pid, os.WNOHANG)
        if reaped == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, owned by another user (the unprivileged postgres user)
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc: trust kill(0)
    # The state letter follows the parenthesised command name, which may itself contain spaces.
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def cmdline(pid: int) -> list[str]:
    """The argv of ``pid``, or ``[]`` if it cannot be read."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def read_pid(path: Path) -> int | None:
    """The pid on the first line of ``path``, or None if there is no usable one."""
    try:
        first = path.read_text().split("\n", 1)[0].strip()
    except OSError:
        return None
    return int(first) if first.isdigit() and int(first) > 0 else None


def live_pid(path: Path, *, is_ours: Callable[[list[str]], bool], remove_stale: bool = True) -> int | None:
    """The pid in ``path`` if that process is alive and ``is_ours(argv)``; else remove the stale file
    (unless ``remove_stale`` is False: the caller decides when it is safe to)."""
    pid = read_pid(path)
    if pid is not None and is_alive(pid) and is_ours(cmdline(pid)):
        return pid
    if remove_stale:
        path.unlink(missing_ok=True)
    return None


def cwd(pid: int) -> Path | None:
    """The working directory of ``pid``, or None (gone, a zombie, or not ours to look at)."""
    try:
        return Path(os.readlink(f"/proc/{pid}/cwd"))
    except OSError:
        return None


def pids_in(directory: Path) -> list[int]:
    """Live processes whose working directory is ``directory`` (zombies have none)."""
    target = directory.resolve()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and cwd(int(entry.name)) == target and is_alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def terminate(pid: int, *, sig: signal.Signals = signal.SIGTERM, timeout: float = 30.0) -> bool:
    """Send ``sig`` and wait up to ``timeout`` s for ``pid`` to exit; SIGKILL it after that.

    Returns True if it exited on ``sig``, False if it had to be killed.
    """
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not is_alive(pid):
            return True
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return True
    while is_alive(pid):
        time.sleep(0.05)
    return False


def tail(path: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of a log file, or a note that it does not exist."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode(errors="replace")
    except OSError:
        return f"({path} does not exist)"
    return "\n".join(text.splitlines()[-lines:])


def children(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` now (Linux: /proc)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(entry.name))
            except (OSError, ValueError, IndexError):
                continue
    return out


def cpu_seconds(pid: int, *, waited_children: bool = False) -> float:
    """CPU (user + system) ``pid`` has used so far, and with ``waited_children`` that of its children
    it has waited for; 0 if it is gone (Linux: /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    # After the command name: utime, stime, cutime, cstime are the 12th to 15th fields, in clock ticks.
    ticks = int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if waited_children else 0)
    return ticks / os.sysconf("SC_CLK_TCK")
