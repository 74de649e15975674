"""Protobuf bodies (``body.format: protobuf``) made by the Java protobuf runtime (``ProtobufBodies.java``, on
``com.google.protobuf:protobuf-java`` from Maven), sent by the official Java producer, decoded in the reader's Python
workers and landed by real Spark in Delta with spark-protobuf's columns; a body that is not a message of the type is
a failed message; a newer descriptor's fields become columns as they arrive."""

from __future__ import annotations

import socket
from datetime import datetime, timezone

import pytest
from deltalake import DeltaTable

from rocketlake.engine.registry import RegistryUnreachable
from tests.integration.engine_support import Engine, send_window
from tests.integration.ingestion_support import unique
from tests.unit.support import SCHEMAS, descriptor_set, ingestion_config

pytestmark = pytest.mark.engine


def order(i: int) -> dict:
    """An order in Protobuf's JSON mapping; an odd one pays by card and has a rating of 0, an even one neither."""
    message = {
        "orderId": f"o-{i}",
        "quantity": i,  # 0 for o-0: a proto3 default, not on the wire
        "points": 4294967295,
        "amount": i + 0.25,
        "status": "PAID" if i % 2 else "NEW",
        "ship": {"city": f"c{i}"},
        "labels": ["a", f"l{i}"],
        "lines": [{"sku": f"s{i}", "quantity": 2, "price": 1.5}],
        "counts": {"k": i},
        "placedAt": "2026-11-29T10:00:00.000005Z",
        "took": "90s",
        "discount": 0,
    }
    if i % 2:
        message |= {"card": "visa", "rating": 0}
    return message


def test_protobuf_messages_land_as_from_protobufs_columns_and_other_bodies_are_failed_messages(
    local_cluster, create_topic, java_producer, spark, tmp_path, protobuf_bodies
):
    topic, group = create_topic(queues=2), unique("g_protobuf")
    descriptors = descriptor_set("order.proto", tmp_path)
    cfg = ingestion_config(
        topic=topic,
        consumer_group=group,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        window={"cron": "* * * * *", "start": "1970-01-01", "grace_seconds": 0},
        body={"format": "protobuf", "descriptor_file": str(descriptors), "message_name": "shop.v1.Order"},
    )
    good = protobuf_bodies(descriptors, "shop.v1.Order", [order(i) for i in range(4)])
    bad = [b"\x0a\xff\xff\xff", b"\xff"]  # a string longer than the body; a field number 0's tag
    window = send_window(java_producer, topic, [], raw=good + bad)
    engine = Engine(local_cluster, spark, tmp_path / "orders", cfg)
    engine.lake.failures_path = str(tmp_path / "failures")
    (accounting,) = engine.run("r1", [("w1", window)]).slice.accounting
    assert (accounting.planned, accounting.rows, accounting.sent_back) == (6, 4, 2)

    failed = DeltaTable(engine.lake.failures_path).to_pyarrow_table(columns=["body", "error"]).to_pylist()
    assert sorted(f["body"] for f in failed) == sorted(bad)
    assert all(f["error"].startswith("body is not a shop.v1.Order message (Protobuf binary)") for f in failed), failed

    table = spark.read.format("delta").load(engine.lake.table_path)
    assert {f.name: f.dataType.simpleString() for f in table.schema.fields if f.name in ("ship", "lines", "took")} == {
        "ship": "struct<city:string,zip:int>",
        "lines": "array<struct<sku:string,quantity:int,price:double>>",
        "took": "bigint",
    }
    rows = {r["order_id"]: r for r in DeltaTable(engine.lake.table_path).to_pyarrow_table().to_pylist()}
    assert sorted(rows) == ["o-0", "o-1", "o-2", "o-3"]
    one = {k: rows["o-1"][k] for k in order(1) if k.islower()} | {
        k: rows["o-1"][k] for k in ("points", "placed_at", "card", "rating", "cash_cents", "total_cents", "counts")
    }
    assert one == {
        "quantity": 1,
        "points": -1,  # uint32 4294967295: the bits, as Java's int
        "amount": 1.25,
        "status": "PAID",
        "ship": {"city": "c1", "zip": None},
        "labels": ["a", "l1"],
        "lines": [{"sku": "s1", "quantity": 2, "price": 1.5}],
        "counts": [("k", 1)],
        "placed_at": datetime(2026, 11, 29, 10, 0, 0, 5, tzinfo=timezone.utc),
        "took": 90_000_000,
        "discount": {"value": None},  # a wrapper holding 0: the message is there, its value is the default
        "card": "visa",
        "rating": 0,  # `optional`: present at 0
        "cash_cents": None,  # the oneof's other member
        "total_cents": None,  # never set
    }
    zero = rows["o-0"]
    assert (zero["quantity"], zero["status"], zero["card"], zero["rating"], zero["counts"]) == (
        None,  # a proto3 scalar at 0 is not on the wire: null, as from_protobuf reads it
        "NEW",
        None,
        None,
        [("k", 0)],  # a map's value at 0 stays
    )

    # A producer on a newer descriptor (order_v2.proto: Order.channel, Address.country), and the ingestion on it:
    # its fields become columns in the window they arrive in; earlier rows hold null there.
    newer = descriptor_set("order_v2.proto", tmp_path)
    cfg = cfg.model_copy(update={"body": cfg.body.model_copy(update={"descriptor_file": str(newer)})})
    later = protobuf_bodies(newer, "shop.v1.Order", [order(4) | {"channel": "web", "ship": {"country": "FR"}}])
    window = send_window(java_producer, topic, [], raw=later)
    engine = Engine(local_cluster, spark, tmp_path / "orders", cfg)
    engine.lake.failures_path = str(tmp_path / "failures")
    (accounting,) = engine.run("r2", [("w2", window)]).slice.accounting
    assert (accounting.planned, accounting.rows) == (1, 1)
    rows = {r["order_id"]: r for r in DeltaTable(engine.lake.table_path).to_pyarrow_table().to_pylist()}
    assert (rows["o-4"]["channel"], rows["o-4"]["ship"]) == ("web", {"city": None, "zip": None, "country": "FR"})
    assert (rows["o-1"]["channel"], rows["o-1"]["ship"]) == (None, {"city": "c1", "zip": None, "country": None})


def test_bodies_framed_for_a_schema_registry_land_once_their_frame_is_checked(
    local_cluster, create_topic, java_producer, spark, tmp_path, protobuf_bodies
):
    """Confluent's wire format, written by the Java side as Confluent's Protobuf serializer frames a body; the ids
    checked against a directory of schemas keyed by id (the offline path). Then the same ingestion against a
    registry that cannot be reached: the window fails in one sentence, nothing lands, no offset moves."""
    topic, group = create_topic(queues=2), unique("g_framed")
    descriptors = descriptor_set("order.proto", tmp_path)
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / "7.proto").write_text((SCHEMAS / "order.proto").read_text())  # as the registry holds it
    body = {"format": "protobuf", "descriptor_file": str(descriptors), "message_name": "shop.v1.Order"}
    cfg = ingestion_config(
        topic=topic,
        consumer_group=group,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        window={"cron": "* * * * *", "start": "1970-01-01", "grace_seconds": 0},
        body={**body, "framing": "confluent", "schemas_dir": str(schemas)},
    )
    framed = protobuf_bodies(descriptors, "shop.v1.Order", [order(i) for i in range(3)], frame=(7, "2"))
    unknown_id = protobuf_bodies(descriptors, "shop.v1.Order", [order(3)], frame=(9, "2"))
    other_message = protobuf_bodies(descriptors, "shop.v1.Order", [order(4)], frame=(7, "0"))
    unframed = protobuf_bodies(descriptors, "shop.v1.Order", [order(5)])
    window = send_window(java_producer, topic, [], raw=framed + unknown_id + other_message + unframed)
    engine = Engine(local_cluster, spark, tmp_path / "orders", cfg)
    engine.lake.failures_path = str(tmp_path / "failures")
    (accounting,) = engine.run("r1", [("w1", window)]).slice.accounting
    assert (accounting.planned, accounting.rows, accounting.sent_back) == (6, 3, 3)
    rows = DeltaTable(engine.lake.table_path).to_pyarrow_table(columns=["order_id", "amount"]).to_pylist()
    assert sorted((r["order_id"], r["amount"]) for r in rows) == [("o-0", 0.25), ("o-1", 1.25), ("o-2", 2.25)]
    errors = sorted(r["error"] for r in DeltaTable(engine.lake.failures_path).to_pyarrow_table().to_pylist())
    assert errors == [
        "body is framed as message [0] of schema 7, not shop.v1.Order ([2] in order.proto)",
        "body is framed with schema id 9, which the schema registry does not hold",
        "body is not in Confluent's wire format (it starts with 0x0a, not the magic byte 0x00)",
    ]

    # A registry nobody answers for: the run fails naming it, the table and the group's offsets stay as they were.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    down = cfg.model_copy(
        update={"body": cfg.body.model_copy(update={"schemas_dir": None, "registry_url": f"http://127.0.0.1:{port}"})}
    )
    window = send_window(java_producer, topic, [], raw=framed[:1])
    engine = Engine(local_cluster, spark, tmp_path / "orders", down)
    version, offsets = DeltaTable(engine.lake.table_path).version(), engine.offsets(topic)
    with pytest.raises(RegistryUnreachable, match=f"the schema registry at http://127.0.0.1:{port} cannot be reached"):
        engine.run("r2", [("w2", window)])
    assert DeltaTable(engine.lake.table_path).version() == version and engine.offsets(topic) == offsets
