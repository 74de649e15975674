"""rocketlake's Dagster code location: ``defs``, built from ``rocketlake.yaml`` (or ``$ROCKETLAKE_CONFIG``).

``workspace.yaml`` and ``dagster ... -m rocketlake.definitions`` load this module. It is the only module
that reads the configuration when imported, so ``rocketlake.assets`` and everything below it stay
importable as a library (a user's own Definitions, the Dagster Component) without a ``rocketlake.yaml``.
A wrong configuration fails here, at load, before any run, naming the ingestion, the key and the value.
"""

from rocketlake.assets.definitions import build_definitions
from rocketlake.pipelines.config import load_config

defs = build_definitions(load_config())

__all__ = ["defs"]
