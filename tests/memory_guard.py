"""A pytest process that grows past a bound tells where, instead of being killed by the kernel without a word.

Two full runs lost a pytest-xdist worker to the kernel's OOM killer (16 GB resident) in the crash tests, which an
isolated run of the same file never reproduced (290 MB at most). A killed worker leaves no traceback; this guard
samples the process's resident memory and, past ``ROCKETLAKE_TEST_RSS_LIMIT_MB`` (4096 by default), prints every
thread's stack and the test running, then raises ``MemoryError`` in the main thread so that test fails with a
traceback of its own. A main thread stuck in one native call that keeps growing is ended at twice the limit
(exit 70), after the stacks are printed: a failed worker is better than a machine swapping every other test.
"""

from __future__ import annotations

import ctypes
import faulthandler
import os
import sys
import threading
import time

LIMIT_MB = int(os.environ.get("ROCKETLAKE_TEST_RSS_LIMIT_MB", "4096"))
_PAGE = os.sysconf("SC_PAGE_SIZE")
current_test = ["(between tests)"]
_out = [sys.__stderr__]


def resident_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE / 2**20


def _report(rss: float, what: str) -> None:
    err = _out[0]
    err.write(
        f"\n[memory guard] pid {os.getpid()} holds {rss:.0f} MB (limit {LIMIT_MB} MB) in "
        f"{current_test[0]}; {what}. Every thread's stack:\n"
    )
    err.flush()
    faulthandler.dump_traceback(file=err, all_threads=True)
    err.flush()


def _watch(main_ident: int) -> None:
    raised = False
    while True:
        time.sleep(0.2)
        rss = resident_mb()
        if rss > 2 * LIMIT_MB:
            _report(rss, "ending the process")
            os._exit(70)
        if rss > LIMIT_MB and not raised:
            _report(rss, "raising MemoryError in the main thread")
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(main_ident), ctypes.py_object(MemoryError))
            raised = True
        elif rss < LIMIT_MB / 2:
            raised = False


def start(stderr_fd: int | None = None) -> None:
    """Watch this process; ``stderr_fd`` is where the report goes (the terminal's or CI log's own descriptor, which
    pytest's capture keeps aside: what a test prints is lost with a process that ends)."""
    if stderr_fd is not None:
        _out[0] = os.fdopen(os.dup(stderr_fd), "w")
    threading.Thread(target=_watch, args=(threading.main_thread().ident,), name="memory-guard", daemon=True).start()
