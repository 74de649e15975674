"""The one place rocketlake's Dagster definitions are assembled from a validated configuration."""

from __future__ import annotations

from dagster import Definitions

from rocketlake.assets.backlog import build_backlog_sensor
from rocketlake.assets.ingestion import build_dead_letter_asset, build_ingestion_asset, rocketmq_resource_key
from rocketlake.assets.lag import build_lag_checks, build_lag_sensor
from rocketlake.assets.orderly_resume import build_resume_sensor
from rocketlake.assets.rebalance import build_rebalance_sensor
from rocketlake.assets.schedules import build_window_schedule
from rocketlake.assets.sensors import dead_runs_sensor
from rocketlake.assets.translator import RocketlakeTranslator, translate
from rocketlake.pipelines.config import MessageModel, RocketLakeConfig
from rocketlake.pipelines.storage import on_s3
from rocketlake.resources.rocketmq_resource import RocketMQResource
from rocketlake.resources.spark import SparkResource


def build_definitions(config: RocketLakeConfig, translator: RocketlakeTranslator | None = None, *,
                      schedules_running: bool = False) -> Definitions:
    """Every asset, check, job, schedule, sensor and resource of ``config``'s ingestions, the assets shaped by
    ``translator`` (``assets.translator``). No executor: the user's project keeps its own for its own jobs;
    rocketlake's jobs carry theirs (``assets.run_guard``). The schedules start stopped unless
    ``schedules_running`` (the demo's UI runs them)."""
    # An S3 lake needs S3A's jars when the session starts; its settings and keys reach the session when a run starts
    # (pipelines.storage.apply_lake).
    resources: dict = {"spark": SparkResource(master=config.spark.master, s3a=on_s3(config.lake.root),
                                              conf=config.spark.conf, remote=config.spark.remote)}
    for name, cluster in config.clusters.items():
        keys = {}
        if cluster.access_key_env:
            # The variables' names: each process that needs the keys (a run, a sensor, a Spark worker) reads them.
            keys = {"access_key_env": cluster.access_key_env, "secret_key_env": cluster.secret_key_env}
        if cluster.tls is not None:
            keys |= {"tls": True, "tls_ca_file": cluster.tls.ca_file, "tls_cert_file": cluster.tls.cert_file,
                     "tls_key_file": cluster.tls.key_file, "tls_verify_hostname": cluster.tls.verify_hostname}
        resources[rocketmq_resource_key(name)] = RocketMQResource(namesrv=cluster.namesrv, cluster=name, **keys)
    shaped = translate(config, translator)
    ingestions = [(name, ing, shaped[name]) for name, ing in config.ingestions.items()]
    # Several ingestions of one topic share its node.
    topics = {spec.key: spec for _, _, a in ingestions for spec in a.topics}
    # The lag, retry-backlog and rebalance sensors serve a cluster each (assets.cluster_tick).
    by_cluster: dict[str, list] = {}
    for _, ing, assets in ingestions:
        by_cluster.setdefault(ing.cluster, []).append((ing, assets))
    clustering = {cluster: [(ing, assets) for ing, assets in members if ing.message_model is MessageModel.CLUSTERING]
                  for cluster, members in by_cluster.items()}
    return Definitions(
        assets=[*topics.values(),  # the topics, upstream of their tables
                *(build_ingestion_asset(name, ing, config.lake, assets) for name, ing, assets in ingestions),
                # CLUSTERING groups send failures back; the broker dead-letters them into %DLQ%<group>.
                *(build_dead_letter_asset(name, ing, config.lake, assets) for name, ing, assets in ingestions
                  if assets.dead_letters is not None)],
        asset_checks=[check for _, ing, assets in ingestions for check in build_lag_checks(ing, assets)],
        schedules=[build_window_schedule(ing, assets, running=schedules_running) for _, ing, assets in ingestions],
        sensors=[dead_runs_sensor,
                 *(build_lag_sensor(cluster, members) for cluster, members in by_cluster.items()),
                 *(build_rebalance_sensor(cluster, members, config.lake) for cluster, members in by_cluster.items()),
                 *(build_backlog_sensor(cluster, members) for cluster, members in clustering.items() if members),
                 # Orderly queues suspended at a message resume once their pause is over, not at the next window.
                 *(build_resume_sensor(ing, assets) for _, ing, assets in ingestions
                   if ing.consume_orderly and ing.can_fail)],
        resources=resources,
    )
