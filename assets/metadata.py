"""What a materialization tells the Dagster UI: ranges per queue, rows, bytes, per-window accounting.

Keys are namespaced constants so sensors, checks and users can rely on them.
"""

from __future__ import annotations

from dagster import MetadataValue, TableColumn, TableRecord, TableSchema

from rocketlake.pipelines.materialize import Materialization

ROWS = "rocketlake/rows"
BYTES = "rocketlake/bytes"
RANGES = "rocketlake/ranges"
WINDOWS = "rocketlake/windows"
LEDGER_RUN = "rocketlake/ledger_run_id"

RANGE_SCHEMA = TableSchema(columns=[
    TableColumn("window", "string"), TableColumn("topic", "string"), TableColumn("broker_name", "string"),
    TableColumn("queue_id", "int"), TableColumn("start", "int"), TableColumn("end", "int"), TableColumn("size", "int"),
])


def materialization_metadata(m: Materialization) -> dict:
    ranges = [TableRecord({"window": w.partition_key, "topic": r.topic, "broker_name": r.broker_name,
                           "queue_id": r.queue_id, "start": r.start, "end": r.end, "size": r.size})
              for w in m.ledger.windows for r in w.ranges]
    return {
        ROWS: MetadataValue.int(sum(a.rows for a in m.accounting)),
        BYTES: MetadataValue.int(m.bytes_read),
        RANGES: MetadataValue.table(ranges, schema=RANGE_SCHEMA),
        WINDOWS: MetadataValue.json({a.partition_key: {"planned": a.planned, "rows": a.rows, "filtered": a.filtered,
                                                       "failed": a.failed} for a in m.accounting}),
        LEDGER_RUN: m.ledger.run_id,
        "dagster/row_count": MetadataValue.int(sum(a.rows for a in m.accounting)),
    }
