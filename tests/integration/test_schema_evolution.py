"""JSON bodies that change between windows (``body.evolve: add_columns``), on real brokers, Spark and Delta, in a
table partitioned by hour as well as day (``layout``).

The official Java producer sends orders; between two windows its bodies gain fields (one nested), and one body
holds a value of another type than the table's column. Runs are the engine's, below Dagster, with windows of
store time around what was just sent (``test_engine_runs``).
"""

from __future__ import annotations

import json
import time

import pytest
from deltalake import DeltaTable

from rocketlake.engine.windows import StoreTimeWindow
from rocketlake.rocketmq.client import RocketMQClient
from rocketlake.rocketmq.errors import TopicNotExist
from tests.integration.engine_support import Engine, now_ms, send_window
from tests.integration.ingestion_support import unique, wait_until
from tests.unit.support import ingestion_config

pytestmark = pytest.mark.engine


def retry_copies(client: RocketMQClient, topic: str) -> int:
    try:
        return sum(client.get_max_offset(q) for q in client.queues(topic))
    except TopicNotExist:  # the broker creates the retry topic with its first message
        return 0


def test_a_json_table_gains_the_fields_bodies_add_and_a_conflicting_value_is_a_failed_message(
    local_cluster, create_topic, java_producer, spark, tmp_path
):
    topic, group = create_topic(queues=2), unique("g_evolve")
    cfg = ingestion_config(
        topic=topic,
        consumer_group=group,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        window={"cron": "* * * * *", "start": "1970-01-01", "grace_seconds": 0},
        body={"format": "json", "schema": "order_id STRING, amount DOUBLE", "evolve": "add_columns"},
        max_reconsume_times=1,
        layout={"partition_by": ["window_hour"]},
    )
    engine = Engine(local_cluster, spark, tmp_path / "orders", cfg)
    path = engine.lake.table_path

    w1 = send_window(java_producer, topic, [{"order_id": f"o-{i}", "amount": i + 0.5} for i in range(4)])
    first = engine.run("r1", [("w1", w1)])
    assert sum(a.rows for a in first.slice.accounting) == 4
    v1 = DeltaTable(path).version()
    assert DeltaTable(path).metadata().partition_columns == ["window_date", "window_hour"]  # the layout asked for
    assert "region" not in DeltaTable(path).schema().to_arrow().names

    later = [
        {"order_id": f"o-{i}", "amount": i, "region": "eu", "ship": {"city": f"c{i}", "zip": i}} for i in range(4, 9)
    ]
    conflicting = {"order_id": "o-bad", "amount": "lots", "region": "us"}
    w2 = send_window(java_producer, topic, later + [conflicting])
    second = engine.run("r2", [("w2", w2)])
    (accounting,) = second.slice.accounting
    assert (accounting.planned, accounting.rows, accounting.sent_back) == (6, 5, 1)

    table = DeltaTable(path)
    assert {"region", "ship"} <= set(table.schema().to_arrow().names)
    # The new columns came with the window's own commit: the version before it has none of them, the commit that
    # follows holds the window's rows in them.
    assert "region" not in DeltaTable(path, version=v1).schema().to_arrow().names
    landed = DeltaTable(path, version=v1 + 1)
    assert {"region", "ship"} <= set(landed.schema().to_arrow().names)
    assert landed.to_pyarrow_table().num_rows == 9
    rows = {r["order_id"]: r for r in table.to_pyarrow_table().to_pylist()}
    assert set(rows) == {f"o-{i}" for i in range(9)}, "the conflicting body is not a row, not even with nulls"
    assert rows["o-0"]["region"] is None and rows["o-0"]["ship"] is None and rows["o-0"]["amount"] == 0.5
    assert (rows["o-5"]["region"], rows["o-5"]["ship"], rows["o-5"]["amount"]) == ("eu", {"city": "c5", "zip": 5}, 5.0)

    # The failed message comes back through the retry topic, fails again, and goes to the dead-letter queue.
    with RocketMQClient(local_cluster.spec.namesrv_address) as client:
        deadline = time.monotonic() + 60
        while retry_copies(client, f"%RETRY%{group}") < 1:
            assert time.monotonic() < deadline, "the broker did not deliver the message sent back"
            time.sleep(0.2)
        w3 = StoreTimeWindow(w2.end_ms, now_ms() + 1)
        wait_until(w3.end_ms / 1000)
        third = engine.run("r3", [("w3", w3)])
        (accounting,) = third.slice.accounting
        assert (accounting.planned, accounting.rows, accounting.dead_lettered) == (1, 0, 1)
        dead = [
            m for mq in client.queues(f"%DLQ%{group}") for m in client.pull(mq, 0, 32, consumer_group=group).messages
        ]
    assert [json.loads(m.body) for m in dead] == [conflicting]
    assert DeltaTable(path).to_pyarrow_table().num_rows == 9


@pytest.mark.parametrize("widening", [True, False], ids=["table allows type widening", "table does not"])
def test_a_value_wider_than_its_column_widens_it_where_the_table_allows_else_fails(
    widening, local_cluster, create_topic, java_producer, spark, tmp_path
):
    """Issue 48: ``amount INT``, then a body whose amount an INT cannot hold (3,000,000,000). With
    ``delta.enableTypeWidening`` the run's commit widens the column to BIGINT and the message lands; without it the
    column's type binds and the message is a failed one, as before. A value that fits keeps the column as it is."""
    topic, group = create_topic(queues=1, brokers=("broker-a",)), unique("g_widen")
    cfg = ingestion_config(
        topic=topic,
        consumer_group=group,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        window={"cron": "* * * * *", "start": "1970-01-01", "grace_seconds": 0},
        body={"format": "json", "schema": "order_id STRING, amount INT", "evolve": "add_columns"},
        table_properties={"delta.enableTypeWidening": "true"} if widening else {},
    )
    path = str(tmp_path / "orders")
    engine = Engine(local_cluster, spark, path, cfg)

    def amount_type() -> str:
        return dict((f.name, f.dataType.simpleString()) for f in spark.read.format("delta").load(path).schema)["amount"]

    first = engine.run("r1", [("w1", send_window(java_producer, topic, [{"order_id": "o-1", "amount": 7}]))])
    assert [a.rows for a in first.slice.accounting] == [1] and amount_type() == "int"  # JSON's BIGINT did not widen
    wide = [{"order_id": "o-2", "amount": 3_000_000_000}, {"order_id": "o-3", "amount": 8}]
    second = engine.run("r2", [("w2", send_window(java_producer, topic, wide))])
    [accounting] = second.slice.accounting
    amounts = {r.order_id: r.amount for r in spark.read.format("delta").load(path).collect()}
    if widening:
        assert (accounting.rows, accounting.sent_back) == (2, 0)
        assert amount_type() == "bigint"
        assert amounts == {"o-1": 7, "o-2": 3_000_000_000, "o-3": 8}
    else:
        assert (accounting.rows, accounting.sent_back) == (1, 1)
        assert amount_type() == "int"
        assert amounts == {"o-1": 7, "o-3": 8}
