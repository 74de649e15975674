"""Topics whose offsets offset windows cannot make exact, refused by name before anything is read: 5.x static topics
(logical queues mapped onto physical queues of several brokers, ``mqadmin updateStaticTopic``), whose offsets are
logical, and compaction topics (``cleanup.policy=COMPACTION``), whose offsets have gaps where keys were compacted."""

from __future__ import annotations

import uuid

import pytest

from rocketlake.engine.broker_access import CompactionTopicRefused, StaticTopicRefused
from rocketlake.engine.windows import StoreTimeWindow
from tests.integration.engine_support import Engine, now_ms
from tests.integration.ingestion_support import unique, wait_until
from tests.unit.support import ingestion_config

pytestmark = pytest.mark.engine


def test_a_static_topic_is_refused_by_name_before_anything_is_read(local_cluster, spark, tmp_path):
    topic = f"static_{uuid.uuid4().hex[:8]}"
    local_cluster.mqadmin().run("updateStaticTopic", "-t", topic, "-qn", "4", "-c", local_cluster.spec.cluster_name)
    cfg = ingestion_config(
        topic=topic,
        consumer_group=unique("g_static"),
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        window={"cron": "* * * * *", "start": "1970-01-01", "grace_seconds": 0},
    )
    engine = Engine(local_cluster, spark, tmp_path / "orders", cfg)
    assert engine.client.route(topic).static_brokers  # the name server's route maps its logical queues
    with pytest.raises(StaticTopicRefused, match=f"topic {topic} is a static topic"):
        engine.run("r1", [("w1", StoreTimeWindow(now_ms() - 60_000, now_ms() - 1))])
    assert not (tmp_path / "orders").exists()


def test_a_compaction_topic_is_refused_by_name_before_anything_is_read(local_cluster, java_producer, spark, tmp_path):
    topic = f"compacted_{uuid.uuid4().hex[:8]}"
    cluster = local_cluster.spec.cluster_name
    local_cluster.mqadmin().run("updateTopic", "-t", topic, "-c", cluster, "-a", "+cleanup.policy=COMPACTION")
    start = now_ms()
    java_producer([{"topic": topic, "keys": ["k-1"], "body": f"v-{i}"} for i in range(3)])
    window = StoreTimeWindow(start, now_ms() + 1)
    wait_until(window.end_ms / 1000)
    group = unique("g_compacted")
    cfg = ingestion_config(
        topic=topic,
        consumer_group=group,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        window={"cron": "* * * * *", "start": "1970-01-01", "grace_seconds": 0},
    )
    engine = Engine(local_cluster, spark, tmp_path / "orders", cfg)
    assert engine.client.topic_attributes(topic)["cleanup.policy"] == "COMPACTION"  # as the brokers keep it
    with pytest.raises(CompactionTopicRefused, match=f"topic {topic} is a compaction topic"):
        engine.run("r1", [("w1", window)])
    assert not (tmp_path / "orders").exists()
    queues = engine.client.queues(topic)
    assert all(engine.client.query_consumer_offset(group, q, set_zero_if_not_found=False) is None for q in queues)
