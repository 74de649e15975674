"""The CPU a test costs: its process's and every process it started (brokers, Spark, Dagster's), from /proc.

pytest's durations say how long a test held its worker; on two cores what `make test` can save is as much its CPU,
which a test waiting for a window to close does not use and a test starting JVMs does. Each test is charged the CPU
its worker's process tree used while it ran: the process itself, the live processes below it (their own time and
that of their children they waited for), and the children this process waited for. A session's long-lived JVMs are
charged to the tests they served (or idled through); a process that leaves the tree during a test (a daemonized
server whose parent exited) takes its CPU so far out of that test's figure, and is not charged after.
"""

from __future__ import annotations

import os

from rocketlake.local.process import stat_fields

_TICK = os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(root: int | None = None) -> float:
    """CPU seconds (user + system) of ``root`` (this process), of its reaped children, and of every live process
    below it with their reaped children."""
    root = root or os.getpid()
    parent_of: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = stat_fields(int(entry))
        if fields is None:
            continue
        pid = int(entry)
        # fields[1]: ppid; [11] utime, [12] stime, [13] cutime, [14] cstime (proc(5), counted from state)
        parent_of[pid] = int(fields[1])
        ticks[pid] = sum(int(v) for v in fields[11:15])
    below: set[int] = set()
    for pid in parent_of:
        chain, p = [], pid
        while p in parent_of and p not in below and p != root:
            chain.append(p)
            p = parent_of[p]
        if p == root or p in below:
            below.update(chain)
    return (ticks.get(root, 0) + sum(ticks[p] for p in below)) / _TICK
