"""A cluster's namespace in RocketMQ's two forms. The first (``ns%name``): a Java producer in the namespace sends,
rocketlake lands the namespace's topic under the group's namespaced name, commits its offsets there, and sends a
failed message back to ``%RETRY%ns%group``; the table keeps its own name. The second (``namespace_v2``, the 5.x Java
client's setNamespaceV2): the namespace goes in every request's fields and names stay as written; the open-source
broker reads names only, so a Java producer and rocketlake in the same v2 namespace meet on the plain names."""

from __future__ import annotations

import pytest
from deltalake import DeltaTable

from rocketlake.dagster.rocketmq_resource import RocketMQResource
from rocketlake.engine.config import parse_config
from rocketlake.engine.windows import StoreTimeWindow
from rocketlake.rocketmq.connection import Connection
from rocketlake.rocketmq.errors import TopicNotExist
from tests.integration.engine_support import Engine, now_ms, stored
from tests.integration.ingestion_support import unique, wait_until

pytestmark = pytest.mark.engine
NAMESPACE = "shop"


def namespaced(cluster, topic: str, group: str, **namespace):
    """The configuration of ingestion ``orders`` of ``topic`` by ``group`` on ``cluster`` in ``namespace``'s form
    (``namespace=`` or ``namespace_v2=``), from the queues' first offsets, JSON orders."""
    return parse_config(
        {
            "clusters": {"local": {"namesrv": cluster.spec.namesrv_address, **namespace}},
            "ingestions": {
                "orders": {
                    "cluster": "local",
                    "topic": topic,
                    "consumer_group": group,
                    "table": "orders",
                    "consume_from_where": "CONSUME_FROM_FIRST_OFFSET",
                    "window": {"cron": "* * * * *", "start": "1970-01-01", "grace_seconds": 0},
                    "body": {"format": "json", "schema": "order_id STRING, amount DOUBLE"},
                }
            },
        }
    )


def test_an_ingestion_in_a_namespace_lands_and_commits_under_the_namespaced_names(
    local_cluster, create_topic, java_producer, spark, tmp_path
):
    wrapped = create_topic(queues=2, prefix=f"{NAMESPACE}%t")  # what a namespaced client's topic is on the broker
    topic, group = wrapped.removeprefix(f"{NAMESPACE}%"), unique("g_ns")
    config = namespaced(local_cluster, topic, group, namespace=NAMESPACE)
    cfg = config.ingestions["orders"]
    assert (cfg.topic, cfg.consumer_group) == (wrapped, f"{NAMESPACE}%{group}")
    started = now_ms()
    sent = java_producer(
        [{"topic": topic, "keys": [f"o-{i}"], "body": f'{{"order_id": "o-{i}", "amount": {i}}}'} for i in range(4)]
        + [{"topic": topic, "keys": ["bad"], "body": "not json"}],
        args=["--namespace", NAMESPACE],
    )
    assert [s.status for s in sent] == ["SEND_OK"] * 5
    engine = Engine(local_cluster, spark, tmp_path / "orders", cfg)
    # The Java client wrapped the topic: the five are in the namespace's topic on the brokers.
    for q in engine.client.queues(wrapped):
        stored(engine.client, q, sum(1 for s in sent if (s.broker_name, s.queue_id) == (q.broker_name, q.queue_id)))
    end = now_ms() + 1
    wait_until(end / 1000)
    window = StoreTimeWindow(started, end)
    (accounting,) = engine.run("r1", [("w1", window)]).slice.accounting
    assert (accounting.rows, accounting.sent_back) == (4, 1)
    rows = DeltaTable(engine.lake.table_path).to_pyarrow_table(columns=["order_id", "topic"]).to_pylist()
    assert sorted(r["order_id"] for r in rows) == [f"o-{i}" for i in range(4)] and {r["topic"] for r in rows} == {
        wrapped
    }
    # Every offset committed under the wrapped group, as the brokers keep it.
    queues = engine.client.queues(wrapped)
    assert engine.offsets(wrapped) == {(q.broker_name, q.queue_id): engine.client.get_max_offset(q) for q in queues}
    assert sum(engine.offsets(wrapped).values()) == 5
    # The failed message went back to the namespaced group's retry topic (the broker created it at the send-back;
    # the message itself reaches it after its delay level), never to the plain group's.
    assert engine.client.queues(f"%RETRY%{NAMESPACE}%{group}")
    with pytest.raises(TopicNotExist):
        engine.client.queues(f"%RETRY%{group}")


def test_an_ingestion_in_a_v2_namespace_sends_it_with_every_request_and_meets_the_java_client_on_plain_names(
    local_cluster, create_topic, java_producer, spark, tmp_path, monkeypatch
):
    topic, group = create_topic(queues=2), unique("g_ns2")
    config = namespaced(local_cluster, topic, group, namespace_v2=NAMESPACE)
    cfg = config.ingestions["orders"]
    assert (cfg.topic, cfg.consumer_group) == (topic, group)  # names as written
    started = now_ms()
    sent = java_producer(
        [{"topic": topic, "keys": [f"o-{i}"], "body": f'{{"order_id": "o-{i}", "amount": {i}}}'} for i in range(4)]
        + [{"topic": topic, "keys": ["bad"], "body": "not json"}],
        args=["--namespace-v2", NAMESPACE],
    )
    assert [s.status for s in sent] == ["SEND_OK"] * 5 and {s.topic for s in sent} == {topic}
    # What this process sends (the driver's side of the run: routes, offsets, the commit): each request's fields.
    fields_sent: list[dict] = []
    prepare = Connection._prepare

    def recorded(self, request, rpc_hook, *, oneway):
        command = prepare(self, request, rpc_hook, oneway=oneway)
        fields_sent.append(dict(command.ext_fields))
        return command

    monkeypatch.setattr(Connection, "_prepare", recorded)
    engine = Engine(
        local_cluster,
        spark,
        tmp_path / "orders",
        cfg,
        resource=RocketMQResource.of_cluster("local", config.clusters["local"]),
    )
    for q in engine.client.queues(topic):
        stored(engine.client, q, sum(1 for s in sent if (s.broker_name, s.queue_id) == (q.broker_name, q.queue_id)))
    end = now_ms() + 1
    wait_until(end / 1000)
    (accounting,) = engine.run("r1", [("w1", StoreTimeWindow(started, end))]).slice.accounting
    assert (accounting.rows, accounting.sent_back) == (4, 1)
    rows = DeltaTable(engine.lake.table_path).to_pyarrow_table(columns=["order_id", "topic"]).to_pylist()
    assert sorted(r["order_id"] for r in rows) == [f"o-{i}" for i in range(4)] and {r["topic"] for r in rows} == {topic}
    queues = engine.client.queues(topic)
    assert engine.offsets(topic) == {(q.broker_name, q.queue_id): engine.client.get_max_offset(q) for q in queues}
    assert engine.client.queues(f"%RETRY%{group}")  # the broker read the plain group's name
    # Those naming the topic or the group (the worker's other clients, a background thread's, are not this one's).
    ours = [f for f in fields_sent if topic in f.values() or group in f.values()]
    assert len(ours) > 5 and all(f.get("ns") == NAMESPACE and f.get("nsd") == "true" for f in ours), ours
