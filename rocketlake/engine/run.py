"""The one run of an ingestion, in order: the sequence production runs and the unit tests drive.

``run`` is a generator. It makes every decision of the exactly-once protocol itself and hands its
caller (the Dagster asset, or a test) two events to translate:

* ``Landed``: the slice is committed and its accounting known. A balanced landing must be recorded
  by the caller (Dagster: the ``MaterializeResult``) before the caller asks for the next event; an
  unbalanced one must not be recorded: ``run`` raises ``Unbalanced`` when resumed, and no offset moves.
* ``Committed``: the group's offsets moved over what the record covers; the positions, for an observation.

The results, each named once: ``Lake.land`` answers a ``LandingReport`` (the Delta commit, the accounting per
window, the failures); ``ingest.land`` pairs it with the entry as planned in a ``LandedSlice``; ``Landed`` carries that
slice to the caller with the share and the prepared state, and ``Committed`` the offsets' moves.

Nothing here knows Dagster or Spark: the run talks to ``ingest.Broker``, ``ingest.Lake``,
``ingest.RecordedRuns`` and ``Group`` (membership and the orderly locks).

The order, and why:
1. every window is closed (its store-time range can no longer grow);
2. this member's share of the queues (membership, strategy, a rebalance sensor's narrowing);
3. ``prepare``: repair offsets an earlier recorded landing did not commit, decide where the group stands;
4. ``land`` (steps 4 to 8 under the orderly locks): plan exact ranges, one Delta commit of slice and ledger entry
   (verdict pending), then the read-back accounting;
5. send back the failures (CLUSTERING), only for a balanced landing;
6. the verdict commit: whether that slice balanced and everything it owed is done, for every member that reads it;
7. ``Landed``: the caller records the materialization, or not;
8. commit the offsets, only over entries the record or a balanced verdict covers;
9. ``Committed``, then compaction of the days that are over (best effort, still in the group's slot).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Protocol

from rocketlake.engine import ingest
from rocketlake.engine.assignment import Assignment, member_share
from rocketlake.engine.config import IngestionConfig
from rocketlake.engine.identity import client_id
from rocketlake.engine.ingest import Broker, Lake, LandedSlice, RecordedRuns, WindowsBetween
from rocketlake.engine.offsets import OffsetMove
from rocketlake.engine.windows import StoreTimeWindow, WindowNotClosed
from rocketlake.rocketmq.message_queue import MessageQueue


class RunLog(Protocol):
    """Where a run's lines go: Dagster's ``context.log`` or a ``logging.Logger``."""

    def info(self, msg: str) -> None: ...

    def warning(self, msg: str) -> None: ...


class Group(Protocol):
    """What a run needs of the consumer group beyond its queues: who its members are, and the orderly locks."""

    def members(self) -> list[str]:
        """The group's client ids as the brokers list them (empty for BROADCASTING)."""

    def locked(self, queues: list[MessageQueue], log: Callable[[str], None]) -> AbstractContextManager:
        """Hold the broker locks of ``queues`` for this member while the body runs; the body gets an object whose
        ``check()`` raises if a lock was lost meanwhile (or None when nothing is locked)."""


class Alone:
    """A ``Group`` of one member that takes every queue and locks nothing (a test's, a backfill's own)."""

    def members(self) -> list[str]:
        return []

    def locked(self, queues, log) -> AbstractContextManager:
        return nullcontext()


@dataclass(frozen=True)
class LandingRequest:
    """What the caller asks of one run (not ``dagster.RunRequest``, which asks Dagster for a run)."""

    ingestion: str
    run_id: str
    windows: list[tuple[str, StoreTimeWindow]]  # (partition key, window), in any order
    now_ms: int
    first_window_start_ms: int  # where the ingestion's windows begin (cfg.window.start)
    start_at_group_position: bool  # scheduled runs start where the group stands; a backfill takes whole windows
    only_queues: Collection[MessageQueue] | None = None  # a rebalance sensor's narrowing of this member's share
    windows_between: WindowsBetween | None = None  # orderly resumes reach back to earlier windows


@dataclass(frozen=True)
class Landed:
    slice: LandedSlice  # the slice replaced and what the lake reported
    share: Assignment
    columns: list[tuple[str, str, bool]]  # the table's columns after the commit (``Lake.columns``)
    prepared: ingest.Prepared  # where the group stood before the landing

    @property
    def balanced(self) -> bool:
        return self.slice.balanced


@dataclass(frozen=True)
class Committed:
    moves: list[OffsetMove]
    positions: dict[MessageQueue, int | None]  # the group's offsets after the commit, per queue of this member


class SeveralWriters(RuntimeError):
    """The group has several members (deployments) and its table's storage is safe with one writer only."""


class BrokersSilent(ConnectionError):
    """No broker of the member's queues answers: a transient state, retried as a connection failure is."""


class GroupSharedWithPop(RuntimeError):
    """5.x POP consumers share the consumer group: refused before anything is read (``Broker.pop_refusal``)."""


class Unbalanced(RuntimeError):
    """The landing's rows do not add up to its ranges: nothing was recorded, no offset moved."""


def still_held(held) -> None:
    """Raise if the orderly locks ``held`` (what ``Group.locked`` gave; None when nothing is locked) were lost."""
    if held is not None:
        held.check()


def check_closed(request: LandingRequest, cfg: IngestionConfig) -> None:
    """Refuse the run in one sentence if one of its windows is not closed (end + grace) yet."""
    for key, window in request.windows:
        try:
            window.check_closed(request.now_ms, cfg.window.grace_seconds * 1000)
        except WindowNotClosed as e:
            raise WindowNotClosed(f"partition {key}: {e}") from None


def run(
    broker: Broker,
    lake: Lake,
    recorded: RecordedRuns,
    group: Group,
    cfg: IngestionConfig,
    request: LandingRequest,
    log: RunLog,
) -> Iterator[Landed | Committed]:
    check_closed(request, cfg)
    shared = broker.pop_refusal()
    if shared is not None:
        raise GroupSharedWithPop(shared)  # before anything is read

    share = member_share(cfg, broker.subscribed_queues(), group.members(), request.only_queues)
    log.info(share.describe())
    refusal = lake.writers_refusal(share.members)
    if refusal is not None:
        raise SeveralWriters(refusal)  # before anything is read or written
    # A broker that does not answer (down, paused, cut off while the name server still routes to it) holds no
    # other broker's queues back: its queues are left out of this run, and land once it answers again (the lag
    # sensor's catch-up finds them trailing). Only when no broker of the share answers does the run fail.
    silent = broker.silent_brokers(share.taken)
    if silent:
        listed = "; ".join(f"{name}: {why}" for name, why in sorted(silent.items()))
        if all(q.broker_name in silent for q in share.taken):
            raise BrokersSilent(
                f"no broker of the group's queues answers ({listed}); nothing was read and no "
                "offset moved. Check that the brokers are up and reachable from here"
            )
        log.warning(
            f"broker(s) {', '.join(sorted(silent))} do not answer ({listed}): their queues are left out of "
            "this run and land once they answer again"
        )
    prepared = ingest.prepare(
        broker,
        lake,
        recorded,
        cfg,
        request.now_ms,
        request.first_window_start_ms,
        member=client_id(cfg),
        taken=share.taken,
        silent=silent,
    )
    for tail in prepared.replaced:  # a failover lost messages the table has: say what happened, once per queue
        log.warning(tail.describe(cfg.consumer_group))
    for move in prepared.repaired:
        log.info(f"repaired offset of {move.queue}: {move.before} -> {move.after} (landed by an earlier run)")

    # Orderly runs hold the queue locks from the landing through the offset commit, as Java's
    # ConsumeMessageOrderlyService holds them through its offset update: a member that takes a queue over
    # finds it landed, sent back, decided and committed, or untouched by this run's later steps.
    with group.locked(prepared.queues, log.info) if cfg.consume_orderly else nullcontext() as held:
        landed = ingest.land(
            broker,
            lake,
            cfg,
            request.ingestion,
            request.run_id,
            request.windows,
            prepared,
            start_at_group_position=request.start_at_group_position,
            log=log.info,
            now_ms=request.now_ms,
            windows_between=request.windows_between,
        )
        # The failures go back before the verdict: a balanced verdict is what lets any member (another
        # deployment, or this one under a new client id) move offsets over the slice without asking Dagster,
        # so it must only exist once every side effect of the landing is done. A run killed part-way through
        # the send-back leaves the verdict pending: the window is landed again and its failures sent again
        # (a copy that comes back twice lands once: ``consume.mark_known``).
        still_held(held)  # a member that took a queue over must not see it sent back and decided by this run
        if landed.balanced:
            ingest.send_back(broker, cfg, landed, log.info)
        verdict = ingest.verdict_of(landed)
        if verdict is not None:
            lake.record_verdict(verdict)
        yield Landed(landed, share, lake.columns(), prepared)
        if not landed.balanced:
            raise Unbalanced(
                "the accounting check failed: the table's rows of these windows do not add up to "
                "their ranges (see the check's windows); the landing is marked unbalanced in the ledger "
                "and no offset moved. Running the windows again lands them anew."
            )

        if request.run_id not in recorded.among(landed.ledger.partition_keys):
            log.warning(
                "the materialization is not visible in the instance yet; offsets will be committed by the next run"
            )
            return
        still_held(held)
        moves = ingest.commit(broker, recorded, prepared, landed.ledger)
        for move in moves:
            log.info(f"committed offset of {move.queue}: {move.before} -> {move.after}")
        positions = {mq: broker.committed_offset(mq) for mq in prepared.queues}
    yield Committed(moves, positions)

    closed_before_ms = request.now_ms - cfg.window.grace_seconds * 1000
    try:
        done = lake.compact(landed.ledger, closed_before_ms)
    except Exception as e:  # noqa: BLE001 - any failure of an optional maintenance step is reported, not raised
        # A failure leaves the table as it was (one Delta commit or none) and is retried when a later run lands
        # a window of that day; it does not fail a run whose data and offsets are landed.
        log.warning(f"compaction skipped: {type(e).__name__}: {str(e)[:300]}")
        return
    for day, removed, added in done:
        log.info(f"compacted day {day}: {removed} files -> {added}")
    if not done:
        return
    try:  # once a day, after its compaction: the files compaction replaced are the ones to delete
        retention = lake.vacuum()
    except Exception as e:  # noqa: BLE001 - maintenance, as above
        log.warning(f"VACUUM skipped: {type(e).__name__}: {str(e)[:300]}")
        return
    if retention is not None:
        log.info(f"vacuumed the table: files out of it for more than {retention} h deleted")
