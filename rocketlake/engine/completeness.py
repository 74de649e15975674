"""Which (window, queue) slices nobody landed: what a rebalance sensor asks a member to land again.

A window is complete when every queue of the subscription has a range for it in some ledger entry of
the group, whichever member landed it (an empty range counts: that queue had nothing in the window).
A queue can lack one because the member that owned it died before its run, because the assignment
moved between two members' runs, or because the queue did not exist when the window was landed (the
topic was expanded since: the new queue's range in an old window is empty, and landing it makes the
window complete). Reads the newest commits of the table with delta-rs: no Spark in a sensor.
"""

from __future__ import annotations

from collections.abc import Iterable

from rocketlake.engine.ledger import PENDING, UNBALANCED, LedgerEntry, with_verdicts
from rocketlake.rocketmq.message_queue import MessageQueue


def landed_queues(entries: Iterable[LedgerEntry], group: str) -> dict[str, set[MessageQueue]]:
    """Partition key -> the queues some entry of ``group`` has a range for (carried entries included), read newest
    first. An entry whose landing did not balance, or whose verdict never came (its run died between its Delta
    commit and its verdict), landed nothing anyone may rely on: its queues are not counted."""
    flat: list[LedgerEntry] = []
    for entry in reversed(list(entries)):  # oldest first: a later verdict decides an earlier entry
        if entry.consumer_group == group:
            flat += [*entry.carried, entry]
    landed: dict[str, set[MessageQueue]] = {}
    for e in with_verdicts(flat):
        if e.verdict in (PENDING, UNBALANCED):
            continue
        for w in e.windows:
            landed.setdefault(w.partition_key, set()).update(r.queue for r in w.ranges)
    return landed


def missing_slices(
    landed: dict[str, set[MessageQueue]], window_keys: Iterable[str], queues: Iterable[MessageQueue]
) -> dict[str, list[MessageQueue]]:
    """Window key -> the queues among ``queues`` no entry landed for it (windows with none missing left out)."""
    queues = sorted(set(queues))
    missing = {}
    for key in window_keys:
        lacking = [q for q in queues if q not in landed.get(key, set())]
        if lacking:
            missing[key] = lacking
    return missing
