"""JSON and Avro bodies framed for a schema registry (``body.framing: confluent``), sent by the official Java
producer: the reader checks each frame's id (and for Avro that the id names ``schema_file``) against a directory of
schemas keyed by id, Spark decodes the payload; a body without a frame, with an unknown id or with another schema
is a failed message, kept as it came."""

from __future__ import annotations

import json

import pytest
from deltalake import DeltaTable

from rocketlake.engine.registry import frame
from tests.integration.engine_support import Engine, send_window
from tests.integration.ingestion_support import unique
from tests.unit.support import SCHEMAS, ingestion_config

pytestmark = pytest.mark.engine
OTHER_SCHEMA = '{"type": "record", "name": "Other", "fields": [{"name": "order_id", "type": "string"}]}'


def landed(local_cluster, spark, tmp_path, topic: str, body: dict, bodies: list[bytes], java_producer):
    cfg = ingestion_config(
        topic=topic,
        consumer_group=unique("g_framed"),
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        window={"cron": "* * * * *", "start": "1970-01-01", "grace_seconds": 0},
        body={**body, "framing": "confluent", "schemas_dir": str(tmp_path / "schemas")},
    )
    window = send_window(java_producer, topic, [], raw=bodies)
    engine = Engine(local_cluster, spark, tmp_path / "orders", cfg)
    engine.lake.failures_path = str(tmp_path / "failures")
    (accounting,) = engine.run("r1", [("w1", window)]).slice.accounting
    rows = DeltaTable(engine.lake.table_path).to_pyarrow_table().to_pylist()
    failed = DeltaTable(engine.lake.failures_path).to_pyarrow_table(columns=["body", "error"]).to_pylist()
    return accounting, rows, failed


def test_framed_json_bodies_land_and_bodies_without_a_known_frame_fail(
    local_cluster, create_topic, java_producer, spark, tmp_path
):
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "5.json").write_text('{"type": "object"}')  # a JSON Schema the registry holds as id 5
    orders = [json.dumps({"order_id": f"o-{i}", "amount": i + 0.5}).encode() for i in range(3)]
    bodies = [frame(5, o) for o in orders] + [frame(6, orders[0]), orders[1]]
    accounting, rows, failed = landed(
        local_cluster,
        spark,
        tmp_path,
        create_topic(queues=2),
        {"format": "json", "schema": "order_id STRING, amount DOUBLE"},
        bodies,
        java_producer,
    )
    assert (accounting.planned, accounting.rows, accounting.sent_back) == (5, 3, 2)
    assert sorted((r["order_id"], r["amount"], r["body"]) for r in rows) == sorted(
        (f"o-{i}", i + 0.5, bodies[i]) for i in range(3)
    )  # the body as it came, frame and all
    assert sorted((f["body"], f["error"]) for f in failed) == sorted(
        [
            (bodies[3], "body is framed with schema id 6, which the schema registry does not hold"),
            (orders[1], "body is not in Confluent's wire format (it starts with 0x7b, not the magic byte 0x00)"),
        ]
    )


def test_framed_avro_bodies_land_when_their_id_names_schema_file(
    local_cluster, create_topic, java_producer, spark, tmp_path, avro_bodies
):
    order_schema = SCHEMAS / "order.avsc"
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "3.avsc").write_text(order_schema.read_text())  # schema_file, registered as id 3
    (tmp_path / "schemas" / "4.avsc").write_text(OTHER_SCHEMA)  # another record, id 4
    records = [
        {"order_id": f"o-{i}", "amount": i + 0.25, "region": None, "ship": {"city": "c"}, "status": "NEW"}
        for i in range(3)
    ]
    encoded = avro_bodies(order_schema, "binary", records)
    bodies = [frame(3, b) for b in encoded] + [frame(4, encoded[0])]
    accounting, rows, failed = landed(
        local_cluster,
        spark,
        tmp_path,
        create_topic(queues=2),
        {"format": "avro", "schema_file": str(order_schema)},
        bodies,
        java_producer,
    )
    assert (accounting.planned, accounting.rows, accounting.sent_back) == (4, 3, 1)
    assert sorted((r["order_id"], r["amount"], r["ship"]) for r in rows) == [
        (f"o-{i}", i + 0.25, {"city": "c"}) for i in range(3)
    ]
    assert [(f["body"], f["error"]) for f in failed] == [
        (bodies[3], "body is framed with schema id 4, whose Avro schema is not schema_file's")
    ]
