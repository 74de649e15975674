"""rocketlake's Dagster code location: ``defs``, built from ``rocketlake.yaml`` (or ``$ROCKETLAKE_CONFIG``).

``workspace.yaml`` and ``dagster ... -m rocketlake.definitions`` load this module. It is the only module
that reads the configuration when imported, so ``rocketlake.assets`` and everything below it stay
importable as a library (a user's own Definitions, the Dagster Component) without a ``rocketlake.yaml``.
A wrong configuration fails here, at load, before any run, naming the ingestion, the key and the value.
"""

from dagster import Definitions

from rocketlake.dagster.definitions import build_definitions
from rocketlake.dagster.run_guard import rocketlake_executor
from rocketlake.engine.config import load_config

# This code location holds rocketlake's definitions and nothing else, so its own executor is rocketlake's: a run
# launched from the UI's Materialize button, a sensor or `dagster asset materialize` reclaims dead runs' pool slots
# too, in process. A user's project (the Component, build_definitions) keeps its own executor.
defs = Definitions.merge(build_definitions(load_config()), Definitions(executor=rocketlake_executor))

__all__ = ["defs"]
