"""rocketlake: Apache RocketMQ topics landed in Delta Lake tables, orchestrated by Dagster, run by PySpark.

The front door: what a Dagster project imports, all from ``rocketlake``::

    import rocketlake

    config = rocketlake.load_config("rocketlake.yaml")
    defs = rocketlake.build_definitions(config, translator=rocketlake.RocketlakeTranslator())

The names load on first use (PEP 562), so ``import rocketlake`` costs nothing and the engine below it
(``rocketlake.engine``) stays free of Dagster and Spark for whoever imports only that.

A subpackage per part, in layers (tests/unit/test_layers.py): the command (``cli``), the demo (``demo``) and the
group member process (``member``) on Dagster's side (``dagster``), the local runtime (``local``), the Spark side
(``spark``), the Delta side (``delta``), the engine (``engine``), and the RocketMQ wire client (``rocketmq``).
``rocketlake.definitions`` is a code location for ``dagster dev -m``: the ingestions of ``rocketlake.yaml``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: The public surface: name -> the module it lives in. Everything else is internal and may change.
PUBLIC: dict[str, str] = {
    # configuration: rocketlake.yaml as a validated contract
    "load_config": "rocketlake.engine.config",
    "RocketLakeConfig": "rocketlake.engine.config",
    # Dagster: the definitions, their shape, and a body of one's own
    "build_definitions": "rocketlake.dagster.definitions",
    "rocketlake_assets": "rocketlake.dagster.definitions",
    "default_resources": "rocketlake.dagster.definitions",
    "IngestionStep": "rocketlake.dagster.ingestion",
    "rocketlake_executor": "rocketlake.dagster.run_guard",
    "RocketlakeTranslator": "rocketlake.dagster.translator",
    "RocketlakeAssetData": "rocketlake.dagster.translator",
    "RocketlakeComponent": "rocketlake.component",
    "SparkResource": "rocketlake.dagster.spark_resource",
    "RocketMQResource": "rocketlake.dagster.rocketmq_resource",
    # listeners: RocketMQ's MessageListenerConcurrently and MessageListenerOrderly, run in Spark's Python workers
    "ConsumeConcurrentlyStatus": "rocketlake.engine.listener",
    "ConsumeConcurrentlyContext": "rocketlake.engine.listener",
    "ConsumeOrderlyStatus": "rocketlake.engine.listener",
    "ConsumeOrderlyContext": "rocketlake.engine.listener",
    "vectorized": "rocketlake.engine.listener",
    # Spark: the `rocketmq` data source (spark.read.format("rocketmq")) registered on a session
    "register": "rocketlake.spark.source",
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
    from rocketlake.component import RocketlakeComponent
    from rocketlake.dagster.definitions import build_definitions, default_resources, rocketlake_assets
    from rocketlake.dagster.ingestion import IngestionStep
    from rocketlake.dagster.rocketmq_resource import RocketMQResource
    from rocketlake.dagster.run_guard import rocketlake_executor
    from rocketlake.dagster.spark_resource import SparkResource
    from rocketlake.dagster.translator import RocketlakeAssetData, RocketlakeTranslator
    from rocketlake.engine.config import RocketLakeConfig, load_config
    from rocketlake.engine.listener import (
        ConsumeConcurrentlyContext,
        ConsumeConcurrentlyStatus,
        ConsumeOrderlyContext,
        ConsumeOrderlyStatus,
        vectorized,
    )
    from rocketlake.spark.source import register
