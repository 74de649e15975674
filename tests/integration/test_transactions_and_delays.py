"""Transactional and delayed messages, sent by the official Java ``TransactionMQProducer``, landed by store time: a
committed message lands in the window of its commit (the broker writes it to the topic then), a rolled-back or
unknown one never lands, a delayed one lands in the window of its delivery; ``born_timestamp`` (opt-in) shows each
difference. The brokers with a timer wheel that the timer tests start also serve POP, which needs it: a group a 5.x
gRPC consumer shares is refused."""

from __future__ import annotations

import time

import pytest
from deltalake import DeltaTable

from rocketlake.engine.windows import StoreTimeWindow
from tests.conftest import pull_range
from tests.integration.engine_support import Engine, now_ms
from tests.integration.ingestion_support import unique, wait_until
from tests.unit.support import ingestion_config

pytestmark = pytest.mark.engine
COMMIT_DELAY_MS = 1500  # the local transaction's outcome comes this long after its half message


def test_only_committed_and_delivered_messages_land_in_the_windows_of_their_commit_and_delivery(
    local_cluster, create_topic, java_producer, spark, tmp_path
):
    topic, group = create_topic(queues=1), unique("g_transactions")
    started = now_ms()
    sent = java_producer(
        [
            {"topic": topic, "keys": ["committed"], "body": "1", "transaction": "commit"},
            {"topic": topic, "keys": ["rolled-back"], "body": "2", "transaction": "rollback"},
            {"topic": topic, "keys": ["unknown"], "body": "3", "transaction": "unknown"},
            {"topic": topic, "keys": ["delayed"], "body": "4", "delay_level": 1},  # 1 s, the first level
        ],
        args=["--transactional", "true", "--commit-delay-ms", str(COMMIT_DELAY_MS)],
    )
    assert [s.status for s in sent] == ["SEND_OK"] * 4
    engine = Engine(
        local_cluster,
        spark,
        tmp_path / "orders",
        ingestion_config(
            topic=topic,
            consumer_group=group,
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            window={"cron": "* * * * *", "start": "1970-01-01", "grace_seconds": 0},
            metadata_columns=["born_timestamp"],
        ),
    )
    queues = engine.client.queues(topic)
    deadline = time.monotonic() + 20
    while sum(engine.client.get_max_offset(q) for q in queues) < 2:  # the commit and the delivery, stored
        assert time.monotonic() < deadline, "the committed and the delayed message did not reach the topic"
        time.sleep(0.1)  # polling the broker, bounded by the deadline above
    pulled = [m for q in queues for m, _ in pull_range(engine.client, q, 0, engine.client.get_max_offset(q))]
    committed = next(m for m in pulled if m.keys == ("committed",))
    # Between the half message (born) and its commit (stored): a window boundary the commit falls after.
    boundary = committed.born_timestamp + COMMIT_DELAY_MS // 2
    end = now_ms() + 1
    wait_until(end / 1000)
    windows = [("before", StoreTimeWindow(started, boundary)), ("after", StoreTimeWindow(boundary, end))]
    accounting = engine.run("r1", windows).slice.accounting
    assert [(a.partition_key, a.planned, a.rows) for a in accounting] == [("before", 0, 0), ("after", 2, 2)]

    rows = {r["keys"]: r for r in DeltaTable(engine.lake.table_path).to_pyarrow_table().to_pylist()}
    assert sorted(rows) == ["committed", "delayed"]  # never the rolled-back or unknown one
    for key, at_least_ms in (("committed", COMMIT_DELAY_MS), ("delayed", 1000)):
        row = rows[key]
        born, store = (int(row[c].timestamp() * 1000) for c in ("born_timestamp", "store_timestamp"))
        assert store - born >= at_least_ms - 50, (key, born, store)  # landed by its commit's or delivery's time
        assert int(row["window_start"].timestamp() * 1000) == boundary
    assert engine.offsets(topic) == {(q.broker_name, q.queue_id): engine.client.get_max_offset(q) for q in queues}


#: Timer messages and POP need the broker's timer wheel, which the shared test brokers keep off (its services wake
#: hundreds of times a second), and consume traces the brokers' trace topic (traceTopicEnable): brokers of their own
#: for this module's timer, trace and POP tests, started on first use.
TIMER_WHEEL_AND_TRACES = (("timerWheelEnable", "true"), ("timerPrecisionMs", "100"), ("traceTopicEnable", "true"))
TIMER_DELAY_MS = 3000


@pytest.fixture(scope="module")
def five_x_cluster(tmp_path_factory):
    from tests.conftest import ROCKETMQ_VERSION, _running_cluster

    yield from _running_cluster(tmp_path_factory, ROCKETMQ_VERSION, extra_broker_properties=TIMER_WHEEL_AND_TRACES)


def test_a_timer_message_lands_in_the_window_of_its_delivery_and_its_timer_topic_never_matches(
    five_x_cluster, spark, tmp_path
):
    from tests.conftest import produce

    topic, group = f"timers_{unique('t')}", unique("g_timers")
    five_x_cluster.create_topic(topic, 1, ("broker-a",))
    started = now_ms()
    deliver_at = started + TIMER_DELAY_MS

    def send(messages):
        return produce(
            five_x_cluster.spec.namesrv_address,
            five_x_cluster.spec.state_dir,
            messages,
            version=five_x_cluster.spec.version,
        )

    sent = send(
        [
            {"topic": topic, "keys": ["now"], "body": "1"},
            {"topic": topic, "keys": ["timer"], "body": "2", "deliver_time_ms": deliver_at},
        ]
    )
    assert [s.status for s in sent] == ["SEND_OK"] * 2
    engine = Engine(
        five_x_cluster,
        spark,
        tmp_path / "orders",
        ingestion_config(
            topic=topic,
            consumer_group=group,
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            window={"cron": "* * * * *", "start": "1970-01-01", "grace_seconds": 0},
            metadata_columns=["born_timestamp"],
        ),
    )
    (queue,) = engine.client.queues(topic)
    deadline = time.monotonic() + 30
    while engine.client.get_max_offset(queue) < 2:  # the timer message, delivered into the topic
        assert time.monotonic() < deadline, "the timer message was not delivered within 30 s"
        time.sleep(0.1)  # polling the broker, bounded by the deadline above
    boundary = deliver_at - TIMER_DELAY_MS // 2  # after the send, before the delivery
    end = now_ms() + 1
    wait_until(end / 1000)
    windows = [("sent", StoreTimeWindow(started, boundary)), ("delivered", StoreTimeWindow(boundary, end))]
    accounting = engine.run("r1", windows).slice.accounting
    assert [(a.partition_key, a.rows) for a in accounting] == [("sent", 1), ("delivered", 1)]
    rows = {r["keys"]: r for r in DeltaTable(engine.lake.table_path).to_pyarrow_table().to_pylist()}
    timer = rows["timer"]
    born, store = (int(timer[c].timestamp() * 1000) for c in ("born_timestamp", "store_timestamp"))
    assert store >= deliver_at - 100 and born < boundary  # born before the boundary, landed by its delivery

    # The broker keeps timer messages in its own topic until they are due: never one a pattern lands. Nor any other
    # topic of RocketMQ's own that these brokers list: the transactions', the delay levels', the traces', and those a
    # broker makes for its cluster and its own name (the name server's system topic list) and for replies.
    from rocketlake.engine.topics import subscribed_topics

    listed = set(engine.client.topics())
    cluster = five_x_cluster.spec.cluster_name
    own = {
        "rmq_sys_wheel_timer",
        "SCHEDULE_TOPIC_XXXX",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "RMQ_SYS_TRACE_TOPIC",
        cluster,
        f"{cluster}_REPLY_TOPIC",
        "broker-a",
        "broker-b",
    }
    assert own <= listed, sorted(own - listed)  # each is there to be matched
    matched = subscribed_topics(ingestion_config(topic=None, topic_pattern=".*", consumer_group=group), engine.client)
    assert topic in matched
    assert not own & set(matched), sorted(own & set(matched))
    assert not [t for t in matched if t.startswith(("rmq_sys_", "RMQ_SYS_", "%"))]


def test_consume_traces_of_a_landing_are_what_mqadmin_query_msg_trace_by_id_reads(five_x_cluster, spark, tmp_path):
    """The traces the asset sends after a window's offsets are committed (``engine.traces.trace_landing``, as
    ``dagster.ingestion`` calls it), read back by RocketMQ's own tool: the group consumed the message."""
    from rocketlake.engine.traces import trace_landing
    from tests.conftest import produce

    topic, group = f"traced_{unique('t')}", unique("g_traced")
    five_x_cluster.create_topic(topic, 1, None)
    started = now_ms()
    sent = produce(
        five_x_cluster.spec.namesrv_address,
        five_x_cluster.spec.state_dir,
        [{"topic": topic, "keys": [f"o-{i}"], "body": str(i)} for i in range(5)],
        version=five_x_cluster.spec.version,
    )
    end = now_ms() + 1
    wait_until(end / 1000)
    engine = Engine(
        five_x_cluster,
        spark,
        tmp_path / "orders",
        ingestion_config(
            topic=topic,
            consumer_group=group,
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            window={"cron": "* * * * *", "start": "1970-01-01", "grace_seconds": 0},
        ),
    )
    landed = engine.run("r1", [("w1", StoreTimeWindow(started, end))])
    assert [a.rows for a in landed.slice.accounting] == [5]
    traced, messages = trace_landing(
        engine.client, engine.lake, landed.slice.ledger, group, "RMQ_SYS_TRACE_TOPIC", 3, started
    )
    assert (traced, messages) == (3, 1)  # at most 3, spread over the offsets; one batched trace message

    from rocketlake.local.process import LocalClusterError

    traced_ids, untraced = set(), set()
    for s in sent:
        try:
            shown = five_x_cluster.mqadmin().run("queryMsgTraceById", "-i", s.msg_id)
        except LocalClusterError as e:  # mqadmin fails when the trace topic holds no trace of the message
            assert "no message" in str(e)
            untraced.add(s.msg_id)
            continue
        assert group in shown, shown  # the group consumed it, as the Java consumer's traces say
        traced_ids.add(s.msg_id)
    assert len(traced_ids) == 3 and len(untraced) == 2


def test_a_group_a_grpc_consumer_popped_through_the_proxy_is_refused_by_name(five_x_cluster, spark, tmp_path):
    """A 5.x gRPC SimpleConsumer receives through the proxy (POP at the broker, which needs the timer wheel of this
    module's brokers) and acknowledges in the ingestion's group. Its heartbeats stay in the proxy, so no broker lists
    it; its POP traces name the group, and the run is refused by name before it reads. A group that never popped the
    topic has no traces (test_pop_groups lands such a group)."""
    from rocketlake.engine.run import GroupSharedWithPop
    from rocketlake.local.proxy import LocalProxy
    from rocketlake.rocketmq.client import RocketMQClient
    from tests.conftest import free_ports, produce
    from tests.integration.engine_support import from_first, grpc_client

    topic, group, other = f"popped_{unique('t')}", unique("g_grpc"), unique("g_pulled")
    five_x_cluster.create_topic(topic, 2, ("broker-a",))
    sent = produce(
        five_x_cluster.spec.namesrv_address,
        five_x_cluster.spec.state_dir,
        [{"topic": topic, "keys": [f"o-{i}"], "body": str(i)} for i in range(4)],
        version=five_x_cluster.spec.version,
    )
    proxy = LocalProxy(five_x_cluster, remoting_port=free_ports(1, block=2)[0])
    try:
        proxy.up()
        endpoint = f"127.0.0.1:{proxy.remoting_port + 1}"
        acknowledged = grpc_client(tmp_path / "classes")(["consume", endpoint, topic, group, "2"]).split()
        assert len(acknowledged) >= 2 and set(acknowledged) <= {s.msg_id for s in sent}
        with RocketMQClient(proxy.address) as through_proxy:  # an ingestion whose cluster names the proxy sees it too
            assert through_proxy.pop_traces(group, [topic]) == {topic}
    finally:
        proxy.down()

    refused = Engine(five_x_cluster, spark, tmp_path / group, from_first(topic, group))
    # Read seconds after the receive, within its 30 s of invisible time: the traces still wait in the timer topic
    # (the revive log's own entries are the unit tests' and were seen in a run that waited).
    assert refused.client.pop_traces(group, [topic]) == {topic}
    assert refused.client.pop_traces(other, [topic]) == set()
    window = [("w1", StoreTimeWindow(now_ms() - 60_000, now_ms() - 1))]
    before = refused.offsets(topic)  # where the POP acknowledgements left the group
    with pytest.raises(GroupSharedWithPop, match=f"consumer group {group} has popped messages of topic {topic}"):
        refused.run("r1", window)
    assert not (tmp_path / group).exists()
    assert refused.offsets(topic) == before  # nothing moved
