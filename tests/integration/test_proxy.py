"""Through RocketMQ 5's proxy (cluster mode), as deployments that expose only a proxy are used: an ingestion whose
cluster names the proxy's remoting endpoint lands a window exactly, commits its offsets and sends a failed message
back (past its last retry: into the dead-letter queue, whose ingestion lands it through the proxy too), and the
brokers behind the proxy (asked directly, and by mqadmin) agree; a member keeps its place in the group through the
proxy. And what 5.x gRPC producers send through it: FIFO message groups."""

from __future__ import annotations

import signal
import time
from types import SimpleNamespace

import pytest
from deltalake import DeltaTable

from rocketlake.engine.assignment import assign
from rocketlake.engine.config import load_config, parse_config
from rocketlake.engine.config.ingestion import dead_letter_config
from rocketlake.engine.windows import StoreTimeWindow
from rocketlake.local.proxy import LocalProxy
from rocketlake.rocketmq.client import RocketMQClient
from rocketlake.rocketmq.errors import BrokerSystemError
from rocketlake.rocketmq.message_queue import MessageQueue
from tests.conftest import free_ports
from tests.integration.engine_support import Engine, from_first, grpc_client, now_ms, stored
from tests.integration.ingestion_support import start_member, unique, until, wait_until, write_config
from tests.java_oracles import allocation_among, allocations, start_push_member

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def proxy(local_cluster):
    """The proxy of the session's cluster, for this module."""
    started = LocalProxy(local_cluster, remoting_port=free_ports(1, block=2)[0])
    started.up()
    yield started
    started.down()


def test_an_ingestion_through_the_proxy_lands_commits_and_sends_back_as_directly(
    local_cluster, proxy, create_topic, java_producer, spark, tmp_path
):
    topic, group = create_topic(queues=2), unique("g_proxy")
    config = parse_config(
        {
            "clusters": {"behind_proxy": {"namesrv": proxy.address}},
            "ingestions": {
                "orders": {
                    "cluster": "behind_proxy",
                    "topic": topic,
                    "consumer_group": group,
                    "table": "orders",
                    "consume_from_where": "CONSUME_FROM_FIRST_OFFSET",
                    "subscription": "TagA",
                    "window": {"cron": "* * * * *", "start": "1970-01-01", "grace_seconds": 0},
                    "body": {"format": "json", "schema": "order_id STRING, amount DOUBLE"},
                    "max_reconsume_times": 0,  # a failed message goes straight to %DLQ%<group>
                }
            },
        }
    )
    cfg = config.ingestions["orders"]
    started = now_ms()
    sent = java_producer(
        [
            {"topic": topic, "tags": "TagA", "keys": [f"o-{i}"], "body": f'{{"order_id": "o-{i}", "amount": {i}}}'}
            for i in range(6)
        ]
        + [{"topic": topic, "tags": "TagB", "keys": ["filtered"], "body": "{}"}]
        + [{"topic": topic, "tags": "TagA", "keys": ["bad"], "body": "not json"}]
    )
    assert [s.status for s in sent] == ["SEND_OK"] * 8
    direct = RocketMQClient(local_cluster.spec.namesrv_address)
    for q in direct.queues(topic):
        stored(direct, q, sum(1 for s in sent if (s.broker_name, s.queue_id) == (q.broker_name, q.queue_id)))
    end = now_ms() + 1
    wait_until(end / 1000)

    through = SimpleNamespace(spec=SimpleNamespace(namesrv_address=proxy.address))
    failures = str(tmp_path / "orders_failures")
    engine = Engine(through, spark, tmp_path / "orders", cfg, failures_path=failures)
    route = engine.client.route(topic)
    assert {a for b in route.broker_datas for a in b.broker_addrs.values()} == {proxy.address}  # routes name it
    (accounting,) = engine.run("r1", [("w1", StoreTimeWindow(started, end))]).slice.accounting
    assert (accounting.rows, accounting.filtered, accounting.dead_lettered) == (6, 1, 1)
    rows = DeltaTable(engine.lake.table_path).to_pyarrow_table(columns=["order_id"]).column("order_id").to_pylist()
    assert sorted(rows) == [f"o-{i}" for i in range(6)]

    # The brokers behind the proxy hold the group's offsets at the queues' ends, as they and mqadmin say.
    ends = {(q.broker_name, q.queue_id): direct.get_max_offset(q) for q in direct.queues(topic)}
    assert {(q.broker_name, q.queue_id): direct.query_consumer_offset(group, q) for q in direct.queues(topic)} == ends
    # mqadmin asks the brokers of the group's retry topic: through the proxy, heartbeats stay in the proxy, so the
    # brokers create that topic only where a send-back went.
    progress = {
        (p.broker_name, p.queue_id): p.consumer_offset for p in local_cluster.mqadmin().consumer_progress(group, topic)
    }
    assert progress and progress == {q: ends[q] for q in progress}
    # The failed message went back through the proxy, past max_reconsume_times: into %DLQ%<group> on the brokers,
    # whose dead-letter ingestion lands it through the proxy, with the error it failed with.
    dead = dead_letter_config(cfg)
    assert sum(direct.get_max_offset(q) for q in direct.queues(dead.topic)) == 1
    dlq_end = now_ms() + 1
    wait_until(dlq_end / 1000)
    letters = Engine(through, spark, tmp_path / "orders_dlq", dead, last_errors_from=failures)
    (accounting,) = letters.run("d1", [("w1", StoreTimeWindow(started, dlq_end))]).slice.accounting
    assert accounting.rows == 1
    (letter,) = DeltaTable(letters.lake.table_path).to_pyarrow_table().to_pylist()
    assert (letter["keys"], letter["body"], letter["origin_topic"]) == ("bad", b"not json", topic)
    assert letter["last_error"] and "json" in letter["last_error"].lower(), letter["last_error"]
    direct.close()


def test_a_member_keeps_its_place_in_the_group_through_the_proxy_beside_a_java_consumer(
    local_cluster, proxy, create_topic, tmp_path
):
    """`rocketlake member` with a cluster that names the proxy heartbeats to the proxy, which keeps the group's
    members itself (cluster mode: the brokers never hear of them). The proxy's member list, and mqadmin
    consumerConnection asked of the proxy, name it beside a Java push consumer that joined through the proxy; the Java
    consumer's own rebalance counts both and takes exactly the share our strategy leaves it; the member leaves the
    group through the proxy on SIGTERM."""
    topic, group, instance, java_instance = create_topic(queues=4), unique("g_member"), unique("ours"), unique("java")
    behind_proxy = SimpleNamespace(spec=SimpleNamespace(namesrv_address=proxy.address))
    config = write_config(
        tmp_path / "rocketlake.yaml",
        behind_proxy,
        tmp_path / "lake",
        {
            "orders": {
                "topic": topic,
                "consumer_group": group,
                "table": unique("t"),
                "client_ip": "127.0.0.1",
                "instance_name": instance,
            }
        },
    )
    ours, theirs = f"127.0.0.1@{instance}", f"127.0.0.1@{java_instance}"
    through = RocketMQClient(proxy.address)
    member = start_member(config, tmp_path)
    java = start_push_member(
        proxy.address, local_cluster.spec.state_dir, group, topic, client_ip="127.0.0.1", instance_name=java_instance
    )
    lines = allocations(java)

    def listed_by_proxy() -> list[str]:
        try:
            return through.get_consumer_list_by_group(group, topic)
        except BrokerSystemError:  # the proxy answers an NPE for a group none of its clients has joined yet
            return []

    try:
        members = sorted([ours, theirs])
        until(lambda: listed_by_proxy() == members, 60, "both listed by the proxy", member)
        # The proxy's connection list: its clients' heartbeats, as a push consumer's (mqadmin consumerConnection
        # would ask the brokers of the group's retry topic, which exists only once a failed message was sent back).
        assert through.consume_type(group, topic) == "CONSUME_PASSIVELY"
        with RocketMQClient(local_cluster.spec.namesrv_address) as direct:
            assert ours not in direct.get_consumer_list_by_group(group, topic)  # the proxy kept the heartbeats

        allocated = allocation_among(lines, topic, members)
        queues = sorted(through.queues(topic))
        cfg = load_config(config).ingestions["orders"]
        shares = {cid: assign(cfg, cid, queues, members).taken for cid in members}
        assert sorted(MessageQueue(*q) for q in allocated["queues"]) == list(shares[theirs])
        assert sorted(q for share in shares.values() for q in share) == queues and all(shares.values())

        member.send_signal(signal.SIGTERM)
        output, _ = member.communicate(timeout=60)
        assert member.returncode == 0, output
        assert f"member {ours} left group {group}" in output
        assert through.get_consumer_list_by_group(group, topic) == [theirs]  # unregistered through the proxy at once
    finally:
        if member.poll() is None:
            member.kill()
            member.communicate()
        java.stdin.close()
        java.wait(timeout=60)
        through.close()


FIFO_GROUPS = ("cart-1", "cart-2", "cart-3", "cart-4")


def test_a_5x_fifo_producers_message_groups_land_in_their_column_and_send_order(local_cluster, proxy, spark, tmp_path):
    """A 5.x gRPC producer sends FIFO messages (``setMessageGroup``) through the proxy to a FIFO topic; an orderly
    ingestion lands each message's group in the opt-in ``message_group`` column, each group's messages on one queue
    in the order they were sent."""
    topic = f"fifo_{unique('t')}"
    local_cluster.create_topic(topic, 2, attributes={"message.type": "FIFO"})  # the proxy checks a FIFO send's topic
    sent = [(f"{group}-{i}", group, str(i)) for i in range(5) for group in FIFO_GROUPS]
    started = now_ms()
    produce = grpc_client(tmp_path / "classes")
    endpoint = f"127.0.0.1:{proxy.remoting_port + 1}"
    ids = produce(["produce-fifo", endpoint, topic], "".join("\t".join(m) + "\n" for m in sent)).split()
    assert len(ids) == len(sent)
    with RocketMQClient(local_cluster.spec.namesrv_address) as direct:
        ends = {q: direct.get_max_offset(q) for q in direct.queues(topic)}
        while sum(ends.values()) < len(sent):  # the brokers index what they stored asynchronously
            assert now_ms() - started < 30_000, ends
            time.sleep(0.05)
            ends = {q: direct.get_max_offset(q) for q in direct.queues(topic)}
    assert sum(ends.values()) == len(sent)
    end = now_ms() + 1
    wait_until(end / 1000)

    cfg = from_first(topic, unique("g_fifo"), consume_orderly=True, metadata_columns=["message_group"])
    engine = Engine(local_cluster, spark, tmp_path / "carts", cfg)
    (accounting,) = engine.run("r1", [("w1", StoreTimeWindow(started, end))]).slice.accounting
    assert accounting.rows == len(sent)
    rows = DeltaTable(engine.lake.table_path).to_pyarrow_table().to_pylist()
    assert sorted(r["msg_id"] for r in rows) == sorted(ids)
    assert {r["keys"]: r["message_group"] for r in rows} == {key: group for key, group, _ in sent}
    for group in FIFO_GROUPS:
        landed = sorted((r["queue_offset"], r["keys"]) for r in rows if r["message_group"] == group)
        assert [k for _, k in landed] == [f"{group}-{i}" for i in range(5)]  # the order it was sent in
        assert len({(r["broker_name"], r["queue_id"]) for r in rows if r["message_group"] == group}) == 1
