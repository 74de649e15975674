"""Tag subscriptions: Java String.hashCode, FilterAPI.buildSubscriptionData, client re-check."""

from __future__ import annotations

import pytest

from rocketlake.rocketmq.errors import InvalidArgument
from rocketlake.rocketmq.filter import (
    Subscription,
    filter_by_tags,
    java_string_hash,
    tags_code,
)
from rocketlake.rocketmq.message import Message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # JDK 17 String.hashCode vectors from the protocol reference, section 4.1
        ("TagA", 2598919),
        ("TagB", 2598920),
        ("*", 42),
        ("", 0),
        ("中文", 646394),
        ("a-very-long-tag-name-0123456789", -417792562),  # wraps past 2^31: signed result
        # U+1F600 is the surrogate pair D83D DE00 in UTF-16: 31 * 0xD83D + 0xDE00 = 1772899
        # (a code-point hash would give 0x1F600 = 128512)
        ("😀", 31 * 0xD83D + 0xDE00),
        ("a😀", (31 * 31 * ord("a") + 31 * 0xD83D + 0xDE00)),
        ("\ud800", 0xD800),  # a lone surrogate is one code unit in Java too
        ("Aa", 2112),
        ("BB", 2112),  # the classic collision with "Aa"
    ],
)
def test_java_string_hash(text, expected):
    assert java_string_hash(text) == expected


def test_java_string_hash_is_signed_32_bit():
    values = [java_string_hash("tag-%d-%s" % (i, "x" * i)) for i in range(200)]
    assert all(-(2**31) <= v < 2**31 for v in values)
    assert any(v < 0 for v in values)


def test_tags_code_is_zero_without_tags():
    assert tags_code(None) == 0
    assert tags_code("") == 0
    assert tags_code("TagA") == 2598919


@pytest.mark.parametrize(
    ("expression", "sub_string", "tags"),
    [
        (None, "*", set()),
        ("", "*", set()),
        ("*", "*", set()),
        ("TagA", "TagA", {"TagA"}),
        ("TagA || TagB", "TagA || TagB", {"TagA", "TagB"}),
        (" TagA ||  || TagB || ", " TagA ||  || TagB || ", {"TagA", "TagB"}),
        ("TagA||TagA", "TagA||TagA", {"TagA"}),
        (" * ", " * ", {"*"}),  # not SUB_ALL: "*" becomes a real tag (hash 42)
        ("a|||b", "a|||b", {"a", "|b"}),  # split on the literal "||", left to right
        (" || ", " || ", set()),  # no tags, yet not subscribe-all
        ("\tTagA\x00", "\tTagA\x00", {"TagA"}),  # Java trim() strips every char <= U+0020
        ("\u00a0TagA\u00a0", "\u00a0TagA\u00a0", {"\u00a0TagA\u00a0"}),  # ... but not NBSP
    ],
)
def test_parse_like_filterapi(expression, sub_string, tags):
    sub = Subscription.parse("T", expression)
    assert sub.topic == "T"
    assert sub.sub_string == sub_string
    assert sub.tags_set == frozenset(tags)
    assert sub.code_set == frozenset(java_string_hash(t) for t in tags)
    assert sub.expression_type == "TAG"
    assert sub.subscribes_all == (sub_string == "*")


@pytest.mark.parametrize("expression", ["||", "||||"])
def test_only_separators_is_a_split_error(expression):
    # Java: "||".split("\\|\\|") is an empty array -> Exception("subString split error")
    with pytest.raises(InvalidArgument, match="subString split error"):
        Subscription.parse("T", expression)


def test_sql92_expression_is_kept_and_not_refiltered_by_the_client():
    sub = Subscription.parse("T", "a > 5", "SQL92")
    assert (sub.sub_string, sub.expression_type, sub.tags_set) == ("a > 5", "SQL92", frozenset())
    assert sub.matches_tags(None) and sub.matches_tags("anything")
    with pytest.raises(InvalidArgument):
        Subscription.parse("T", "", "SQL92")


def test_sub_version_is_a_millisecond_timestamp_outside_equality():
    a = Subscription.parse("T", "TagA")
    b = Subscription.parse("T", "TagA")
    assert a.sub_version > 1_600_000_000_000
    assert a == b
    assert a != Subscription.parse("T", "TagB")


def _msg(tags: str | None) -> Message:
    return Message(topic="T", properties={} if tags is None else {"TAGS": tags})


@pytest.mark.parametrize(
    ("expression", "tags", "expected"),
    [
        ("*", None, True),
        ("*", "TagA", True),
        (None, None, True),
        ("TagA", None, False),  # a message without tags only matches "*"
        ("TagA", "TagA", True),
        ("TagA", "TagB", False),
        ("TagA || TagB", "TagB", True),
        ("TagA", "taga", False),  # case-sensitive
        ("TagA", "TagA || TagB", False),  # whole-string equality, not a tag list
        ("TagA", " TagA", False),
        ("TagA", "", False),
        ("Aa", "BB", False),  # same hash code (2112): the broker lets it through, the client must not
        (" || ", "TagA", True),  # empty tag set: Java's client does not re-filter
    ],
)
def test_client_side_match(expression, tags, expected):
    sub = Subscription.parse("T", expression)
    assert sub.matches(_msg(tags)) is expected
    assert sub.matches_tags(tags) is expected


@pytest.mark.parametrize(
    ("expression", "code", "expected"),
    [
        ("*", 2598919, True),
        ("TagA", 2598919, True),
        ("TagA", 2598920, False),
        ("TagA", None, True),  # no tags code stored: ExpressionMessageFilter lets it pass
        ("Aa", tags_code("BB"), True),  # hash collision passes on the broker
        (" || ", 2598919, False),  # empty code set: broker matches nothing
    ],
)
def test_broker_side_tags_code_match(expression, code, expected):
    assert Subscription.parse("T", expression).matches_tags_code(code) is expected


def test_filter_by_tags_keeps_order_and_drops_collisions():
    messages = [_msg("TagA"), _msg(None), _msg("BB"), _msg("Aa"), _msg("TagA")]
    kept = filter_by_tags(messages, Subscription.parse("T", "TagA || Aa"))
    assert kept == [messages[0], messages[3], messages[4]]
    assert filter_by_tags(messages, Subscription.parse("T", "*")) == messages


def test_json_form_has_subscriptiondata_field_names():
    sub = Subscription.parse("T", "TagB || TagA")
    assert sub.as_json_dict() == {
        "classFilterMode": False,
        "codeSet": [2598919, 2598920],
        "expressionType": "TAG",
        "subString": "TagB || TagA",
        "subVersion": sub.sub_version,
        "tagsSet": ["TagA", "TagB"],
        "topic": "T",
    }
