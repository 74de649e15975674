"""How far each broker's clock is from this host's: what the ``broker_clock`` check judges.

Windows are a pure function of broker store time, but the planner closes a window by its own clock (close +
``window.grace_seconds``). A broker whose clock is behind by more than the grace stores, after the planner closed
a window, messages with store times inside it: they land in the next window (windows are anchored on the ledger's
recorded ends, so nothing is lost or doubled), but not in the window their store time names, and the table's
windows stop meaning what they say. A clock ahead by as much makes the broker's store times jump back when it is
corrected, with the same effect. Nothing in the data shows either at the time; the broker's clock does.

A broker tells its clock without being asked for it: GET_BROKER_RUNTIME_INFO (``mqadmin brokerStatus``) answers
``bootTimestamp`` (its store's boot, in milliseconds of its clock) and ``runtime``, the time since then in whole
seconds (``[ 0 days, 1 hours, 2 minutes, 3 seconds ]``, ``StoreStatsService#getFormatRuntime``), both in 4.x and
5.x. Their sum is the broker's time when it answered, to the second below; the request's round trip bounds when
that was on this host's clock.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from rocketlake.rocketmq.errors import ProtocolError, RocketMQError

_RUNTIME = re.compile(r"\[\s*([\d,]+) days,\s*([\d,]+) hours,\s*([\d,]+) minutes,\s*([\d,]+) seconds\s*\]")


@dataclass(frozen=True, slots=True)
class BrokerClock:
    """One broker's clock against this host's: ``skew_ms`` > 0 is ahead, with ``error_ms`` either way."""

    broker: str
    skew_ms: int
    error_ms: int

    def off_by_more_than(self, bound_ms: int) -> bool:
        """True when even the most favourable reading of the measure is beyond ``bound_ms``."""
        return abs(self.skew_ms) - self.error_ms > bound_ms

    def describe(self) -> str:
        way = "ahead of" if self.skew_ms > 0 else "behind"
        return f"{self.broker} is {abs(self.skew_ms) / 1000:.1f}s {way} this host (±{self.error_ms / 1000:.1f}s)"


def runtime_seconds(text: str) -> int:
    """The seconds ``runtime`` says (MessageFormat groups thousands with commas: ``1,024 days``)."""
    found = _RUNTIME.fullmatch(text.strip())
    if found is None:
        raise ProtocolError(f"runtime {text!r} is not '[ D days, H hours, M minutes, S seconds ]'")
    days, hours, minutes, seconds = (int(part.replace(",", "")) for part in found.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def clock_of(broker: str, info: dict[str, str], sent_ms: float, answered_ms: float) -> BrokerClock:
    """The clock of ``broker`` from its runtime info, asked at ``sent_ms`` and answered at ``answered_ms`` (this
    host's clock). The broker's time was in [boot + runtime, boot + runtime + 1 s) at some instant of the round
    trip: the skew is the middle of what that allows, the error half its width."""
    try:
        boot_ms = int(info["bootTimestamp"])
        at_ms = boot_ms + runtime_seconds(info["runtime"]) * 1000
    except (KeyError, ValueError) as e:
        raise ProtocolError(f"broker {broker}'s runtime info has no usable bootTimestamp and runtime: {e}") from e
    low, high = at_ms - answered_ms, at_ms + 1000 - sent_ms
    return BrokerClock(broker, round((low + high) / 2), round((high - low) / 2))


def read_clocks(
    client, brokers: Iterable[str], now: Callable[[], float] = time.time
) -> tuple[list[BrokerClock], dict[str, str]]:
    """Each broker's clock (one request to its master, not retried: a retry would only widen the error), and why
    the others could not be read: a broker that does not answer is the other checks' to show, not a clock to judge."""
    clocks, unread = [], {}
    for name in sorted(set(brokers)):
        try:
            sent = now() * 1000
            info = client.broker(name).get_broker_runtime_info()
            clocks.append(clock_of(name, info, sent, now() * 1000))
        except RocketMQError as e:
            unread[name] = str(e)
    return clocks, unread
