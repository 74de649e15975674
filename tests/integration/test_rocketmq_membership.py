"""Group membership, queue locks, send-back and subscription groups on the real brokers (5.3.3, 4.9.7)."""

from __future__ import annotations

import time
import uuid

import pytest

from rocketlake.rocketmq.admin import SubscriptionGroupConfig
from rocketlake.rocketmq.client import RocketMQClient
from rocketlake.rocketmq.heartbeat import (
    ConsumeFromWhere,
    ConsumerData,
    ConsumeType,
    MessageModel,
    new_client_id,
)
from rocketlake.rocketmq.message_queue import MessageQueue
from rocketlake.rocketmq.pull import PullStatus
from rocketlake.rocketmq.send import OutgoingMessage

pytestmark = pytest.mark.broker


def group_name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def pull_first(client, mq: MessageQueue, group: str, *, within: float):
    """Poll ``mq`` from offset 0 until the broker has a message there (it is stored asynchronously,
    or, for a delayed retry, only once the delay has passed)."""
    deadline = time.monotonic() + within
    while (result := client.pull(mq, 0, 32, consumer_group=group)).status is not PullStatus.FOUND:
        assert time.monotonic() < deadline, f"nothing arrived in {mq} within {within} s"
        time.sleep(0.05)  # polling the broker's queue, bounded by the deadline above
    return result


def test_heartbeat_registers_members_and_unregister_removes_them(rocketmq_cluster, rocketmq_client, new_topic):
    topic = new_topic(queues=1)
    group = group_name("g_members")
    consumer = ConsumerData.of(
        group,
        {topic: "TagA || TagB"},
        message_model=MessageModel.CLUSTERING,
        consume_type=ConsumeType.CONSUME_PASSIVELY,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    )
    first, second = new_client_id(), new_client_id()
    assert rocketmq_client.get_consumer_list_by_group(group, topic) == []
    with (
        RocketMQClient(rocketmq_cluster.spec.namesrv_address, private_connections=True) as alice,
        RocketMQClient(rocketmq_cluster.spec.namesrv_address, private_connections=True) as bob,
    ):
        alice.heart_beat(first, [consumer])
        assert rocketmq_client.get_consumer_list_by_group(group, topic) == [first]
        bob.heart_beat(second, [consumer])
        for broker in ("broker-a", "broker-b"):
            assert rocketmq_client.broker(broker).get_consumer_list_by_group(group) == sorted([first, second])

        # The broker keys members by connection: another client id over alice's connection replaces her.
        third = new_client_id()
        alice.heart_beat(third, [consumer])
        assert rocketmq_client.get_consumer_list_by_group(group, topic) == sorted([second, third])

        bob.unregister_client(second, consumer_group=group)
        assert rocketmq_client.get_consumer_list_by_group(group, topic) == [third]
        alice.unregister_client(third, consumer_group=group)
        assert rocketmq_client.get_consumer_list_by_group(group, topic) == []


def test_queue_locks_are_exclusive_until_unlocked(rocketmq_cluster, new_topic):
    topic = new_topic(queues=2)
    group = group_name("g_orderly")
    alice_id, bob_id = new_client_id(), new_client_id()
    data = ConsumerData.of(group, {topic: "*"})
    with (
        RocketMQClient(rocketmq_cluster.spec.namesrv_address, private_connections=True) as alice,
        RocketMQClient(rocketmq_cluster.spec.namesrv_address, private_connections=True) as bob,
    ):
        queues = alice.queues(topic)
        alice.heart_beat(alice_id, [data])
        bob.heart_beat(bob_id, [data])

        assert alice.lock_batch_mq(group, alice_id, queues) == set(queues)
        assert bob.lock_batch_mq(group, bob_id, queues) == set()
        assert alice.lock_batch_mq(group, alice_id, queues[:1]) == {queues[0]}  # renewal
        alice.unlock_batch_mq(group, alice_id, queues[1:])
        assert bob.lock_batch_mq(group, bob_id, queues) == set(queues[1:])
        assert alice.lock_batch_mq(group, alice_id, queues) == {queues[0]}


def test_send_back_reaches_dead_letter_and_retry_topics(rocketmq_client, new_topic):
    topic = new_topic(queues=1, brokers=("broker-b",))
    mq = MessageQueue(topic, "broker-b", 0)
    group = group_name("g_sendback")
    rocketmq_client.heart_beat(new_client_id(), [ConsumerData.of(group, {topic: "*"})])
    sent = rocketmq_client.send_batch(
        [OutgoingMessage(topic, b"poison", tags="T", keys=["k-poison"]), OutgoingMessage(topic, b"retry me")], mq
    )
    deadline = time.monotonic() + 10
    while rocketmq_client.get_max_offset(mq) < 2:
        assert time.monotonic() < deadline
    poison, retry = rocketmq_client.pull(mq, 0, 32, consumer_group=group).messages

    # A negative delay level sends it straight to %DLQ%<group>, one queue on the same broker.
    rocketmq_client.consumer_send_msg_back(group, mq, poison, delay_level=-1)
    dlq = MessageQueue(f"%DLQ%{group}", "broker-b", 0)
    [dead] = pull_first(rocketmq_client, dlq, group, within=10).messages
    assert dead.body == b"poison" and dead.tags == "T" and dead.keys == ("k-poison",)
    assert dead.reconsume_times == 1
    assert dead.msg_id == sent[0].msg_id  # the UNIQ_KEY travels with it
    assert dead.properties["ORIGIN_MESSAGE_ID"] == sent[0].offset_msg_id  # the broker's id of the original
    assert dead.properties["RETRY_TOPIC"] == topic  # (Message.original_topic only maps %RETRY% topics)

    # Delay level 1 (1 s): it comes back in %RETRY%<group> once the delay has passed.
    rocketmq_client.consumer_send_msg_back(group, mq, retry, delay_level=1)
    retry_mq = MessageQueue(f"%RETRY%{group}", "broker-b", 0)
    [again] = pull_first(rocketmq_client, retry_mq, group, within=30).messages
    assert again.body == b"retry me" and again.reconsume_times == 1
    assert again.restore_retry_topic(group).topic == topic


def test_subscription_group_config_controls_consumption(rocketmq_client, new_topic):
    topic = new_topic(queues=1, brokers=("broker-a",))
    mq = MessageQueue(topic, "broker-a", 0)
    group = group_name("g_disabled")
    rocketmq_client.create_subscription_group(
        SubscriptionGroupConfig(group, consume_enable=False), brokers=["broker-a"]
    )
    from rocketlake.rocketmq.errors import NoPermission

    with pytest.raises(NoPermission) as caught:
        rocketmq_client.pull(mq, 0, 32, consumer_group=group)
    assert "no permission" in str(caught.value)
    # Re-created (updated) as enabled: the same group may pull again, and may commit (it exists now).
    rocketmq_client.create_subscription_group(group, brokers=["broker-a"])
    assert rocketmq_client.pull(mq, 0, 32, consumer_group=group).status is PullStatus.NO_NEW_MSG
    assert rocketmq_client.update_consumer_offset(group, mq, 0)
    assert rocketmq_client.query_consumer_offset(group, mq) == 0
