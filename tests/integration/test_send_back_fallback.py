"""Issue 45, a broker down: a send-back the storing broker does not take goes to the retry topic on another broker,
as Java's push consumer produces it there (``DefaultMQPushConsumerImpl#sendMessageBack``). The engine's run on the
disruptable brokers, Spark and Delta, without Dagster (``test_engine_runs.Engine``)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from rocketlake.engine.run import Alone, Committed, LandingRequest, run
from rocketlake.engine.windows import StoreTimeWindow
from rocketlake.rocketmq.client import RocketMQClient
from rocketlake.rocketmq.errors import TopicNotExist
from rocketlake.rocketmq.message import retry_topic
from rocketlake.rocketmq.message_queue import MessageQueue
from rocketlake.rocketmq.send import OutgoingMessage
from tests.integration.engine_support import Engine, now_ms, stored
from tests.integration.ingestion_support import unique, wait_until
from tests.unit.support import Lines, ingestion_config

pytestmark = pytest.mark.engine


def test_a_send_back_the_storing_broker_does_not_take_is_produced_into_the_retry_topic(disruptable, spark, tmp_path):
    """Issue 45: broker-a stores a message the listener fails, and stops answering between the landing and the
    send-back (SIGSTOP past the client's timeout). As Java's DefaultMQPushConsumerImpl.sendMessageBack does, the run
    then produces the message into %RETRY%<group> on broker-b: the original's body and properties, RETRY_TOPIC the
    original topic, ORIGIN_MESSAGE_ID its offset id (as the broker sets it on a send-back it takes; Java's fallback
    puts the msgId, which two messages a producer's retry stored share), reconsume times 1. The run balances and
    commits."""
    client = RocketMQClient(disruptable.spec.namesrv_address)
    topic, group = unique("fallback"), unique("g_fallback")
    client.create_topic(topic, 1)
    deadline = time.monotonic() + 10
    while {q.broker_name for q in client.queues(topic)} != {"broker-a", "broker-b"}:
        assert time.monotonic() < deadline, client.queues(topic)
        time.sleep(0.2)
        client.refresh_route(topic)
    on_a = MessageQueue(topic, "broker-a", 0)
    start = now_ms()
    sent = client.send(
        OutgoingMessage(topic, b'{"order": "p0"}', tags="poison", keys=("p0",), properties={"colour": "red"}), on_a
    )
    stored(client, on_a, 1)
    end = now_ms() + 1
    wait_until(end / 1000)
    cfg = ingestion_config(
        topic=topic,
        consumer_group=group,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        listener="tests.unit.listeners:fail_poison",
        window={"cron": "* * * * *", "start": "1970-01-01", "grace_seconds": 0},
    )
    engine = Engine(disruptable, spark, tmp_path / "orders", cfg)
    pid = disruptable.broker_processes["broker-a"].pid()
    land = engine.lake.land

    def land_then_pause_broker_a(*args, **kwargs):
        landing = land(*args, **kwargs)
        os.kill(pid, signal.SIGSTOP)  # after the read and the commit, before the send-back
        return landing

    engine.lake.land = land_then_pause_broker_a
    lines = Lines()
    try:
        events = run(
            engine.broker,
            engine.lake,
            engine.recorded,
            Alone(),
            cfg,
            LandingRequest(
                "orders", "r1", [("w", StoreTimeWindow(start, end))], now_ms(), 0, start_at_group_position=True
            ),
            lines,
        )
        landed = next(events)  # the send-back is made before the landing is reported
    finally:
        os.kill(pid, signal.SIGCONT)
    assert landed.balanced and [a.sent_back for a in landed.slice.accounting] == [1]
    engine.recorded.record(landed.slice.ledger)
    assert [e for e in events if isinstance(e, Committed)]
    assert engine.offsets(topic)[("broker-a", 0)] == 1
    said = [line for line in lines.lines if "did not take the send-back" in line]
    assert said and f"%RETRY%{group}" in said[0] and "broker-a" in said[0], lines.lines

    # Parked at delay level 3 (3 s on these brokers), then in the retry topic on broker-b. Broker-a, resumed, may run
    # the send-back it was sent while paused too (a request that timed out may still be executed, as with Java's
    # client): a second copy there, which the table lands once (by original msgId) like any copy that comes back twice.
    retry = retry_topic(group)
    copies, deadline = [], time.monotonic() + 30
    while not copies:
        assert time.monotonic() < deadline, "no copy in the retry topic on broker-b"
        time.sleep(0.5)  # the delay level's seconds, polled
        try:
            client.refresh_route(retry)  # the broker the send created the topic on registers it a moment later
        except TopicNotExist:
            continue
        copies = [
            m
            for mq in client.queues(retry)
            if mq.broker_name == "broker-b"
            for m in client.pull(mq, 0, 32, consumer_group=group).messages
        ]
    [copy] = copies
    assert copy.body == b'{"order": "p0"}' and copy.reconsume_times == 1
    props = copy.properties
    assert props["RETRY_TOPIC"] == topic and props["ORIGIN_MESSAGE_ID"] == sent.offset_msg_id
    assert props["colour"] == "red" and props["TAGS"] == "poison" and props["KEYS"] == "p0"
    assert copy.msg_id == sent.msg_id  # the original's UNIQ_KEY travels with its properties, as in Java
