"""Failures on plain data: what a send-back needs, what the broker will do with it, and how a window adds up."""

from __future__ import annotations

import pytest

from rocketlake.pipelines import ingest
from rocketlake.pipelines.config import dead_letter_config
from rocketlake.pipelines.failures import (
    DEAD_LETTERED,
    FAILED,
    SENT_BACK,
    FailedContent,
    FailedMessage,
    commit_log_offset_of,
    retry_message,
)
from rocketlake.pipelines.ingest import Landing, Materialization, WindowAccounting
from rocketlake.pipelines.ledger import LedgerEntry
from rocketlake.resources.rocketmq.message import create_offset_msg_id
from rocketlake.resources.rocketmq.message_queue import MessageQueue
from tests.unit.support import ingestion_config

MQ = MessageQueue("orders", "broker-a", 0)


def test_the_commit_log_offset_is_read_back_from_the_offset_message_id():
    for offset in (0, 1, 123_456_789, 2**40 + 7):
        assert commit_log_offset_of(create_offset_msg_id("127.0.0.1:10911", offset)) == offset
        assert commit_log_offset_of(create_offset_msg_id("[::1]:10911", offset)) == offset
    with pytest.raises(ValueError, match="not an offset message id"):
        commit_log_offset_of("C0A8")


def test_every_category_counts_toward_the_balance():
    a = WindowAccounting("w", planned=10, seen=10, rows=4, filtered=1, sent_back=2, dead_lettered=1, failed=1,
                         duplicates=1)
    assert a.balanced and a.not_landed == 6
    assert not WindowAccounting("w", 10, 10, 4, 1, sent_back=2).balanced  # three offsets unaccounted for
    assert not WindowAccounting("w", 2, 2, 2, 0, queue_problems=("orders/broker-a/0: ...",)).balanced


class SendBackRecorder:
    def __init__(self, fail_at: int | None = None):
        self.sent: list[tuple[FailedMessage, int]] = []
        self.fail_at = fail_at

    def send_back(self, failure, max_reconsume_times, delay_level=0):
        if self.fail_at is not None and len(self.sent) == self.fail_at:
            raise ConnectionError("broker-a is down")
        self.sent.append((failure, max_reconsume_times))


def failure(offset: int, outcome: str) -> FailedMessage:
    return FailedMessage(MQ, offset, create_offset_msg_id("127.0.0.1:10911", 1000 + offset), f"U{offset}", "orders",
                         0, outcome, "listener answered RECONSUME_LATER")


def materialization(*failures: FailedMessage) -> Materialization:
    entry = LedgerEntry("orders", "g", "run-1", ())
    return Materialization(entry, Landing((), {}, 0, 3, failures))


def test_send_back_sends_what_the_brokers_take_back_and_nothing_kept():
    cfg = ingestion_config(listener="tests.unit.listeners:fail_poison", max_reconsume_times=3)
    broker = SendBackRecorder()
    m = materialization(failure(0, SENT_BACK), failure(1, DEAD_LETTERED), failure(2, FAILED))
    lines = []
    assert ingest.send_back(broker, cfg, m, lines.append) == 2
    assert [(f.queue_offset, limit) for f, limit in broker.sent] == [(0, 3), (1, 3)]
    assert lines == ["sent back 2 failed message(s) to g's retry topic (1 of them to %DLQ%g, after 3 attempts)"]


def test_a_send_back_that_fails_fails_the_run_before_its_materialization():
    cfg = ingestion_config(listener="tests.unit.listeners:fail_poison")
    broker = SendBackRecorder(fail_at=1)
    with pytest.raises(ConnectionError):
        ingest.send_back(broker, cfg, materialization(failure(0, SENT_BACK), failure(1, SENT_BACK)))
    assert len(broker.sent) == 1  # the next run lands the window again and sends back what fails then


def test_the_retry_message_is_the_original_as_java_produces_it_back():
    """DefaultMQPushConsumerImpl#sendMessageBackAsNormalMessage: body and properties, RETRY_TOPIC, ORIGIN_MESSAGE_ID,
    RECONSUME_TIME + 1, MAX_RECONSUME_TIMES, no TRAN_MSG, delay level 3 + reconsume times."""
    f = FailedMessage(MQ, 7, create_offset_msg_id("127.0.0.1:10911", 1007), "U7", "orders", 2, SENT_BACK, "boom")
    read = FailedContent(b"{}", "poison", "k1", "U7", {"UNIQ_KEY": "U7", "TAGS": "poison", "KEYS": "k1", "colour": "red",
                                                     "TRAN_MSG": "true", "WAIT": "true"})
    m = retry_message("g", f, read, 16)
    assert (m.topic, m.body, m.reconsume_times, m.max_reconsume_times) == ("%RETRY%g", b"{}", 3, 16)
    assert m.properties == {"UNIQ_KEY": "U7", "TAGS": "poison", "KEYS": "k1", "colour": "red", "WAIT": "true",
                            "RETRY_TOPIC": "orders", "ORIGIN_MESSAGE_ID": "U7", "RECONSUME_TIME": "3",
                            "MAX_RECONSUME_TIMES": "16", "DELAY": "5"}

    # A redelivered copy (read from %RETRY%g, its origin topic restored) keeps its ORIGIN_MESSAGE_ID and RETRY_TOPIC.
    copy = FailedMessage(MessageQueue("%RETRY%g", "broker-a", 0), 0, f.offset_msg_id, "U7", "orders", 1, SENT_BACK, "x")
    again = retry_message("g", copy, FailedContent(b"{}", None, None, "O1", {"ORIGIN_MESSAGE_ID": "O1",
                                                                             "RETRY_TOPIC": "orders"}), 16)
    assert (again.properties["ORIGIN_MESSAGE_ID"], again.properties["RETRY_TOPIC"]) == ("O1", "orders")
    assert (again.reconsume_times, again.properties["DELAY"]) == (2, "4")


def test_without_the_properties_read_the_retry_message_carries_what_the_columns_hold():
    f = FailedMessage(MQ, 7, create_offset_msg_id("127.0.0.1:10911", 1007), "U7", "orders", 0, SENT_BACK, "boom")
    m = retry_message("g", f, FailedContent(b"x", "poison", "k1 k2", "U7"), 16)
    assert m.properties == {"TAGS": "poison", "KEYS": "k1 k2", "UNIQ_KEY": "U7", "ORIGIN_MESSAGE_ID": "U7",
                            "RETRY_TOPIC": "orders", "RECONSUME_TIME": "1", "MAX_RECONSUME_TIMES": "16", "DELAY": "3"}
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
