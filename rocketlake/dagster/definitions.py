"""The one place rocketlake's Dagster definitions are assembled from a validated configuration."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dagster import AssetsDefinition, Definitions, PreviewWarning

from rocketlake.dagster.backlog import build_backlog_sensor
from rocketlake.dagster.ingestion import Body, build_dead_letter_asset, build_ingestion_asset, rocketmq_resource_key
from rocketlake.dagster.lag import build_lag_checks, build_lag_sensor
from rocketlake.dagster.orderly_resume import build_resume_sensor
from rocketlake.dagster.partitions import check_crons
from rocketlake.dagster.rebalance import build_rebalance_sensor
from rocketlake.dagster.rocketmq_resource import RocketMQResource
from rocketlake.dagster.schedules import build_window_schedule
from rocketlake.dagster.sensors import dead_runs_sensor
from rocketlake.dagster.spark_resource import SparkResource
from rocketlake.dagster.topic_tables import METADATA_KEY, build_new_topics_sensor, with_topic_tables
from rocketlake.dagster.translator import RocketlakeTranslator, translate
from rocketlake.engine.config import MessageModel, RocketLakeConfig


def rocketlake_assets(
    config: RocketLakeConfig, ingestion: str, translator: RocketlakeTranslator | None = None
) -> Callable[[Body], AssetsDefinition]:
    """The table asset of one ingestion with a body of one's own, as ``@dbt_assets`` and ``@sling_assets`` give one:
    the decorated ``body(context, step)`` runs in place of rocketlake's and calls ``step.land()``, which yields
    the materialization and its checks (``yield from step.land()``), with what it likes before and after. The
    asset is otherwise rocketlake's own (key, partitions, pool, checks, retries); hand it to ``build_definitions``
    (``assets=[...]``), which puts it in place of the one it would build."""
    if ingestion not in config.ingestions:
        raise ValueError(
            f"rocketlake_assets: no ingestion {ingestion!r} in the configuration; it has "
            f"{', '.join(sorted(config.ingestions)) or 'none'}"
        )

    def decorator(body: Body) -> AssetsDefinition:
        shaped = translate(config, translator)[ingestion]
        return build_ingestion_asset(ingestion, config.ingestions[ingestion], config.lake, shaped, body=body)

    return decorator


def default_resources(config: RocketLakeConfig) -> dict[str, Any]:
    """The resources ``config`` asks for, by the keys rocketlake's assets name them: ``spark`` and one
    ``rocketmq_<cluster>`` per cluster."""
    resources: dict[str, Any] = {"spark": SparkResource.of_config(config.spark, config.lake)}
    for name, cluster in config.clusters.items():
        resources[rocketmq_resource_key(name)] = RocketMQResource.of_cluster(name, cluster)
    return resources


def build_definitions(
    config: RocketLakeConfig,
    translator: RocketlakeTranslator | None = None,
    *,
    assets: Sequence[AssetsDefinition] = (),
    resources: Mapping[str, Any] | None = None,
    schedules_running: bool = False,
) -> Definitions:
    """Every asset, check, job, schedule, sensor and resource of ``config``'s ingestions, the assets shaped by
    ``translator`` (``dagster.translator``). ``assets`` made by ``rocketlake_assets`` (with the same translator) take
    the place of the table assets of their ingestions, and ``resources`` of one's own, by key, the place of those
    ``default_resources`` builds from the configuration. No executor: the user's project keeps its own for its own
    jobs; rocketlake's jobs carry theirs (``dagster.run_guard``). The schedules start stopped unless
    ``schedules_running`` (the demo's UI runs them)."""
    unexpanded = config.ingestions
    config, per_topic = with_topic_tables(config)  # one ingestion per topic of those that ask for a table each
    check_crons(config)
    own = {a.key: a for a in assets}
    built = default_resources(config)
    unused = sorted(set(resources or {}) - set(built))
    if unused:
        raise ValueError(
            f"build_definitions: resources={unused} are not resources these definitions use; they use {sorted(built)}"
        )
    resources = {**built, **(resources or {})}
    shaped = translate(config, translator)
    ingestions = [(name, ing, shaped[name]) for name, ing in config.ingestions.items()]
    # Several ingestions of one topic share its node.
    topics = {spec.key: spec for _, _, a in ingestions for spec in a.topics}
    # The lag, retry-backlog and rebalance sensors serve a cluster each (assets.cluster_tick).
    by_cluster: dict[str, list] = {}
    for _, ing, made in ingestions:
        by_cluster.setdefault(ing.cluster, []).append((ing, made))
    clustering = {
        cluster: [(ing, made) for ing, made in members if ing.message_model is MessageModel.CLUSTERING]
        for cluster, members in by_cluster.items()
    }
    tables = {made.table_key for _, _, made in ingestions}
    strangers = sorted(key.to_user_string() for key in own if key not in tables)
    if strangers:
        raise ValueError(
            f"build_definitions: assets={strangers} are not the table of any ingestion (the tables are "
            f"{sorted(k.to_user_string() for k in tables)}); make them with rocketlake_assets and the "
            "same translator"
        )
    defs = Definitions(
        assets=[
            *topics.values(),  # the topics, upstream of their tables
            *(
                own.get(made.table_key) or build_ingestion_asset(name, ing, config.lake, made)
                for name, ing, made in ingestions
            ),
            # CLUSTERING groups send failures back; the broker dead-letters them into %DLQ%<group>.
            *(
                build_dead_letter_asset(name, ing, config.lake, made)
                for name, ing, made in ingestions
                if made.dead_letters is not None
            ),
        ],
        asset_checks=[check for _, ing, made in ingestions for check in build_lag_checks(ing, made)],
        schedules=[build_window_schedule(ing, made, running=schedules_running) for _, ing, made in ingestions],
        sensors=[
            dead_runs_sensor,
            *(build_lag_sensor(cluster, members) for cluster, members in by_cluster.items()),
            *(build_rebalance_sensor(cluster, members, config.lake) for cluster, members in by_cluster.items()),
            *(build_backlog_sensor(cluster, members) for cluster, members in clustering.items() if members),
            # Orderly queues suspended at a message resume once their pause is over, not at the next window.
            *(build_resume_sensor(ing, made) for _, ing, made in ingestions if ing.consume_orderly and ing.can_fail),
            *(build_new_topics_sensor(config, name, unexpanded[name], topics) for name, topics in per_topic.items()),
        ],
        resources=resources,
    )
    if not per_topic:
        return defs
    # The runs' processes rebuild the tables these definitions were made with (dagster.topic_tables), as Dagster's
    # own state-backed integrations keep theirs; Dagster calls the method a preview, which a user need not be told.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PreviewWarning)
        return defs.with_reconstruction_metadata({METADATA_KEY: json.dumps(per_topic)})
