"""rocketlake: Apache RocketMQ topics landed in Delta Lake tables, orchestrated by Dagster, run by PySpark.

The front door: what a Dagster project imports, all from ``rocketlake``::

    import rocketlake

    config = rocketlake.load_config("rocketlake.yaml")
    defs = rocketlake.build_definitions(config, translator=rocketlake.RocketlakeTranslator())

The names load on first use (PEP 562), so ``import rocketlake`` costs nothing and the engine below it
(``rocketlake.pipelines``) stays free of Dagster and Spark for whoever imports only that.

One import package. The repository keeps the design card's folders, installed as its subpackages:
``rocketlake.assets`` (Dagster assets, schedules, checks, executor), ``rocketlake.pipelines`` (the ingestion
engine, free of Dagster), ``rocketlake.resources`` (Spark, the RocketMQ wire client, the local runtime). The code
location (``rocketlake.definitions``), the ``rocketlake`` command (``rocketlake.cli``) and the demo
(``rocketlake.demo``) sit on top of all three.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: The public surface: name -> the module it lives in. Everything else is internal and may change.
PUBLIC: dict[str, str] = {
    # configuration: rocketlake.yaml as a validated contract
    "load_config": "rocketlake.pipelines.config",
    "RocketLakeConfig": "rocketlake.pipelines.config",
    # Dagster: the definitions, their shape, and a body of one's own
    "build_definitions": "rocketlake.assets.definitions",
    "rocketlake_assets": "rocketlake.assets.definitions",
    "IngestionStep": "rocketlake.assets.ingestion",
    "RocketlakeTranslator": "rocketlake.assets.translator",
    "RocketlakeAssetData": "rocketlake.assets.translator",
    "RocketlakeComponent": "rocketlake.component",
    "SparkResource": "rocketlake.resources.spark",
    "RocketMQResource": "rocketlake.resources.rocketmq_resource",
    # listeners: RocketMQ's MessageListenerConcurrently and MessageListenerOrderly, run in Spark's Python workers
    "ConsumeConcurrentlyStatus": "rocketlake.pipelines.listener",
    "ConsumeConcurrentlyContext": "rocketlake.pipelines.listener",
    "ConsumeOrderlyStatus": "rocketlake.pipelines.listener",
    "ConsumeOrderlyContext": "rocketlake.pipelines.listener",
    "vectorized": "rocketlake.pipelines.listener",
    # Spark: the `rocketmq` data source (spark.read.format("rocketmq")) registered on a session
    "register": "rocketlake.pipelines.source",
}

__all__ = ["__version__", *PUBLIC]


def __getattr__(name: str) -> Any:
    module = PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'rocketlake' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(PUBLIC))


if TYPE_CHECKING:  # what type checkers and IDEs see
    from rocketlake.assets.definitions import build_definitions, rocketlake_assets
    from rocketlake.assets.ingestion import IngestionStep
    from rocketlake.assets.translator import RocketlakeAssetData, RocketlakeTranslator
    from rocketlake.component import RocketlakeComponent
    from rocketlake.pipelines.config import RocketLakeConfig, load_config
    from rocketlake.pipelines.listener import (
        ConsumeConcurrentlyContext,
        ConsumeConcurrentlyStatus,
        ConsumeOrderlyContext,
        ConsumeOrderlyStatus,
        vectorized,
    )
    from rocketlake.pipelines.source import register
    from rocketlake.resources.rocketmq_resource import RocketMQResource
    from rocketlake.resources.spark import SparkResource
