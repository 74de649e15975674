"""How the demo's downstream assets follow the landed table: in batches, one run at a time, exact after re-landings.

A schedule that asks for one run per new window per downstream asset makes a window's landing cost as many runs as
there are downstream assets (four runs a minute, each a process, on the demo), and queues them when a run is slow.
The pattern here is the one to copy instead:

* **stale, not missing.** A window is stale for the downstream asset when the table's latest materialization of it
  is newer than the downstream's (Dagster's storage ids are ordered): a window landed again (a backfill, a repair)
  is computed again; one never landed upstream is never computed.
* **in batches.** The stale windows that follow each other make one run over their partition range (the asset has
  a single-run backfill policy and replaces exactly the windows of its range).
* **one at a time.** While a run of the follower's job is queued or running, the tick asks for nothing: that run's
  windows stop being stale when it ends, and what it did not take is still stale at the next tick.
* **soon after the landing.** A sensor ticking every ``FOLLOW_EVERY_S`` seconds, not a cron: a follower on the
  minute's cron started up to a minute after the table's window landed (74 s from the window's close to the
  aggregate, against 15 s to the table, in ``benchmarks/steady_state.py``).
* **only when rows changed.** A landing that changed no row of the table (a quiet window's ledger commit alone says
  so in its metadata, ``rocketlake/rows_changed``) gives a follower nothing to do: windows stale only through such
  landings ask for no run, and join the next run whose range reaches them.
* **together.** The followers of one table share a run (``follow_together``): a run's fixed cost (a process that
  imports Dagster and the code location, a Spark session) is paid once per batch, not once per follower.
"""

# No "from __future__ import annotations": Dagster inspects the sensor's context annotation at runtime.
from collections.abc import Mapping

from dagster import (
    AssetKey,
    AssetRecordsFilter,
    DagsterEventType,
    DagsterInstance,
    DefaultSensorStatus,
    RunRequest,
    RunsFilter,
    SensorEvaluationContext,
    SkipReason,
    sensor,
)

from rocketlake.dagster.metadata import ROWS_CHANGED
from rocketlake.dagster.partitions import RANGE_END, RANGE_START, contiguous_ranges
from rocketlake.dagster.run_guard import ON_ITS_WAY
from rocketlake.dagster.tick_instance import tick_instance

#: Materializations read a page at a time, and at most this many: beyond, a follower runs without reading more.
PAGE, LOOK_AT_MOST = 100, 500
#: Windows only ever landed quiet wait for a run until this many do (an hour of minute windows): then one run
#: follows them all, so they neither cost a run each nor stay stale for ever.
QUIET_BATCH = 60
#: How often a follower looks for landings to follow: each look is a call to the code server by the daemon.
FOLLOW_EVERY_S = 15


def stale_windows(upstream: Mapping[str, int], downstream: Mapping[str, int]) -> list[str]:
    """The partition keys whose upstream materialization (storage id) is newer than the downstream's, sorted."""
    return sorted(key for key, landed in upstream.items() if downstream.get(key, -1) < landed)


def busy(instance: DagsterInstance, job_name: str) -> SkipReason | None:
    """Why a follower asks for nothing now: a run of its job is queued or running; None when none is."""
    if instance.get_run_ids(RunsFilter(job_name=job_name, statuses=ON_ITS_WAY), limit=1):
        return SkipReason(f"a run of {job_name} is queued or running; the next tick takes what it leaves")
    return None


def changed_rows(record) -> bool:
    """Whether a materialization of the table changed its rows: one that does not say (a user's, an older
    rocketlake's) counts as changed."""
    said = record.asset_materialization.metadata.get(ROWS_CHANGED)
    return said is None or bool(said.value)


def changed_since(
    instance: DagsterInstance, upstream: AssetKey, followed: Mapping[str, int], partitions: list[str] | None = None
) -> set[str | None] | None:
    """The partitions (None for an unpartitioned one) of ``upstream`` with a materialization newer than
    ``followed[partition]`` (or than ``followed[None]``: one storage id for all) that changed rows; None when there
    are more than ``LOOK_AT_MOST`` to read (the caller then treats everything as changed)."""
    floor = min(followed.values(), default=-1)
    records_filter = AssetRecordsFilter(
        asset_key=upstream, asset_partitions=partitions, after_storage_id=floor if floor >= 0 else None
    )
    changed, cursor, seen = set(), None, 0
    while True:
        page = instance.fetch_materializations(records_filter, limit=PAGE, cursor=cursor)
        for record in page.records:
            key = record.partition_key
            if record.storage_id > followed.get(key, followed.get(None, -1)) and changed_rows(record):
                changed.add(key)
        seen += len(page.records)
        if not page.has_more:
            return changed
        if seen >= LOOK_AT_MOST:
            return None
        cursor = page.cursor


def rows_changed_since(instance: DagsterInstance, upstream: AssetKey, followed: int | None) -> bool:
    """Whether a materialization of ``upstream`` after storage id ``followed`` (None: ever) changed rows."""
    changed = changed_since(instance, upstream, {None: -1 if followed is None else followed})
    return changed is None or bool(changed)


def latest_storage_id(instance: DagsterInstance, key: AssetKey) -> int | None:
    """The storage id of the asset's latest materialization (ordered like the event log); None when it has none."""
    records = instance.fetch_materializations(AssetRecordsFilter(asset_key=key), limit=1).records
    return records[0].storage_id if records else None


def newest_stale_range(
    instance: DagsterInstance, upstream: AssetKey, downstream: AssetKey, partitions_def
) -> RunRequest | None:
    """A run over the newest range of windows stale for ``downstream``, or None when none is."""
    latest = instance.get_latest_storage_id_by_partition
    stale = stale_windows(
        latest(upstream, DagsterEventType.ASSET_MATERIALIZATION),
        latest(downstream, DagsterEventType.ASSET_MATERIALIZATION),
    )
    if not stale:
        return None
    ranges = contiguous_ranges(stale, partitions_def.get_next_partition_key)
    changed = None
    if len(stale) <= LOOK_AT_MOST:
        followed = latest(downstream, DagsterEventType.ASSET_MATERIALIZATION)
        changed = changed_since(instance, upstream, {k: followed.get(k, -1) for k in stale}, stale)
    if changed is not None:
        # A range whose windows were only landed quiet (no row changed) waits: the next range that changes rows and
        # reaches it takes it along, or, once QUIET_BATCH windows wait, one run takes the oldest of them.
        with_rows = [(first, last) for first, last in ranges if any(first <= k <= last for k in changed)]
        if with_rows:
            ranges = with_rows
        elif len(stale) >= QUIET_BATCH:
            ranges = ranges[:1]
        else:
            return None
    first, last = ranges[-1]  # the newest first
    # No run key: a failed run's windows are still stale at the next tick, and are asked for again.
    return RunRequest(tags={RANGE_START: first, RANGE_END: last})


def follow(job, upstream: AssetKey, downstream: AssetKey, partitions_def, every_s: int = FOLLOW_EVERY_S):
    """The downstream job over the newest range of windows stale for it, one run at a time (see the module)."""

    @sensor(
        name=f"{job.name}_follows",
        job=job,
        minimum_interval_seconds=every_s,
        default_status=DefaultSensorStatus.RUNNING,
        description=f"Materializes {downstream.to_user_string()} over the windows of "
        f"{upstream.to_user_string()} landed (or landed again) since it last did, in one run.",
    )
    def follows(context: SensorEvaluationContext):
        instance = tick_instance(context)
        if wait := busy(instance, job.name):
            return wait
        return newest_stale_range(instance, upstream, downstream, partitions_def) or SkipReason(
            f"{downstream.to_user_string()} is up to date with {upstream.to_user_string()}"
        )

    return follows


def follow_changes(job, upstream: AssetKey, downstream: AssetKey, every_s: int = FOLLOW_EVERY_S):
    """The job of an asset that reads its upstream's change feed, after new materializations of it, one run at a
    time: a run reads whatever changed since the last one, so one run covers every landing before it."""

    @sensor(
        name=f"{job.name}_follows",
        job=job,
        minimum_interval_seconds=every_s,
        default_status=DefaultSensorStatus.RUNNING,
        description=f"Materializes {downstream.to_user_string()} after new materializations of "
        f"{upstream.to_user_string()}, one run at a time.",
    )
    def follows(context: SensorEvaluationContext):
        instance = tick_instance(context)
        if wait := busy(instance, job.name):
            return wait
        landed, followed = (
            latest_storage_id(instance, upstream),
            latest_storage_id(instance, downstream),
        )
        if landed is None:
            return SkipReason(f"{upstream.to_user_string()} has no materialization yet")
        if (followed is not None and followed > landed) or not rows_changed_since(instance, upstream, followed):
            return SkipReason(
                f"{downstream.to_user_string()} has followed every landing of {upstream.to_user_string()} "
                "that changed rows"
            )
        return RunRequest()  # no run key: a failed run is asked for again at the next tick

    return follows


def follow_together(
    job, upstream: AssetKey, windowed: AssetKey, partitions_def, changes: AssetKey, every_s: int = FOLLOW_EVERY_S
):
    """Both kinds of follower of one table in one job and one run at a time: ``windowed`` over the newest range of
    windows stale for it (as ``follow``) and, in the same run, ``changes``, which reads the table's change feed since
    its last run (as ``follow_changes``); when only ``changes`` is behind, a run of it alone."""

    @sensor(
        name=f"{job.name}_follows",
        job=job,
        minimum_interval_seconds=every_s,
        default_status=DefaultSensorStatus.RUNNING,
        description=f"Materializes {windowed.to_user_string()} over the windows of {upstream.to_user_string()} "
        f"landed (or landed again) since it last did, and {changes.to_user_string()} after them, "
        "in one run.",
    )
    def follows(context: SensorEvaluationContext):
        instance = tick_instance(context)
        if wait := busy(instance, job.name):
            return wait
        if request := newest_stale_range(instance, upstream, windowed, partitions_def):
            return request  # both assets: the windowed one over the range, the change feed after the same landings
        landed, followed = latest_storage_id(instance, upstream), latest_storage_id(instance, changes)
        if (
            landed is not None
            and (followed is None or followed < landed)
            and rows_changed_since(instance, upstream, followed)
        ):
            return RunRequest(asset_selection=[changes])
        return SkipReason(
            f"{windowed.to_user_string()} and {changes.to_user_string()} are up to date with "
            f"{upstream.to_user_string()}"
        )

    return follows
