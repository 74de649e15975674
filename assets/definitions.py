"""The one place rocketlake's Dagster definitions are assembled from a validated configuration."""

from __future__ import annotations

from dagster import Definitions, EnvVar

from rocketlake.assets.ingestion import build_dead_letter_asset, build_ingestion_asset, rocketmq_resource_key
from rocketlake.assets.backlog import build_backlog_sensor
from rocketlake.assets.run_guard import rocketlake_executor
from rocketlake.assets.lag import build_lag_checks, build_lag_sensor
from rocketlake.assets.orderly_resume import build_resume_sensor
from rocketlake.assets.rebalance import build_rebalance_sensor
from rocketlake.assets.schedules import build_window_schedule
from rocketlake.assets.topics import topic_specs
from rocketlake.assets.sensors import dead_runs_sensor
from rocketlake.pipelines.config import MessageModel, RocketLakeConfig
from rocketlake.resources.rocketmq_resource import RocketMQResource
from rocketlake.resources.spark import SparkResource


def build_definitions(config: RocketLakeConfig) -> Definitions:
    resources: dict = {"spark": SparkResource(master=config.spark.master, conf=config.spark.conf)}
    for name, cluster in config.clusters.items():
        keys = {}
        if cluster.access_key_env:
            keys = {"access_key": EnvVar(cluster.access_key_env), "secret_key": EnvVar(cluster.secret_key_env)}
        resources[rocketmq_resource_key(name)] = RocketMQResource(namesrv=cluster.namesrv, **keys)
    return Definitions(
        assets=[*topic_specs(config),  # the topics, upstream of their tables
                *(build_ingestion_asset(name, ing, config.lake) for name, ing in config.ingestions.items()),
                # CLUSTERING groups send failures back; the broker dead-letters them into %DLQ%<group>.
                *(build_dead_letter_asset(name, ing, config.lake) for name, ing in config.ingestions.items()
                  if ing.message_model is MessageModel.CLUSTERING)],
        asset_checks=[check for ing in config.ingestions.values() for check in build_lag_checks(ing)],
        schedules=[build_window_schedule(ing) for ing in config.ingestions.values()],
        sensors=[dead_runs_sensor, *(build_lag_sensor(ing) for ing in config.ingestions.values()),
                 *(build_rebalance_sensor(ing, config.lake.table_path(ing.table))
                                     for ing in config.ingestions.values()),
                 *(build_backlog_sensor(ing) for ing in config.ingestions.values()
                   if ing.message_model is MessageModel.CLUSTERING),
                 # Orderly queues suspended at a message resume once their pause is over, not at the next window.
                 *(build_resume_sensor(ing) for ing in config.ingestions.values() if ing.consume_orderly and ing.can_fail)],
        resources=resources,
        # One process per run, which reclaims the pool slots of runs that died (see run_guard).
        executor=rocketlake_executor,
    )

