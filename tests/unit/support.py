"""Plain-data helpers shared by the unit tests."""

from __future__ import annotations

from rocketlake.pipelines.config import IngestionConfig, parse_config


def ingestion_config(**ingestion) -> IngestionConfig:
    """A valid ingestion ``orders`` (topic orders, group g, minute windows) with ``ingestion``'s keys on top."""
    return parse_config({
        "clusters": {"local": {"namesrv": "127.0.0.1:9876"}},
        "ingestions": {"orders": {"cluster": "local", "topic": "orders", "consumer_group": "g", "table": "orders",
                                  "window": {"cron": "* * * * *", "start": "1970-01-01"}, **ingestion}},
    }).ingestions["orders"]
