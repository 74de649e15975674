"""A sensor per orderly ingestion whose messages can fail: it resumes a suspended queue once its pause is over.

A queue suspended at a message (SUSPEND_CURRENT_QUEUE_A_MOMENT) waits ``suspend_current_queue_time_millis``; the
next run after that resumes it. With windows of an hour, the next scheduled run could be an hour away, so this
sensor reads the suspensions the table's latest materialization reports (``rocketlake/suspended_queues``) and, when
one is due, asks for a run of that partition that starts where the group stands (tag ``rocketlake/resume``): the
queues already past it have nothing to land, the suspended one resumes at its message. One request per
materialization at most (its run id is in the run key), so a resume that fails again waits for the new pause its
own materialization reports.
"""

from __future__ import annotations

import time

from dagster import (
    DefaultSensorStatus,
    RunRequest,
    SensorDefinition,
    SensorEvaluationContext,
    SkipReason,
    sensor,
)

from rocketlake.dagster.ingestion import RESUME_TAG
from rocketlake.dagster.metadata import SUSPENDED, suspended_from
from rocketlake.dagster.tick_instance import tick_instance
from rocketlake.dagster.translator import IngestionAssets
from rocketlake.engine.config import IngestionConfig
from rocketlake.engine.windows import iso

CHECK_EVERY_S = 10


def build_resume_sensor(cfg: IngestionConfig, assets: IngestionAssets) -> SensorDefinition:
    asset_key = assets.table_key

    @sensor(
        name=assets.name("orderly_resume"),
        minimum_interval_seconds=CHECK_EVERY_S,
        asset_selection=[asset_key],
        default_status=DefaultSensorStatus.RUNNING,
        description=f"Resumes the suspended queues of {cfg.table} (orderly) once their pause of "
        f"{cfg.suspend_current_queue_time_millis} ms is over, without waiting for the schedule.",
    )
    def orderly_resume(context: SensorEvaluationContext):
        event = tick_instance(context).get_latest_materialization_event(asset_key)
        if event is None or event.asset_materialization is None:
            return SkipReason(f"{cfg.table} has no materialization yet")
        materialization = event.asset_materialization
        entry = materialization.metadata.get(SUSPENDED)
        suspended = suspended_from(entry) if entry is not None else {}
        if not suspended:
            return SkipReason(f"no queue of {cfg.table} is suspended")
        now_ms = int(time.time() * 1000)
        due = sorted(q for q, s in suspended.items() if s["retry_after_ms"] <= now_ms)
        if not due:
            first = min(s["retry_after_ms"] for s in suspended.values())
            return SkipReason(f"{len(suspended)} suspended queue(s) of {cfg.table} wait until {iso(first)}")
        described = ", ".join(
            f"{q} at offset {suspended[q]['offset']} ({suspended[q]['attempts']} failed attempt(s))" for q in due
        )
        context.log.info(f"resuming {described}: a run of partition {materialization.partition}")
        return RunRequest(
            run_key=f"resume:{event.run_id}:{','.join(due)}",
            partition_key=materialization.partition,
            tags={RESUME_TAG: ",".join(due)},
        )

    return orderly_resume
