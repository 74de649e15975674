"""Topic and group name rules (client Validators.java + TopicValidator.java, reference 5.1)."""

from __future__ import annotations

import pytest

from rocketlake.rocketmq.errors import InvalidName, RocketMQError
from rocketlake.rocketmq.validators import (
    check_consumer_group,
    check_group,
    check_topic,
    check_topic_for_send,
    is_system_group,
    is_system_topic,
)


@pytest.mark.parametrize("name", ["T1", "a", "%RETRY%group", "%DLQ%g", "a|b", "A-Z_a-z_0-9", "x" * 127, "TBW102"])
def test_valid_topics_pass(name: str) -> None:
    check_topic(name)


@pytest.mark.parametrize(
    "topic, rule, limit, java_text",
    [
        ("", "blank", None, "The specified topic is blank"),
        ("   ", "blank", None, "The specified topic is blank"),
        ("\t\n", "blank", None, "The specified topic is blank"),
        ("x" * 128, "max_length", 127, "The specified topic is longer than topic max length 127."),
        (
            "a b",
            "characters",
            "^[%|a-zA-Z0-9_-]+$",
            "The specified topic[a b] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$",
        ),
        ("orders.v1", "characters", "^[%|a-zA-Z0-9_-]+$", "The specified topic[orders.v1] contains illegal"),
        ("中文", "characters", "^[%|a-zA-Z0-9_-]+$", "The specified topic[中文] contains illegal"),
        ("topic\n", "characters", "^[%|a-zA-Z0-9_-]+$", "The specified topic[topic\n] contains illegal"),
        # U+00A0 is not whitespace for java.lang.Character#isWhitespace: illegal, not blank.
        ("\u00a0", "characters", "^[%|a-zA-Z0-9_-]+$", "The specified topic[\u00a0] contains illegal"),
        # String.length() counts UTF-16 units: 126 + an astral character (2 units) = 128 > 127.
        ("x" * 126 + "😀", "max_length", 127, "The specified topic is longer than topic max length 127."),
    ],
)
def test_invalid_topics_name_value_rule_and_limit(topic: str, rule: str, limit: object, java_text: str) -> None:
    with pytest.raises(InvalidName) as info:
        check_topic(topic)
    error = info.value
    assert str(error).startswith(java_text)
    assert (error.kind, error.value, error.rule, error.limit) == ("topic", topic, rule, limit)
    shown = topic if len(topic) <= 40 else topic[:40] + "..."
    assert f"got {shown!r}" in str(error)  # the message shows the offending value


def test_the_offending_characters_are_listed() -> None:
    with pytest.raises(InvalidName, match=r"offending characters: ' \.'"):
        check_topic("a.b c")


@pytest.mark.parametrize("group", ["g1", "CID_consumer", "%x%", "g" * 255])
def test_valid_groups_pass(group: str) -> None:
    check_group(group)


@pytest.mark.parametrize(
    "group, rule, java_text",
    [
        ("", "blank", "the specified group is blank"),
        (" ", "blank", "the specified group is blank"),
        ("g" * 256, "max_length", "the specified group is longer than group max length 255."),
        ("my group", "characters", "the specified group[my group] contains illegal characters, allowing only"),
    ],
)
def test_invalid_groups(group: str, rule: str, java_text: str) -> None:
    with pytest.raises(InvalidName) as info:
        check_group(group)
    assert str(info.value).startswith(java_text)
    assert (info.value.kind, info.value.rule) == ("group", rule)


def test_none_is_blank_like_java_null() -> None:
    with pytest.raises(InvalidName, match="the specified group is blank"):
        check_group(None)  # type: ignore[arg-type]


def test_default_consumer_group_is_reserved_for_consumers() -> None:
    check_group("DEFAULT_CONSUMER")
    with pytest.raises(InvalidName, match="consumerGroup can not equal DEFAULT_CONSUMER") as info:
        check_consumer_group("DEFAULT_CONSUMER")
    assert info.value.rule == "reserved"


@pytest.mark.parametrize(
    "topic",
    [
        "SCHEDULE_TOPIC_XXXX",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
    ],
)
def test_system_topics_are_refused_for_sending_but_valid_names(topic: str) -> None:
    check_topic(topic)
    with pytest.raises(InvalidName, match=rf"Sending message to topic\[{topic}\] is forbidden\.") as info:
        check_topic_for_send(topic)
    assert info.value.rule == "not_allowed_send"


def test_sendable_system_topics_and_user_topics() -> None:
    check_topic_for_send("TBW102")  # a system topic, but not in NOT_ALLOWED_SEND_TOPIC_SET
    check_topic_for_send("orders")
    with pytest.raises(InvalidName, match="blank"):
        check_topic_for_send("")


def test_system_topic_and_group_predicates() -> None:
    assert is_system_topic("TBW102") and is_system_topic("rmq_sys_anything") and is_system_topic("CHECKPOINT_TOPIC")
    assert not is_system_topic("orders") and not is_system_topic("RMQ_SYS_custom")
    assert is_system_group("CID_RMQ_SYS_TRANS") and not is_system_group("CID_orders")


def test_invalid_name_is_a_value_error_in_the_one_hierarchy() -> None:
    with pytest.raises(ValueError):
        check_topic("")
    with pytest.raises(RocketMQError):
        check_group("")
