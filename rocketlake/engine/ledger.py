"""The ledger: what each Delta commit landed, and what a later run needs of it. Plain data, no I/O.

Every rocketlake commit of a table carries one ``LedgerEntry`` in its commitInfo ``userMetadata``
(``delta_writer`` writes and reads it): the windows, their exact ``OffsetRange``s, the run that
landed them, where the group started on each queue (``origin``) and the deleted offsets it accepted
as lost (``gaps``).

A run needs only the entries still *at stake*: those with a range (or gap) the group's committed
offset has not passed yet, on any queue of the group, and those holding an orderly queue's suspension. Those its run trusted (recorded by Dagster, or
another member's balanced landing) each entry keeps only as merged spans per queue (``landed``): a
queue stuck behind a gap keeps one span above it, however many windows land meanwhile, so an entry's
size stays bounded. The others it repeats whole (``carried``) as the run saw them when it read the
table at version ``read_version``; commits made after that by other
members of the group (concurrent writers) are read on their own. So a reader needs the group's
newest entry, its carried entries and every entry committed between its ``read_version`` and it
(recursively); older commits may be cleaned from the Delta log (``delta.logRetentionDuration``)
without losing anything a run relies on. With a single writer that is the newest verdict and the landing it
decides. docs/concepts/ledger.md is the specification.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from rocketlake.rocketmq.message_queue import MessageQueue, OffsetRange

LEDGER_KEY = "rocketlake"
LEDGER_VERSION = 1


class NewerLedger(ValueError):
    """The table's ledger was written in a newer format than this rocketlake reads."""


# An entry's verdict: whether the rows its commit left in the table add up to its ranges (the accounting check).
# A run commits its slice first (``pending``), reads the slice back, then commits the verdict (an entry without
# windows that carries the decided copy); other members move offsets only over ``balanced`` entries. Entries
# written before verdicts existed have none (None) and are trusted as they were.
PENDING = "pending"
BALANCED = "balanced"
UNBALANCED = "unbalanced"


@dataclass(frozen=True)
class WindowEntry:
    partition_key: str
    start_ms: int
    end_ms: int
    ranges: tuple[OffsetRange, ...]

    @property
    def size(self) -> int:
        return sum(r.size for r in self.ranges)


@dataclass(frozen=True)
class Suspension:
    """An orderly queue stopped at a message it could not consume (SUSPEND_CURRENT_QUEUE_A_MOMENT).

    Nothing of the queue at or after ``offset`` is landed; no run tries the queue again before
    ``until_ms``, and the next that does resumes at ``offset``, in the window that holds it. ``attempts``
    counts the failed calls of that message so far: the Java consumer's local reconsumeTimes.
    """

    offset: int
    attempts: int
    until_ms: int
    window_key: str
    window_start_ms: int
    window_end_ms: int
    msg_id: str | None = None
    error: str | None = None

    def to_dict(self) -> dict:
        return {
            "offset": self.offset,
            "attempts": self.attempts,
            "until_ms": self.until_ms,
            "window": [self.window_key, self.window_start_ms, self.window_end_ms],
            "msg_id": self.msg_id,
            "error": self.error,
        }

    @classmethod
    def from_dict(cls, raw: dict) -> Suspension:
        key, start, end = raw["window"]
        return cls(
            int(raw["offset"]),
            int(raw["attempts"]),
            int(raw["until_ms"]),
            key,
            int(start),
            int(end),
            raw.get("msg_id"),
            raw.get("error"),
        )


@dataclass(frozen=True)
class LedgerEntry:
    """What one Delta commit landed: the windows, their ranges, and who landed them."""

    ingestion: str
    consumer_group: str
    run_id: str
    windows: tuple[WindowEntry, ...]
    # Where the group started on each queue it had no offset for (decided once, by the first run).
    origin: dict[MessageQueue, int] = field(default_factory=dict)
    # [from, to) the broker deleted before they were landed, accepted as lost (on_deleted_messages: record).
    gaps: dict[MessageQueue, tuple[int, int]] = field(default_factory=dict)
    # Earlier entries of the group still at stake when this one was written (their own ``carried`` dropped).
    carried: tuple[LedgerEntry, ...] = ()
    version: int | None = None  # the Delta version, filled in when read back
    # The member (client id) whose run landed it; None for entries written before members existed.
    member: str | None = None
    # The table version the run read the ledger at; None: the version just before its own (one writer).
    read_version: int | None = None
    # False for an entry written before ``carried`` existed: the entries before it must be read too.
    self_sufficient: bool = field(default=True, compare=False)
    # Orderly queues stopped at a message (``Suspension``): the entry lands nothing of them from there on.
    suspended: dict[MessageQueue, Suspension] = field(default_factory=dict)
    # Spans (per queue, merged) of the entries at stake that this entry's run trusted, above the group's offsets:
    # every reader may pass over them. Not part of the identity: only the entry itself holds it, never a copy.
    landed: dict[MessageQueue, tuple[tuple[int, int], ...]] = field(default_factory=dict, compare=False)
    # The name server address(es) of the cluster the ranges were read from; None for entries written before.
    namesrv: str | None = None
    # PENDING, BALANCED or UNBALANCED (see above); not part of the identity: a verdict decides an entry's copies.
    verdict: str | None = field(default=None, compare=False)
    # The window boundaries known when it was written, its own windows' included: per queue, (boundary's time in
    # ms, offset) pairs. A boundary once recorded is the one every later plan of the windows on either side of it
    # uses (``known_bounds``), so windows tile each queue's offsets whatever the store times found later say.
    # Not part of the identity: only the entry itself holds it, never a copy.
    bounds: dict[MessageQueue, tuple[tuple[int, int], ...]] = field(default_factory=dict, compare=False)

    @property
    def partition_keys(self) -> list[str]:
        return [w.partition_key for w in self.windows]

    @property
    def is_verdict(self) -> bool:
        """A verdict commit's entry (``ingest.verdict_of``): no windows of its own, only the decided copy."""
        return not self.windows

    @property
    def queues(self) -> set[MessageQueue]:
        return {r.queue for w in self.windows for r in w.ranges}

    def spans(self) -> Iterable[tuple[MessageQueue, int, int]]:
        """Every (queue, start, end) this entry passes the group over: its ranges, up to where an orderly queue
        is suspended, and its accepted gaps."""
        for w in self.windows:
            for r in w.ranges:
                stop = self.suspended.get(r.queue)
                if stop is None:
                    yield r.queue, r.start, r.end
                elif r.start < stop.offset:
                    yield r.queue, r.start, min(r.end, stop.offset)
        for mq, (lo, hi) in self.gaps.items():
            yield mq, lo, hi

    def _body(self) -> dict:
        return {
            "ingestion": self.ingestion,
            "consumer_group": self.consumer_group,
            "run_id": self.run_id,
            "windows": [
                {
                    "partition_key": w.partition_key,
                    "start_ms": w.start_ms,
                    "end_ms": w.end_ms,
                    "ranges": [r.to_dict() for r in w.ranges],
                }
                for w in self.windows
            ],
            "origin": {mq.key: offset for mq, offset in sorted(self.origin.items())},
            "gaps": {mq.key: list(gap) for mq, gap in sorted(self.gaps.items())},
            **({"member": self.member} if self.member is not None else {}),
            **({"namesrv": self.namesrv} if self.namesrv is not None else {}),
            **(
                {"suspended": {mq.key: s.to_dict() for mq, s in sorted(self.suspended.items())}}
                if self.suspended
                else {}
            ),
        }

    def _with_verdict(self) -> dict:
        return {**self._body(), **({"verdict": self.verdict} if self.verdict is not None else {})}

    def to_json(self) -> str:
        body = {
            LEDGER_KEY: LEDGER_VERSION,
            **self._with_verdict(),
            "carried": [e._with_verdict() for e in self.carried],
        }
        if self.landed:
            body["landed"] = {mq.key: [list(s) for s in spans] for mq, spans in sorted(self.landed.items())}
        if self.bounds:
            body["bounds"] = {mq.key: [list(p) for p in pairs] for mq, pairs in sorted(self.bounds.items())}
        if self.read_version is not None:
            body["read_version"] = self.read_version
        return json.dumps(body, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str, version: int | None = None) -> LedgerEntry | None:
        """The entry of a commit's userMetadata; None for someone else's commit (OPTIMIZE, a user's write)."""
        try:
            raw = json.loads(text)
        except (TypeError, ValueError):
            return None
        if not isinstance(raw, dict) or raw.get(LEDGER_KEY) is None:
            return None
        written = raw[LEDGER_KEY]
        if isinstance(written, int) and written > LEDGER_VERSION:
            # Read as someone else's commit, it would hide what a newer rocketlake landed: a run would land it again.
            raise NewerLedger(
                f"Delta version {version} of this table holds a ledger entry in format {written}, written "
                f"by a newer rocketlake; this one reads format {LEDGER_VERSION}: upgrade rocketlake on "
                "every member of the group before it lands this table again"
            )
        if written != LEDGER_VERSION:
            return None
        carried = raw.get("carried")
        entry = cls._from_body(
            raw, version, None if carried is None else tuple(cls._from_body(c, None, ()) for c in carried)
        )
        read_version = raw.get("read_version")
        if read_version is not None:
            entry = replace(entry, read_version=int(read_version))
        landed = raw.get("landed")
        if landed:
            entry = replace(
                entry,
                landed={MessageQueue.from_key(k): tuple((int(a), int(b)) for a, b in v) for k, v in landed.items()},
            )
        bounds = raw.get("bounds")
        if bounds:
            entry = replace(
                entry,
                bounds={MessageQueue.from_key(k): tuple((int(t), int(o)) for t, o in v) for k, v in bounds.items()},
            )
        return entry

    @classmethod
    def _from_body(cls, raw: dict, version: int | None, carried: tuple[LedgerEntry, ...] | None) -> LedgerEntry:
        windows = tuple(
            WindowEntry(
                w["partition_key"],
                int(w["start_ms"]),
                int(w["end_ms"]),
                tuple(OffsetRange.from_dict(r) for r in w["ranges"]),
            )
            for w in raw["windows"]
        )
        origin = {MessageQueue.from_key(k): int(v) for k, v in raw.get("origin", {}).items()}
        gaps = {MessageQueue.from_key(k): (int(v[0]), int(v[1])) for k, v in raw.get("gaps", {}).items()}
        suspended = {MessageQueue.from_key(k): Suspension.from_dict(v) for k, v in raw.get("suspended", {}).items()}
        return cls(
            raw["ingestion"],
            raw["consumer_group"],
            raw["run_id"],
            windows,
            origin,
            gaps,
            carried or (),
            version,
            raw.get("member"),
            self_sufficient=carried is not None,
            suspended=suspended,
            verdict=raw.get("verdict"),
            namesrv=raw.get("namesrv"),
        )

    @property
    def identity(self) -> str:
        """Equal for an entry and its copies carried by later entries (which have no version)."""
        return json.dumps(self._body(), sort_keys=True)

    def reads_down_to(self) -> int | None:
        """Versions above this one are read already; a reader also needs those down to (not incl.) this."""
        if not self.self_sufficient or self.version is None:
            return None
        return self.read_version if self.read_version is not None else self.version - 1


def history_of(
    entries_newest_first: Iterable[LedgerEntry], group: str, lowest_version_read: int | None = None
) -> tuple[list[LedgerEntry], bool]:
    """The entries of ``group`` a run needs, oldest first, from commits read newest first.

    Takes the group's entries (and what they carry) down to the lowest floor (``reads_down_to``) of
    the self-sufficient ones read: everything at or below it is carried by them (an entry without a
    version sets no floor: where it stands is unknown). Returns whether the floor is
    proven reached: an entry at or below it came next, or ``lowest_version_read`` (the oldest commit
    the caller read, ledger or not) is just above it. If not, the caller must read further back.
    """
    read: list[LedgerEntry] = []
    floor: int | None = None
    complete = False
    for entry in entries_newest_first:
        if floor is not None and entry.version is not None and entry.version <= floor:
            complete = True
            break
        if entry.consumer_group != group:
            continue
        read.append(entry)
        down_to = entry.reads_down_to()
        if down_to is not None:
            floor = down_to if floor is None else min(floor, down_to)
    if not complete and floor is not None and lowest_version_read is not None:
        complete = lowest_version_read <= floor + 1
    entries: list[LedgerEntry] = []
    seen: dict[str, int] = {}
    for entry in reversed(read):  # oldest first: the first origin of a queue wins (``origin_of``)
        for e in (*entry.carried, *(() if entry.is_verdict else (entry,))):
            at = seen.get(e.identity)
            if at is None:
                seen[e.identity] = len(entries)
                entries.append(e)
            elif e.verdict not in (None, PENDING):
                # A decided verdict read later replaces what an earlier copy said (a copy carried before the
                # verdict was committed says PENDING; a slice landed again by the same run decides again).
                entries[at] = replace(entries[at], verdict=e.verdict)
    return entries, complete


def with_verdicts(entries_oldest_first: list[LedgerEntry]) -> list[LedgerEntry]:
    """The landings' entries, each with the verdict a later verdict commit decided, verdict commits left out."""
    decided = {
        e.identity: e.verdict
        for v in entries_oldest_first
        if v.is_verdict
        for e in v.carried
        if e.verdict not in (None, PENDING)
    }
    return [replace(e, verdict=decided.get(e.identity, e.verdict)) for e in entries_oldest_first if not e.is_verdict]


def origin_of(entries: Iterable[LedgerEntry]) -> dict[MessageQueue, int]:
    """The origin each queue got from the first run that saw the group without an offset."""
    origin: dict[MessageQueue, int] = {}
    for entry in entries:
        for mq, offset in entry.origin.items():
            origin.setdefault(mq, offset)
    return origin


def at_stake(entries: Iterable[LedgerEntry], committed: dict[MessageQueue, int | None]) -> list[LedgerEntry]:
    """Entries with a range or gap, on a queue of ``committed``, that its committed offset has not passed.

    A queue without a committed offset keeps every entry on it at stake. Entries whose queues all
    left the subscription can never move an offset again and are dropped.
    """
    kept = []
    for entry in entries:
        stops = ((mq, s.offset, s.offset + 1) for mq, s in entry.suspended.items())
        for mq, _, end in (*entry.spans(), *stops):  # a suspension is at stake until the group passes its message
            if mq in committed and (committed[mq] is None or end > committed[mq]):
                kept.append(entry)
                break
    return kept


def suspensions(entries: Iterable[LedgerEntry], positions: dict[MessageQueue, int]) -> dict[MessageQueue, Suspension]:
    """The suspension each orderly queue is under: the newest entry's record at the group's position on it."""
    found: dict[MessageQueue, Suspension] = {}
    for entry in entries:  # oldest first: a later record of the same message replaces an earlier one
        for mq, s in entry.suspended.items():
            if positions.get(mq) == s.offset:
                found[mq] = s
    return found


def summarized(entries: Iterable[LedgerEntry]) -> dict[MessageQueue, list[tuple[int, int]]]:
    """The trusted spans the entries keep merged (``LedgerEntry.landed``), per queue."""
    spans: dict[MessageQueue, list[tuple[int, int]]] = {}
    for entry in entries:
        for mq, kept in entry.landed.items():
            spans.setdefault(mq, []).extend(kept)
    return spans


def merged(
    spans: dict[MessageQueue, list[tuple[int, int]]], committed: dict[MessageQueue, int | None]
) -> dict[MessageQueue, tuple[tuple[int, int], ...]]:
    """Spans above the committed offsets of the group's queues, overlapping and touching ones joined, and below
    each committed offset ``[0, committed)``: where the group stood, passed already. That span lets a later run
    move the group forward again after an operator's tool set it back on the broker (5.x resets offsets there,
    telling no client), even below the newest entry's ranges."""
    out: dict[MessageQueue, tuple[tuple[int, int], ...]] = {}
    for mq in sorted(committed.keys() & spans.keys() | {mq for mq, c in committed.items() if c}):
        found = [*spans.get(mq, ()), *([(0, committed[mq])] if committed[mq] else [])]
        floor = committed[mq]
        joined: list[list[int]] = []
        for start, end in sorted(s for s in found if floor is None or s[1] >= floor):
            if joined and start <= joined[-1][1]:
                joined[-1][1] = max(joined[-1][1], end)
            else:
                joined.append([start, end])
        if joined:
            out[mq] = tuple((a, b) for a, b in joined)
    return out


def landed_spans(
    entries: Iterable[LedgerEntry], trusted: Callable[[LedgerEntry], bool]
) -> dict[MessageQueue, list[tuple[int, int]]]:
    """Per queue, what the group may pass over: the spans of the entries ``trusted`` accepts (recorded by Dagster,
    balanced), and the trusted spans entries keep merged."""
    entries = list(entries)
    spans = summarized(entries)
    for entry in entries:
        if trusted(entry):
            for mq, start, end in entry.spans():
                spans.setdefault(mq, []).append((start, end))
    return spans


#: Per queue, how many recorded window boundaries above the group's committed offset an entry keeps: the oldest
#: half (the edge of a hole the group waits at) and the newest half (where the next windows start); and how many
#: at or below it (the newest: where the next window starts, and the recent windows a backfill may land again).
BOUNDS_KEPT = 16
BOUNDS_KEPT_PASSED = 8

Bounds = dict[MessageQueue, dict[int, int]]


def known_bounds(entries: Iterable[LedgerEntry]) -> Bounds:
    """Every window boundary the entries recorded, per queue (time ms -> offset), read oldest first. Each entry
    carries the boundaries known before it, and its plan reuses them wherever the broker still holds them: the
    newest recording of a time is the one its windows were landed with."""
    found: Bounds = {}
    for entry in entries:
        for mq, pairs in entry.bounds.items():
            found.setdefault(mq, {}).update(pairs)
    return found


def kept_bounds(found: Bounds, committed: dict[MessageQueue, int | None]) -> Bounds:
    """What an entry carries of ``found``: per queue the ``BOUNDS_KEPT_PASSED`` newest boundaries at or below the
    committed offset (where the next window of a group that is caught up starts, and the recent windows a backfill
    may land again) and ``BOUNDS_KEPT`` above it. An entry's size stays bounded; a window landed again after its
    boundaries were dropped is planned from store times, as before boundaries were recorded (a message that was
    late for it, landed in the next window, could then be landed in both)."""
    kept: Bounds = {}
    for mq, by_time in found.items():
        pairs = sorted(by_time.items())
        at = committed.get(mq)
        below = [] if at is None else [p for p in pairs if p[1] <= at][-BOUNDS_KEPT_PASSED:]
        above = pairs if at is None else [p for p in pairs if p[1] > at]
        if len(above) > BOUNDS_KEPT:
            above = above[: BOUNDS_KEPT // 2] + above[-(BOUNDS_KEPT // 2) :]
        if below or above:
            kept[mq] = dict(below + above)
    return kept
