"""Writing windows to Delta: replace exactly the slice (windows x queues), ledger in the same commit.

Idempotence comes from ``replaceWhere``: re-running a window rewrites the rows of that window
on the queues this run took, and nothing else, in one atomic commit. The ledger (which offset
ranges each window covered, and what became of every offset) travels in that very commit's
``userMetadata``, so the table and the ledger can never disagree; any Delta reader sees it in the
table history. The table itself is a plain Delta table.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

from pyspark.sql import DataFrame, SparkSession

LEDGER_KEY = "rocketlake"
LEDGER_VERSION = 1


@dataclass(frozen=True)
class RangeEntry:
    topic: str
    broker_name: str
    queue_id: int
    start: int
    end: int

    @property
    def queue(self) -> tuple[str, str, int]:
        return (self.topic, self.broker_name, self.queue_id)

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class WindowEntry:
    partition_key: str
    start_ms: int
    end_ms: int
    ranges: tuple[RangeEntry, ...]


@dataclass(frozen=True)
class LedgerEntry:
    """What one Delta commit landed: the windows, their ranges, and who landed them."""

    ingestion: str
    consumer_group: str
    run_id: str
    windows: tuple[WindowEntry, ...]
    origin: dict[str, int] = field(default_factory=dict)  # "topic/broker/qid" -> where a new group started
    # "topic/broker/qid" -> [from, to): deleted by the broker before they were landed, accepted as lost
    gaps: dict[str, tuple[int, int]] = field(default_factory=dict)
    version: int | None = None  # the Delta version, filled in when read back

    def to_json(self) -> str:
        body = asdict(self)
        body.pop("version")
        return json.dumps({LEDGER_KEY: LEDGER_VERSION, **body}, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str, version: int | None = None) -> "LedgerEntry | None":
        try:
            raw = json.loads(text)
        except (TypeError, ValueError):
            return None
        if not isinstance(raw, dict) or raw.get(LEDGER_KEY) != LEDGER_VERSION:
            return None  # someone else's commit (OPTIMIZE, a user's own write)
        windows = tuple(
            WindowEntry(w["partition_key"], w["start_ms"], w["end_ms"],
                        tuple(RangeEntry(**r) for r in w["ranges"]))
            for w in raw["windows"])
        gaps = {k: (int(v[0]), int(v[1])) for k, v in raw.get("gaps", {}).items()}
        return cls(raw["ingestion"], raw["consumer_group"], raw["run_id"], windows, raw.get("origin", {}), gaps, version)


def queue_key(topic: str, broker_name: str, queue_id: int) -> str:
    return f"{topic}/{broker_name}/{queue_id}"


def _sql_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def slice_predicate(window_starts_ms: Iterable[int], queues: Iterable[tuple[str, str, int]]) -> str:
    """The replaceWhere predicate of (these windows) x (these queues)."""
    windows = ", ".join(f"timestamp_millis({ms})" for ms in sorted(set(window_starts_ms)))
    keys = ", ".join(_sql_string(queue_key(*q)) for q in sorted(set(queues)))
    return (f"window_start IN ({windows}) AND "
            f"concat_ws('/', topic, broker_name, CAST(queue_id AS STRING)) IN ({keys})")


def is_delta_table(spark: SparkSession, path: str) -> bool:
    from delta.tables import DeltaTable

    return DeltaTable.isDeltaTable(spark, path)


def write_slice(df: DataFrame, path: str, ledger: LedgerEntry) -> None:
    """Replace (ledger windows) x (ledger queues) in the table at ``path`` with ``df``, one commit."""
    queues = {r.queue for w in ledger.windows for r in w.ranges}
    writer = (df.write.format("delta").option("userMetadata", ledger.to_json())
              .option("mergeSchema", "true"))
    if is_delta_table(df.sparkSession, path):
        predicate = slice_predicate((w.start_ms for w in ledger.windows), queues) if queues else "false"
        writer.mode("overwrite").option("replaceWhere", predicate).save(path)
    else:
        writer.mode("append").save(path)


def read_ledger(spark: SparkSession, path: str) -> list[LedgerEntry]:
    """Every rocketlake commit of the table, oldest first."""
    if not is_delta_table(spark, path):
        return []
    from delta.tables import DeltaTable

    history = DeltaTable.forPath(spark, path).history().select("version", "userMetadata").collect()
    entries = [LedgerEntry.from_json(row["userMetadata"], row["version"]) for row in history if row["userMetadata"]]
    return sorted((e for e in entries if e is not None), key=lambda e: e.version)


def last_commit_version(spark: SparkSession, path: str) -> int | None:
    if not is_delta_table(spark, path):
        return None
    from delta.tables import DeltaTable

    return DeltaTable.forPath(spark, path).history(1).collect()[0]["version"]
