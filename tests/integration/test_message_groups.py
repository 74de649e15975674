"""5.x FIFO message groups (``__SHARDINGKEY``, what the proxy stores a FIFO producer's ``messageGroup`` as): the
opt-in ``message_group`` column, landed by an orderly ingestion, each group's messages on its queue in send order."""

from __future__ import annotations

import pytest
from deltalake import DeltaTable

from rocketlake.engine.windows import StoreTimeWindow
from tests.integration.engine_support import Engine, now_ms, stored
from tests.integration.ingestion_support import unique, wait_until
from tests.unit.support import ingestion_config

pytestmark = pytest.mark.engine
GROUPS = {"cart-1": ("broker-a", 0), "cart-2": ("broker-a", 1), "cart-3": ("broker-b", 0)}


def test_message_groups_land_in_their_column_in_the_order_each_group_was_sent(
    local_cluster, create_topic, java_producer, spark, tmp_path
):
    topic = create_topic(queues=2)
    started = now_ms()
    # A FIFO producer keeps a group on one queue (it selects the queue by the group) and sends it in order.
    messages = [
        {"topic": topic, "keys": [f"{group}-{i}"], "body": str(i), "message_group": group, "broker": b, "queue_id": q}
        for i in range(4)
        for group, (b, q) in GROUPS.items()
    ] + [{"topic": topic, "keys": ["no-group"], "body": "x", "broker": "broker-b", "queue_id": 1}]
    sent = java_producer(messages)
    engine = Engine(
        local_cluster,
        spark,
        tmp_path / "orders",
        ingestion_config(
            topic=topic,
            consumer_group=unique("g_fifo"),
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            consume_orderly=True,
            window={"cron": "* * * * *", "start": "1970-01-01", "grace_seconds": 0},
            metadata_columns=["message_group"],
        ),
    )
    for q in engine.client.queues(topic):
        stored(engine.client, q, sum(1 for s in sent if (s.broker_name, s.queue_id) == (q.broker_name, q.queue_id)))
    end = now_ms() + 1
    wait_until(end / 1000)
    (accounting,) = engine.run("r1", [("w1", StoreTimeWindow(started, end))]).slice.accounting
    assert (accounting.planned, accounting.rows) == (13, 13)
    rows = DeltaTable(engine.lake.table_path).to_pyarrow_table().to_pylist()
    assert {r["keys"]: r["message_group"] for r in rows} == {
        **{f"{g}-{i}": g for g in GROUPS for i in range(4)},
        "no-group": None,  # a message without a group
    }
    for group, (broker, queue) in GROUPS.items():
        landed = sorted((r["queue_offset"], r["keys"]) for r in rows if r["message_group"] == group)
        assert [k for _, k in landed] == [f"{group}-{i}" for i in range(4)]  # the group's order, on its queue
        assert {(r["broker_name"], r["queue_id"]) for r in rows if r["message_group"] == group} == {(broker, queue)}
