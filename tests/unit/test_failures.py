"""Failures on plain data: what a send-back needs, what the broker will do with it, and how a window adds up."""

from __future__ import annotations

import pytest

from rocketlake.engine import ingest
from rocketlake.engine.config import dead_letter_config
from rocketlake.engine.failures import (
    DEAD_LETTERED,
    FAILED,
    SENT_BACK,
    FailedContent,
    FailedMessage,
    commit_log_offset_of,
    retry_message,
)
from rocketlake.engine.ingest import LandedSlice, LandingReport, WindowAccounting
from rocketlake.engine.ledger import LedgerEntry
from rocketlake.rocketmq.message import create_offset_msg_id
from rocketlake.rocketmq.message_queue import MessageQueue
from rocketlake.rocketmq.send import RetryMessage
from tests.unit.support import ingestion_config

MQ = MessageQueue("orders", "broker-a", 0)


def test_the_commit_log_offset_is_read_back_from_the_offset_message_id():
    for offset in (0, 1, 123_456_789, 2**40 + 7):
        assert commit_log_offset_of(create_offset_msg_id("127.0.0.1:10911", offset)) == offset
        assert commit_log_offset_of(create_offset_msg_id("[::1]:10911", offset)) == offset
    with pytest.raises(ValueError, match="not an offset message id"):
        commit_log_offset_of("C0A8")


def test_every_category_counts_toward_the_balance():
    a = WindowAccounting(
        "w", planned=10, seen=10, rows=4, filtered=1, sent_back=2, dead_lettered=1, failed=1, duplicates=1
    )
    assert a.balanced and a.not_landed == 6
    assert not WindowAccounting("w", 10, 10, 4, 1, sent_back=2).balanced  # three offsets unaccounted for
    assert not WindowAccounting("w", 2, 2, 2, 0, queue_problems=("orders/broker-a/0: ...",)).balanced


class SendBackRecorder:
    """A broker taking send-backs; ``refusing``: brokers that do not (their send-backs raise ``ConnectionError``)."""

    def __init__(self, refusing: tuple[str, ...] = (), produce_fails: bool = False):
        self.sent: list[tuple[FailedMessage, int]] = []
        self.tried: list[int] = []
        self.produced: list[tuple[RetryMessage, str]] = []
        self.refusing = refusing
        self.produce_fails = produce_fails

    def send_back(self, failure, max_reconsume_times, delay_level=0):
        self.tried.append(failure.queue_offset)
        if failure.queue.broker_name in self.refusing:
            raise ConnectionError(f"{failure.queue.broker_name} is down")
        self.sent.append((failure, max_reconsume_times))

    def produce_retry(self, message, avoid):
        if self.produce_fails:
            raise TimeoutError("no other broker answers")
        self.produced.append((message, avoid))
        return "broker-b"


def failure(offset: int, outcome: str, mq: MessageQueue = MQ) -> FailedMessage:
    return FailedMessage(
        mq,
        offset,
        create_offset_msg_id("127.0.0.1:10911", 1000 + offset),
        f"U{offset}",
        "orders",
        0,
        outcome,
        "listener answered RECONSUME_LATER",
    )


def content(offset: int) -> FailedContent:
    return FailedContent(
        f"body {offset}".encode(),
        "poison",
        "k1 k2",
        f"U{offset}",
        {"UNIQ_KEY": f"U{offset}", "TAGS": "poison", "KEYS": "k1 k2", "colour": "red"},
    )


def materialization(*failures: FailedMessage, contents=None) -> LandedSlice:
    entry = LedgerEntry("orders", "g", "run-1", ())
    return LandedSlice(entry, LandingReport((), 3, failures, contents=contents))


def test_send_back_sends_what_the_brokers_take_back_and_nothing_kept():
    cfg = ingestion_config(listener="tests.unit.listeners:fail_poison", max_reconsume_times=3)
    broker = SendBackRecorder()
    m = materialization(failure(0, SENT_BACK), failure(1, DEAD_LETTERED), failure(2, FAILED))
    lines = []
    assert ingest.send_back(broker, cfg, m, lines.append) == 2
    assert [(f.queue_offset, limit) for f, limit in broker.sent] == [(0, 3), (1, 3)]
    assert lines == ["sent back 2 failed message(s) to g's retry topic (1 of them to %DLQ%g, after 3 attempts)"]


def test_what_a_broker_does_not_take_back_is_produced_into_the_retry_topic_on_another():
    """Issue 45: as Java's DefaultMQPushConsumerImpl.sendMessageBack, on any failure. The broker that refused is asked
    once: the rest of its failures go the same way without waiting for it again; other brokers' are sent back."""
    cfg = ingestion_config(listener="tests.unit.listeners:fail_poison", max_reconsume_times=3)
    b0 = MessageQueue("orders", "broker-b", 0)
    broker = SendBackRecorder(refusing=("broker-a",))
    asked = []

    def contents(name):
        asked.append(name)
        return {(MQ, o): content(o) for o in (0, 1, 2)}

    m = materialization(
        failure(0, SENT_BACK),
        failure(1, DEAD_LETTERED),
        failure(2, SENT_BACK),
        failure(5, SENT_BACK, b0),
        contents=contents,
    )
    lines = []
    assert ingest.send_back(broker, cfg, m, lines.append) == 4
    assert broker.tried == [0, 5] and [f.queue_offset for f, _ in broker.sent] == [5] and asked == ["broker-a"]
    assert [(r.body, r.reconsume_times, avoid) for r, avoid in broker.produced] == [
        (b"body 0", 1, "broker-a"),
        (b"body 1", 4, "broker-a"),
        (b"body 2", 1, "broker-a"),
    ]
    assert lines[0] == (
        "3 failed message(s) were produced into %RETRY%g (on broker-b) because broker broker-a did not "
        "take the send-back: ConnectionError: broker-a is down"
    )


def test_a_send_back_that_fails_and_cannot_be_produced_either_fails_the_run_before_its_materialization():
    cfg = ingestion_config(listener="tests.unit.listeners:fail_poison")
    m = materialization(
        failure(0, SENT_BACK), failure(1, SENT_BACK), contents=lambda name: {(MQ, 0): content(0), (MQ, 1): content(1)}
    )
    with pytest.raises(ingest.SendBackFailed, match="producing it into %RETRY%g on another broker failed too"):
        ingest.send_back(SendBackRecorder(refusing=("broker-a",), produce_fails=True), cfg, m)
    with pytest.raises(ingest.SendBackFailed, match="kept none of their bodies"):  # a landing without contents
        ingest.send_back(SendBackRecorder(refusing=("broker-a",)), cfg, materialization(failure(0, SENT_BACK)))
    unread = materialization(failure(0, SENT_BACK), contents=lambda name: {})
    with pytest.raises(ingest.SendBackFailed, match="not among those this run read"):
        ingest.send_back(SendBackRecorder(refusing=("broker-a",)), cfg, unread)
    # the next run lands the window again and sends back what fails then


def test_the_retry_message_is_the_original_as_java_produces_it_back():
    """DefaultMQPushConsumerImpl#sendMessageBackAsNormalMessage: body and properties, RETRY_TOPIC, ORIGIN_MESSAGE_ID,
    RECONSUME_TIME + 1, MAX_RECONSUME_TIMES, no TRAN_MSG, delay level 3 + reconsume times."""
    f = FailedMessage(MQ, 7, create_offset_msg_id("127.0.0.1:10911", 1007), "U7", "orders", 2, SENT_BACK, "boom")
    read = FailedContent(
        b"{}",
        "poison",
        "k1",
        f.offset_msg_id,
        {"UNIQ_KEY": "U7", "TAGS": "poison", "KEYS": "k1", "colour": "red", "TRAN_MSG": "true", "WAIT": "true"},
    )
    m = retry_message("g", f, read, 16)
    assert (m.topic, m.body, m.reconsume_times, m.max_reconsume_times) == ("%RETRY%g", b"{}", 3, 16)
    # ORIGIN_MESSAGE_ID: the original's offset id, as the broker sets it on CONSUMER_SEND_MSG_BACK (Java's fallback
    # puts the msgId, which two messages a producer's retry stored share).
    assert m.properties == {
        "UNIQ_KEY": "U7",
        "TAGS": "poison",
        "KEYS": "k1",
        "colour": "red",
        "WAIT": "true",
        "RETRY_TOPIC": "orders",
        "ORIGIN_MESSAGE_ID": f.offset_msg_id,
        "RECONSUME_TIME": "3",
        "MAX_RECONSUME_TIMES": "16",
        "DELAY": "5",
    }

    # A redelivered copy (read from %RETRY%g, its origin topic restored) keeps its ORIGIN_MESSAGE_ID and RETRY_TOPIC.
    copy = FailedMessage(MessageQueue("%RETRY%g", "broker-a", 0), 0, f.offset_msg_id, "U7", "orders", 1, SENT_BACK, "x")
    again = retry_message(
        "g", copy, FailedContent(b"{}", None, None, "O1", {"ORIGIN_MESSAGE_ID": "O1", "RETRY_TOPIC": "orders"}), 16
    )
    assert (again.properties["ORIGIN_MESSAGE_ID"], again.properties["RETRY_TOPIC"]) == ("O1", "orders")
    assert (again.reconsume_times, again.properties["DELAY"]) == (2, "4")


def test_without_the_properties_read_the_retry_message_carries_what_the_columns_hold():
    f = FailedMessage(MQ, 7, create_offset_msg_id("127.0.0.1:10911", 1007), "U7", "orders", 0, SENT_BACK, "boom")
    m = retry_message("g", f, FailedContent(b"x", "poison", "k1 k2", f.offset_msg_id), 16)
    assert m.properties == {
        "TAGS": "poison",
        "KEYS": "k1 k2",
        "UNIQ_KEY": "U7",
        "ORIGIN_MESSAGE_ID": f.offset_msg_id,
        "RETRY_TOPIC": "orders",
        "RECONSUME_TIME": "1",
        "MAX_RECONSUME_TIMES": "16",
        "DELAY": "3",
    }
    # A message without a UNIQ_KEY (its msgId is the broker's offset id): none is made up from it.
    anonymous = FailedMessage(MQ, 7, f.offset_msg_id, f.offset_msg_id, "orders", 0, SENT_BACK, "boom")
    m = retry_message("g", anonymous, FailedContent(b"x", None, None, f.offset_msg_id), 16)
    assert "UNIQ_KEY" not in m.properties and m.properties["ORIGIN_MESSAGE_ID"] == f.offset_msg_id


def test_a_dead_letter_is_produced_over_the_maximum_so_the_broker_moves_it_to_the_dlq():
    """SendMessageProcessor#handleRetryAndDLQ moves a %RETRY% message whose reconsume times are over the maximum (5.x;
    at or over on 4.9) to %DLQ%<group>. A concurrent dead letter is there by its own count; an orderly one (its
    attempts counted by its suspension, its reconsume times 0) is produced with the maximum + 1, as Java's
    ConsumeMessageOrderlyService#sendMessageBack produces a message whose local count reached the maximum."""
    read = FailedContent(b"x", None, None, "U1")
    concurrent = FailedMessage(MQ, 1, create_offset_msg_id("127.0.0.1:10911", 1), "U1", "orders", 3, DEAD_LETTERED, "")
    assert retry_message("g", concurrent, read, 3).reconsume_times == 4
    orderly = FailedMessage(MQ, 1, concurrent.offset_msg_id, "U1", "orders", 0, DEAD_LETTERED, "")
    m = retry_message("g", orderly, read, 5)
    assert (m.reconsume_times, m.properties["RECONSUME_TIME"], m.properties["MAX_RECONSUME_TIMES"]) == (6, "6", "5")


def test_the_dead_letter_ingestion_lands_the_groups_dlq_raw_from_its_first_offset():
    cfg = ingestion_config(listener="tests.unit.listeners:fail_poison", body={"format": "json", "schema": "a INT"})
    dlq = dead_letter_config(cfg)
    assert (dlq.topic, dlq.table, dlq.consumer_group) == ("%DLQ%g", "orders_dlq", "g")
    assert dlq.body.format == "raw" and dlq.listener is None and not dlq.can_fail
    assert dlq.consume_from_where.value == "CONSUME_FROM_FIRST_OFFSET"
    assert (dlq.dead_letters_of, dlq.membership_topic) == ("orders", "orders")
    assert cfg.dead_letters_of is None and cfg.membership_topic == "orders"
