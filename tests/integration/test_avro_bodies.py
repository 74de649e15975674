"""Avro bodies (``body.format: avro``) made by Avro's own Java classes, sent by the official Java producer, landed
by real Spark (spark-avro's ``from_avro``) in Delta; bodies that are not records of the schema are failed messages.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from deltalake import DeltaTable

from tests.integration.engine_support import Engine, send_window
from tests.integration.ingestion_support import unique
from tests.unit.support import ingestion_config

pytestmark = pytest.mark.engine
HERE = Path(__file__).parent
ORDER_SCHEMA = HERE / "schemas" / "order.avsc"
OTHER_SCHEMA = '{"type": "record", "name": "Other", "fields": [{"name": "order_id", "type": "string"}]}'


def order(i: int, region: str | None) -> dict:
    """A record in Avro's JSON encoding (a union's branch named)."""
    return {
        "order_id": f"o-{i}",
        "amount": i + 0.25,
        "region": None if region is None else {"string": region},
        "ship": {"city": f"c{i}"},
        "status": "PAID" if i % 2 else "NEW",
    }


@pytest.mark.parametrize("encoding", ["binary", "single_object"])
def test_avro_records_land_as_columns_and_other_bodies_are_failed_messages(
    local_cluster, create_topic, java_producer, spark, tmp_path, avro_bodies, encoding
):
    topic, group = create_topic(queues=2), unique(f"g_avro_{encoding}")
    cfg = ingestion_config(
        topic=topic,
        consumer_group=group,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        window={"cron": "* * * * *", "start": "1970-01-01", "grace_seconds": 0},
        body={"format": "avro", "schema_file": str(ORDER_SCHEMA), "encoding": encoding},
    )
    good = avro_bodies(ORDER_SCHEMA, encoding, [order(i, "eu" if i % 2 else None) for i in range(4)])
    other = tmp_path / "other.avsc"
    other.write_text(OTHER_SCHEMA)
    if encoding == "binary":
        bad = [b"\xff\xff\xff\xff\xff\xff"]  # a string length no record has
        why = "body is not Avro binary of the record in schema_file"
    else:  # the right record without the frame, and a framed record of another schema
        bad = avro_bodies(ORDER_SCHEMA, "binary", [order(9, None)]) + avro_bodies(
            other, "single_object", [{"order_id": "o-x"}]
        )
        why = "body is not Avro single-object encoding of schema_file"
    window = send_window(java_producer, topic, [], raw=good + bad)
    engine = Engine(local_cluster, spark, tmp_path / "orders", cfg)
    engine.lake.failures_path = str(tmp_path / "failures")  # where a run keeps its failed messages, and why
    landed = engine.run("r1", [("w1", window)])
    (accounting,) = landed.slice.accounting
    assert (accounting.planned, accounting.rows, accounting.sent_back) == (4 + len(bad), 4, len(bad))
    failed = DeltaTable(engine.lake.failures_path).to_pyarrow_table(columns=["body", "error"]).to_pylist()
    assert sorted(f["body"] for f in failed) == sorted(bad)
    assert all(f["error"].startswith(why) for f in failed), failed
    rows = {r["order_id"]: r for r in DeltaTable(engine.lake.table_path).to_pyarrow_table().to_pylist()}
    assert sorted(rows) == ["o-0", "o-1", "o-2", "o-3"]
    assert {k: rows["o-1"][k] for k in ("amount", "region", "ship", "status")} == {
        "amount": 1.25,
        "region": "eu",
        "ship": {"city": "c1"},
        "status": "PAID",
    }
    assert rows["o-2"]["region"] is None and rows["o-2"]["status"] == "NEW"
