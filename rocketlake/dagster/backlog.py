"""A sensor per cluster, ``rocketlake_<cluster>_retry_backlog``, that reports each CLUSTERING ingestion's retry
topic and dead-letter queue backlog.

Every 60 s it measures for each (``engine.backlog``) the messages waiting in ``%RETRY%<group>`` and
``%DLQ%<group>`` and the age of the oldest, and records them as an observation of its table's asset whenever they change, so the UI
plots them next to the windows; a dead letter waiting, or a retry older than ``RETRY_AGE_WARNING_S``, is also a
warning in the sensor's log. Sent-back messages come back within the broker's delays (at most 2 h by default), so a
retry much older than that means the ingestion is not running.
"""

from __future__ import annotations

import json
import time

from dagster import (
    AssetObservation,
    DefaultSensorStatus,
    MetadataValue,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from rocketlake.dagster.cluster_tick import Members, read_each, tick_summary, tick_timeout_ms
from rocketlake.dagster.ingestion import rocketmq_resource_key
from rocketlake.dagster.translator import IngestionAssets, cluster_sensor_name
from rocketlake.engine.backlog import Backlog, backlog_of
from rocketlake.engine.config import DLQ_GROUP_TOPIC_PREFIX, IngestionConfig
from rocketlake.rocketmq.message import retry_topic

RETRY_WAITING = "rocketlake/retry_waiting"
RETRY_OLDEST_AGE = "rocketlake/retry_oldest_age_seconds"
DLQ_WAITING = "rocketlake/dead_letters_waiting"
DLQ_OLDEST_AGE = "rocketlake/dead_letters_oldest_age_seconds"
DLQ_TOTAL = "rocketlake/dead_letters_total"
RETRY_AGE_WARNING_S = 3 * 3600


def backlog_events(
    cfg: IngestionConfig, assets: IngestionAssets, retry: Backlog, dead: Backlog, now_ms: int, log
) -> tuple[list, list, str]:
    """One ingestion's figures (what the cursor keeps), its observation (none when unchanged) and its summary."""
    summary = f"{retry.describe(now_ms)}; {dead.describe(now_ms)}"
    if dead.waiting:
        log.warning(
            f"{dead.waiting} dead letter(s) of {cfg.consumer_group} wait to be landed in "
            f"{assets.dead_letters.key.to_user_string()}: {summary}"
        )
    if retry.waiting and (retry.age_seconds(now_ms) or 0) > RETRY_AGE_WARNING_S:
        log.warning(f"the retry topic of {cfg.consumer_group} backs up: {summary}")
    figures = [retry.waiting, retry.oldest_store_ms, dead.waiting, dead.oldest_store_ms, dead.total]
    metadata = {
        RETRY_WAITING: MetadataValue.int(retry.waiting),
        DLQ_WAITING: MetadataValue.int(dead.waiting),
        DLQ_TOTAL: MetadataValue.int(dead.total),
    }
    for key, backlog in ((RETRY_OLDEST_AGE, retry), (DLQ_OLDEST_AGE, dead)):
        age = backlog.age_seconds(now_ms)
        if age is not None:
            metadata[key] = MetadataValue.float(age)
    return figures, [AssetObservation(asset_key=assets.table_key, metadata=metadata, description=summary)], summary


def build_backlog_sensor(cluster: str, members: Members) -> SensorDefinition:
    """One sensor for every CLUSTERING ingestion of ``cluster``, one client a tick (``dagster.cluster_tick``). Its
    cursor keeps each ingestion's last figures, by table: an ingestion is observed again only when they change."""
    rocketmq_key = rocketmq_resource_key(cluster)
    timeout_ms = tick_timeout_ms(members)
    tables = [assets.table_key for _, assets in members]

    def measure(client, cfg: IngestionConfig) -> tuple[Backlog, Backlog]:
        return (
            backlog_of(client, cfg.consumer_group, retry_topic(cfg.consumer_group)),
            backlog_of(client, cfg.consumer_group, DLQ_GROUP_TOPIC_PREFIX + cfg.consumer_group),
        )

    @sensor(
        name=cluster_sensor_name(cluster, tables, "retry_backlog"),
        minimum_interval_seconds=60,
        required_resource_keys={rocketmq_key},
        asset_selection=tables,
        default_status=DefaultSensorStatus.STOPPED,
        description=f"Reports, for each CLUSTERING ingestion of cluster {cluster}, the messages waiting in "
        "%RETRY%<group> and %DLQ%<group> (count and age of the oldest) on its table.",
    )
    def retry_backlog(context: SensorEvaluationContext):
        resource = getattr(context.resources, rocketmq_key)
        now_ms = int(time.time() * 1000)
        with resource.open_client(timeout_ms) as client:
            read, failed = read_each(
                members, lambda cfg: measure(client, cfg), "measure the retry and dead-letter backlog", context.log
            )
        cursor = json.loads(context.cursor) if context.cursor else {}
        events, said = [], []
        for cfg, assets, (retry, dead) in read:
            figures, observed, summary = backlog_events(cfg, assets, retry, dead, now_ms, context.log)
            key = assets.table_key.to_user_string()
            if cursor.get(key) != figures:
                cursor[key] = figures
                events += observed
            said.append(f"{cfg.consumer_group}: {summary}")
        summary = tick_summary(said, failed)
        if not events:
            return SensorResult(skip_reason=SkipReason(f"unchanged: {summary}"), cursor=json.dumps(cursor))
        return SensorResult(asset_events=events, skip_reason=SkipReason(summary), cursor=json.dumps(cursor))

    return retry_backlog
