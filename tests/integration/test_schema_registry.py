"""Bodies framed for a real schema registry: Apicurio Registry, started by the local runtime (``rocketlake local up
--registry``), answering Confluent's REST API. The schemas are registered through that API, as a serializer that
auto-registers does; the bodies (Avro by Avro's Java classes, Protobuf by the Java protobuf runtime, JSON) carry the
ids the registry gave in Confluent's wire format and are sent by the official Java producer. The reader looks each
id up in the registry (``body.registry_url``) and lands the bodies whose frame names the ingestion's schema; a body
framed with an id the registry never gave is a failed message with its reason."""

from __future__ import annotations

import json

import pytest
from deltalake import DeltaTable

from rocketlake.engine.registry import frame
from rocketlake.local.schema_registry import LocalSchemaRegistry
from tests.conftest import free_ports
from tests.integration.engine_support import Engine, from_first, send_window
from tests.integration.ingestion_support import unique
from tests.integration.test_protobuf_bodies import order as protobuf_order
from tests.unit.support import SCHEMAS, descriptor_set

pytestmark = pytest.mark.engine

ORDER_JSON_SCHEMA = {
    "type": "object",
    "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}},
}


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    [port] = free_ports(1)
    registry = LocalSchemaRegistry(tmp_path_factory.mktemp("registry"), port=port)
    try:
        registry.up()
        yield registry
    finally:
        registry.down()


def landed(cluster, spark, tmp_path, topic: str, body: dict, bodies: list[bytes], java_producer, registry):
    """The window of ``bodies`` landed by an ingestion whose ids are looked up in ``registry``: (accounting, rows,
    failures' errors)."""
    cfg = from_first(topic, unique("g_registry"), body={**body, "framing": "confluent", "registry_url": registry.url})
    window = send_window(java_producer, topic, [], raw=bodies)
    engine = Engine(cluster, spark, tmp_path / topic, cfg)
    engine.lake.failures_path = str(tmp_path / f"{topic}_failures")
    (accounting,) = engine.run("r1", [("w1", window)]).slice.accounting
    rows = DeltaTable(engine.lake.table_path).to_pyarrow_table().to_pylist()
    failed = DeltaTable(engine.lake.failures_path).to_pyarrow_table(columns=["body", "error"]).to_pylist()
    return accounting, rows, sorted(f["error"] for f in failed)


def test_bodies_framed_with_the_ids_a_real_registry_gave_land_and_an_id_it_never_gave_fails(
    local_cluster, create_topic, java_producer, spark, tmp_path, registry, avro_bodies, protobuf_bodies
):
    avro_topic, proto_topic, json_topic = (create_topic(queues=2) for _ in range(3))
    order_avsc = (SCHEMAS / "order.avsc").read_text()
    avro_id = registry.register(f"{avro_topic}-value", order_avsc)
    assert registry.register(f"{avro_topic}-value", order_avsc) == avro_id  # the same schema, the same id
    other_id = registry.register(f"{avro_topic}-other", '{"type": "record", "name": "Other", "fields": []}')
    proto_id = registry.register(f"{proto_topic}-value", (SCHEMAS / "order.proto").read_text(), "PROTOBUF")
    json_id = registry.register(f"{json_topic}-value", json.dumps(ORDER_JSON_SCHEMA), "JSON")
    never_given = max(avro_id, other_id, proto_id, json_id) + 1000
    args = (local_cluster, spark, tmp_path)

    # Avro: the id must name the ingestion's schema_file; another record's id is a failed message.
    records = [
        {"order_id": f"o-{i}", "amount": i + 0.25, "region": None, "ship": {"city": "c"}, "status": "NEW"}
        for i in range(3)
    ]
    encoded = avro_bodies(SCHEMAS / "order.avsc", "binary", records)
    bodies = [frame(avro_id, b) for b in encoded] + [frame(other_id, encoded[0]), frame(never_given, encoded[1])]
    body = {"format": "avro", "schema_file": str(SCHEMAS / "order.avsc")}
    accounting, rows, errors = landed(*args, avro_topic, body, bodies, java_producer, registry)
    assert (accounting.planned, accounting.rows, accounting.sent_back) == (5, 3, 2)
    assert sorted((r["order_id"], r["amount"]) for r in rows) == [(f"o-{i}", i + 0.25) for i in range(3)]
    assert errors == [
        f"body is framed with schema id {never_given}, which the schema registry does not hold",
        f"body is framed with schema id {other_id}, whose Avro schema is not schema_file's",
    ]

    # Protobuf: the frame's message-index list must name the ingestion's message in the registry's .proto.
    descriptors = descriptor_set("order.proto", tmp_path)
    messages = [protobuf_order(i) for i in range(3)]
    bodies = protobuf_bodies(descriptors, "shop.v1.Order", messages, frame=(proto_id, "2")) + protobuf_bodies(
        descriptors, "shop.v1.Order", [protobuf_order(3)], frame=(never_given, "2")
    )
    body = {"format": "protobuf", "descriptor_file": str(descriptors), "message_name": "shop.v1.Order"}
    accounting, rows, errors = landed(*args, proto_topic, body, bodies, java_producer, registry)
    assert (accounting.planned, accounting.rows, accounting.sent_back) == (4, 3, 1)
    assert sorted((r["order_id"], r["amount"]) for r in rows) == [("o-0", 0.25), ("o-1", 1.25), ("o-2", 2.25)]
    assert errors == [f"body is framed with schema id {never_given}, which the schema registry does not hold"]

    # JSON Schema: the registry holds the id; Spark parses the payload with the ingestion's schema.
    orders = [json.dumps({"order_id": f"o-{i}", "amount": i + 0.5}).encode() for i in range(3)]
    bodies = [frame(json_id, o) for o in orders] + [frame(never_given, orders[0])]
    body = {"format": "json", "schema": "order_id STRING, amount DOUBLE"}
    accounting, rows, errors = landed(*args, json_topic, body, bodies, java_producer, registry)
    assert (accounting.planned, accounting.rows, accounting.sent_back) == (4, 3, 1)
    assert sorted((r["order_id"], r["amount"], r["body"]) for r in rows) == sorted(
        (f"o-{i}", i + 0.5, frame(json_id, orders[i])) for i in range(3)
    )
    assert errors == [f"body is framed with schema id {never_given}, which the schema registry does not hold"]
