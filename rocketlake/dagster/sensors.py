"""Sensors the Dagster daemon evaluates for rocketlake.

``rocketlake_dead_runs`` does, every 30 seconds, what every rocketlake run does when it starts
(``run_guard.reclaim_dead_runs``): a run whose process died on this host is marked failed and its pool slots
are freed. Without it, a group whose run died would wait for its next run to clean up; with a queued run
coordinator that enforces pools per run, that next run would never be launched at all.
"""

from __future__ import annotations

from dagster import DefaultSensorStatus, SensorEvaluationContext, SkipReason, sensor

from rocketlake.dagster.run_guard import reclaim_dead_runs
from rocketlake.dagster.tick_instance import tick_instance


@sensor(
    name="rocketlake_dead_runs",
    minimum_interval_seconds=30,
    default_status=DefaultSensorStatus.RUNNING,
    description="Marks rocketlake runs whose process died on this host as failed and frees their pool slots, "
    "so the consumer group's next run is never blocked.",
)
def dead_runs_sensor(context: SensorEvaluationContext) -> SkipReason:
    lines = reclaim_dead_runs(tick_instance(context))
    for line in lines:
        context.log.warning(line)
    return SkipReason("; ".join(lines) if lines else "no dead rocketlake run holds a pool slot")
