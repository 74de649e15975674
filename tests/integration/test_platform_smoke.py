"""The platform on real parts: two brokers, the Java producer, mqadmin, Spark, Delta and delta-rs."""

from __future__ import annotations

import sys
from collections import Counter

import pytest
from deltalake import DeltaTable

pytestmark = pytest.mark.broker


def test_both_brokers_register_on_loopback(local_cluster):
    status = local_cluster.status()
    assert status.ready, status.render(local_cluster.spec.cluster_name)
    assert {(b.name, b.registered_address) for b in status.brokers} == {
        ("broker-a", local_cluster.spec.broker("broker-a").address),
        ("broker-b", local_cluster.spec.broker("broker-b").address),
    }
    assert all(b.registered_address.startswith("127.0.0.1:") for b in status.brokers)


def test_java_peer_sends_100_and_mqadmin_counts_them(local_cluster, create_topic, java_producer):
    topic = create_topic(queues=4)
    sent = java_producer(args=["--topic", topic, "--count", "100", "--body-size", "256"])

    assert len(sent) == 100
    assert {s.status for s in sent} == {"SEND_OK"}
    per_queue = Counter((s.broker_name, s.queue_id) for s in sent)
    # Queue ids 0..3 exist on both brokers: the peer's answers already need the broker in the key.
    assert {b for b, _ in per_queue} == {"broker-a", "broker-b"}
    assert set(per_queue) <= {(b, q) for b in ("broker-a", "broker-b") for q in range(4)}

    status = local_cluster.mqadmin().topic_status(topic)
    assert sum(q.max_offset for q in status) == 100
    assert {(q.broker_name, q.queue_id): q.max_offset for q in status if q.max_offset} == dict(per_queue)
    # Offsets the peer was told are exactly 0..n-1 in every queue.
    for key, n in per_queue.items():
        assert sorted(s.queue_offset for s in sent if (s.broker_name, s.queue_id) == key) == list(range(n))


def test_java_peer_stdin_mode_targets_a_queue_and_sends_batches(create_topic, java_producer):
    topic = create_topic(queues=2, brokers=("broker-b",))
    sent = java_producer(
        messages=[
            {
                "topic": topic,
                "tags": "TagA",
                "keys": ["k1", "k2"],
                "properties": {"p": "v"},
                "body": "héllo",
                "broker": "broker-b",
                "queue_id": 1,
            },
            {"batch": [{"topic": topic, "body": f"b{i}"} for i in range(3)], "broker": "broker-b", "queue_id": 1},
        ]
    )
    assert [(s.broker_name, s.queue_id, s.queue_offset) for s in sent] == [("broker-b", 1, i) for i in range(4)]
    assert len({s.msg_id for s in sent}) == 4


@pytest.mark.engine  # Spark and Delta, no broker
def test_spark_writes_delta_that_delta_rs_reads(spark, tmp_path):
    path = str(tmp_path / "smoke_table")
    rows = [(i, f"order-{i}", i * 1.5) for i in range(10)]
    spark.createDataFrame(rows, "id INT, order_id STRING, amount DOUBLE").write.format("delta").save(path)

    by_spark = sorted(tuple(r) for r in spark.read.format("delta").load(path).collect())
    by_delta_rs = sorted(tuple(r.values()) for r in DeltaTable(path).to_pyarrow_table().to_pylist())
    assert by_spark == rows
    assert by_delta_rs == rows
    # Workers run this interpreter, so they import this environment's site-packages.
    assert spark.sparkContext.pythonExec == sys.executable
