"""A queue whose tail the broker replaced: a replica promoted without the old master's newest messages.

In 5.x controller mode (or when a slave is promoted by hand), the new master's copy of a queue may end at an offset
T below the end E the table already landed: messages [T, E) existed only on the dead master. The new master then
stores new messages at the reused offsets T, T+1, ... Left alone, the ledger would repair the group's offset to E
(past the broker's end, or over new messages), and the next windows would start at E: the new messages at [T, E)
would be skipped without a word.

Windows are a pure function of store time, and the ledger records each window's boundaries per queue
(``LedgerEntry.bounds``: time -> offset). The newest one, ``(t_last, b_last)``, is where the next window starts.
A queue whose broker no longer agrees with it had its tail replaced: its max offset is below the landed end, or the
message just below ``b_last`` now has a store time at or after ``t_last`` (it is a new message). The queue is then
re-anchored at ``b' = b(q, t_last)``, the first offset stored at or after ``t_last``: what was landed stays in the
table, the lost messages cannot be landed (they are gone), and every new message lands in the next windows.

A broker that holds none of what the table landed (a store recreated, another cluster) has no tail to re-anchor:
``LedgerAheadOfBroker``. Pure functions over the ``StoreTimeReader`` and ledger entries; the caller commits.

Only a queue whose offsets its master answers is examined. While a master is down, a slave may answer for it (a 5.x
slave acting as master, routed as brokerId 0): it holds what it has copied so far, below what the table landed, and
the master comes back with the rest. Taking that for a replaced tail would move the group back over messages the
table has, and land them again.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, replace

from rocketlake.engine.ledger import LedgerEntry, Suspension
from rocketlake.engine.windows import StoreTimeReader, first_offset_at_or_after
from rocketlake.rocketmq.message_queue import MessageQueue, OffsetRange


class LedgerAheadOfBroker(RuntimeError):
    """The table says messages were landed that the broker does not hold, and nothing it landed is there any more:
    another cluster, or a store recreated."""


#: What to do about ``LedgerAheadOfBroker``; never to delete the table: what it landed is real and may be all that
#: is left of those messages. An offsets reset would not help: the ledger would move the group past the broker again.
KEEP_THE_TABLE = (
    "Nothing was read and no offset moved. Point the ingestion back at the cluster the table was landed from; or, to "
    "land this broker's messages, give the ingestion a new `table` (this table stays as it is, with what it landed)."
)


class SlaveBehind(RuntimeError):
    """A slave answering for a master that is down holds less than the table landed: the rest is on the master, and
    the queues wait for it."""


class MasterChanged(RuntimeError):
    """A broker's master changed while the run read its queues for a replaced tail: who answered is not known."""


def check_same_masters(before: dict[str, str], now: dict[str, str], queues: Iterable[MessageQueue]) -> None:
    """Refuse to re-anchor ``queues`` unless the masters that answered before the reads (broker name -> address)
    still answer: a master that died meanwhile may have left a slave answering some of the reads."""
    changed = sorted({q.broker_name for q in queues if now.get(q.broker_name) != before.get(q.broker_name)})
    if changed:
        listed = "; ".join(f"{name}: {before.get(name)} before, {now.get(name) or 'none'} now" for name in changed)
        raise MasterChanged(
            f"the master of broker(s) {', '.join(changed)} changed while this run read their queues "
            f"({listed}). Nothing was written and no offset moved: the next run reads them again."
        )


def ahead_of_broker(group: str, listed: str, why: str) -> LedgerAheadOfBroker:
    """The refusal, in one form wherever it is found: ``listed`` names each queue, ``why`` the likely cause."""
    return LedgerAheadOfBroker(
        f"the table's ledger says group {group} landed messages the broker does not have "
        f"({listed}). {why} {KEEP_THE_TABLE}"
    )


@dataclass(frozen=True)
class ReplacedTail:
    """A queue the broker holds only up to ``anchor`` of what the table landed up to ``landed_end``."""

    queue: MessageQueue
    landed_end: int  # E: how far the ledger says the table landed the queue
    broker_end: int  # the broker's max offset now
    anchor: int  # b': the first offset stored at or after ``boundary_ms``; the old messages end there
    boundary_ms: int  # t_last: the end of the newest window landed on the queue
    committed: int | None  # the group's offset on the queue when the run found it

    def describe(self, group: str) -> str:
        moved = (
            f", group {group}'s offset goes back from {self.committed} to {self.anchor}"
            if self.committed is not None and self.committed > self.anchor
            else ""
        )
        return (
            f"queue {self.queue.key} lost its newest messages in a failover: the table landed it up to offset "
            f"{self.landed_end}, but the master serving it now holds the old messages only below offset "
            f"{self.anchor} (its max offset is {self.broker_end}), so messages [{self.anchor}, {self.landed_end}), "
            f"landed from the old master, stay in the table{moved}, and new messages from offset {self.anchor} "
            "land in the next windows"
        )


def recorded_bounds(entries: Iterable[LedgerEntry]) -> dict[MessageQueue, dict[int, int]]:
    """Per queue, the boundaries the entries recorded (time ms -> offset): their ``bounds``, and each window's end (an
    entry written before ``bounds`` existed still says where its windows ended)."""
    points: dict[MessageQueue, dict[int, int]] = {}
    for entry in entries:
        for w in entry.windows:
            for r in w.ranges:
                points.setdefault(r.queue, {})[w.end_ms] = r.end
        for mq, pairs in entry.bounds.items():
            points.setdefault(mq, {}).update(pairs)
    return points


def landed_ends(entries: Iterable[LedgerEntry]) -> dict[MessageQueue, int]:
    """Per queue, the highest offset the entries say the group landed or passed."""
    ends: dict[MessageQueue, int] = {}
    for e in entries:
        spans = [(mq, end) for mq, _, end in e.spans()] + [(mq, end) for mq, s in e.landed.items() for _, end in s]
        for mq, end in spans:
            ends[mq] = max(end, ends.get(mq, end))
    return ends


def replaced_tails(
    times: StoreTimeReader,
    entries: list[LedgerEntry],
    queues: Iterable[MessageQueue],
    committed: dict[MessageQueue, int | None],
    cluster: str | None,
    group: str,
    refuse: Collection[MessageQueue],
) -> list[ReplacedTail]:
    """The queues among ``queues`` whose tail the broker replaced, each with where to re-anchor it.

    One store-time read per queue the ledger knows (the message below its newest boundary), more only for a queue
    found replaced. Raises ``LedgerAheadOfBroker`` for a queue of ``refuse`` (this member's) that holds none of what
    the table landed; another member's such queue is left out (its owner's run is refused, this one goes on).
    """
    found = []
    bounds, ends = recorded_bounds(entries), landed_ends(entries)
    for mq in queues:
        points = bounds.get(mq)
        if not points:
            continue
        end = max(ends.get(mq, 0), *points.values())
        lo, hi = times.min_offset(mq), times.max_offset(mq)
        t_last = max(points)
        b_last = points[t_last]
        changed = lo < b_last <= hi and times.store_time(mq, b_last - 1) >= t_last
        if hi >= end and not changed:
            continue
        # Never above the old boundary: the messages below it that the broker still holds were landed already.
        anchor = min(first_offset_at_or_after(times, mq, t_last, lo, hi), b_last)
        try:
            check_same_store(times, entries, mq, points, anchor, (lo, hi, end), cluster, group)
        except LedgerAheadOfBroker:
            if mq in refuse:
                raise
            continue
        found.append(ReplacedTail(mq, end, hi, anchor, t_last, committed.get(mq)))
    return found


def check_same_store(
    times: StoreTimeReader,
    entries: list[LedgerEntry],
    mq: MessageQueue,
    points: dict[int, int],
    anchor: int,
    offsets: tuple[int, int, int],
    cluster: str | None,
    group: str,
) -> None:
    """Refuse to re-anchor on a store that is not the one the table was landed from: another cluster's name server,
    or no recorded boundary the broker still holds below the anchor (a message just below it stored before it). A
    truncated replica keeps every boundary of its older messages; a recreated store keeps none."""
    lo, hi, end = offsets
    listed = f"{mq.key}: landed up to {end}, the broker holds up to {hi}"
    landed_from = next((e.namesrv for e in reversed(entries) if e.namesrv is not None), None)
    if cluster is not None and landed_from is not None and cluster != landed_from:
        raise ahead_of_broker(
            group,
            listed,
            f"The table was landed from cluster {landed_from}, and the ingestion now reads cluster {cluster}.",
        )
    newest = max(points)
    older = [(t, b) for t, b in sorted(points.items(), reverse=True) if t < newest and lo < b <= min(hi, anchor)]
    if not any(times.store_time(mq, b - 1) < t for t, b in older):  # stops at the first one held
        raise ahead_of_broker(
            group,
            listed,
            "None of the messages the table landed there is on the broker: its "
            "store was recreated, or the ingestion now points at another cluster.",
        )


def cut_at(
    entries: list[LedgerEntry], anchors: dict[MessageQueue, int], keep_bounds: Collection[MessageQueue] = ()
) -> list[LedgerEntry]:
    """The entries as a run must read them once each queue of ``anchors`` holds the old messages only below its anchor:
    ranges, gaps, trusted spans and boundaries above it dropped (an empty range stays: the window did land the queue),
    so nothing moves the group over the reused offsets, and nothing plans a window from a boundary that is gone.

    ``keep_bounds``: queues (another member's) whose boundaries stay as they were: this run plans nothing on them, and
    the entry it writes keeps the evidence that lets their owner find the replaced tail too, whichever run reads first.
    """

    def rng(r: OffsetRange) -> OffsetRange:
        cut = anchors.get(r.queue)
        return r if cut is None else OffsetRange(r.queue, min(r.start, cut), min(r.end, cut))

    def below(mq: MessageQueue, spans) -> tuple[tuple[int, int], ...]:
        cut = anchors.get(mq)
        return tuple(spans) if cut is None else tuple((a, min(b, cut)) for a, b in spans if a < cut)

    def kept(mq: MessageQueue, s: Suspension) -> bool:
        return mq not in anchors or s.offset < anchors[mq]

    cut_entries = []
    for e in entries:
        cut_entries.append(
            replace(
                e,
                windows=tuple(replace(w, ranges=tuple(rng(r) for r in w.ranges)) for w in e.windows),
                origin={mq: min(o, anchors.get(mq, o)) for mq, o in e.origin.items()},
                gaps={mq: gap for mq, (lo, hi) in e.gaps.items() for gap in below(mq, [(lo, hi)])},
                suspended={mq: s for mq, s in e.suspended.items() if kept(mq, s)},
                landed={mq: spans for mq, spans in ((mq, below(mq, s)) for mq, s in e.landed.items()) if spans},
                bounds={
                    mq: tuple((t, b) for t, b in pairs if mq not in anchors or mq in keep_bounds or b <= anchors[mq])
                    for mq, pairs in e.bounds.items()
                },
            )
        )
    return cut_entries
