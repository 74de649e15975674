"""The code location ``workspace.yaml`` loads: ``rocketlake.yaml`` (or ``$ROCKETLAKE_CONFIG``), read on import, so a
wrong configuration fails here, at load, before any run, naming the ingestion, the key and the value."""

from __future__ import annotations

from dagster import Definitions

import rocketlake
from assets import ingestion_definitions
from resources import deployment_resources

config = rocketlake.load_config()
# This code location holds rocketlake's definitions and nothing else, so its executor is rocketlake's: a run launched
# from the UI's Materialize button, a sensor or `dagster asset materialize` reclaims dead runs' pool slots too.
defs = Definitions.merge(
    ingestion_definitions(config, deployment_resources(config)), Definitions(executor=rocketlake.rocketlake_executor)
)
