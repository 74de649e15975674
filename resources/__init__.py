"""This repository's Dagster resources, made with rocketlake's public API as a user's project makes its own.

Spark and the RocketMQ clients come from ``rocketlake.yaml`` as rocketlake builds them; a deployment that runs Spark
its own way hands ``build_definitions`` a ``SparkResource`` of its own under the key ``spark`` instead.
"""

from __future__ import annotations

from typing import Any

import rocketlake


def deployment_resources(config: rocketlake.RocketLakeConfig) -> dict[str, Any]:
    return rocketlake.default_resources(config)
