"""What a member does when a broker asks it to reset its group's offsets or to consume one message directly."""

from __future__ import annotations

import json

import pytest

from rocketlake.member.requests import consume_directly, reset_offsets
from rocketlake.rocketmq.client_requests import CMResult, DirectConsumeResult, decode_reset_offset_body
from rocketlake.rocketmq.codes import RequestCode, ResponseCode
from rocketlake.rocketmq.errors import ProtocolError
from rocketlake.rocketmq.frame import RemotingCommand
from rocketlake.rocketmq.message import Message
from rocketlake.rocketmq.message_queue import MessageQueue
from tests.unit.record_encoder import encode_message_record
from tests.unit.support import ingestion_config

pytestmark = pytest.mark.unit

Q0, Q1, OTHER = (
    MessageQueue("orders", "broker-a", 0),
    MessageQueue("orders", "broker-a", 1),
    MessageQueue("audit", "broker-a", 0),
)


def test_the_reset_body_is_read_with_its_object_keys():
    # ResetOffsetBody.encode() of a 4.9 broker (fastjson 1): MessageQueue objects as keys.
    body = (
        b'{"offsetTable":{{"brokerName":"broker-a","queueId":1,"topic":"orders"}:17,'
        b'{"brokerName":"broker-a","queueId":0,"topic":"orders"}:5}}'
    )
    assert decode_reset_offset_body(body) == {Q0: 5, Q1: 17}
    assert decode_reset_offset_body(None) == {}
    with pytest.raises(ProtocolError, match="is not a queue and an offset"):
        decode_reset_offset_body(b'{"offsetTable":{"orders":5}}')


class Offsets:
    """A group's committed offsets as plain data (the part of ``GroupBroker`` a reset uses)."""

    def __init__(self, committed):
        self.committed, self.commits = dict(committed), []

    def committed_offset(self, mq):
        return self.committed.get(mq)

    def commit_offset(self, mq, offset):
        self.commits.append((mq, offset))
        self.committed[mq] = offset


def test_a_reset_moves_forward_and_leaves_other_topics_alone():
    offsets = Offsets({Q0: 3, Q1: 10})
    outcome = reset_offsets(offsets, {Q0: 8, Q1: 10, OTHER: 0}, {"orders"}, 1700000000000, lambda: set())
    assert offsets.commits == [(Q0, 8)] and outcome.refused is None and outcome.unchanged == 1
    assert "moved 1 queue(s): orders/broker-a/0 3->8" in outcome.summary()


def test_a_reset_that_would_move_any_queue_backward_changes_nothing_and_says_why():
    offsets = Offsets({Q0: 3, Q1: 10})
    outcome = reset_offsets(offsets, {Q0: 8, Q1: 2}, {"orders"}, 0, lambda: set())
    assert offsets.commits == []
    assert "1 queue(s) would move backward (orders/broker-a/1 10->2)" in outcome.refused
    assert "REFUSED" in outcome.summary() and "rocketlake backfill" in outcome.summary()


def test_a_reset_waits_for_no_run_but_refuses_while_one_is_in_flight():
    offsets = Offsets({Q0: 3})
    outcome = reset_offsets(offsets, {Q0: 8}, {"orders"}, -1, lambda: {"run-1"})
    assert offsets.commits == [] and "run-1" in outcome.refused
    # Nothing to move: no need to ask Dagster at all.
    assert reset_offsets(offsets, {Q0: 3}, {"orders"}, -1, lambda: 1 / 0).refused is None


def record(body: bytes, tags: str = "t", topic: str = "orders", **props) -> bytes:
    return encode_message_record(
        Message(
            topic=topic,
            queue_id=1,
            queue_offset=7,
            commit_log_offset=1234,
            born_host="127.0.0.1:5000",
            store_host="127.0.0.1:10911",
            store_timestamp=1700000000000,
            body=body,
            properties={"TAGS": tags, "UNIQ_KEY": "ABC", **props},
        )
    )


def test_a_direct_consume_calls_the_listener_on_the_message_and_answers_its_verdict():
    cfg = ingestion_config(listener="tests.unit.listeners:fail_poison")
    ok = consume_directly(cfg, record(b"x"), "broker-a")
    later = consume_directly(cfg, record(b"x", tags="poison"), "broker-a")
    assert (ok.consume_result, ok.order, ok.auto_commit) == (CMResult.CR_SUCCESS, False, True)
    assert (later.consume_result, later.remark) == (CMResult.CR_LATER, "listener answered RECONSUME_LATER")
    vectorised = ingestion_config(listener="tests.unit.listeners:vectorised_upper")
    assert consume_directly(vectorised, record(b"x", tags="poison"), "broker-a").consume_result is CMResult.CR_LATER
    orderly = ingestion_config(listener="tests.unit.listeners:orderly_fail_by_tag", consume_orderly=True)
    held = consume_directly(orderly, record(b"x", tags="poison"), "broker-a")
    assert (held.consume_result, held.order) == (CMResult.CR_LATER, True)


def test_the_listener_gets_the_message_as_in_a_run_with_the_original_topic_and_the_bodys_fields(monkeypatch):
    import tests.unit.listeners as listeners

    seen = []
    monkeypatch.setattr(
        listeners, "spy", lambda messages, context: seen.extend(messages) or "CONSUME_SUCCESS", raising=False
    )
    cfg = ingestion_config(listener="tests.unit.listeners:spy", body={"format": "json", "schema": "amount DOUBLE"})
    body = json.dumps({"amount": 3.5, "note": "x"}).encode()
    # A copy sent back to the retry topic: the listener sees the topic it was sent to (resetRetryAndNamespace).
    result = consume_directly(cfg, record(body, topic="%RETRY%g", RETRY_TOPIC="orders"), "broker-a")
    assert result.consume_result is CMResult.CR_SUCCESS
    [message] = seen
    assert (
        message["topic"],
        message["broker_name"],
        message["queue_id"],
        message["queue_offset"],
        message["tags"],
        message["msg_id"],
        message["amount"],
    ) == ("orders", "broker-a", 1, 7, "t", "ABC", 3.5)
    assert "note" not in message and message["body"] == body


def test_a_body_that_does_not_decode_is_answered_later_and_an_exception_as_thrown(monkeypatch):
    import tests.unit.listeners as listeners

    cfg = ingestion_config(body={"format": "json", "schema": "amount DOUBLE"})
    bad = consume_directly(cfg, record(b"{not json"), "broker-a")
    assert bad.consume_result is CMResult.CR_LATER and bad.remark.startswith("body is not JSON")
    assert consume_directly(cfg, record(b"[1]"), "broker-a").remark == "body is JSON but not an object (a list)"
    assert consume_directly(cfg, record(b'{"amount": 1}'), "broker-a").consume_result is CMResult.CR_SUCCESS
    variant = ingestion_config(body={"format": "variant"})  # any JSON value, as parse_json takes it
    assert consume_directly(variant, record(b"[1]"), "broker-a").consume_result is CMResult.CR_SUCCESS
    assert consume_directly(variant, record(b"{not json"), "broker-a").remark.startswith("body is not JSON")

    def explode(messages, context):
        raise RuntimeError("downstream is down")

    monkeypatch.setattr(listeners, "explode", explode, raising=False)
    thrown = consume_directly(ingestion_config(listener="tests.unit.listeners:explode"), record(b"x"), "broker-a")
    assert (thrown.consume_result, thrown.remark) == (CMResult.CR_THROW_EXCEPTION, "RuntimeError: downstream is down")
    monkeypatch.setattr(listeners, "explode", lambda messages, context: None)
    assert (
        consume_directly(
            ingestion_config(listener="tests.unit.listeners:explode"), record(b"x"), "broker-a"
        ).consume_result
        is CMResult.CR_RETURN_NULL
    )


def test_the_result_is_fastjsons_form_and_mqadmins_text():
    result = DirectConsumeResult(CMResult.CR_LATER, remark="why", spent_time_ms=3)
    assert json.loads(result.encode()) == {
        "autoCommit": True,
        "consumeResult": "CR_LATER",
        "order": False,
        "remark": "why",
        "spentTimeMills": 3,
    }
    assert b"remark" not in DirectConsumeResult(CMResult.CR_SUCCESS).encode()
    assert str(result) == (
        "ConsumeMessageDirectlyResult [order=false, autoCommit=true, consumeResult=CR_LATER, "
        "remark=why, spentTimeMills=3]"
    )


class Recorder:
    """A member as the request router sees it."""

    client_id = "127.0.0.1@a"

    def __init__(self):
        self.resets = []

    def running_info(self):
        return b'{"x":1}'

    def consume_directly(self, request):
        return b'{"consumeResult":"CR_SUCCESS"}'

    def reset(self, address, request):
        self.resets.append((address, request.ext_fields["topic"]))


def test_requests_go_to_the_member_of_their_group_and_others_get_the_java_clients_remark(monkeypatch):
    from rocketlake.member import process as member

    recorder = Recorder()
    monkeypatch.setattr(member, "_members", {"g1": recorder})

    def asked(code: int, **fields) -> RemotingCommand:
        return RemotingCommand(code=code, opaque=42, ext_fields=fields)

    ok = member._answer(asked(RequestCode.GET_CONSUMER_RUNNING_INFO, consumerGroup="g1", clientId="127.0.0.1@a"), "b")
    assert (ok.code, ok.opaque, ok.is_response, ok.body) == (ResponseCode.SUCCESS, 42, True, b'{"x":1}')
    direct = member._answer(
        asked(RequestCode.CONSUME_MESSAGE_DIRECTLY, consumerGroup="g1", clientId="127.0.0.1@a", msgId="M"), "b"
    )
    assert direct.body == b'{"consumeResult":"CR_SUCCESS"}'
    for group, client_id in (("g2", "127.0.0.1@a"), ("g1", "127.0.0.1@other")):
        refused = member._answer(
            asked(RequestCode.CONSUME_MESSAGE_DIRECTLY, consumerGroup=group, clientId=client_id), "b"
        )
        assert (refused.code, refused.remark) == (
            ResponseCode.SYSTEM_ERROR,
            f"The Consumer Group <{group}> not exist in this consumer",
        )
    # RESET_CONSUMER_CLIENT_OFFSET is oneway: handled, never answered; another group's is not ours to handle.
    assert member._answer(asked(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, group="g1", topic="orders"), "b1") is None
    assert member._answer(asked(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, group="g2", topic="orders"), "b1") is None
    assert recorder.resets == [("b1", "orders")]
