"""Several topics into one table (``topics``, ``topic_pattern``) on real brokers, Spark and Delta, below Dagster.

The official Java producer writes to each topic; a run lands every topic's queues in one Delta commit with one
ledger entry, and commits each queue's offset, which the Java admin tool reads back per topic. A topic created
after the first window that matches the pattern joins at the next window. A list of topics goes the same way
below the subscription (``topics.subscribed_topics``, unit-tested); the pattern is the case with a
moving list.
"""

from __future__ import annotations

import re
import uuid

import pytest
from deltalake import DeltaTable

from rocketlake.delta.ledger_log import read_ledger
from rocketlake.engine.topics import subscribed_topics
from rocketlake.engine.windows import StoreTimeWindow
from rocketlake.rocketmq.client import RocketMQClient
from tests.integration.engine_support import Engine, now_ms
from tests.integration.ingestion_support import unique, wait_until
from tests.unit.support import ingestion_config

pytestmark = pytest.mark.engine
WINDOW = {"cron": "* * * * *", "start": "1970-01-01", "grace_seconds": 0}


def send_to(java_producer, topics: dict[str, int]) -> StoreTimeWindow:
    """``n`` orders to each topic (one Java producer call), alone in a window of store time, closed on return."""
    start = now_ms()
    java_producer(
        [
            {"topic": topic, "tags": "TagA", "keys": [f"{topic}-{i}"], "body": f"{topic}-{i}"}
            for topic, n in topics.items()
            for i in range(n)
        ]
    )
    end = now_ms() + 1
    wait_until(end / 1000)
    return StoreTimeWindow(start, end)


def assert_group_at_the_end(cluster, group: str, topics: list[str]):
    for topic in topics:
        progress = [p for p in cluster.mqadmin().consumer_progress(group, topic) if p.topic == topic]
        assert progress and all(p.consumer_offset == p.broker_offset for p in progress), (topic, progress)


def test_a_topic_created_later_that_matches_the_pattern_joins_at_the_next_window(
    local_cluster, create_topic, java_producer, spark, tmp_path
):
    prefix = f"pat{uuid.uuid4().hex[:6]}"
    first = create_topic(queues=2, prefix=prefix)
    create_topic(queues=1, prefix="other")  # matches nothing
    group = unique("g_pattern")
    cfg = ingestion_config(
        topic=None,
        topic_pattern=re.escape(prefix) + "_.*",
        consumer_group=group,
        window=WINDOW,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    )
    engine = Engine(local_cluster, spark, tmp_path / "orders", cfg)
    w1 = send_to(java_producer, {first: 4})
    assert sum(a.rows for a in engine.run("r1", [("w1", w1)]).slice.accounting) == 4

    second = create_topic(queues=2, prefix=prefix)
    with RocketMQClient(local_cluster.spec.namesrv_address) as client:
        assert second in subscribed_topics(cfg, client)  # the name server lists it as soon as it is created
    w2 = send_to(java_producer, {first: 2, second: 5})
    landed = engine.run("r2", [("w2", w2)])
    assert sum(a.rows for a in landed.slice.accounting) == 7
    rows = DeltaTable(engine.lake.table_path).to_pyarrow_table(columns=["topic"]).to_pylist()
    assert sorted(r["topic"] for r in rows).count(second) == 5 and len(rows) == 11
    # Both topics' ranges in the one entry of the one commit; each queue's offset committed, as mqadmin reads it.
    entry = next(e for e in read_ledger(engine.lake.table_path, group) if e.run_id == "r2")
    assert {r.queue.topic for w in entry.windows for r in w.ranges if r.size} == {first, second}
    assert_group_at_the_end(local_cluster, group, [first, second])
