"""Is the table on time, and is the group catching up? Plain data, no I/O.

Freshness: every window must be landed once it is closed (end + grace) and a slack has passed for its run;
the check fails when the newest landed window is older than the newest window whose deadline is over.
Lag growth: the group's total lag in messages, observed every minute, normally rises inside a window and
falls when the window's run commits; a lag that rose at every one of the last ``GROWTH_TICKS`` observations
means the runs do not keep up (or do not run), which is worth a warning before freshness fails.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

#: Consecutive rises of the total lag that make a warning.
GROWTH_TICKS = 5


@dataclass(frozen=True)
class Freshness:
    passed: bool
    newest_landed: str | None  # partition key
    newest_due: str | None  # the newest window whose close + grace + slack is over (None: none yet)

    def describe(self) -> str:
        if self.newest_due is None:
            return "no window is due yet"
        if self.passed:
            return f"newest landed window {self.newest_landed}; every window due by now (up to {self.newest_due}) is in"
        landed = self.newest_landed or "none"
        return f"window {self.newest_due} is due (closed + grace + slack) but the newest landed window is {landed}"


def freshness(newest_due: str | None, landed: Sequence[str], start_of: Callable[[str], datetime]) -> Freshness:
    """``newest_due``: the newest window past its deadline; ``landed``: the materialized window keys."""
    newest = max(landed, key=start_of, default=None)
    passed = newest_due is None or (newest is not None and start_of(newest) >= start_of(newest_due))
    return Freshness(passed, newest, newest_due)


def lag_keeps_growing(totals_oldest_first: Sequence[int], ticks: int = GROWTH_TICKS) -> bool:
    """Whether the total lag rose at each of the last ``ticks`` observations."""
    last = list(totals_oldest_first)[-(ticks + 1) :]
    return len(last) == ticks + 1 and all(b > a for a, b in zip(last, last[1:]))
