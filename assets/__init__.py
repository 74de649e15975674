"""rocketlake's Dagster code location: ``dagster dev -w workspace.yaml`` loads ``defs`` from here."""

from rocketlake.assets.definitions import defs

__all__ = ["defs"]
