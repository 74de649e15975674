"""Consumer offsets and queue offsets on the real brokers, judged by mqadmin and the Java admin API.

Same tests on 5.3.3 and 4.9.7. Offsets this client commits must be exactly what
``mqadmin consumerProgress`` and ``DefaultMQAdminExt#examineConsumeStats`` report; what the broker
answers for a group or queue without a commit is pinned down per version (reference 2.6).
"""

from __future__ import annotations

import time
import uuid

import pytest

from rocketlake.rocketmq.errors import SubscriptionGroupNotExist
from rocketlake.rocketmq.heartbeat import ConsumerData, new_client_id
from rocketlake.rocketmq.message_queue import MessageQueue
from rocketlake.rocketmq.send import OutgoingMessage

pytestmark = pytest.mark.broker


def fill(client, topic: str, counts: dict[tuple[str, int], int]) -> None:
    """``counts[(broker, queue)]`` messages into each queue (one batch per queue), then wait until
    the broker's consume queues list them: the store dispatches to them asynchronously, and until
    then max offset and QUERY_CONSUMER_OFFSET still describe the queue without them."""
    for (broker, queue_id), n in counts.items():
        if n:
            client.send_batch(
                [OutgoingMessage(topic, f"m{i}".encode()) for i in range(n)], MessageQueue(topic, broker, queue_id)
            )
    deadline = time.monotonic() + 10
    for (broker, queue_id), n in counts.items():
        mq = MessageQueue(topic, broker, queue_id)
        while client.get_max_offset(mq) < n:
            assert time.monotonic() < deadline, f"{mq} never showed {n} messages"


def test_committed_offsets_are_what_mqadmin_and_the_java_admin_report(rocketmq_client, new_topic, java_peers):
    topic = new_topic(queues=2)
    counts = {("broker-a", 0): 5, ("broker-a", 1): 3, ("broker-b", 0): 4, ("broker-b", 1): 0}
    fill(rocketmq_client, topic, counts)
    group = f"g_commit_{uuid.uuid4().hex[:8]}"
    client_id = new_client_id()
    answers = rocketmq_client.heart_beat(client_id, [ConsumerData.of(group, {topic: "*"})])
    assert set(answers) == {"broker-a", "broker-b"}

    committed = {
        MessageQueue(topic, "broker-a", 0): 3,
        MessageQueue(topic, "broker-a", 1): 3,
        MessageQueue(topic, "broker-b", 0): 1,
        MessageQueue(topic, "broker-b", 1): 0,
    }
    for mq, offset in committed.items():
        assert rocketmq_client.update_consumer_offset(group, mq, offset) is True
    assert {mq: rocketmq_client.query_consumer_offset(group, mq) for mq in committed} == committed

    # Our GET_CONSUME_STATS, the Java admin API and mqadmin all agree, queue by queue.
    ours = rocketmq_client.get_consume_stats(group, topic)
    assert {mq: (w.broker_offset, w.consumer_offset) for mq, w in ours.offsets.items()} == {
        mq: (counts[(mq.broker_name, mq.queue_id)], offset) for mq, offset in committed.items()
    }
    [java] = java_peers.admin([{"op": "consumeStats", "group": group, "topic": topic}])
    assert java["ok"], java
    assert {(r["broker"], r["queue_id"]): (r["broker_offset"], r["consumer_offset"]) for r in java["value"]} == {
        (mq.broker_name, mq.queue_id): (w.broker_offset, w.consumer_offset) for mq, w in ours.offsets.items()
    }
    progress_args = (group,) if java_peers.is_4x else (group, topic)  # 4.9's consumerProgress has no -t
    rows = [r for r in java_peers.mqadmin().consumer_progress(*progress_args) if r.topic == topic]
    assert {(r.broker_name, r.queue_id): (r.broker_offset, r.consumer_offset) for r in rows} == {
        (mq.broker_name, mq.queue_id): (counts[(mq.broker_name, mq.queue_id)], offset)
        for mq, offset in committed.items()
    }

    # A commit can move backwards (a reset) and is seen at once.
    mq = MessageQueue(topic, "broker-a", 0)
    assert rocketmq_client.update_consumer_offset(group, mq, 1)
    assert rocketmq_client.query_consumer_offset(group, mq) == 1
    rocketmq_client.unregister_client(client_id, consumer_group=group)


def test_query_without_a_commit_answers_as_the_broker_documents(rocketmq_client, new_topic, java_peers):
    topic = new_topic(queues=2, brokers=("broker-a",))
    fill(rocketmq_client, topic, {("broker-a", 0): 2})
    hot, empty = MessageQueue(topic, "broker-a", 0), MessageQueue(topic, "broker-a", 1)
    unknown_topic = MessageQueue(f"no_such_topic_{uuid.uuid4().hex[:6]}", "broker-a", 0)
    group = f"g_fresh_{uuid.uuid4().hex[:8]}"

    # Min offset 0 and message 0 still hot: both lines answer 0 although nothing was committed.
    assert rocketmq_client.query_consumer_offset(group, hot) == 0
    if java_peers.is_4x:
        # 4.9: "message 0 not on disk" is also true when there is no message 0 at all.
        assert rocketmq_client.query_consumer_offset(group, empty) == 0
        assert rocketmq_client.query_consumer_offset(group, unknown_topic) == 0
        # setZeroIfNotFound does not exist before 5.x and is ignored.
        assert rocketmq_client.query_consumer_offset(group, hot, set_zero_if_not_found=False) == 0
    else:
        # 5.x: an empty queue has no hot message 0 -> QUERY_NOT_FOUND.
        assert rocketmq_client.query_consumer_offset(group, empty) is None
        assert rocketmq_client.query_consumer_offset(group, unknown_topic) is None
        assert rocketmq_client.query_consumer_offset(group, hot, set_zero_if_not_found=False) is None

    # Committing for a group the broker does not know: 5.3 refuses, 4.9 stores it.
    if java_peers.is_4x:
        assert rocketmq_client.update_consumer_offset(group, hot, 1) is True
        assert rocketmq_client.query_consumer_offset(group, hot) == 1
    else:
        with pytest.raises(SubscriptionGroupNotExist) as caught:
            rocketmq_client.update_consumer_offset(group, hot, 1)
        assert caught.value.address == rocketmq_client.broker("broker-a").address
        assert "heart_beat" in str(caught.value)
        assert rocketmq_client.query_consumer_offset(group, hot) == 0


def test_queue_offsets_and_earliest_time_match_the_java_admin(rocketmq_client, new_topic, java_peers):
    topic = new_topic(queues=2)
    counts = {("broker-a", 0): 3, ("broker-a", 1): 0, ("broker-b", 0): 0, ("broker-b", 1): 6}
    fill(rocketmq_client, topic, counts)
    queues = rocketmq_client.queues(topic)
    assert queues == sorted(MessageQueue(topic, b, q) for b, q in counts)

    commands = [
        {"op": op, "topic": topic, "broker": mq.broker_name, "queue_id": mq.queue_id}
        for mq in queues
        for op in ("minOffset", "maxOffset", "earliestMsgStoreTime")
    ]
    answers = iter(java_peers.admin(commands))
    for mq in queues:
        java_min, java_max, java_earliest = (next(answers) for _ in range(3))
        assert rocketmq_client.get_min_offset(mq) == java_min["value"] == 0
        assert rocketmq_client.get_max_offset(mq) == java_max["value"] == counts[(mq.broker_name, mq.queue_id)]
        earliest = rocketmq_client.get_earliest_msg_store_time(mq)
        if counts[(mq.broker_name, mq.queue_id)]:
            assert java_earliest["ok"] and earliest == java_earliest["value"] > 0
            first = rocketmq_client.pull(mq, 0, 1, consumer_group="g_offsets_reader").messages[0]
            assert earliest == first.store_timestamp
        else:
            # The broker answers -1 for a queue without messages (the Java admin returns it as is).
            assert earliest is None
            assert not java_earliest["ok"] or java_earliest["value"] == -1
    # mqadmin topicStatus (the Java tools, through the peer server) sees the same min/max.
    status = {
        (s.broker_name, s.queue_id): (s.min_offset, s.max_offset) for s in java_peers.mqadmin().topic_status(topic)
    }
    assert status == {(mq.broker_name, mq.queue_id): (0, counts[(mq.broker_name, mq.queue_id)]) for mq in queues}
