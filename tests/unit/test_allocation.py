"""Allocation strategies on hand-checked cases (tests/integration/test_allocation_vs_java.py proves them against Java)."""

from __future__ import annotations

import logging

import pytest

from rocketlake.engine.allocation import (
    AllocationError,
    ByConfig,
    ConsistentHash,
    PrefixMachineRoomResolver,
    java_split,
    make_strategy,
    md5_hash,
    rebalance,
    sort_for_rebalance,
)
from rocketlake.engine.config import AllocateStrategy
from rocketlake.rocketmq.message_queue import MessageQueue

T = "TopicTest"


def qs(broker: str, n: int, topic: str = T) -> list[MessageQueue]:
    return [MessageQueue(topic, broker, i) for i in range(n)]


def ids(queues) -> list[tuple[str, int]]:
    return [(q.broker_name, q.queue_id) for q in queues]


def test_design_example_two_members_split_sixteen_queues_eight_eight():
    topic = qs("broker-b", 8) + qs("broker-a", 8)  # any order: the rebalance sorts
    avg = make_strategy(AllocateStrategy.AVG)
    first = rebalance(avg, "g", "10.0.0.2@2", topic, ["10.0.0.2@2", "10.0.0.1@1"])
    second = rebalance(avg, "g", "10.0.0.1@1", topic, ["10.0.0.2@2", "10.0.0.1@1"])
    assert second == frozenset(qs("broker-a", 8))  # "10.0.0.1@1" sorts first: the first 8 of the sorted list
    assert first == frozenset(qs("broker-b", 8))


def test_one_queue_two_members_the_second_gets_nothing():
    avg = make_strategy("AVG")
    assert avg.allocate("g", "a", qs("broker-a", 1), ["a", "b"]) == qs("broker-a", 1)
    assert avg.allocate("g", "b", qs("broker-a", 1), ["a", "b"]) == []


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        ("AVG", [[0, 1, 2], [3, 4, 5], [6, 7]]),
        ("AVG_BY_CIRCLE", [[0, 3, 6], [1, 4, 7], [2, 5]]),
    ],
)
def test_eight_queues_three_members(strategy, expected):
    s = make_strategy(strategy)
    got = [[q.queue_id for q in s.allocate("g", c, qs("b", 8), ["a", "b", "c"])] for c in "abc"]
    assert got == expected


def test_a_member_not_in_the_list_gets_nothing_and_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="rocketlake.engine.allocation"):
        assert make_strategy("AVG").allocate("g", "x", qs("b", 4), ["a", "b"]) == []
    assert "x is not among the members" in caplog.text


@pytest.mark.parametrize(
    ("cid", "mqs", "cids", "message"),
    [
        ("", qs("b", 1), ["a"], "currentCID is empty"),
        ("a", [], ["a"], "mqAll is null or mqAll empty"),
        ("a", qs("b", 1), [], "cidAll is null or cidAll empty"),
    ],
)
def test_empty_inputs_raise_like_java(cid, mqs, cids, message):
    with pytest.raises(AllocationError, match=message):
        make_strategy("AVG_BY_CIRCLE").allocate("g", cid, mqs, cids)


def test_config_returns_its_list_whatever_the_inputs():
    mine = [MessageQueue("other", "x", 3), MessageQueue(T, "a", 0)]
    s = make_strategy("CONFIG", queues=mine)
    assert isinstance(s, ByConfig)
    assert s.allocate("g", "", [], []) == mine


def test_java_split_drops_trailing_empty_parts():
    assert java_split("r1@b", "@") == ["r1", "b"]
    assert java_split("r1@b@", "@") == ["r1", "b"]
    assert java_split("r1@", "@") == ["r1"]
    assert java_split("@", "@") == []
    assert java_split("", "@") == [""]
    assert java_split("@x", "@") == ["", "x"]


def test_machine_room_takes_mod_then_one_of_the_remainder():
    mq_all = qs("r1@a", 3) + qs("r2@b", 2) + qs("plain", 2) + qs("r3@c", 2) + qs("r1@d@", 1)
    s = make_strategy("MACHINE_ROOM", consumer_rooms={"r1", "r2"})
    # 6 queues in rooms r1/r2 (r1@d@ splits into two parts), 4 members: mod 1, rem 2
    got = [ids(s.allocate("g", c, mq_all, ["c0", "c1", "c2", "c3"])) for c in ("c0", "c1", "c2", "c3")]
    assert got == [[("r1@a", 0), ("r2@b", 1)], [("r1@a", 1), ("r1@d@", 0)], [("r1@a", 2)], [("r2@b", 0)]]


def test_machine_room_nearby_own_room_first_then_rooms_without_members():
    mq_all = qs("r1@a", 4) + qs("r2@b", 2) + qs("r3@c", 2)
    cids = ["r1@10.0.0.1@1", "r1@10.0.0.2@1", "r2@10.0.0.3@1"]
    s = make_strategy("MACHINE_ROOM_NEARBY", resolver=PrefixMachineRoomResolver(), inner="AVG")
    assert s.name == "MACHINE_ROOM_NEARBY-AVG"
    got = [ids(s.allocate("g", c, mq_all, cids)) for c in cids]
    assert got == [
        [("r1@a", 0), ("r1@a", 1), ("r3@c", 0)],
        [("r1@a", 2), ("r1@a", 3), ("r3@c", 1)],
        [("r2@b", 0), ("r2@b", 1)],
    ]
    with pytest.raises(AllocationError, match="Machine room is null for mq MessageQueue"):
        s.allocate("g", cids[0], qs("@x", 1), cids)


def test_consistent_hash_matches_the_reference_vector():
    assert md5_hash(str(MessageQueue(T, "broker-a", 0))) == 1987926524
    mq_all = qs("broker-a", 4) + qs("broker-b", 4)
    cids = ["10.0.0.1@c1", "10.0.0.2@c2", "10.0.0.3@c3"]
    s = make_strategy("CONSISTENT_HASH")
    got = {c: ids(s.allocate("g", c, mq_all, cids)) for c in cids}
    assert got == {
        "10.0.0.1@c1": [("broker-a", 0)],
        "10.0.0.2@c2": [("broker-a", 2), ("broker-b", 0)],
        "10.0.0.3@c3": [("broker-a", 1), ("broker-a", 3), ("broker-b", 1), ("broker-b", 2), ("broker-b", 3)],
    }
    assert ConsistentHash(0).allocate("g", cids[0], mq_all, cids) == []  # an empty ring owns nothing
    with pytest.raises(AllocationError, match="illegal virtualNodeCnt :-1"):
        make_strategy("CONSISTENT_HASH", virtual_node_count=-1)


def test_sort_is_java_string_order_not_code_point_order():
    # Java compares UTF-16 code units: a surrogate (U+D83D) sorts before U+FF5A, unlike Python's str order
    mq_all, cids = sort_for_rebalance(
        [
            MessageQueue(T, "\uff5a", 0),
            MessageQueue(T, "\U0001f600", 1),
            MessageQueue(T, "a", 2),
            MessageQueue(T, "a", 10),
        ],
        ["\uff5a@1", "\U0001f600@1", "b@1"],
    )
    assert ids(mq_all) == [("a", 2), ("a", 10), ("\U0001f600", 1), ("\uff5a", 0)]
    assert cids == ["b@1", "\U0001f600@1", "\uff5a@1"]
    assert sorted(mq_all[::-1]) == mq_all  # MessageQueue's own order is Java's too


def test_message_queue_sorts_ascii_and_non_ascii_brokers_together():
    queues = [
        MessageQueue(T, "\u00e9", 0),
        MessageQueue(T, "b", 1),
        MessageQueue("\u00e9", "a", 0),
        MessageQueue(T, "a", 0),
    ]
    assert sorted(queues) == [
        MessageQueue(T, "a", 0),
        MessageQueue(T, "b", 1),
        MessageQueue(T, "\u00e9", 0),
        MessageQueue("\u00e9", "a", 0),
    ]


@pytest.mark.parametrize(
    ("strategy", "kwargs", "message"),
    [
        ("CONFIG", {}, "needs the list of queues"),
        ("MACHINE_ROOM", {}, "needs the consumer machine rooms"),
        ("MACHINE_ROOM_NEARBY", {}, "needs a machine room resolver"),
        (
            "MACHINE_ROOM_NEARBY",
            {"resolver": PrefixMachineRoomResolver(), "inner": "MACHINE_ROOM_NEARBY"},
            "cannot wrap",
        ),
    ],
)
def test_factory_names_what_a_strategy_needs(strategy, kwargs, message):
    with pytest.raises(AllocationError, match=message):
        make_strategy(strategy, **kwargs)


def test_factory_covers_every_setting():
    extra = {"queues": [], "consumer_rooms": [], "resolver": PrefixMachineRoomResolver()}
    names = {s: make_strategy(s, **extra).name for s in AllocateStrategy}
    assert names == {s: s.value for s in AllocateStrategy} | {
        AllocateStrategy.MACHINE_ROOM_NEARBY: "MACHINE_ROOM_NEARBY-AVG"
    }
