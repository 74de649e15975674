"""5.x static topics (logical queues mapped onto physical queues of several brokers, ``mqadmin updateStaticTopic``):
their offsets are logical, so a run refuses one by name before it reads anything."""

from __future__ import annotations

import uuid

import pytest

from rocketlake.engine.broker_access import StaticTopicRefused
from rocketlake.engine.windows import StoreTimeWindow
from tests.integration.engine_support import Engine, now_ms
from tests.integration.ingestion_support import unique
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
