"""Topics whose offsets offset windows cannot make exact, refused by name before anything is read: 5.x static topics
(logical queues mapped onto physical queues of several brokers, ``mqadmin updateStaticTopic``), whose offsets are
logical, and compaction topics (``cleanup.policy=COMPACTION``), whose offsets have gaps where keys were compacted."""

from __future__ import annotations

import uuid

import pytest

from rocketlake.engine.broker_access import CompactionTopicRefused, StaticTopicRefused
from rocketlake.engine.windows import StoreTimeWindow
from tests.integration.engine_support import Engine, from_first, now_ms, send_window
from tests.integration.ingestion_support import unique

pytestmark = pytest.mark.engine


def test_a_static_topic_is_refused_by_name_before_anything_is_read(local_cluster, spark, tmp_path):
    topic = f"static_{uuid.uuid4().hex[:8]}"
    local_cluster.mqadmin().run("updateStaticTopic", "-t", topic, "-qn", "4", "-c", local_cluster.spec.cluster_name)
    cfg = from_first(topic, unique("g_static"))
    engine = Engine(local_cluster, spark, tmp_path / "orders", cfg)
    assert engine.client.route(topic).static_brokers  # the name server's route maps its logical queues
    with pytest.raises(StaticTopicRefused, match=f"topic {topic} is a static topic"):
        engine.run("r1", [("w1", StoreTimeWindow(now_ms() - 60_000, now_ms() - 1))])
    assert not (tmp_path / "orders").exists()


def test_a_compaction_topic_is_refused_by_name_before_anything_is_read(local_cluster, java_producer, spark, tmp_path):
    topic = f"compacted_{uuid.uuid4().hex[:8]}"
    cluster = local_cluster.spec.cluster_name
    local_cluster.mqadmin().run("updateTopic", "-t", topic, "-c", cluster, "-a", "+cleanup.policy=COMPACTION")
    window = send_window(java_producer, topic, [{"v": i} for i in range(3)])
    group = unique("g_compacted")
    cfg = from_first(topic, group)
    engine = Engine(local_cluster, spark, tmp_path / "orders", cfg)
    assert engine.client.topic_attributes(topic)["cleanup.policy"] == "COMPACTION"  # as the brokers keep it
    with pytest.raises(CompactionTopicRefused, match=f"topic {topic} is a compaction topic"):
        engine.run("r1", [("w1", window)])
    assert not (tmp_path / "orders").exists()
    queues = engine.client.queues(topic)
    assert all(engine.client.query_consumer_offset(group, q, set_zero_if_not_found=False) is None for q in queues)
