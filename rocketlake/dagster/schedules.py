"""A schedule per ingestion: every window once it is closed (end + grace), exactly once.

It ticks every minute and asks for the most recent closed windows that are neither materialized nor
already asked for: a window with a run of the job queued or in progress is left to that run. (A schedule's
run key only deduplicates within one tick, so without that a window whose run waits for its group's pool
slot, or outlasts a tick, would be asked for again at every tick.) A short outage of the daemon is caught up
(``CATCH_UP`` windows back) without flooding a new deployment with every window since ``window.start``;
a window whose run failed is asked for again while it is among those.

Windows that follow each other are asked for in one run (its partition range), and a tick that finds two runs of
the job on their way (one landing, one waiting for the group's pool) asks for nothing (``MOST_ON_ITS_WAY``): on a
machine where a run outlasts its window, the next run takes every window closed meanwhile, so the pipeline keeps
up instead of queueing a run per window for ever (seen on 2 cores under load: 8 runs queued and growing).

A minute's tick cannot fall on a window's close when the grace is not a whole number of minutes: with a 2 s
grace the window would wait 58 s for the next tick. So a tick also asks for the window that closes before the
next tick (``LEAD``), tagged with its close (``CLOSES_AT_TAG``); its run waits for that close before it plans
anything (``dagster.ingestion.wait_for_close``), and every rule of a closed window holds as before. Closed windows
asked for at the same tick that lead up to it are asked for in its run: when ``make ui`` starts after windows closed
unlanded, one run takes them and the window closing now, where two would queue behind each other.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from dagster import (
    AssetCheckKey,
    AssetSelection,
    DefaultScheduleStatus,
    RunRequest,
    RunsFilter,
    ScheduleDefinition,
    ScheduleEvaluationContext,
    SkipReason,
    define_asset_job,
    schedule,
)

from rocketlake.dagster.catch_up import CAUGHT_UP_CHECK
from rocketlake.dagster.ingestion import CLOSES_AT_TAG, LEAD_SECONDS
from rocketlake.dagster.lag import LAG_CHECKS
from rocketlake.dagster.partitions import (
    RANGE_END,
    RANGE_START,
    contiguous_ranges,
    last_closed_windows,
    materialized_among,
    run_windows,
    window_end,
    window_partitions,
)
from rocketlake.dagster.run_guard import ON_ITS_WAY, rocketlake_executor
from rocketlake.dagster.tick_instance import tick_instance
from rocketlake.dagster.translator import IngestionAssets
from rocketlake.engine.config import IngestionConfig

CATCH_UP = 3
#: Runs of the job on their way (queued, starting, running) past which a tick asks for nothing: one landing and
#: one waiting keep the group's pool busy, and the next run takes every window closed meanwhile.
MOST_ON_ITS_WAY = 2
LEAD = timedelta(seconds=LEAD_SECONDS)


def build_window_schedule(cfg: IngestionConfig, assets: IngestionAssets, running: bool = False) -> ScheduleDefinition:
    partitions = window_partitions(cfg.window)
    # A CLUSTERING group's dead letters are landed in the same runs, after the table (``<table>_dlq``).
    dead_letters = [assets.dead_letters.key] if assets.dead_letters else []
    # The lag sensor evaluates the freshness and lag checks every minute; a window's run does not.
    minute_checks = AssetSelection.checks(
        *(AssetCheckKey(assets.table_key, name) for name in LAG_CHECKS),
        *(AssetCheckKey(key, CAUGHT_UP_CHECK) for key in dead_letters),
    )
    selection = AssetSelection.assets(assets.table_key, *dead_letters) - minute_checks
    job = define_asset_job(
        assets.job_name,
        selection=selection,
        executor_def=rocketlake_executor,
        tags={MAX_RUNTIME_TAG: str(max_runtime_seconds(cfg))},
    )

    @schedule(
        name=assets.name("windows"),
        job=job,
        cron_schedule="* * * * *",
        execution_timezone=cfg.window.timezone,
        default_status=DefaultScheduleStatus.RUNNING if running else DefaultScheduleStatus.STOPPED,
        description=f"Materializes each closed window of {cfg.table} ({cfg.window.cron}, "
        f"+{cfg.window.grace_seconds}s grace).",
    )
    def windows(context: ScheduleEvaluationContext):
        closed = last_closed_windows(partitions, context.scheduled_execution_time, cfg.window.grace_seconds, CATCH_UP)
        instance = tick_instance(context)
        on_its_way = instance.get_runs(RunsFilter(job_name=job.name, statuses=ON_ITS_WAY))
        if len(on_its_way) >= MOST_ON_ITS_WAY:
            # Behind: runs take longer than a window. What closes meanwhile waits for a later tick, where one run
            # takes every window left, instead of a run per window queueing up for ever.
            return SkipReason(
                f"{len(on_its_way)} runs of {job.name} are on their way; the windows closed meanwhile "
                "are asked for together once one of them ends"
            )
        materialized = materialized_among(instance, assets.table_key, closed)
        pending = set().union(*(run_windows(partitions, run.tags) for run in on_its_way))
        # The last CATCH_UP closed windows that no run landed or is landing, oldest first, and the window that closes
        # before the next tick: one run per window, or one run over several that follow each other (after an outage,
        # while runs outlast windows, or the windows closed since the daemon stopped and the one closing now).
        missing = [key for key in closed if key not in materialized | pending]
        soon = closing_soon(partitions, context.scheduled_execution_time, cfg.window.grace_seconds)
        lead = soon if soon is not None and soon[0] not in pending else None
        if lead is not None:
            missing.append(lead[0])
        requests = []
        for first, last in contiguous_ranges(missing, partitions.get_next_partition_key):
            # A run that takes the window closing soon waits for its close (at most the grace past the tick) before
            # it plans: the closed windows before it in the same run wait that long too, rather than a second run
            # queueing behind theirs.
            tags = {CLOSES_AT_TAG: str(int(lead[1].timestamp() * 1000))} if lead and last == lead[0] else {}
            if first == last:
                requests.append(RunRequest(run_key=first, partition_key=first, tags=tags))
            else:
                requests.append(
                    RunRequest(run_key=f"{first}...{last}", tags={RANGE_START: first, RANGE_END: last, **tags})
                )
        return requests

    return windows


#: Dagster's run-monitoring limit of a run (every run of the job carries it, however it was started)
MAX_RUNTIME_TAG = "dagster/max_runtime"
#: the run's own deadline (``run_timeout``, from its step's start) fails it with a sentence first; Dagster's ends a
#: run whose process no longer answers at all, this much later (the time to start the process and its step)
MAX_RUNTIME_MARGIN_S = 300


def max_runtime_seconds(cfg: IngestionConfig) -> int:
    return int(cfg.run_timeout_seconds) + MAX_RUNTIME_MARGIN_S


def closing_soon(partitions, now: datetime, grace_seconds: int) -> tuple[str, datetime] | None:
    """(key, close) of the window that closes after ``now`` and before the next tick (``now + LEAD``), if one does
    (at most one: a window is at least a minute long)."""
    for key in last_closed_windows(partitions, now + LEAD - timedelta(microseconds=1), grace_seconds, 1):
        closes_at = window_end(partitions, key) + timedelta(seconds=grace_seconds)
        if closes_at > now:
            return key, closes_at
    return None
