"""This member's share of the group's queues, from the brokers' membership and the configured strategy."""

from __future__ import annotations

from rocketlake.engine.assignment import assign, owners
from rocketlake.rocketmq.message_queue import MessageQueue
from tests.unit.support import ingestion_config

TOPIC = [MessageQueue("orders", broker, q) for broker in ("broker-a", "broker-b") for q in range(8)]
RETRY = [MessageQueue("%RETRY%g", broker, 0) for broker in ("broker-a", "broker-b")]
M1, M2 = "127.0.0.1@m1", "127.0.0.1@m2"


config = ingestion_config


def test_two_members_split_sixteen_queues_eight_and_eight_and_each_retry_queue_once():
    cfg = config()
    first, second = (assign(cfg, cid, TOPIC + RETRY, [M2, M1]) for cid in (M1, M2))
    assert [q for q in first.taken if q.topic == "orders"] == TOPIC[:8], "the first 8 of the sorted list"
    assert [q for q in second.taken if q.topic == "orders"] == TOPIC[8:], "and the last 8"
    assert [q for q in first.taken if q.topic != "orders"] == RETRY[:1], "the retry topic is rebalanced on its own"
    assert [q for q in second.taken if q.topic != "orders"] == RETRY[1:]
    assert first.members == (M1, M2) and "takes 9 of 18 queues under AVG" in first.describe()


def test_one_queue_two_members_one_idles_and_says_why():
    cfg = config()
    one = [TOPIC[0]]
    taken = {cid: assign(cfg, cid, one, [M1, M2]) for cid in (M1, M2)}
    assert taken[M1].taken == (TOPIC[0],) and taken[M2].taken == ()
    assert taken[M2].describe() == (
        f"member {M2} takes no queue: AVG gives it none of 1 queue(s) among 2 member(s) (members: {M1}, {M2})"
    )
    with_retry = assign(cfg, M2, one + RETRY, [M1, M2])
    assert with_retry.taken == (RETRY[1],)
    assert with_retry.describe().endswith("; it idles on topic orders: none of its 1 queue(s) is its share")


def test_alone_when_nobody_heartbeats_and_nothing_when_others_divided_the_queues_without_it():
    cfg = config()
    assert assign(cfg, M1, TOPIC, []).taken == tuple(TOPIC)
    outsider = assign(cfg, M1, TOPIC, [M2])
    assert outsider.taken == () and "start `rocketlake member`" in outsider.why_none


def test_each_strategy_changes_the_share():
    members = [M1, M2, "127.0.0.1@m3"]
    avg = assign(config(), M1, TOPIC, members).taken
    circle = assign(config(allocate_message_queue_strategy="AVG_BY_CIRCLE"), M1, TOPIC, members).taken
    ring = assign(config(allocate_message_queue_strategy="CONSISTENT_HASH", virtual_node_count=3), M1, TOPIC, members)
    assert avg == tuple(TOPIC[:6]) and circle == tuple(TOPIC[0::3])
    assert ring.strategy == "CONSISTENT_HASH" and ring.taken not in (avg, circle)
    listed = assign(
        config(
            allocate_message_queue_strategy="CONFIG",
            allocate_message_queue_list=["broker-b/7", "%RETRY%g/broker-a/0", "broker-c/1"],
        ),
        M1,
        TOPIC + RETRY,
        members,
    ).taken
    assert listed == (RETRY[0], TOPIC[15]), "the configured queues that exist, each under its own topic"


def test_broadcasting_takes_every_queue_whoever_else_is_a_member():
    assert assign(config(message_model="BROADCASTING"), M1, TOPIC, [M2]).taken == tuple(TOPIC)


def test_the_key_changes_with_members_or_queues_only():
    cfg = config()
    base = assign(cfg, M1, TOPIC, [M1, M2])
    assert assign(cfg, M1, list(reversed(TOPIC)), [M2, M1]).key == base.key
    assert assign(cfg, M1, TOPIC, [M1]).key != base.key
    assert assign(cfg, M1, TOPIC[:15], [M1, M2]).key != base.key


def test_owners_name_the_member_each_queue_goes_to():
    owned = owners(config(), TOPIC, [M2, M1])
    assert {q: owned[q] for q in TOPIC} == {q: (M1 if i < 8 else M2) for i, q in enumerate(TOPIC)}
    assert set(owners(config(), TOPIC, []).values()) == {"none (the next run of any deployment takes it)"}
