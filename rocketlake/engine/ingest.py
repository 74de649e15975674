"""One ingestion run, free of Dagster and of Spark: plan -> read -> write -> account -> commit.

The run talks to three small interfaces, so every branch of the exactly-once protocol is a unit
test on plain data:

* ``Broker``: the consumer group's queues, offsets and store times on RocketMQ
  (``broker_access.GroupBroker`` over a live cluster);
* ``Lake``: the table's ledger, and landing a ledger entry's ranges in one Delta commit with its
  accounting (``materialize.SparkLake``);
* ``RecordedRuns``: which runs Dagster has recorded a materialization for, among some partitions.

The asset calls ``prepare`` and ``land`` before it reports the materialization, and ``commit`` only
after Dagster has recorded it. Offsets move only over ledger entries someone may trust (``trusted``): a balanced
verdict, whoever wrote it, or a landing without a verdict that Dagster recorded or another member wrote; never a
pending or unbalanced one. So a run that dies anywhere leaves the group where the table says it is, and the next
run's ``prepare`` repairs it (docs/concepts/ledger.md states the rules).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from rocketlake.engine.config import IngestionConfig
from rocketlake.engine.failures import DEAD_LETTERED, SENT_BACK, FailedContent, FailedMessage, retry_message
from rocketlake.engine.ledger import (
    BALANCED,
    PENDING,
    UNBALANCED,
    Bounds,
    LedgerEntry,
    Suspension,
    WindowEntry,
    at_stake,
    kept_bounds,
    known_bounds,
    landed_spans,
    merged,
    origin_of,
    suspensions,
)
from rocketlake.engine.offsets import OffsetMove, initial_position, moves_from_ledger
from rocketlake.engine.orderly import OutOfOrder, out_of_order
from rocketlake.engine.tails import (  # noqa: F401 - prepare raises them
    LedgerAheadOfBroker,
    MasterChanged,
    ReplacedTail,
    SlaveBehind,
    ahead_of_broker,
    check_same_masters,
    cut_at,
    replaced_tails,
)
from rocketlake.engine.windows import MessagesDeleted, StoreTimeReader, StoreTimeWindow, iso, window_ranges
from rocketlake.rocketmq.message import retry_topic
from rocketlake.rocketmq.message_queue import MessageQueue, OffsetRange
from rocketlake.rocketmq.send import RetryMessage

Log = Callable[[str], None]


def _no_log(_: str) -> None:
    pass


class Broker(StoreTimeReader, Protocol):
    """What a run needs from RocketMQ for one consumer group (store times included, for windows)."""

    #: the cluster's name server address(es); each ledger entry records it (``rocketlake local down --wipe``)
    cluster: str | None

    def subscribed_queues(self) -> list[MessageQueue]: ...

    def pop_refusal(self) -> str | None:
        """Why 5.x POP consumers sharing the group keep it from being landed by offset windows; None when none do."""

    def committed_offset(self, queue: MessageQueue) -> int | None:
        """The group's committed offset, None if it has none for this queue."""

    def commit_offset(self, queue: MessageQueue, offset: int) -> None: ...

    def send_back(self, failure: FailedMessage, max_reconsume_times: int, delay_level: int = 0) -> None:
        """CONSUMER_SEND_MSG_BACK of a failed message to the broker that stores it (a negative delay level: to
        the dead-letter queue at once)."""

    def produce_retry(self, message: RetryMessage, avoid: str) -> str:
        """Produce ``message`` into its retry topic on a broker other than ``avoid``; the broker that stored it."""

    def silent_brokers(self, queues: Collection[MessageQueue]) -> dict[str, str]:
        """The brokers of ``queues`` that do not answer now (down, paused, cut off), each with why."""

    def masters(self, queues: Collection[MessageQueue]) -> dict[str, str]:
        """The broker names of ``queues`` whose offsets their master answers now, each with the master's address;
        not those a slave answers for while their master is down (a 5.x slave acting as master)."""


class RecordedRuns(Protocol):
    def among(self, partition_keys: Collection[str]) -> set[str]:
        """Run ids with a recorded materialization of any of these partitions."""


@dataclass(frozen=True)
class WindowAccounting:
    partition_key: str
    planned: int  # sum of the window's range sizes
    seen: int  # offsets the reader returned
    rows: int  # rows of this window x these queues in the table after the commit
    filtered: int  # offsets the subscription's tags filtered out
    body_bytes: int = 0  # bytes of the message bodies of the rows landed (before any decoding)
    sent_back: int = 0  # failed, sent back to %RETRY%<group> (CLUSTERING)
    dead_lettered: int = 0  # failed for the last time, sent back to %DLQ%<group> (CLUSTERING)
    failed: int = 0  # failed, kept in the failures table (BROADCASTING: never sent back)
    duplicates: int = 0  # redelivered copies of messages landed already
    held: int = 0  # orderly: at or after the message a queue is suspended at, landed when it resumes
    queue_problems: tuple[str, ...] = ()  # queues of the window whose offsets do not add up (see materialize)

    @property
    def not_landed(self) -> int:
        return self.filtered + self.sent_back + self.dead_lettered + self.failed + self.duplicates + self.held

    @property
    def balanced(self) -> bool:
        return self.seen == self.planned and self.rows + self.not_landed == self.planned and not self.queue_problems


@dataclass(frozen=True)
class LandingReport:
    """What the lake reports after landing an entry."""

    accounting: tuple[WindowAccounting, ...]
    delta_version: int | None  # the Delta commit that replaced the slice and carries the ledger
    failures: tuple[FailedMessage, ...] = ()  # messages not consumed; CLUSTERING sends them back after the commit
    entry: LedgerEntry | None = None  # the entry as committed, when landing changed it (orderly suspensions)
    #: The failures of one broker as read (``FailedContent`` by queue and offset), asked for only when that broker does
    #: not take their send-back: their bodies stay out of the driver otherwise.
    contents: Callable[[str], dict[tuple[MessageQueue, int], FailedContent]] | None = field(
        default=None, compare=False, repr=False
    )
    #: False when the landing changed no row of the table (a quiet window's ledger commit alone, no queue to read):
    #: what follows the table's rows has nothing new to follow.
    rows_changed: bool = True


class Lake(Protocol):
    def table_version(self) -> int | None:
        """The table's newest version (None: no table yet); read before the ledger."""

    def ledger(self, group: str) -> list[LedgerEntry]:
        """The group's entries a run needs (at least those still at stake), oldest first."""

    def land(self, entry: LedgerEntry, queue_count: int, log: Log, *, again: bool = False) -> LandingReport:
        """Read ``entry``'s ranges, replace its windows x queues with them in one commit carrying ``entry``
        (verdict PENDING), and count what the table holds of them after that commit. ``again``: some of the ranges
        were landed before (``landed_before``), so copies of their messages may be in the table already."""

    def record_verdict(self, verdict: LedgerEntry) -> None:
        """Commit ``verdict`` (an entry without windows carrying the decided copy of the landed one), no data."""

    def columns(self) -> list[tuple[str, str, bool]]:
        """The table's columns now (name, type, nullable); none before the table exists."""

    def compact(self, entry: LedgerEntry, closed_before_ms: int) -> list[tuple[str, int, int]]:
        """Compact the days of ``entry``'s windows that are over: ``(day, files removed, files added)``."""

    def vacuum(self) -> int | None:
        """VACUUM per the ingestion's ``vacuum_retention_hours``: the retention applied, or None when it has none."""

    def writers_refusal(self, members: tuple[str, ...]) -> str | None:
        """Why the table cannot take the commits of ``members`` (a group's members, each a deployment writing it),
        or None when it can."""


@dataclass(frozen=True)
class LandedSlice:
    """A slice (windows x queues) the lake replaced: the ledger entry as planned, and the lake's report on it."""

    planned: LedgerEntry
    report: LandingReport

    @property
    def ledger(self) -> LedgerEntry:
        """The entry committed with the slice: the plan, with the suspensions the landing found."""
        return self.report.entry or self.planned

    @property
    def accounting(self) -> tuple[WindowAccounting, ...]:
        return self.report.accounting

    @property
    def delta_version(self) -> int | None:
        return self.report.delta_version

    @property
    def rows_changed(self) -> bool:
        return self.report.rows_changed

    @property
    def balanced(self) -> bool:
        return all(a.balanced for a in self.accounting)


def verdict_of(m: LandedSlice) -> LedgerEntry | None:
    """The commit that decides ``m``'s landing: an entry without windows (it never stays at stake) carrying the
    landed entry with its verdict; None when the landing made no commit."""
    if m.delta_version is None:
        return None
    decided = replace(m.ledger, verdict=BALANCED if m.balanced else UNBALANCED, carried=(), version=None)
    return replace(
        m.ledger,
        windows=(),
        origin={},
        gaps={},
        suspended={},
        verdict=None,
        version=None,
        landed={},
        bounds={},
        carried=(*m.ledger.carried, decided),
    )


@dataclass(frozen=True)
class Prepared:
    queues: list[MessageQueue]  # the queues this member takes
    at_stake: list[LedgerEntry]  # earlier entries at stake this run does not trust (kept whole)
    repaired: list[OffsetMove]  # offsets a previous run landed but did not commit
    starts: dict[MessageQueue, int]  # where the group stands on each queue (committed or origin)
    origin: dict[MessageQueue, int]  # where the group started, known or decided now
    gaps: dict[MessageQueue, tuple[int, int]]  # deleted before they were landed (on_deleted_messages: record)
    member: str | None = None  # this member's client id, written into its entries
    read_version: int | None = None  # the table version the ledger was read at
    suspended: dict[MessageQueue, Suspension] = field(default_factory=dict)  # orderly queues stopped at a message
    landed: dict[MessageQueue, tuple[tuple[int, int], ...]] = field(default_factory=dict)  # trusted spans, merged
    bounds: Bounds = field(default_factory=dict)  # window boundaries recorded by earlier plans (``ledger``)
    replaced: tuple[ReplacedTail, ...] = ()  # queues a promoted replica holds only part of (``tails``), re-anchored


def _keys(entries: list[LedgerEntry]) -> set[str]:
    return {key for e in entries for key in e.partition_keys}


def _foreign(entry: LedgerEntry, member: str | None) -> bool:
    return entry.member is not None and member is not None and entry.member != member


def trusted_entries(
    recorded: RecordedRuns, entries: list[LedgerEntry], member: str | None
) -> Callable[[LedgerEntry], bool]:
    """Which entries may move offsets: never an unbalanced one; any entry whose verdict says balanced, whoever
    wrote it; one whose run Dagster recorded.

    A run commits its balanced verdict only once everything the landing owed is done (its slice in the table,
    its failures sent back: ``run.run``), so the verdict alone is the proof, for this member and any other,
    under whatever client id (an IP that changed, another deployment with a Dagster instance of its own). An
    entry whose verdict is still pending (its run died between its Delta commit and its verdict, in the
    send-back for instance) moves nothing, for anyone: its windows are landed again. Entries written before
    verdicts existed (None) are trusted as they were: recorded, or another member's.
    """
    runs = recorded.among(_keys(entries)) if entries else set()

    def trusted(entry: LedgerEntry) -> bool:
        if entry.verdict in (UNBALANCED, PENDING):  # a step retry of a recorded run keeps its run id: not enough
            return False
        if entry.verdict == BALANCED or entry.run_id in runs:
            return True
        return entry.verdict is None and _foreign(entry, member)

    return trusted


def _apply(broker: Broker, moves: list[OffsetMove]) -> None:
    for move in moves:
        broker.commit_offset(move.queue, move.after)


def prepare(
    broker: Broker,
    lake: Lake,
    recorded: RecordedRuns,
    cfg: IngestionConfig,
    now_ms: int,
    first_window_start_ms: int,
    *,
    member: str | None = None,
    taken: Collection[MessageQueue] | None = None,
    silent: Collection[str] = (),
) -> Prepared:
    """Repair offsets an earlier run landed but did not commit, then decide where the group stands.

    ``taken``: the queues this member takes (default: every queue of the subscription). Offsets move
    only on those; what is at stake is judged on every queue of the group, so that this member's entry
    carries what other members still need too. ``silent``: brokers that do not answer; their queues are
    neither read nor committed, and every entry on them stays at stake (their offsets are unknown). A queue whose
    tail a promoted replica replaced is re-anchored first (``tails``): ``replaced`` says which, for the run's log.
    """
    group = cfg.consumer_group
    version = lake.table_version()
    read_version = -1 if version is None else version  # -1: no table yet, so every commit is newer than the read
    ledger = lake.ledger(group)
    every = broker.subscribed_queues()
    queues = every if taken is None else sorted(set(every) & set(taken))
    queues = [mq for mq in queues if mq.broker_name not in silent]
    committed_all = {mq: None if mq.broker_name in silent else broker.committed_offset(mq) for mq in every}
    committed = {mq: committed_all[mq] for mq in queues}
    # Before any offset moves: a queue whose tail a promoted replica replaced is re-anchored where its old messages
    # end, and the run forgets the ledger's tail above that, so that neither the repair below nor the plan skips the
    # new messages stored at the reused offsets. On every queue that answers: this member commits its own, and reads
    # another member's as its owner will leave it, so the entry it writes carries no old tail for anyone.
    # Only where the master answers: a slave answering for a master that is down (a 5.x slave acting as master)
    # holds what it has copied so far, not a replaced tail, and the master comes back with the rest. Its queues keep
    # their offsets and go on as before.
    answering = [mq for mq in every if mq.broker_name not in silent]
    masters = broker.masters(answering) if ledger else {}
    slaves = {mq.broker_name for mq in answering} - set(masters) if ledger else set()
    examined = [mq for mq in answering if mq.broker_name in masters]
    found = replaced_tails(broker, ledger, examined, committed_all, broker.cluster, group, refuse=queues)
    if found:  # the masters read are still the ones answering: one that died meanwhile may have left a slave
        check_same_masters(masters, broker.masters([r.queue for r in found]), [r.queue for r in found])
        ledger = cut_at(ledger, {r.queue: r.anchor for r in found}, keep_bounds={r.queue for r in found} - set(queues))
        started = origin_of(ledger)
        for r in found:
            position = committed_all[r.queue] if committed_all[r.queue] is not None else started.get(r.queue)
            if position is None or position > r.anchor:  # back to the anchor; a group below it moves up as it lands
                committed_all[r.queue] = r.anchor
                if r.queue in committed:
                    broker.commit_offset(r.queue, r.anchor)
                    committed[r.queue] = r.anchor
    replaced = [r for r in found if r.queue in committed]
    stake = at_stake(ledger, committed_all)
    # Only the windows at stake can move an offset: ask Dagster about those, not the asset's whole history.
    trusted = trusted_entries(recorded, stake, member)
    summaries = [e for e in ledger if e.landed]
    repaired = moves_from_ledger(committed, stake + summaries, trusted)
    check_within_broker(broker, repaired, group, slaves)
    _apply(broker, repaired)
    committed |= {move.queue: move.after for move in repaired}
    committed_all |= committed

    origin = origin_of(ledger)
    starts = {}
    for mq, offset in committed.items():
        if offset is None and mq not in origin:
            origin[mq] = initial_position(broker, cfg, mq, now_ms, first_window_start_ms)
        starts[mq] = offset if offset is not None else origin[mq]
    gaps = deleted_gaps(broker, starts)
    if gaps and cfg.on_deleted_messages == "fail":
        listed = "; ".join(f"{mq.key}: [{lo}, {hi})" for mq, (lo, hi) in sorted(gaps.items()))
        raise MessagesDeleted(
            f"the broker deleted messages group {group} never landed ({listed}). Nothing was written. "
            "Land them from a backup if you have one; to accept the loss, set on_deleted_messages: record for this "
            "ingestion, which records the gap in the ledger and moves on."
        )
    positions = {mq: max(start, gaps.get(mq, (0, 0))[1]) for mq, start in starts.items()}
    still = at_stake(ledger, committed_all)
    # What this run trusts is kept merged, the rest whole: the entry it writes stays bounded (see ``ledger``).
    # An entry with an orderly suspension stays whole: only it says where another member's queue waits.
    kept_whole = [e for e in still if not trusted(e) or e.suspended]
    landed = merged(landed_spans(still + summaries, trusted), committed_all)
    bounds = known_bounds(ledger)
    for r in replaced:  # the next window on the queue starts at the anchor: every new message lands
        bounds.setdefault(r.queue, {})[r.boundary_ms] = r.anchor
    return Prepared(
        queues,
        kept_whole,
        repaired,
        starts,
        origin,
        gaps,
        member,
        read_version,
        suspensions(ledger, positions) if cfg.consume_orderly else {},
        landed,
        kept_bounds(bounds, committed_all),
        tuple(replaced),
    )


def check_within_broker(broker: Broker, moves: list[OffsetMove], group: str, slaves: Collection[str] = ()) -> None:
    """Refuse to commit offsets the broker has never had: the table was landed from a store that is gone (a
    broker whose store was recreated, another cluster under the same name). Nothing is moved. A store that holds
    part of them (a promoted replica's) is re-anchored before (``tails``): this guards what that does not see.
    ``slaves``: broker names a slave answers for while their master is down; it has not copied everything yet."""
    beyond = [(m, broker.max_offset(m.queue)) for m in moves]
    beyond = [(m, top) for m, top in beyond if m.after > top]
    if beyond:
        listed = "; ".join(f"{m.queue.key}: landed up to {m.after}, the broker holds up to {top}" for m, top in beyond)
        names = sorted({m.queue.broker_name for m, _ in beyond})
        if set(names) <= set(slaves):
            raise SlaveBehind(
                f"the table's ledger says group {group} landed messages the broker does not have ({listed}): the "
                f"master of {', '.join(names)} does not answer, and a slave answers in its place with what it has "
                "copied so far; the rest is on the master. Nothing was read and no offset moved, and the table is "
                "right as it is: the run lands these queues once the master is back."
            )
        raise ahead_of_broker(
            group, listed, "The broker's store was recreated, or the ingestion now points at another cluster."
        )


def deleted_gaps(broker: Broker, starts: dict[MessageQueue, int]) -> dict[MessageQueue, tuple[int, int]]:
    """Queues where the group stands below the broker's min offset: [position, min) is gone."""
    gaps = {}
    for mq, position in starts.items():
        lowest = broker.min_offset(mq)
        if position < lowest:
            gaps[mq] = (position, lowest)
    return gaps


def plan_windows(
    times: StoreTimeReader,
    queues: list[MessageQueue],
    windows: list[tuple[str, StoreTimeWindow]],
    starts: dict[MessageQueue, int] | None = None,
    bounds: Bounds | None = None,
) -> tuple[WindowEntry, ...]:
    """Exact ranges per window; with ``starts``, a range begins no earlier than its queue's start."""
    return planned_with_bounds(times, queues, windows, starts, bounds)[0]


def planned_with_bounds(
    times: StoreTimeReader,
    queues: list[MessageQueue],
    windows: list[tuple[str, StoreTimeWindow]],
    starts: dict[MessageQueue, int] | None = None,
    bounds: Bounds | None = None,
) -> tuple[tuple[WindowEntry, ...], Bounds]:
    """``plan_windows``, and ``bounds`` with the boundaries these windows were planned with (a recorded one where the
    broker still holds it, else the one found now).

    Each window's range on a queue is anchored on the boundaries recorded before (``windows.window_ranges``): a
    scheduled window starts where the last one landed on the queue ended, whatever the store times found now say.
    """
    known: Bounds = {mq: dict(by_time) for mq, by_time in (bounds or {}).items()}
    planned = []
    for key, window in sorted(windows, key=lambda kw: kw[1]):
        ranges = []
        for r in window_ranges(times, queues, window, known):
            by_time = known.setdefault(r.queue, {})
            # What the plan used: a recorded boundary, or (where the broker no longer holds it) what it found.
            by_time[window.start_ms], by_time[window.end_ms] = r.start, r.end
            start = max(r.start, starts[r.queue]) if starts and r.queue in starts else r.start
            ranges.append(OffsetRange(r.queue, min(start, r.end), r.end))
        planned.append(WindowEntry(key, window.start_ms, window.end_ms, tuple(ranges)))
    return tuple(planned), known


#: The windows of the ingestion between two instants, ``[(partition key, StoreTimeWindow)]``; from the partitions.
WindowsBetween = Callable[[int, int], list[tuple[str, StoreTimeWindow]]]


def land(
    broker: Broker,
    lake: Lake,
    cfg: IngestionConfig,
    ingestion: str,
    run_id: str,
    windows: list[tuple[str, StoreTimeWindow]],
    prepared: Prepared,
    *,
    start_at_group_position: bool,
    log: Log = _no_log,
    now_ms: int = 0,
    windows_between: WindowsBetween | None = None,
) -> LandedSlice:
    """Plan the windows and land them in one commit whose ledger entry carries what is still at stake.

    ``start_at_group_position``: scheduled runs start where the group stands; an explicit backfill
    always takes whole windows. An orderly ingestion refuses windows that would skip unlanded messages
    of a queue (``OutOfOrder``), except where a queue is suspended (``orderly_plan``). ``log`` hears one
    line per step: the planned ranges, the Spark job, the commit.
    """
    planned, bounds = planned_with_bounds(
        broker, prepared.queues, windows, prepared.starts if start_at_group_position else None, prepared.bounds
    )
    suspended: dict[MessageQueue, Suspension] = {}
    if cfg.consume_orderly:
        planned, suspended = orderly_plan(broker, planned, prepared, now_ms, windows_between, log)
        positions = {mq: max(start, prepared.gaps.get(mq, (0, 0))[1]) for mq, start in prepared.starts.items()}
        problems = out_of_order(planned, {mq: p for mq, p in positions.items() if mq not in suspended})
        if problems:
            raise OutOfOrder(
                "orderly: a window of a queue cannot land before the earlier ones; land the earlier "
                "windows first (nothing was read, no offset moved): " + "; ".join(problems)
            )
    entry = LedgerEntry(
        ingestion,
        cfg.consumer_group,
        run_id,
        planned,
        dict(prepared.origin),
        dict(prepared.gaps),
        carried=tuple(prepared.at_stake),
        member=prepared.member,
        read_version=prepared.read_version,
        suspended=suspended,
        verdict=PENDING,
        namesrv=broker.cluster,
        landed=dict(prepared.landed),
        bounds={mq: tuple(sorted(by_time.items())) for mq, by_time in sorted(bounds.items())},
    )
    for w in planned:
        log(
            f"window {w.partition_key}: {w.size} offsets planned: "
            + ", ".join(
                f"{r.queue.broker_name}/{r.queue.topic}/{r.queue.queue_id} [{r.start}, {r.end})" for r in w.ranges
            )
        )
    return LandedSlice(entry, lake.land(entry, len(prepared.queues), log, again=landed_before(planned, prepared)))


def landed_before(planned: Iterable[WindowEntry], prepared: Prepared) -> bool:
    """Whether a range of ``planned`` holds offsets a run landed before: passed by the group, in a trusted span, or in
    an entry still at stake. Only then can one of its messages have been sent back, and a copy of it landed since."""
    spans: dict[MessageQueue, list[tuple[int, int]]] = {mq: list(s) for mq, s in prepared.landed.items()}
    for entry in prepared.at_stake:
        for w in entry.windows:
            for r in w.ranges:
                spans.setdefault(r.queue, []).append((r.start, r.end))
    return any(
        lo < r.end and r.start < hi for w in planned for r in w.ranges if r.size for lo, hi in spans.get(r.queue, ())
    )


def orderly_plan(
    times: StoreTimeReader,
    planned: tuple[WindowEntry, ...],
    prepared: Prepared,
    now_ms: int,
    windows_between: WindowsBetween | None,
    log: Log,
) -> tuple[tuple[WindowEntry, ...], dict]:
    """Where orderly queues are suspended: a queue whose pause is not over takes no range in this run (its
    windows wait); one whose pause is over resumes at its message, in the window that holds it, and takes
    every window from there on, so it lands in order. Returns the plan and the suspensions it carries (the
    landing replaces those of the queues it reads with what it finds)."""
    waiting = {mq: s for mq, s in prepared.suspended.items() if s.until_ms > now_ms and mq in prepared.queues}
    due = {mq: s for mq, s in prepared.suspended.items() if s.until_ms <= now_ms and mq in prepared.queues}
    for mq, s in sorted(waiting.items()):
        log(
            f"orderly: {mq.key} is suspended at offset {s.offset} ({s.attempts} failed attempt(s), last: "
            f"{s.error}); it waits until {iso(s.until_ms)} and takes no range in this run"
        )
    windows = {w.start_ms: w for w in planned}
    first_ms = min(windows, default=None)
    for mq, s in sorted(due.items()):
        log(f"orderly: {mq.key} resumes at offset {s.offset} (window {s.window_key}, attempt {s.attempts + 1})")
        earlier = [(s.window_key, StoreTimeWindow(s.window_start_ms, s.window_end_ms))]
        if windows_between is not None and first_ms is not None and s.window_end_ms < first_ms:
            earlier += windows_between(s.window_end_ms, first_ms)
        for key, window in earlier:
            if first_ms is not None and window.start_ms >= first_ms:
                continue
            (r,) = window_ranges(times, [mq], window, prepared.bounds)
            w = windows.get(window.start_ms) or WindowEntry(key, window.start_ms, window.end_ms, ())
            windows[window.start_ms] = replace(w, ranges=(*(x for x in w.ranges if x.queue != mq), r))

    def from_suspension(r: OffsetRange) -> OffsetRange:
        offset = due[r.queue].offset if r.queue in due else r.start
        return OffsetRange(r.queue, min(max(r.start, offset), r.end), r.end)

    resumed = tuple(
        replace(
            w,
            ranges=tuple(
                sorted((from_suspension(r) for r in w.ranges if r.queue not in waiting), key=lambda r: r.queue)
            ),
        )
        for _, w in sorted(windows.items())
    )
    return resumed, {**waiting, **due}


def send_back(broker: Broker, cfg: IngestionConfig, m: LandedSlice, log: Log = _no_log) -> int:
    """Send back this run's failures (CLUSTERING), after its Delta commit and before its materialization.

    A run that dies part-way leaves the materialization unrecorded and the offsets where they were: the
    next run lands the window again and sends back what fails then. A message sent back twice comes back
    twice; the table lands it once (``consume.mark_known`` and the in-run dedupe, by the stored original).

    When the broker that stores a message does not take its send-back (down, paused, an error answer), the message
    and the rest of that broker's are produced into ``%RETRY%<group>`` on another broker instead, as Java's
    ``DefaultMQPushConsumerImpl#sendMessageBack`` does on any failure (``produce_back``).
    """
    sent = [f for f in m.report.failures if f.outcome in (SENT_BACK, DEAD_LETTERED)]
    refused: dict[str, tuple[str, list[FailedMessage]]] = {}  # broker -> (why, its failures not sent back)
    for failure in sent:
        name = failure.queue.broker_name
        if name in refused:  # one refusal is enough: the rest of its failures are not made to wait for it again
            refused[name][1].append(failure)
            continue
        try:
            # Orderly queues never use the retry topic: a message out of attempts goes to %DLQ% directly, as the
            # Java consumer's ConsumeMessageOrderlyService.checkReconsumeTimes does.
            broker.send_back(failure, cfg.effective_max_reconsume_times, -1 if cfg.consume_orderly else 0)
        except Exception as e:  # noqa: BLE001 - Java falls back on any Throwable; a failing fallback raises
            refused[name] = (f"{type(e).__name__}: {e}", [failure])
    for name, (why, failures) in sorted(refused.items()):
        produce_back(broker, cfg, m.report, name, why, failures, log)
    if sent:
        dead = sum(f.outcome == DEAD_LETTERED for f in sent)
        log(
            f"sent back {len(sent)} failed message(s) to {cfg.consumer_group}'s retry topic ({dead} of them to "
            f"%DLQ%{cfg.consumer_group}, after {cfg.effective_max_reconsume_times} attempts)"
        )
    return len(sent)


class SendBackFailed(RuntimeError):
    """A broker did not take a send-back and the failures could not be produced into the retry topic either."""


def produce_back(
    broker: Broker,
    cfg: IngestionConfig,
    report: LandingReport,
    name: str,
    why: str,
    failures: Sequence[FailedMessage],
    log: Log = _no_log,
) -> None:
    """Produce ``failures``, which broker ``name`` did not take back (``why``), into ``%RETRY%<group>`` on another
    broker (``failures.retry_message``): the broker stores each there, or in ``%DLQ%<group>`` once it is out of
    attempts. Raises when that fails too: the run stops before its verdict and the window lands again."""
    retry = retry_topic(cfg.consumer_group)
    if report.contents is None:
        raise SendBackFailed(
            f"broker {name} did not take the send-back of {len(failures)} failed message(s) ({why}), "
            f"and this landing cannot produce them into {retry}: it kept none of their bodies"
        )
    read = report.contents(name)
    missing = [f for f in failures if (f.queue, f.queue_offset) not in read]
    if missing:
        listed = ", ".join(f"{f.queue.key}@{f.queue_offset}" for f in missing[:5])
        raise SendBackFailed(
            f"broker {name} did not take the send-back ({why}), and {len(missing)} of its failed "
            f"messages are not among those this run read ({listed}): nothing to produce into {retry}"
        )
    stored_on: set[str] = set()
    for f in failures:
        message = retry_message(
            cfg.consumer_group, f, read[(f.queue, f.queue_offset)], cfg.effective_max_reconsume_times
        )
        try:
            stored_on.add(broker.produce_retry(message, avoid=name))
        except Exception as e:
            raise SendBackFailed(
                f"broker {name} did not take the send-back of {f.queue.key}@{f.queue_offset} ({why}), "
                f"and producing it into {retry} on another broker failed too: {e}"
            ) from e
    log(
        f"{len(failures)} failed message(s) were produced into {retry} (on {', '.join(sorted(stored_on))}) because "
        f"broker {name} did not take the send-back: {why}"
    )


def commit(broker: Broker, recorded: RecordedRuns, prepared: Prepared, landed: LedgerEntry) -> list[OffsetMove]:
    """Move the group's offsets over every recorded entry at stake, this run's included (balanced: its verdict is
    committed, though the copy in hand still says pending)."""
    # ``landed`` keeps the trusted spans of the rest, merged
    entries = [*prepared.at_stake, replace(landed, verdict=BALANCED)]
    committed = {mq: broker.committed_offset(mq) for mq in prepared.queues}
    moves = moves_from_ledger(committed, entries, trusted_entries(recorded, entries, prepared.member))
    _apply(broker, moves)
    return moves
