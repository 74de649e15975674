"""A sensor per CLUSTERING ingestion that reports the retry topic's and the dead-letter queue's backlog.

Every 60 s it measures (``pipelines.backlog``) the messages waiting in ``%RETRY%<group>`` and ``%DLQ%<group>`` and
the age of the oldest, and records them as an observation of the table's asset whenever they change, so the UI
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

from rocketlake.assets.ingestion import rocketmq_resource_key
from rocketlake.pipelines.backlog import backlog_of
from rocketlake.pipelines.config import DLQ_GROUP_TOPIC_PREFIX, IngestionConfig
from rocketlake.resources.rocketmq.errors import RocketMQError
from rocketlake.resources.rocketmq.message import retry_topic
from rocketlake.assets.translator import IngestionAssets

RETRY_WAITING = "rocketlake/retry_waiting"
RETRY_OLDEST_AGE = "rocketlake/retry_oldest_age_seconds"
DLQ_WAITING = "rocketlake/dead_letters_waiting"
DLQ_OLDEST_AGE = "rocketlake/dead_letters_oldest_age_seconds"
DLQ_TOTAL = "rocketlake/dead_letters_total"
RETRY_AGE_WARNING_S = 3 * 3600


def build_backlog_sensor(cfg: IngestionConfig, assets: IngestionAssets) -> SensorDefinition:
    asset_key = assets.table_key
    rocketmq_key = rocketmq_resource_key(cfg.cluster)

    @sensor(name=assets.name("retry_backlog"), minimum_interval_seconds=60, required_resource_keys={rocketmq_key},
            asset_selection=[asset_key], default_status=DefaultSensorStatus.STOPPED,
            description=f"Reports the messages waiting in %RETRY%{cfg.consumer_group} and "
                        f"%DLQ%{cfg.consumer_group} (count and age of the oldest) on {cfg.table}.")
    def retry_backlog(context: SensorEvaluationContext):
        resource = getattr(context.resources, rocketmq_key)
        now_ms = int(time.time() * 1000)
        try:
            with resource.open_client(cfg.mq_client_api_timeout) as client:
                retry = backlog_of(client, cfg.consumer_group, retry_topic(cfg.consumer_group))
                dead = backlog_of(client, cfg.consumer_group, DLQ_GROUP_TOPIC_PREFIX + cfg.consumer_group)
        except RocketMQError as e:
            return SkipReason(f"cannot measure the retry and dead-letter backlog of {cfg.consumer_group}: {e}")
        summary = f"{retry.describe(now_ms)}; {dead.describe(now_ms)}"
        if dead.waiting:
            context.log.warning(f"{dead.waiting} dead letter(s) of {cfg.consumer_group} wait to be landed in "
                                f"{assets.dead_letters.key.to_user_string()}: {summary}")
        if retry.waiting and (retry.age_seconds(now_ms) or 0) > RETRY_AGE_WARNING_S:
            context.log.warning(f"the retry topic of {cfg.consumer_group} backs up: {summary}")
        figures = {"retry": [retry.waiting, retry.oldest_store_ms], "dlq": [dead.waiting, dead.oldest_store_ms,
                                                                          dead.total]}
        if context.cursor == json.dumps(figures):
            return SkipReason(f"unchanged: {summary}")
        metadata = {RETRY_WAITING: MetadataValue.int(retry.waiting), DLQ_WAITING: MetadataValue.int(dead.waiting),
                    DLQ_TOTAL: MetadataValue.int(dead.total)}
        for key, backlog in ((RETRY_OLDEST_AGE, retry), (DLQ_OLDEST_AGE, dead)):
            age = backlog.age_seconds(now_ms)
            if age is not None:
                metadata[key] = MetadataValue.float(age)
        return SensorResult(asset_events=[AssetObservation(asset_key=asset_key, metadata=metadata,
                                                           description=summary)],
                            skip_reason=SkipReason(summary), cursor=json.dumps(figures))

    return retry_backlog
