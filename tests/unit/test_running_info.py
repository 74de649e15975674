"""The body of a member's answer to GET_CONSUMER_RUNNING_INFO, in fastjson's form (``running_info``)."""

from __future__ import annotations

import pytest

from rocketlake.rocketmq.filter import Subscription
from rocketlake.rocketmq.message_queue import MessageQueue
from rocketlake.rocketmq.running_info import ConsumeStatus, ProcessQueueInfo, encode_running_info

pytestmark = pytest.mark.unit


def test_queues_are_object_keys_in_tree_order_and_subscriptions_one_per_topic_and_expression():
    subs = [
        Subscription.parse(
            "TopicA",
            "tagA || tagB",
        ),
        Subscription.parse("%RETRY%g1", "*"),
        Subscription.parse("TopicA", "tagA || tagB"),
    ]
    subs = [Subscription(s.topic, s.sub_string, s.tags_set, s.code_set, s.expression_type, 1700000000123) for s in subs]
    body = encode_running_info(
        {"PROP_CONSUME_TYPE": "CONSUME_PASSIVELY", "consumerGroup": "g1"},
        subs,
        {
            MessageQueue("TopicA", "broker-b", 0): ProcessQueueInfo(7),
            MessageQueue("TopicA", "broker-a", 1): ProcessQueueInfo(-1),
            MessageQueue("%RETRY%g1", "broker-a", 0): ProcessQueueInfo(0),
        },
        {"TopicA": ConsumeStatus(consume_ok_tps=3.0)},
        {"landedOffset@TopicA/broker-b/0": "9"},
    )
    text = body.decode()
    # What ConsumerRunningInfo.encode() writes (fastjson 1): fields sorted, TreeMap order, bare object keys.
    assert text.startswith(
        '{"mqPopTable":{},"mqTable":{{"brokerName":"broker-a","queueId":0,"topic":"%RETRY%g1"}:{"cachedMsgCount":0,'
    )
    assert text.index('"queueId":1,"topic":"TopicA"}') < text.index(
        '{"brokerName":"broker-b","queueId":0,"topic'
        '":"TopicA"}:{"cachedMsgCount":0,'
        '"cachedMsgMaxOffset":0,"cachedMsgMinOffset":0,'
        '"cachedMsgSizeInMiB":0,"commitOffset":7,'
    )
    assert (
        '"statusTable":{"TopicA":{"consumeFailedMsgs":0,"consumeFailedTPS":0.0,"consumeOKTPS":3.0,"consumeRT":0.0,'
        '"pullRT":0.0,"pullTPS":0.0}}'
    ) in text
    assert (
        '"subscriptionSet":[{"classFilterMode":false,"codeSet":[],"expressionType":"TAG","subString":"*",'
        '"subVersion":1700000000123,"tagsSet":[],"topic":"%RETRY%g1"},{"classFilterMode":false,"codeSet":'
        '[3552231,3552232],"expressionType":"TAG","subString":"tagA || tagB","subVersion":1700000000123,'
        '"tagsSet":["tagA","tagB"],"topic":"TopicA"}]'
    ) in text
    assert text.endswith('"userConsumerInfo":{"landedOffset@TopicA/broker-b/0":"9"}}')


def test_a_property_that_is_not_a_string_is_refused():
    with pytest.raises(TypeError, match="PROP_CONSUMEORDERLY"):
        encode_running_info({"PROP_CONSUMEORDERLY": False}, [], {}, {})


def test_the_members_properties_are_strings_under_the_java_names():
    from rocketlake.member.status import properties
    from tests.unit.support import ingestion_config

    props = properties(ingestion_config(consume_orderly=True), "127.0.0.1:9876;127.0.0.1:9877", 1700000000000, "v")
    assert all(isinstance(v, str) for v in props.values())
    assert (
        props["PROP_CONSUMEORDERLY"],
        props["PROP_NAMESERVER_ADDR"],
        props["consumeOrderly"],
        props["pullBatchSize"],
        props["messageModel"],
    ) == ("true", "127.0.0.1:9876;127.0.0.1:9877;", "true", "32", "CLUSTERING")


def test_rates_are_javas_spans_over_the_ingestions_windows_and_runs():
    """Per second over the last minute (pulled: every message read; OK: landed; failed: sent back or kept), the
    mean run time of the minute's runs as the consume RT, and the failed messages of the last hour."""
    from rocketlake.member.status import EndedRun, LandedWindow, consume_status

    now = 10_000.0
    windows = [
        LandedWindow(now - 10, rows=90, failed=6),
        LandedWindow(now - 59, rows=30, failed=0),
        LandedWindow(now - 61, rows=500, failed=4),  # out of the minute, in the hour
        LandedWindow(now - 3601, rows=7, failed=100),
    ]  # out of both
    runs = [EndedRun(now - 5, 20.0), EndedRun(now - 30, 10.0), EndedRun(now - 90, 600.0)]
    status = consume_status(windows, runs, now)
    assert (status.consume_ok_tps, status.consume_failed_tps, status.pull_tps) == (120 / 60, 6 / 60, 126 / 60)
    assert status.consume_rt == 15_000.0 and status.pull_rt == 0.0
    assert status.consume_failed_msgs == 10
    assert consume_status([], [], now) == consume_status(windows, runs, now + 7200) == type(status)()


def test_the_rates_go_to_the_topic_or_with_several_topics_to_the_user_info():
    import json

    from rocketlake.member.status import CONSUME_STATUS, running_info
    from rocketlake.rocketmq.running_info import ConsumeStatus
    from tests.unit.support import ingestion_config

    rates = ConsumeStatus(consume_ok_tps=2.0)
    one = json.loads(running_info(ingestion_config(), ["orders"], {}, {}, "ns", 1, "v", rates=rates))
    assert one["statusTable"]["orders"]["consumeOKTPS"] == 2.0
    assert one["statusTable"]["%RETRY%g"]["consumeOKTPS"] == 0.0
    several = json.loads(
        running_info(ingestion_config(topic=None, topics=["a", "b"]), ["a", "b"], {}, {}, "ns", 1, "v", rates=rates)
    )
    assert {t: s["consumeOKTPS"] for t, s in several["statusTable"].items()} == {"a": 0.0, "b": 0.0, "%RETRY%g": 0.0}
    assert json.loads(several["userConsumerInfo"][CONSUME_STATUS])["consumeOKTPS"] == 2.0
