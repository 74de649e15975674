"""A process on a shifted clock: libfaketime (Debian's ``libfaketime``), for brokers whose clock is wrong."""

from __future__ import annotations

from pathlib import Path

FOLDERS = ("/usr/lib/x86_64-linux-gnu/faketime", "/usr/lib/aarch64-linux-gnu/faketime", "/usr/lib/faketime")


def faketime_env(offset: str) -> dict[str, str]:
    """The environment that puts a process on a clock ``offset`` (``-30s``) from the machine's. The JVM's
    monotonic clock is left alone: faking it stalls its timers."""
    for folder in FOLDERS:
        library = Path(folder) / "libfaketimeMT.so.1"
        if library.exists():
            return {
                "LD_PRELOAD": str(library),
                "FAKETIME": offset,
                "FAKETIME_DONT_FAKE_MONOTONIC": "1",
                "FAKETIME_DONT_RESET": "1",
            }
    raise RuntimeError("a broker on a shifted clock needs libfaketime: apt-get install libfaketime")
