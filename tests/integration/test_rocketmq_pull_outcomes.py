"""Every PULL_MESSAGE outcome on the real brokers (5.3.3 and 4.9.7): found, nothing new, illegal
offset, nothing matched, tag hash collisions re-checked on the client, missing topic and queue."""

from __future__ import annotations

import time

import pytest

from rocketlake.rocketmq.errors import BrokerSystemError, InvalidParameter, TopicNotExist
from rocketlake.rocketmq.filter import java_string_hash
from rocketlake.rocketmq.message_queue import MessageQueue
from rocketlake.rocketmq.pull import GetMessageStatus, PullStatus
from rocketlake.rocketmq.send import OutgoingMessage

pytestmark = pytest.mark.broker

GROUP = "g_pull_outcomes"
# "Aa" and "BB" have the same Java String.hashCode, so the broker's tag-code filter cannot tell them apart.
COLLIDING = ("Aa", "BB")


@pytest.fixture
def queues(rocketmq_client, new_topic):
    """broker-a/0 with 6 tagged messages, broker-a/1 empty."""
    topic = new_topic(queues=2, brokers=("broker-a",))
    full, empty = MessageQueue(topic, "broker-a", 0), MessageQueue(topic, "broker-a", 1)
    tags = ["Aa", "BB", "TagC", "Aa", "BB", None]
    rocketmq_client.send_batch([OutgoingMessage(topic, f"m{i}".encode(), tags=t) for i, t in enumerate(tags)], full)
    deadline = time.monotonic() + 10
    while rocketmq_client.get_max_offset(full) < len(tags):  # the consume queue is written asynchronously
        assert time.monotonic() < deadline
    return full, empty, tags


def test_found_no_new_msg_and_offset_illegal(rocketmq_client, queues):
    full, empty, tags = queues
    n = len(tags)

    found = rocketmq_client.pull(full, 0, 32, consumer_group=GROUP)
    assert found.status is PullStatus.FOUND and found.store_status is GetMessageStatus.FOUND
    assert [m.body for m in found.messages] == [f"m{i}".encode() for i in range(n)]
    assert (found.next_begin_offset, found.min_offset, found.max_offset, found.filtered_out) == (n, 0, n, 0)

    partial = rocketmq_client.pull(full, 2, 3, consumer_group=GROUP)
    assert [m.queue_offset for m in partial.messages] == [2, 3, 4] and partial.next_begin_offset == 5

    at_max = rocketmq_client.pull(full, n, 32, consumer_group=GROUP)
    assert at_max.status is PullStatus.NO_NEW_MSG and at_max.messages == []
    assert at_max.store_status is GetMessageStatus.OFFSET_OVERFLOW_ONE and at_max.next_begin_offset == n

    beyond = rocketmq_client.pull(full, n + 10, 32, consumer_group=GROUP)
    assert beyond.status is PullStatus.OFFSET_ILLEGAL and beyond.messages == []
    assert beyond.store_status is GetMessageStatus.OFFSET_OVERFLOW_BADLY and beyond.next_begin_offset == n

    fresh = rocketmq_client.pull(empty, 0, 32, consumer_group=GROUP)
    assert fresh.status is PullStatus.NO_NEW_MSG and fresh.store_status is GetMessageStatus.NO_MESSAGE_IN_QUEUE
    moved = rocketmq_client.pull(empty, 3, 32, consumer_group=GROUP)
    assert moved.status is PullStatus.OFFSET_ILLEGAL and moved.store_status is GetMessageStatus.NO_MESSAGE_IN_QUEUE
    assert (moved.next_begin_offset, moved.max_offset) == (0, 0)

    # No long polling unless asked: a pull at the end answers at once (a held one would take >= 5 s,
    # the broker's hold-check interval).
    started = time.monotonic()
    rocketmq_client.pull(full, n, 32, consumer_group=GROUP)
    assert time.monotonic() - started < 2.5


def test_tag_subscription_client_recheck_and_no_matched_msg(rocketmq_client, queues, java_peers):
    full, _, tags = queues
    assert java_string_hash(COLLIDING[0]) == java_string_hash(COLLIDING[1])

    only_aa = rocketmq_client.pull(full, 0, 32, consumer_group=GROUP, sub_expression="Aa")
    assert only_aa.status is PullStatus.FOUND
    assert [m.queue_offset for m in only_aa.messages] == [0, 3]
    # The broker let "BB" through (same hash code); the client re-check dropped and counted them.
    assert only_aa.filtered_out == 2 and only_aa.next_begin_offset == len(tags)

    two = rocketmq_client.pull(full, 0, 32, consumer_group=GROUP, sub_expression="TagC || BB")
    assert [(m.queue_offset, m.tags) for m in two.messages] == [(1, "BB"), (2, "TagC"), (4, "BB")]
    assert two.filtered_out == 2  # the two "Aa", let through by BB's hash code

    nothing = rocketmq_client.pull(full, 0, 32, consumer_group=GROUP, sub_expression="TagZ")
    assert nothing.status is PullStatus.NO_MATCHED_MSG and nothing.messages == []
    assert nothing.store_status is GetMessageStatus.NO_MATCHED_MESSAGE
    assert nothing.next_begin_offset == len(tags)  # every scanned entry is accounted for

    # The Java consumer with the same subscription keeps exactly the same messages.
    dump = java_peers.consume(full.topic, {(full.broker_name, full.queue_id): (0, len(tags))}, subscription="Aa")
    assert [d["queueOffset"] for d in dump] == [0, 3]


def test_missing_topic_and_queue_name_the_broker_request_and_code(rocketmq_client, queues, java_peers):
    full, _, _ = queues
    broker = rocketmq_client.broker("broker-a")
    missing = MessageQueue("no_such_topic_xyz", "broker-a", 0)
    with pytest.raises(TopicNotExist) as caught:
        rocketmq_client.pull(missing, 0, 32, consumer_group=GROUP)
    error = caught.value
    assert (error.address, error.request_code, error.response_code) == (broker.address, 11, 17)
    text = str(error)
    assert broker.address in text and "broker-a" in text
    assert "PULL_MESSAGE(11)" in text and "TOPIC_NOT_EXIST(17)" in text and "no_such_topic_xyz" in text

    wrong_queue = MessageQueue(full.topic, "broker-a", 7)
    expected = BrokerSystemError if java_peers.is_4x else InvalidParameter  # 29 exists from 5.x on
    with pytest.raises(expected) as caught:
        rocketmq_client.pull(wrong_queue, 0, 32, consumer_group=GROUP)
    assert "queueId[7] is illegal" in str(caught.value)
