"""POP traces (``rocketmq.pop_log``): checkpoints, acks and batch acks as a 5.3 broker writes them (``PopCheckPoint``,
``AckMsg``, ``BatchAckMsg`` serialised by fastjson, keyed by their ``@JSONField`` names), in its revive log or waiting
in its timer topic, read for one group."""

from __future__ import annotations

from rocketlake.rocketmq.message import Message
from rocketlake.rocketmq.pop_log import TIMER_TOPIC, popped_topics, revive_topic

LOG = revive_topic("DefaultCluster")
# As PopMessageProcessor.buildCkMsg and the ack path write them.
CHECKPOINT = (
    b'{"bm":0,"bn":"broker-a","c":"g_app","d":[0,1],"it":30000,"n":2,"pt":1764480000000,"q":1,'
    b'"reviveTime":1764480030000,"ro":17,"so":40,"t":"orders"}'
)
ACK = b'{"ao":41,"bn":"broker-a","c":"g_app","pt":1764480000000,"q":1,"so":40,"t":"orders"}'
BATCH_ACK = b'{"aol":[42,43],"bn":"broker-a","c":"g_other","pt":1764480000000,"q":0,"so":42,"t":"payments"}'


def entry(topic: str, tag: str | None, body: bytes, **properties: str) -> Message:
    return Message(topic=topic, body=body, properties={**({"TAGS": tag} if tag else {}), **properties})


def test_the_topics_a_group_popped_come_from_its_checkpoints_and_acks():
    entries = [entry(LOG, "ck", CHECKPOINT), entry(LOG, "ack", ACK), entry(LOG, "bAck", BATCH_ACK)]
    assert popped_topics(entries, "g_app") == {"orders"}
    assert popped_topics(entries, "g_other") == {"payments"}
    assert popped_topics(entries, "g_none") == set()


def test_entries_still_waiting_in_the_timer_topic_count_and_users_timer_messages_do_not():
    waiting = entry(TIMER_TOPIC, "ck", CHECKPOINT, REAL_TOPIC=LOG)
    users = entry(TIMER_TOPIC, "ck", CHECKPOINT, REAL_TOPIC="orders")  # a user's timer message that looks alike
    assert popped_topics([waiting], "g_app") == {"orders"}
    assert popped_topics([users], "g_app") == set()


def test_entries_that_are_no_pop_traces_are_passed_over():
    entries = [
        entry(LOG, None, CHECKPOINT),  # no tag: not the broker's checkpoint
        entry(LOG, "other", ACK),
        entry(LOG, "ck", b"not json"),
        entry(LOG, "ck", b'["c", "g_app"]'),
        entry(LOG, "ack", b'{"c": "g_app", "t": 7}'),
    ]
    assert popped_topics(entries, "g_app") == set()


def test_the_revive_log_is_named_after_the_cluster():
    assert LOG == "rmq_sys_REVIVE_LOG_DefaultCluster"
