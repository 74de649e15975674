"""How rocketlake's assets look in a user's Dagster project: a translator, as Dagster's integrations give one.

Three kinds of asset come from an ingestion: its topic (an external asset, upstream), its table, and, for a
CLUSTERING group, its dead-letter table (``<table>_dlq``, downstream of the table). ``RocketlakeTranslator``
makes the ``AssetSpec`` of each from a ``RocketlakeAssetData``; a subclass changes what a project wants (a key
prefix, its group, owners, tags, kinds, a description, an automation condition) and keeps the rest::

    class MyTranslator(RocketlakeTranslator):
        def get_asset_spec(self, data: RocketlakeAssetData) -> dg.AssetSpec:
            spec = super().get_asset_spec(data)
            return spec.replace_attributes(key=spec.key.with_prefix("raw"), group_name="ingest",
                                           owners=["team:data-platform"])

    defs = build_definitions(load_config("rocketlake.yaml"), translator=MyTranslator())

Everything derived from an asset follows its translated key: the checks sit on it, the lineage (topic ->
table -> dead letters) joins the translated keys, and the names of the job, schedule and sensors of an
ingestion are made from its table's key (``raw__orders_job`` for ``raw/orders``), so two prefixes of one table
name never clash. The partitions, pools, resources and the lineage itself belong to rocketlake: a translator
that adds ``deps`` adds them beside rocketlake's own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Literal

from dagster import AssetKey, AssetSpec, MetadataValue

from rocketlake.engine.config import IngestionConfig, LakeConfig, MessageModel, RocketLakeConfig, dead_letter_config

TOPIC_KEY_PREFIX = "rocketmq"
DEFAULT_GROUP = "rocketlake"

Role = Literal["topic", "table", "dead_letters"]


def _name_part(text: str) -> str:
    # Dagster names allow [A-Za-z0-9_] only; RocketMQ topics also allow '-', '%' and '|'.
    return re.sub(r"[^A-Za-z0-9_]", "_", text)


def topic_asset_key(cluster: str, topic: str) -> AssetKey:
    return AssetKey([TOPIC_KEY_PREFIX, _name_part(cluster), _name_part(topic)])


def pattern_asset_key(cluster: str, pattern: str) -> AssetKey:
    """The node of a ``topic_pattern``: the topics it matches change, so the pattern is the node."""
    return AssetKey([TOPIC_KEY_PREFIX, _name_part(cluster), "pattern_" + _name_part(pattern)])


def table_asset_key(table: str) -> AssetKey:
    """A table's default key: ``orders``, or ``sales/orders`` for the catalog table ``sales.orders``."""
    return AssetKey(table.split("."))


def table_job_name(table: str) -> str:
    """The job the default translator names after ``table``: ``orders_job``, ``sales__orders_job``."""
    return f"{table_asset_key(table).to_python_identifier()}_job"


@dataclass(frozen=True)
class RocketlakeAssetData:
    """What a translator knows about one asset: its role, the ingestion it belongs to (for a topic read by
    several ingestions, the first of them) and where it lives."""

    role: Role
    ingestion: str
    config: IngestionConfig
    cluster: str
    namesrv: str
    #: The topic of a topic asset (a ``topic_pattern``'s text for its node); for a table, its topics' label.
    topic: str
    #: The Delta table's name (``None`` for a topic) and its location.
    table: str | None = None
    table_path: str | None = None


class RocketlakeTranslator:
    """The default look of rocketlake's assets; subclass it and override ``get_asset_spec``."""

    def get_asset_spec(self, data: RocketlakeAssetData) -> AssetSpec:
        if data.role == "topic" and data.config.topic_pattern is not None:
            return AssetSpec(
                key=pattern_asset_key(data.cluster, data.topic),
                kinds={"rocketmq"},
                group_name=DEFAULT_GROUP,
                description=f"RocketMQ topics matching `{data.topic}` on cluster `{data.cluster}` (name server "
                f"{data.namesrv}), as the name server lists them at each run: a topic created later "
                "joins. Not materialized by Dagster.",
                metadata={
                    "rocketlake/topic_pattern": data.topic,
                    "rocketlake/cluster": data.cluster,
                    "rocketlake/namesrv": data.namesrv,
                },
            )
        if data.role == "topic":
            return AssetSpec(
                key=topic_asset_key(data.cluster, data.topic),
                kinds={"rocketmq"},
                group_name=DEFAULT_GROUP,
                description=f"RocketMQ topic `{data.topic}` on cluster `{data.cluster}` (name server {data.namesrv}). "
                "Not materialized by Dagster: the brokers hold it; the tables downstream land it.",
                metadata={
                    "rocketlake/topic": data.topic,
                    "rocketlake/cluster": data.cluster,
                    "rocketlake/namesrv": data.namesrv,
                },
            )
        cfg = data.config
        if data.role == "dead_letters":
            description = (
                f"Dead letters of group `{cfg.consumer_group}` (`{cfg.dead_letters_of}`): messages its listener "
                f"failed {cfg.effective_max_reconsume_times} times, landed in Delta at "
                f"`{data.table_path}` with their last error."
            )
        else:
            description = (
                f"RocketMQ {cfg.topic_label} (group `{cfg.consumer_group}`, {cfg.message_model.value}) "
                f"landed in Delta at `{data.table_path}`, one partition per window `{cfg.window.cron}`."
            )
        return AssetSpec(
            key=table_asset_key(data.table),
            kinds={"rocketmq", "spark", "delta"},
            group_name=DEFAULT_GROUP,
            description=description,
            metadata={
                "rocketlake/topic": cfg.topic_label,
                "rocketlake/consumer_group": cfg.consumer_group,
                "rocketlake/table_path": MetadataValue.path(data.table_path),
            },
        )


@dataclass(frozen=True)
class IngestionAssets:
    """One ingestion's translated specs, and the names of the definitions made from them."""

    topics: tuple[AssetSpec, ...]  # each topic landed (or the pattern's node), upstream of the table
    table: AssetSpec
    dead_letters: AssetSpec | None

    @property
    def table_key(self) -> AssetKey:
        return self.table.key

    def name(self, suffix: str) -> str:
        """``<table key as an identifier>_<suffix>``: ``orders_job``, ``raw__orders_lag``."""
        return f"{self.table.key.to_python_identifier()}_{suffix}"

    @property
    def job_name(self) -> str:
        return self.name("job")


def cluster_sensor_name(cluster: str, tables: Iterable[AssetKey], suffix: str) -> str:
    """The name of a sensor that serves every ingestion of ``cluster``: ``rocketlake_<cluster>_<suffix>``, under the
    key prefix its tables share (``raw__rocketlake_main_lag`` when they are all under ``raw``), so two rocketlake
    components of one project, each with its own key prefix, never clash."""
    paths = [key.path[:-1] for key in tables]
    common: list[str] = []
    for parts in zip(*paths) if paths else ():
        if len(set(parts)) != 1:
            break
        common.append(parts[0])
    return AssetKey([*common, f"rocketlake_{_name_part(cluster)}_{suffix}"]).to_python_identifier()


def translate(config: RocketLakeConfig, translator: RocketlakeTranslator | None = None) -> dict[str, IngestionAssets]:
    """Each ingestion's specs from ``translator`` (the default one when None); a topic read by several ingestions
    is translated once, for the first of them, so they share its node."""
    translator = translator or RocketlakeTranslator()
    topics: dict[tuple[str, str], AssetSpec] = {}
    out = {}
    for name, ing in config.ingestions.items():
        namesrv = config.clusters[ing.cluster].namesrv

        def data(
            role: Role, cfg: IngestionConfig = ing, lake: LakeConfig = config.lake, topic: str | None = None
        ) -> RocketlakeAssetData:
            table = None if role == "topic" else cfg.table
            return RocketlakeAssetData(
                role=role,
                ingestion=name,
                config=cfg,
                cluster=cfg.cluster,
                namesrv=namesrv,
                topic=topic or cfg.topic_label,
                table=table,
                table_path=lake.table_path(table) if table else None,
            )

        specs = []
        for topic in [ing.plain(t) for t in ing.topic_names] or [ing.topic_pattern]:  # as users name them
            spec = topics.get((ing.cluster, topic))
            if spec is None:
                spec = topics[(ing.cluster, topic)] = _checked(
                    translator.get_asset_spec(data("topic", topic=topic)), "topic", name
                )
            specs.append(spec)
        table = _checked(translator.get_asset_spec(data("table")), "table", name)
        dead = None
        if ing.message_model is MessageModel.CLUSTERING:  # the broker dead-letters its failures
            dead = _checked(
                translator.get_asset_spec(data("dead_letters", dead_letter_config(ing))), "dead_letters", name
            )
        out[name] = IngestionAssets(topics=tuple(specs), table=table, dead_letters=dead)
    return out


def _checked(spec: AssetSpec, role: str, ingestion: str) -> AssetSpec:
    if not isinstance(spec, AssetSpec):
        raise TypeError(
            f"the translator's get_asset_spec returned {type(spec).__name__} for the {role} asset of "
            f"ingestion {ingestion!r}; it must return a dagster.AssetSpec"
        )
    return spec
