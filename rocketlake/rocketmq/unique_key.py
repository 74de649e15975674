"""Producer-side unique message ids (property ``UNIQ_KEY``), as ``MessageClientIDSetter`` makes them.

Layout (``common/.../message/MessageClientIDSetter.java#createUniqID``), upper-case hex::

    ip (4 bytes, 16 for IPv6) | pid (int16) | class-loader hash (int32)   <- fixed per process
    | ms since the start of the current month, local time (int32) | counter (int16)

32 hex characters for an IPv4 host. Java has no class loader equivalent here: we use a random
32-bit number drawn once per process, which plays the same role (distinguishing two clients
with the same ip and pid). The fixed part is rebuilt after ``fork()`` (the pid changes, and a
forked Spark worker must not repeat its parent's ids), and the counter is per process.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import os
import random
import socket
import threading
import time

__all__ = ["create_uniq_id", "local_ip_bytes", "month_start_ms"]

_lock = threading.Lock()
_state: tuple[int, str, itertools.count] | None = None  # (pid, fixed hex prefix, counter)
_month: tuple[int, int] = (0, -1)  # (start ms, next start ms) of the month the last id fell in


def local_ip_bytes() -> bytes:
    """This host's address as Java's ``UtilAll.getIP`` would prefer it: a non-loopback IPv4.

    The route to a public address is asked of the kernel (a UDP ``connect`` sends nothing);
    without any route the host name's address is used, and failing that a fake address made
    from the clock, as ``MessageClientIDSetter#createFakeIP`` does.
    """
    for probe in ("8.8.8.8", "10.255.255.255"):
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.connect((probe, 1))
                ip = s.getsockname()[0]
            if not ip.startswith("127.") and ip != "0.0.0.0":
                return socket.inet_aton(ip)
        except OSError:
            continue
    try:
        ip = socket.gethostbyname(socket.gethostname())
        return socket.inet_aton(ip)
    except OSError:
        return (int(time.time() * 1000) & 0xFFFFFFFF).to_bytes(4, "big")


def month_start_ms(now_ms: int) -> tuple[int, int]:
    """Start of ``now_ms``'s month and of the next one, local time (``setStartTime``)."""
    local = _dt.datetime.fromtimestamp(now_ms / 1000).astimezone()
    start = local.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    nxt = start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)
    # Re-localise: the month boundary may lie on the other side of a DST change.
    start = start.replace(tzinfo=None).astimezone()
    nxt = nxt.replace(tzinfo=None).astimezone()
    return int(start.timestamp() * 1000), int(nxt.timestamp() * 1000)


def _fixed_state() -> tuple[str, itertools.count]:
    global _state
    pid = os.getpid()
    state = _state
    if state is None or state[0] != pid:
        with _lock:
            state = _state
            if state is None or state[0] != pid:
                fixed = local_ip_bytes() + (pid & 0xFFFF).to_bytes(2, "big") + random.getrandbits(32).to_bytes(4, "big")
                state = _state = (pid, fixed.hex().upper(), itertools.count(random.getrandbits(16)))
    return state[1], state[2]


def create_uniq_id(now_ms: int | None = None) -> str:
    """A new UNIQ_KEY: unique per process, time-ordered within a month, 32 hex chars for IPv4."""
    global _month
    fixed, counter = _fixed_state()
    current = int(time.time() * 1000) if now_ms is None else now_ms
    start, nxt = _month
    if not start <= current < nxt:
        start, nxt = _month = month_start_ms(current)
    diff = current - start
    if -1_000_000 < diff < 0:  # clock stepped back (NTP); Java clamps the same way
        diff = 0
    # next() on itertools.count is atomic under the GIL, like Java's AtomicInteger.
    return f"{fixed}{diff & 0xFFFFFFFF:08X}{next(counter) & 0xFFFF:04X}"
