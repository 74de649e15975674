"""JSON bodies landed as one VARIANT column (``body.format: variant``, Spark 4's ``parse_json``), on real brokers,
Spark and Delta: bodies of any shape land without a schema or inference, are read with ``variant_get``, and a body
that is not JSON is a failed message (sent back), as with ``format: json``."""

from __future__ import annotations

import json

import pytest
from deltalake import DeltaTable

from tests.integration.engine_support import Engine, send_window
from tests.integration.ingestion_support import unique
from tests.unit.support import ingestion_config

pytestmark = pytest.mark.engine

BODIES = [
    {"order_id": "o-0", "amount": 1.5, "customer": {"id": 7, "region": "eu"}},
    {"order_id": "o-1", "amount": 2, "items": [{"sku": "a"}, {"sku": "b"}]},  # another shape: no drift, no new column
    {"order_id": "o-2", "note": None},
]
NOT_JSON = [b"{not json", b"\xff\xfe{}"]  # malformed, and not UTF-8


def test_json_bodies_land_as_a_variant_column_and_what_is_not_json_fails(
    local_cluster, create_topic, java_producer, spark, tmp_path
):
    topic, group = create_topic(queues=1, brokers=("broker-a",)), unique("g_variant")
    cfg = ingestion_config(
        topic=topic,
        consumer_group=group,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        window={"cron": "* * * * *", "start": "1970-01-01", "grace_seconds": 0},
        body={"format": "variant"},
    )
    path = str(tmp_path / "orders")
    engine = Engine(local_cluster, spark, path, cfg)
    window = send_window(java_producer, topic, BODIES, raw=NOT_JSON)

    landed = engine.run("r1", [("w1", window)])
    [accounting] = landed.slice.accounting
    assert (accounting.planned, accounting.rows, accounting.sent_back) == (5, 3, 2)

    table = spark.read.format("delta").load(path)
    assert dict((f.name, f.dataType.simpleString()) for f in table.schema.fields)["body_variant"] == "variant"
    rows = {
        r.order_id: r
        for r in table.selectExpr(
            "variant_get(body_variant, '$.order_id', 'string') AS order_id",
            "variant_get(body_variant, '$.amount', 'double') AS amount",
            "variant_get(body_variant, '$.customer.region', 'string') AS region",
            "variant_get(body_variant, '$.items[1].sku', 'string') AS second_sku",
            "to_json(body_variant) AS text",
        ).collect()
    }
    assert sorted(rows) == ["o-0", "o-1", "o-2"]
    assert (rows["o-0"].amount, rows["o-0"].region) == (1.5, "eu")
    assert (rows["o-1"].amount, rows["o-1"].second_sku) == (2.0, "b")
    assert json.loads(rows["o-2"].text) == BODIES[2]  # a JSON null kept as such
    assert "variantType" in set(DeltaTable(path).protocol().writer_features or ())
