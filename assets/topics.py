"""RocketMQ topics as assets of their own: the upstream of every table in the lineage graph.

A topic is not produced by Dagster, so it is an external asset (an ``AssetSpec``, kind ``rocketmq``): it cannot be
materialized, but it is a node of the graph, with the cluster's name server and the topic's real name in its
metadata, and the observations of the group's lag (``assets.lag``) beside it. Several ingestions of one topic
(two groups, broadcasting members) share the node.
"""

from __future__ import annotations

import re

from dagster import AssetKey, AssetSpec

from rocketlake.pipelines.config import IngestionConfig, RocketLakeConfig

TOPIC_KEY_PREFIX = "rocketmq"


def _name_part(text: str) -> str:
    # Dagster names allow [A-Za-z0-9_] only; RocketMQ topics also allow '-', '%' and '|'.
    return re.sub(r"[^A-Za-z0-9_]", "_", text)


def topic_asset_key(cluster: str, topic: str) -> AssetKey:
    return AssetKey([TOPIC_KEY_PREFIX, _name_part(cluster), _name_part(topic)])


def ingestion_topic_key(cfg: IngestionConfig) -> AssetKey:
    return topic_asset_key(cfg.cluster, cfg.topic)


def topic_specs(config: RocketLakeConfig) -> list[AssetSpec]:
    """One external asset per (cluster, topic) some ingestion reads."""
    specs: dict[AssetKey, AssetSpec] = {}
    for ing in config.ingestions.values():
        key = ingestion_topic_key(ing)
        if key in specs:
            continue
        namesrv = config.clusters[ing.cluster].namesrv
        specs[key] = AssetSpec(
            key=key, kinds={"rocketmq"}, group_name="rocketlake",
            description=f"RocketMQ topic `{ing.topic}` on cluster `{ing.cluster}` (name server {namesrv}). "
                        "Not materialized by Dagster: the brokers hold it; the tables downstream land it.",
            metadata={"rocketlake/topic": ing.topic, "rocketlake/cluster": ing.cluster,
                      "rocketlake/namesrv": namesrv})
    return list(specs.values())
