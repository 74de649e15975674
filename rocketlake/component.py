"""rocketlake as a Dagster Component: a user's ``dg`` project adds ingestions in YAML, without Python.

``defs/<name>/defs.yaml`` in the project::

    type: rocketlake.component.RocketlakeComponent
    attributes:
      clusters:
        main: {namesrv: "{{ env.ROCKETMQ_NAMESRV }}"}
      lake: {root: /data/lake}
      ingestions:
        orders: {cluster: main, topic: orders, consumer_group: GID_orders, table: orders,
                 window: {cron: "*/5 * * * *", start: "2026-11-01"}}
      translation:                       # Dagster's asset attributes, applied to every rocketlake asset
        key_prefix: raw
        group_name: ingest
        owners: ["team:data-platform"]
        tags: {"layer": "bronze"}

The attributes are typed with the models that validate ``rocketlake.yaml`` (``engine.config``), so ``dg``
shows their schema and ``dg check yaml`` checks them before the project loads; the cross-checks (an
ingestion's cluster exists, each table has one ingestion, keys not supported yet) run at load, naming the
ingestion, the key and the value. Dagster's templating works in text values (``"{{ env.ROCKETMQ_NAMESRV }}"``);
ACL keys stay environment variable *names* (``access_key_env``). ``translation`` takes the asset attributes
Dagster's own components take (key, key_prefix, group_name, owners, tags, kinds, description, metadata,
automation_condition), with ``{{ data.role }}`` (``topic``, ``table`` or ``dead_letters``), ``{{ data.table }}``,
``{{ data.topic }}`` and ``{{ data.ingestion }}`` in scope. In Python, override ``get_asset_spec`` in a subclass,
as with ``RocketlakeTranslator``.
"""

from __future__ import annotations

from typing import Annotated, Any

import dagster as dg
from dagster.components.utils.translation import TranslationFn, TranslationFnResolver

from rocketlake.dagster.definitions import build_definitions
from rocketlake.dagster.translator import RocketlakeAssetData, RocketlakeTranslator
from rocketlake.engine.config import ClusterConfig, IngestionConfig, LakeConfig, SparkConfig, parse_config


def _templated(context: dg.ResolutionContext, value: Any) -> Any:
    """A typed attribute, its ``{{ ... }}`` templates resolved; ``parse_config`` validates the result again."""
    dumped = _dump(value)
    return context.resolve_value(dumped)


def _dump(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _dump(v) for k, v in value.items()}
    if hasattr(value, "model_dump"):
        # Only the keys the YAML set: a key rocketlake does not honour yet is refused when present, not by default.
        return value.model_dump(mode="json", by_alias=True, exclude_unset=True)
    return value


def _typed(model_type: Any) -> dg.Resolver:
    return dg.Resolver(_templated, model_field_type=model_type)


class RocketlakeComponent(dg.Component, dg.Resolvable, dg.Model):
    """RocketMQ topics landed in Delta tables, one time-window partition per window (rocketlake.yaml's keys)."""

    clusters: Annotated[dict[str, Any], _typed(dict[str, ClusterConfig])]
    ingestions: Annotated[dict[str, Any], _typed(dict[str, IngestionConfig])]
    lake: Annotated[dict[str, Any] | None, _typed(LakeConfig | None)] = None
    spark: Annotated[dict[str, Any] | None, _typed(SparkConfig | None)] = None
    translation: Annotated[
        TranslationFn[RocketlakeAssetData] | None,
        TranslationFnResolver[RocketlakeAssetData](lambda data: {"data": data}),
    ] = None

    def get_asset_spec(self, data: RocketlakeAssetData) -> dg.AssetSpec:
        """The spec of one of rocketlake's assets: the default translator's, then ``translation``'s attributes."""
        base = RocketlakeTranslator().get_asset_spec(data)
        return self.translation(base, data) if self.translation else base

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        raw: dict[str, Any] = {"clusters": self.clusters, "ingestions": self.ingestions}
        for key in ("lake", "spark"):
            if getattr(self, key) is not None:
                raw[key] = getattr(self, key)
        config = parse_config(raw, source=str(context.path / "defs.yaml"))
        return build_definitions(config, translator=_ComponentTranslator(self))


class _ComponentTranslator(RocketlakeTranslator):
    """The component's ``get_asset_spec`` (a subclass may override it) as a translator."""

    def __init__(self, component: RocketlakeComponent):
        self.component = component

    def get_asset_spec(self, data: RocketlakeAssetData) -> dg.AssetSpec:
        return self.component.get_asset_spec(data)
