"""rocketlake's Dagster code location: ``dagster dev -w workspace.yaml`` loads ``defs`` from here."""

from assets.definitions import defs

__all__ = ["defs"]
