"""Start and stop the JVMs of the local cluster, and know them again by pid.

A pid file holds the pid and the process start time (field 22 of /proc/<pid>/stat), so `down`
never signals a process that merely reuses an old pid. JVMs run in their own session: they
outlive the command that started them and a Ctrl-C in that terminal does not reach them.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


class LocalClusterError(RuntimeError):
    """The local cluster could not be started, reached or stopped; the message says why and what to do."""


# Small heaps: the start scripts' 4-8 GB defaults do not fit beside Spark on a laptop.
NAMESRV_HEAP = ["-Xms128m", "-Xmx256m", "-XX:MaxDirectMemorySize=128m", "-XX:+UseSerialGC"]
BROKER_HEAP = ["-Xms256m", "-Xmx1g", "-XX:MaxDirectMemorySize=512m", "-XX:+UseG1GC"]
TOOL_HEAP = ["-Xms32m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]

# RocketMQ's CI runs JDK 8; on 17 these keep its direct-buffer and reflection paths working.
JDK17_FLAGS = [
    "--add-exports",
    "java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens",
    "java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.nio=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.lang=ALL-UNNAMED",
    "--add-exports",
    "java.base/jdk.internal.ref=ALL-UNNAMED",
    "-XX:-OmitStackTraceInFastThrow",
]


def jvm_base_flags(user_home: Path, rocketmq_home: Path, logback: str, *, ipv4_only: bool = True) -> list[str]:
    """Flags every RocketMQ JVM of ours gets.

    ``user.home`` isolates logs, the default store and the name server's kv file under our state
    directory; the logback resource must be named, or a shared classpath picks another role's.
    ``ipv4_only=False`` for a JVM that listens on or connects to IPv6's loopback: preferIPv4Stack makes
    the JVM's sockets IPv4 only (binding ::1 fails with UnsupportedAddressTypeException).
    ``JAVA_OPT_EXT`` in the environment comes last, as RocketMQ's own start scripts append it.
    """
    return [
        f"-Duser.home={user_home}",
        f"-Drocketmq.home.dir={rocketmq_home}",
        f"-Drmq.logback.configurationFile={logback}",
        "-Dtls.server.mode=disabled",
        *(["-Djava.net.preferIPv4Stack=true"] if ipv4_only else []),
        *JDK17_FLAGS,
        *shlex.split(os.environ.get("JAVA_OPT_EXT", "")),
    ]


#: The timer slack of the RocketMQ JVMs the local runtime starts. Their store and request services poll on short
#: timers whether or not there is work (the store's ReputMessageService looks at the commit log every millisecond,
#: the POP buffer every 5 ms, the fast-failure check every 10 ms): two idle 5.3 brokers took 5.5 CPU-s a minute. With
#: 10 ms of slack the kernel may wake such a timer up to 10 ms late and wakes several at once: 3.4 CPU-s a minute. A
#: message is visible to pulls up to 10 ms later than it would be; its store time, which windows go by, is the
#: commit log's, taken when it is written, so no window changes.
ROCKETMQ_TIMER_SLACK_NS = 10_000_000
_PR_SET_TIMERSLACK, _PR_GET_TIMERSLACK = 29, 30


@contextlib.contextmanager
def timer_slack(ns: int | None) -> Iterator[None]:
    """The calling thread's timer slack set to ``ns`` while processes are started in the block: a child inherits
    its parent thread's slack, keeps it across ``exec`` and hands it to every thread it starts (prctl(2)). The
    slack is Linux's; elsewhere, or with ``ns`` None, nothing changes."""
    libc = _libc() if ns is not None else None
    if libc is None:
        yield
        return
    before = libc.prctl(_PR_GET_TIMERSLACK, 0, 0, 0, 0)
    libc.prctl(_PR_SET_TIMERSLACK, ctypes.c_ulong(ns), 0, 0, 0)
    try:
        yield
    finally:
        if before > 0:
            libc.prctl(_PR_SET_TIMERSLACK, ctypes.c_ulong(before), 0, 0, 0)


def _libc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def stat_fields(pid: int) -> list[str] | None:
    """Fields 3 on (state, ppid, ...) of ``/proc/<pid>/stat`` as proc(5) numbers them, or None if it is gone. The
    command name (field 2) may hold spaces and parentheses: the split starts after its closing one."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # gone (FileNotFoundError, ProcessLookupError) or not ours to read
        return None
    return stat[stat.rindex(")") + 2 :].split()


def start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (clock ticks since boot), or None if it is gone."""
    fields = stat_fields(pid)
    return fields[19] if fields is not None and _alive(pid, fields) else None


def _alive(pid: int, fields: list[str]) -> bool:
    """Whether ``pid``, whose ``stat_fields`` are ``fields``, still runs. A zombie alone is dead for our purposes;
    but a JVM's leader thread leaves first and shows as a zombie while its other threads exit, and its files stay
    open until the last of them has: a Spark Connect server judged gone then still listened on its port, and
    starting it again failed with "port in use"."""
    if fields[0] != "Z":
        return True
    try:
        return any(task != str(pid) for task in os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return False


def session_members(sid: int) -> list[int]:
    """The pids of the live processes in session ``sid`` (field 6 of /proc/<pid>/stat): a daemon's children that
    put themselves in process groups of their own are still in its session."""
    return list(_live_where(3, sid))


def group_members(pgid: int) -> dict[int, str]:
    """The live processes of process group ``pgid`` (field 5 of /proc/<pid>/stat) and their start times."""
    return _live_where(2, pgid)


def _live_where(field: int, value: int) -> dict[int, str]:
    """pid -> start time of the live processes whose ``stat_fields`` ``field`` is ``value``."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := stat_fields(int(entry.name))) is not None:
            if int(fields[field]) == value and _alive(int(entry.name), fields):
                found[int(entry.name)] = fields[19]
    return found


def command_line(pid: int) -> str:
    """``pid``'s command line, its arguments joined by spaces ("" if it is gone or not ours to read)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def descendants(pid: int, session: int | None = None) -> dict[int, str]:
    """The live descendants of ``pid`` (children, their children, ...) and their start times, those of ``session``
    only when given: a snapshot that outlives a parent's exit, when its children are handed to init."""
    children: dict[int, list[int]] = {}
    seen: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if (
            entry.name.isdigit()
            and (fields := stat_fields(int(entry.name))) is not None
            and _alive(int(entry.name), fields)
        ):
            children.setdefault(int(fields[1]), []).append(int(entry.name))
            seen[int(entry.name)] = fields
    found: dict[int, str] = {}
    todo = list(children.get(pid, ()))
    while todo:
        child = todo.pop()
        if child not in found:
            found[child] = seen[child][19]
            todo.extend(children.get(child, ()))
    return {child: started for child, started in found.items() if session is None or int(seen[child][3]) == session}


def end_processes(processes: dict[int, str], grace: float) -> list[int]:
    """SIGTERM each of ``processes`` (pid -> start time) still running as the same process, SIGKILL those still
    there ``grace`` seconds later; the pids that had to be killed."""

    def running() -> list[int]:
        return [pid for pid, started in processes.items() if start_time(pid) == started]

    for pid in running():
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while (left := running()) and time.monotonic() < deadline:
        time.sleep(0.1)  # polling the process table, bounded by the grace
    for pid in left:
        _signal(pid, signal.SIGKILL)
    return left


@dataclass(frozen=True)
class ManagedProcess:
    """One JVM of the cluster: its pid file and its console log."""

    role: str
    state_dir: Path

    @property
    def pid_file(self) -> Path:
        return self.state_dir / f"{self.role}.pid"

    @property
    def log_file(self) -> Path:
        return self.state_dir / "logs" / f"{self.role}.out"

    def pid(self) -> int | None:
        """The recorded pid if that very process is still alive, else None."""
        try:
            pid_text, started = self.pid_file.read_text().split()
            pid = int(pid_text)
        except (FileNotFoundError, ValueError):
            return None
        return pid if start_time(pid) == started else None

    def start(
        self, cmd: list[str], env: dict[str, str], cwd: Path | None = None, *, timer_slack_ns: int | None = None
    ) -> int:
        """Start ``cmd`` in a session of its own, its output in ``log_file``; ``timer_slack_ns``: the process's timer
        slack (:func:`timer_slack`)."""
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "wb") as out, timer_slack(timer_slack_ns):
            proc = subprocess.Popen(
                cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=cwd,
                start_new_session=True,
            )
        started = start_time(proc.pid)
        self.pid_file.write_text(f"{proc.pid} {started}\n")
        return proc.pid

    def log_tail(self, lines: int = 25) -> str:
        try:
            text = self.log_file.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log written)"
        return "\n".join(text.strip().splitlines()[-lines:]) or "(log is empty)"

    def stop(self, timeout: float = 30.0) -> bool:
        """SIGTERM, then SIGKILL after ``timeout``; True if a process of ours was running."""
        return stop_all([self], timeout) == [self.role]


def kept_secret(env_var: str, path: Path, length: int = 24) -> str:
    """``$env_var`` if set, else a secret generated once into ``path`` (mode 0600, created exclusively) and read back
    from there afterwards: a local service's password that is never printed."""
    configured = os.environ.get(env_var)
    if configured:
        return configured
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # another process wrote it first: read theirs
        else:
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_urlsafe(length))
    return path.read_text().strip()


def wait_for(ready, deadline: float, processes: list[ManagedProcess], what: str, interval: float = 0.5) -> None:
    """Poll ``ready()`` (a process's own answer: a port, a page, a query) until it is true; fail in one message
    with the log tail when one of ``processes`` exits or ``deadline`` (time.monotonic) passes."""
    while not ready():
        for proc in processes:
            if proc.pid() is None:
                raise LocalClusterError(
                    f"{proc.role} exited while waiting for {what}; its log ({proc.log_file}) "
                    f"ends with:\n{proc.log_tail()}"
                )
        if time.monotonic() > deadline:
            culprit = processes[-1]
            raise LocalClusterError(
                f"timed out waiting for {what}; {culprit.role}'s log ({culprit.log_file}) ends "
                f"with:\n{culprit.log_tail()}"
            )
        time.sleep(interval)  # polling: none of these servers notifies readiness


def stop_all(processes: list[ManagedProcess], timeout: float = 30.0, sig: int = signal.SIGTERM) -> list[str]:
    """Stop several processes at once (``sig``, SIGTERM by default, to all, then wait, then SIGKILL what is left).

    Returns the roles that were running. Brokers flush and unmap their stores on SIGTERM, which
    takes seconds each: signalling them together keeps `down` as quick as the slowest one.
    """
    running = {}
    for proc in processes:
        pid = proc.pid()
        if pid is None:
            proc.pid_file.unlink(missing_ok=True)
        else:
            running[proc] = (pid, start_time(pid))
            _signal(pid, sig)
    deadline = time.monotonic() + timeout
    alive = dict(running)
    while alive:
        for proc, (pid, started) in list(alive.items()):
            _reap(pid)
            if start_time(pid) != started:
                del alive[proc]
            elif time.monotonic() > deadline:
                _signal(pid, signal.SIGKILL)
        time.sleep(0.1)  # polling processes we signalled; there is no portable wait on a non-child
    for proc in running:
        proc.pid_file.unlink(missing_ok=True)
    return [proc.role for proc in processes if proc in running]


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _reap(pid: int) -> None:
    # When this process started the JVM (tests do), it must reap it or it stays a zombie.
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    # HA binds every interface, so check the wildcard too.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return True
    return False


def accepts_connections(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False
