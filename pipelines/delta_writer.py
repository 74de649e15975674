"""Writing windows to Delta: replace exactly the slice (windows x queues), ledger in the same commit.

Idempotence comes from ``replaceWhere``: re-running a window rewrites the rows of that window
on the queues this run took, and nothing else, in one atomic commit. The ledger (which offset
ranges each window covered, and what became of every offset) travels in that very commit's
``userMetadata``, so the table and the ledger can never disagree; any Delta reader sees it in the
table history. The table itself is a plain Delta table.
"""

from __future__ import annotations

from collections.abc import Iterable

from pyspark.sql import DataFrame, SparkSession

from rocketlake.pipelines.ledger import LedgerEntry, history_of
from rocketlake.resources.rocketmq.message_queue import MessageQueue

# How many of the newest commits to read at first; a group's newest entry is nearly always among them.
FIRST_HISTORY_PAGE = 20


def _sql_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def slice_predicate(window_starts_ms: Iterable[int], queues: Iterable[MessageQueue]) -> str:
    """The replaceWhere predicate of (these windows) x (these queues)."""
    windows = ", ".join(f"timestamp_millis({ms})" for ms in sorted(set(window_starts_ms)))
    keys = ", ".join(_sql_string(mq.key) for mq in sorted(set(queues)))
    return (f"window_start IN ({windows}) AND "
            f"concat_ws('/', topic, broker_name, CAST(queue_id AS STRING)) IN ({keys})")


def is_delta_table(spark: SparkSession, path: str) -> bool:
    from delta.tables import DeltaTable

    return DeltaTable.isDeltaTable(spark, path)


def write_slice(df: DataFrame, path: str, ledger: LedgerEntry) -> None:
    """Replace (ledger windows) x (ledger queues) in the table at ``path`` with ``df``, one commit."""
    queues = ledger.queues
    writer = (df.write.format("delta").option("userMetadata", ledger.to_json())
              .option("mergeSchema", "true"))
    if is_delta_table(df.sparkSession, path):
        predicate = slice_predicate((w.start_ms for w in ledger.windows), queues) if queues else "false"
        writer.mode("overwrite").option("replaceWhere", predicate).save(path)
    else:
        writer.mode("append").save(path)


def read_ledger(spark: SparkSession, path: str, group: str | None = None) -> list[LedgerEntry]:
    """The ledger entries a run of ``group`` needs, oldest first (every readable one if ``group`` is None).

    Reads the history newest first, a page at a time, only until the group's newest entry: it carries
    every earlier entry still at stake, so commits cleaned from the Delta log are never needed.
    """
    if not is_delta_table(spark, path):
        return []
    from delta.tables import DeltaTable

    table = DeltaTable.forPath(spark, path)
    limit = FIRST_HISTORY_PAGE
    while True:
        rows = table.history(limit).select("version", "userMetadata").collect()
        newest_first = [e for e in (LedgerEntry.from_json(r["userMetadata"], r["version"])
                                    for r in sorted(rows, key=lambda r: -r["version"]) if r["userMetadata"]) if e]
        if group is None:
            if len(rows) < limit:
                return list(reversed(newest_first))
        else:
            entries, complete = history_of(newest_first, group)
            if complete or len(rows) < limit:
                return entries
        limit *= 10


def last_commit_version(spark: SparkSession, path: str) -> int | None:
    if not is_delta_table(spark, path):
        return None
    from delta.tables import DeltaTable

    return DeltaTable.forPath(spark, path).history(1).collect()[0]["version"]
