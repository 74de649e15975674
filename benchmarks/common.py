"""Shared by the benchmarks: a dedicated local cluster, bulk data from the Java producer, RSS sampling."""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rocketlake.local.cluster import LocalCluster
from rocketlake.local.peers import java_command
from rocketlake.local.process import LocalClusterError, stat_fields
from rocketlake.local.spec import BrokerSpec, ClusterSpec


def free_port() -> int:
    """A port on 127.0.0.1 nothing listens on now (a code server's)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def bench_cluster(
    state_dir: Path,
    store_dir: Path | None = None,
    ports=(29876, 29911, 29921),
    broker_properties: dict[str, object] | None = None,
):
    """A name server and two brokers of our own, stopped and wiped afterwards."""
    spec = ClusterSpec(
        state_dir=state_dir,
        store_root=store_dir,
        namesrv_port=ports[0],
        brokers=(BrokerSpec("broker-a", ports[1]), BrokerSpec("broker-b", ports[2])),
        extra_broker_properties=tuple((broker_properties or {}).items()),
    )
    cluster = LocalCluster(spec)
    try:
        cluster.up()
        yield cluster
    finally:
        cluster.down(wipe=True)


def produce_bulk(cluster: LocalCluster, topic: str, count: int, body_size: int = 1024, batch: int = 64) -> float:
    """Send ``count`` messages with the Java producer in batches; returns seconds taken.

    The producer prints a line per message sent; they go to a file and are only counted (held in memory, the
    lines of a 10x backlog took 17 GB), and a count short of ``count`` is an error."""
    args = [
        "--namesrv",
        cluster.spec.namesrv_address,
        "--topic",
        topic,
        "--count",
        str(count),
        "--body-size",
        str(body_size),
        "--batch",
        str(batch),
        "--compress-over",
        str(1 << 20),
    ]
    started = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.run(
            java_command("ProducerPeer", cluster.spec.state_dir, args), stdout=out, stderr=err, timeout=3600
        )
        seconds = time.perf_counter() - started
        out.seek(0)
        sent = sum(1 for line in out if line.startswith(b"{"))
        if proc.returncode != 0 or sent != count:
            err.seek(0)
            raise LocalClusterError(
                f"the Java producer sent {sent:,} of {count:,} messages (exit {proc.returncode}):\n"
                f"{err.read()[-3000:].decode(errors='replace')}"
            )
    return seconds


_TICK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class _Process:
    ppid: int
    cpu_seconds: float  # the process's and its reaped children's (the kernel adds an exited child to its parent)
    rss: int  # resident bytes
    cmdline: str


def _processes() -> dict[int, _Process]:
    """Every process now, from /proc/<pid>/stat (fields of proc(5)) and cmdline."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            fields = stat_fields(pid)
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if fields is None:
            continue
        utime, stime, cutime, cstime = (int(f) for f in fields[11:15])
        found[pid] = _Process(
            int(fields[1]), (utime + stime + cutime + cstime) / _TICK, int(fields[21]) * _PAGE, cmdline
        )
    return found


def _subtrees(processes: dict[int, _Process], roots: Iterable[int], exclude: frozenset[int] = frozenset()) -> list[int]:
    """The pids of ``roots`` and their descendants, leaving out the subtrees of ``exclude``."""
    children: dict[int, list[int]] = {}
    for pid, process in processes.items():
        children.setdefault(process.ppid, []).append(pid)
    found, stack = [], [pid for pid in roots if pid in processes]
    while stack:
        pid = stack.pop()
        if pid in exclude:
            continue
        found.append(pid)
        stack.extend(children.get(pid, []))
    return found


def tree_cpu_seconds(root_pid: int) -> float:
    """CPU seconds of ``root_pid`` and its descendants now, with their reaped children's."""
    processes = _processes()
    return sum(processes[pid].cpu_seconds for pid in _subtrees(processes, [root_pid]))


def _part_of(pid: int, cmdline: str) -> str:
    """Which part of this process tree a process is: this Python process, Spark's JVM, or a Python worker."""
    if pid == os.getpid():
        return "this python (driver)"
    return "spark jvm" if "java" in cmdline.split(" ")[0] else "python workers"


def process_tree_rss_parts(root_pid: int, exclude: frozenset[int] = frozenset()) -> dict[str, int]:
    """Resident bytes of ``root_pid`` and its descendants (JVMs and Python workers included) per part
    (:func:`_part_of`), leaving out the subtrees of ``exclude`` (the broker and name server the benchmark started)."""
    processes = _processes()
    parts: dict[str, int] = {}
    for pid in _subtrees(processes, [root_pid], exclude):
        part = _part_of(pid, processes[pid].cmdline)
        parts[part] = parts.get(part, 0) + processes[pid].rss
    return parts


class PeakRss:
    """Samples the RSS of this process tree every ``interval`` seconds while active."""

    def __init__(self, interval: float = 0.25, root_pid: int | None = None, exclude: frozenset[int] = frozenset()):
        self.interval = interval
        self.root = root_pid or os.getpid()
        self.exclude = exclude
        self.peak = 0  # of the whole tree at one instant
        self.peaks: dict[str, int] = {}  # of each part, each at its own worst instant
        self._stop = threading.Event()

    def _sample(self) -> None:
        parts = process_tree_rss_parts(self.root, self.exclude)
        self.peak = max(self.peak, sum(parts.values()))
        for part, rss in parts.items():
            self.peaks[part] = max(self.peaks.get(part, 0), rss)

    def __enter__(self) -> "PeakRss":
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()


class CpuSeconds:
    """CPU seconds spent while active, per part: the brokers named by pid, and this process tree split into
    Spark's JVM, its Python workers and this Python process. A child that exits is counted through its parent
    (the kernel adds it to the parent's children's time), so every second is counted once."""

    def __init__(self, brokers: dict[str, frozenset[int]]):
        self.brokers = brokers
        self.seconds: dict[str, float] = {}

    def _snapshot(self) -> dict[int, tuple[str, float]]:
        processes = _processes()
        parts: dict[int, tuple[str, float]] = {}
        for name, pids in self.brokers.items():  # a broker's whole tree: start scripts fork the JVM
            parts |= {pid: (name, processes[pid].cpu_seconds) for pid in _subtrees(processes, pids)}
        for pid in _subtrees(processes, [os.getpid()], exclude=frozenset(parts)):
            parts[pid] = (_part_of(pid, processes[pid].cmdline), processes[pid].cpu_seconds)
        return parts

    def __enter__(self) -> "CpuSeconds":
        self._before = self._snapshot()
        return self

    def __exit__(self, *exc) -> None:
        totals: dict[str, float] = {}
        for pid, (part, seconds) in self._snapshot().items():
            before = self._before.get(pid)
            totals[part] = totals.get(part, 0.0) + seconds - (before[1] if before and before[0] == part else 0.0)
        self.seconds = totals


def mib(n: float) -> str:
    return f"{n / 1024 / 1024:,.0f} MiB"


def cluster_pids(cluster: LocalCluster) -> frozenset[int]:
    procs = [cluster.namesrv, *cluster.broker_processes.values()]
    return frozenset(pid for pid in (p.pid() for p in procs) if pid is not None)
