"""This repository's assets: the tables ``rocketlake.yaml``'s ingestions land, with their topics, dead letters,
checks, schedules and sensors, built with rocketlake's public API as a user's project builds them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dagster import Definitions

import rocketlake


def ingestion_definitions(config: rocketlake.RocketLakeConfig, resources: Mapping[str, Any]) -> Definitions:
    return rocketlake.build_definitions(config, resources=resources)
