"""What every part of the configuration shares: the file's error, strict models, range checks."""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from rocketlake.engine.columns import METADATA_COLUMNS

# One definition of each, the wire's: a config value is the name the Java client and the broker use.

CONFIG_ENV = "ROCKETLAKE_CONFIG"
DEFAULT_CONFIG = "rocketlake.yaml"
#: One name of ``engine.columns.METADATA_COLUMNS``: pydantic's refusal then lists them all.
MetadataColumn = Literal[METADATA_COLUMNS]  # type: ignore[valid-type]


#: ``name``, or ``database.name`` for a table of Spark's catalog (each part an identifier Dagster and Spark accept)
TABLE_NAME = r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?"
#: In ``table`` and ``consumer_group``: a table (and group) per topic, named from each topic (``engine.topic_tables``).
TOPIC_FIELD = "{topic}"


class ConfigError(ValueError):
    """The configuration file is wrong; ``problems`` lists one readable line per mistake."""

    def __init__(self, source: str, problems: list[str]):
        self.source = source
        self.problems = problems
        super().__init__(f"{source} is not valid:\n" + "\n".join(f"  - {p}" for p in problems))


class AllocateStrategy(str, Enum):
    """The names RocketMQ's strategies report from ``getName()``."""

    AVG = "AVG"
    AVG_BY_CIRCLE = "AVG_BY_CIRCLE"
    CONFIG = "CONFIG"
    MACHINE_ROOM = "MACHINE_ROOM"
    MACHINE_ROOM_NEARBY = "MACHINE_ROOM_NEARBY"
    CONSISTENT_HASH = "CONSISTENT_HASH"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=False)


def _range(lo: int, hi: int, *, unlimited: int | None = None) -> Any:
    """A field validator factory for RocketMQ's inclusive ranges (optionally with a sentinel)."""

    def check(value: int) -> int:
        if value == unlimited:
            return value
        if not lo <= value <= hi:
            extra = f" or {unlimited} for no limit" if unlimited is not None else ""
            raise ValueError(f"is out of range [{lo}, {hi}]{extra}")
        return value

    check.allowed = f"[{lo}, {hi}]" + (f", or {unlimited} (no limit)" if unlimited is not None else "")
    check.bounds = (lo, hi, unlimited)
    return check


def _template(value: str) -> bool:
    """A Dagster template (``{{ env.X }}``) in a Component's attributes: checked once Dagster has resolved it (the
    component validates the resolved configuration again), not before."""
    return "{{" in value
