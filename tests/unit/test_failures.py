"""Failures on plain data: what a send-back needs, what the broker will do with it, and how a window adds up."""

from __future__ import annotations

import pytest

from rocketlake.pipelines import ingest
from rocketlake.pipelines.config import dead_letter_config
from rocketlake.pipelines.failures import (
    DEAD_LETTERED,
    FAILED,
    SENT_BACK,
    FailedMessage,
    commit_log_offset_of,
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


def test_the_dead_letter_ingestion_lands_the_groups_dlq_raw_from_its_first_offset():
    cfg = ingestion_config(listener="tests.unit.listeners:fail_poison", body={"format": "json", "schema": "a INT"})
    dlq = dead_letter_config(cfg)
    assert (dlq.topic, dlq.table, dlq.consumer_group) == ("%DLQ%g", "orders_dlq", "g")
    assert dlq.body.format == "raw" and dlq.listener is None and not dlq.can_fail
    assert dlq.consume_from_where.value == "CONSUME_FROM_FIRST_OFFSET"
    assert (dlq.dead_letters_of, dlq.membership_topic) == ("orders", "orders")
    assert cfg.dead_letters_of is None and cfg.membership_topic == "orders"
