"""rocketlake as a Dagster Component: a user's ``dg`` project adds ingestions in YAML, without Python.

``defs/<name>/defs.yaml`` in the project::

    type: rocketlake.component.RocketlakeComponent
    attributes:
      clusters:
        main: {namesrv: "10.0.0.1:9876"}
      lake: {root: /data/lake}
      ingestions:
        orders: {cluster: main, topic: orders, consumer_group: GID_orders, table: orders,
                 window: {cron: "*/5 * * * *", start: "2026-11-01"}}

The attributes are exactly the keys of ``rocketlake.yaml`` and are validated by the same code, so a
wrong value fails when the project loads, naming the ingestion, the key and the value, and a key
rocketlake does not honour yet is refused the same way. Values may use Dagster's templating
(``"{{ env.ROCKETMQ_NAMESRV }}"``); ACL keys stay environment variable *names* (``access_key_env``).
"""

from __future__ import annotations

from typing import Any

import dagster as dg

from rocketlake.assets.definitions import build_definitions
from rocketlake.pipelines.config import parse_config


class RocketlakeComponent(dg.Component, dg.Model, dg.Resolvable):
    """RocketMQ topics landed in Delta tables, one time-window partition per window (rocketlake.yaml's keys)."""

    clusters: dict[str, dict[str, Any]]
    ingestions: dict[str, dict[str, Any]]
    lake: dict[str, Any] | None = None
    spark: dict[str, Any] | None = None

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        raw: dict[str, Any] = {"clusters": self.clusters, "ingestions": self.ingestions}
        for key in ("lake", "spark"):
            if getattr(self, key) is not None:
                raw[key] = getattr(self, key)
        return build_definitions(parse_config(raw, source=str(context.path / "defs.yaml")))
