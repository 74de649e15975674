"""BrokerClient and the sans-I/O request builders / answer readers behind it.

Pure functions are tested directly. BrokerClient is tested against a *scripted peer*: a loopback
listener (the frame echo peer of test_rocketmq_connection) whose answers the test writes, so each
request's fields and each kind of answer can be checked without a broker. Behaviour against the
real brokers is in tests/integration/test_rocketmq_*.py.
"""

from __future__ import annotations

import json
import pickle
import re
import zlib
from collections.abc import Callable, Iterator

import pytest

from rocketlake.rocketmq.admin import (
    SubscriptionGroupConfig,
    build_create_topic_request,
    encode_lock_body,
    parse_consume_stats,
    parse_lock_response,
)
from rocketlake.rocketmq.broker import BoundaryType, BrokerClient
from rocketlake.rocketmq.codes import RequestCode
from rocketlake.rocketmq.errors import (
    InvalidArgument,
    ProtocolError,
    RequestTimeout,
    SubscriptionGroupNotExist,
    SystemBusy,
    TopicNotExist,
)
from rocketlake.rocketmq.fastjson import FrozenObject, loads
from rocketlake.rocketmq.filter import Subscription
from rocketlake.rocketmq.frame import RemotingCommand, encode
from rocketlake.rocketmq.heartbeat import ConsumerData, MessageModel, encode_heartbeat, new_client_id
from rocketlake.rocketmq.message import Message, decode_batch, decode_properties
from rocketlake.rocketmq.message_queue import MessageQueue
from rocketlake.rocketmq.pools import PrivateConnections
from rocketlake.rocketmq.pull import (
    FLAG_COMMIT_OFFSET,
    FLAG_SUBSCRIPTION,
    FLAG_SUSPEND,
    GetMessageStatus,
    PullStatus,
    build_pull_request,
    parse_pull_response,
)
from rocketlake.rocketmq.send import (
    OutgoingMessage,
    RetryMessage,
    SendStatus,
    build_retry_request,
    build_send_batch_request,
    build_send_request,
    parse_send_response,
)
from tests.unit.frame_peer import FrameEchoPeer
from tests.unit.record_encoder import encode_message_record

ADDRESS = "127.0.0.1:10911"


def response(code: int = 0, remark: str | None = None, body: bytes = b"", version: int = 479, **fields: object):
    return RemotingCommand(
        code=code,
        ext_fields={k: str(v) for k, v in fields.items()},
        body=body,
        flag=1,
        remark=remark,
        version=version,
        language="JAVA",
    )


def record(queue_offset: int, tags: str | None = None, body: bytes = b"x") -> bytes:
    props = {"UNIQ_KEY": f"K{queue_offset}"}
    if tags is not None:
        props["TAGS"] = tags
    return encode_message_record(
        Message(
            topic="T",
            queue_id=0,
            queue_offset=queue_offset,
            commit_log_offset=100 * queue_offset,
            born_host="127.0.0.1:5000",
            store_host="127.0.0.1:10911",
            body=body,
            properties=props,
        )
    )


# --------------------------------------------------------------------------- pull (sans I/O)


def test_pull_request_carries_every_required_field_and_the_right_flags() -> None:
    sub = Subscription.parse("T", "TagA || TagB")
    plain = build_pull_request(
        consumer_group="g", topic="T", queue_id=2, offset=7, max_msgs=32, subscription=sub, broker_name="broker-a"
    )
    assert plain.code == RequestCode.PULL_MESSAGE
    assert plain.ext_fields == {
        "consumerGroup": "g",
        "topic": "T",
        "queueId": "2",
        "queueOffset": "7",
        "maxMsgNums": "32",
        "sysFlag": str(FLAG_SUBSCRIPTION),
        "commitOffset": "0",
        "suspendTimeoutMillis": "0",
        "subVersion": "0",
        "subscription": "TagA || TagB",
        "expressionType": "TAG",
        "bname": "broker-a",
    }
    both = build_pull_request(
        consumer_group="g",
        topic="T",
        queue_id=0,
        offset=0,
        max_msgs=1,
        subscription=sub,
        commit_offset=5,
        suspend_timeout_ms=15000,
    )
    assert int(both.ext_fields["sysFlag"]) == FLAG_SUBSCRIPTION | FLAG_COMMIT_OFFSET | FLAG_SUSPEND
    assert both.ext_fields["commitOffset"] == "5" and both.ext_fields["suspendTimeoutMillis"] == "15000"
    registered = build_pull_request(
        consumer_group="g", topic="T", queue_id=0, offset=0, max_msgs=1, subscription=sub, post_subscription=False
    )
    assert registered.ext_fields["sysFlag"] == "0" and "subscription" not in registered.ext_fields


@pytest.mark.parametrize(
    "topic, expression",
    [("T", "*"), ("T", "TagA || TagB"), ("T", "a > 5 AND b = 'x'"), ("%RETRY%g", "*"), ("T", "a LIKE '%s%%'")],
)
def test_a_pull_from_a_template_is_the_bytes_of_the_request_encoded_whole(topic: str, expression: str) -> None:
    from dataclasses import replace

    from rocketlake.rocketmq.frame import RequestTemplate, encode
    from rocketlake.rocketmq.pull import PULL_OPEN_FIELDS

    sub = Subscription.parse(topic, expression, "SQL92" if ">" in expression or "LIKE" in expression else "TAG")
    args = dict(
        consumer_group="g", topic=topic, queue_id=3, subscription=sub, broker_name="broker-a", suspend_timeout_ms=0
    )
    template = RequestTemplate(build_pull_request(**args, offset=0, max_msgs=1, commit_offset=0), PULL_OPEN_FIELDS)
    for offset, size, commit, opaque in [(0, 1, 0, 0), (123456789012345, 1024, 77, 2**31 - 1), (9, 32, 5, 12)]:
        whole = replace(build_pull_request(**args, offset=offset, max_msgs=size, commit_offset=commit), opaque=opaque)
        assert template.encode(opaque, (str(offset), str(size), str(commit))) == encode(whole)
    with pytest.raises(InvalidArgument, match="not in the request"):
        RequestTemplate(build_pull_request(**args, offset=0, max_msgs=1), ("nextBeginOffset",))


@pytest.mark.parametrize(
    "bad",
    [
        {"queue_id": -1},
        {"offset": -1},
        {"max_msgs": 0},
        {"max_msgs": 1025},
        {"commit_offset": -2},
        {"suspend_timeout_ms": -1},
    ],
)
def test_pull_request_refuses_bad_arguments(bad: dict) -> None:
    args = {
        "consumer_group": "g",
        "topic": "T",
        "queue_id": 0,
        "offset": 0,
        "max_msgs": 32,
        "subscription": Subscription.parse("T", "*"),
        **bad,
    }
    with pytest.raises(InvalidArgument):
        build_pull_request(**args)
    # A stream of pulls refuses the same numbers: the queue's and the options' when it is set up, each pull's when
    # it is sent (nothing is sent: the broker's address is never dialled).
    broker = BrokerClient("127.0.0.1:1", broker_name="b")
    stream_bad = {k: v for k, v in bad.items() if k in ("queue_id", "commit_offset", "suspend_timeout_ms")}
    send_bad = {k: v for k, v in bad.items() if k in ("offset", "max_msgs")}
    with pytest.raises(InvalidArgument, match=str(next(iter(bad.values())))):
        stream = broker.pull_stream("T", stream_bad.pop("queue_id", 0), consumer_group="g", **stream_bad)
        stream.send(**{"offset": 0, "max_msgs": 32, **send_bad})


@pytest.mark.parametrize(
    ("code", "status"),
    [
        (0, PullStatus.FOUND),
        (19, PullStatus.NO_NEW_MSG),
        (20, PullStatus.NO_MATCHED_MSG),
        (21, PullStatus.OFFSET_ILLEGAL),
    ],
)
def test_pull_codes_map_like_the_java_client(code: int, status: PullStatus) -> None:
    body = record(4) if code == 0 else b""
    remark = {0: "FOUND", 19: "OFFSET_OVERFLOW_ONE", 20: "NO_MATCHED_MESSAGE", 21: "NO_MESSAGE_IN_QUEUE"}[code]
    answer = response(code, remark, body, nextBeginOffset=5, minOffset=1, maxOffset=9, suggestWhichBrokerId=0)
    result = parse_pull_response(answer, Subscription.parse("T", "*"), address=ADDRESS)
    assert result.status is status and result.store_status is GetMessageStatus(remark)
    assert (result.next_begin_offset, result.min_offset, result.max_offset) == (5, 1, 9)
    assert [m.queue_offset for m in result.messages] == ([4] if code == 0 else [])


def test_pull_rechecks_tags_on_the_client_and_counts_what_it_drops() -> None:
    body = b"".join([record(0, "Aa"), record(1, "BB"), record(2, None), record(3, "Aa")])
    answer = response(0, "FOUND", body, nextBeginOffset=4, minOffset=0, maxOffset=4, suggestWhichBrokerId=0)
    result = parse_pull_response(answer, Subscription.parse("T", "Aa"), address=ADDRESS)
    assert [m.queue_offset for m in result.messages] == [0, 3] and result.filtered_out == 2
    everything = parse_pull_response(answer, Subscription.parse("T", "*"), address=ADDRESS)
    assert len(everything.messages) == 4 and everything.filtered_out == 0


def test_pull_errors_name_the_broker_request_and_code() -> None:
    with pytest.raises(TopicNotExist) as caught:
        parse_pull_response(
            response(17, "topic[T] not exist"), Subscription.parse("T", "*"), address=ADDRESS, hint="create it"
        )
    assert (
        str(caught.value)
        == f"{ADDRESS} answered PULL_MESSAGE(11) with TOPIC_NOT_EXIST(17): topic[T] not exist -- create it"
    )
    with pytest.raises(ProtocolError, match="nextBeginOffset='x'"):
        parse_pull_response(response(19, nextBeginOffset="x"), Subscription.parse("T", "*"), address=ADDRESS)
    with pytest.raises(ProtocolError, match="does not decode"):
        parse_pull_response(
            response(0, body=b"\x00" * 200, nextBeginOffset=1), Subscription.parse("T", "*"), address=ADDRESS
        )


# --------------------------------------------------------------------------- send (sans I/O)


def test_send_request_is_java_shaped_and_compresses_from_4096_bytes() -> None:
    small = OutgoingMessage("T", b"x" * 4095, tags="TagA", keys=["k1", "k2"], properties={"p": "v"}, flag=3)
    request, [key] = build_send_request(small, 2, producer_group="pg", broker_name="broker-a")
    f = request.ext_fields
    assert request.code == RequestCode.SEND_MESSAGE_V2 and request.body == b"x" * 4095
    assert (f["a"], f["b"], f["c"], f["d"], f["e"], f["f"], f["h"], f["m"], f["n"]) == (
        "pg",
        "T",
        "TBW102",
        "4",
        "2",
        "0",
        "3",
        "false",
        "broker-a",
    )
    assert decode_properties(f["i"]) == {"p": "v", "TAGS": "TagA", "KEYS": "k1 k2", "WAIT": "true", "UNIQ_KEY": key}
    assert re.fullmatch(r"[0-9A-F]{32}", key)

    big, _ = build_send_request(OutgoingMessage("T", b"y" * 4096), 0)
    assert big.ext_fields["f"] == str(0x301) and zlib.decompress(big.body) == b"y" * 4096


def test_a_retry_message_keeps_its_properties_and_carries_its_reconsume_times_in_the_header() -> None:
    """What Java's producer sends for a %RETRY% message (DefaultMQProducerImpl#sendKernelImpl): the properties as
    they are (RECONSUME_TIME and MAX_RECONSUME_TIMES included: the string is made before they are cleared), the
    original's UNIQ_KEY kept, reconsume times in ``j`` and the maximum in ``l``."""
    props = {
        "UNIQ_KEY": "U1",
        "TAGS": "t",
        "RETRY_TOPIC": "orders",
        "ORIGIN_MESSAGE_ID": "U1",
        "RECONSUME_TIME": "2",
        "MAX_RECONSUME_TIMES": "16",
        "DELAY": "4",
        "colour": "red",
    }
    request, [key] = build_retry_request(
        RetryMessage("%RETRY%g", b"x", props, 2, 16, flag=5), 0, producer_group="pg", broker_name="broker-b"
    )
    f = request.ext_fields
    assert request.code == RequestCode.SEND_MESSAGE_V2 and request.body == b"x" and key == "U1"
    assert (f["a"], f["b"], f["e"], f["h"], f["j"], f["l"], f["n"]) == (
        "pg",
        "%RETRY%g",
        "0",
        "5",
        "2",
        "16",
        "broker-b",
    )
    assert decode_properties(f["i"]) == props
    _, [made] = build_retry_request(RetryMessage("%RETRY%g", b"x", {}, 1, 16), 0)
    assert re.fullmatch(r"[0-9A-F]{32}", made)  # none to keep: a new one, as MessageClientIDSetter#setUniqID
    big, _ = build_retry_request(RetryMessage("%RETRY%g", b"y" * 4096, {}, 1, 16), 0)
    assert big.ext_fields["f"] == str(0x301) and zlib.decompress(big.body) == b"y" * 4096
    assert "l" not in build_send_request(OutgoingMessage("T", b"x"), 0)[0].ext_fields  # plain sends: no maximum
    with pytest.raises(InvalidArgument, match="not a retry topic"):
        RetryMessage("orders", b"x", {}, 1, 16)


def test_batch_request_keeps_one_unique_key_per_message_and_none_for_the_batch() -> None:
    messages = [OutgoingMessage("T", f"m{i}".encode(), tags="B") for i in range(3)]
    request, keys = build_send_batch_request(messages, 1)
    assert request.code == RequestCode.SEND_BATCH_MESSAGE and request.ext_fields["m"] == "true"
    assert decode_properties(request.ext_fields["i"]) == {"WAIT": "true"}  # no batch-level UNIQ_KEY
    entries = decode_batch(request.body)
    assert [e.body for e in entries] == [b"m0", b"m1", b"m2"]
    assert [e.properties["UNIQ_KEY"] for e in entries] == keys and len(set(keys)) == 3
    with pytest.raises(InvalidArgument, match="same"):
        build_send_batch_request([OutgoingMessage("T", b"a"), OutgoingMessage("U", b"b")], 0)


def test_send_answers_become_one_result_per_message() -> None:
    answer = response(0, queueId=1, queueOffset=10, msgId="AA,BB,CC")
    results = parse_send_response(
        answer, ["k0", "k1", "k2"], topic="T", broker_name="b", address=ADDRESS, request_code=320
    )
    assert [(r.msg_id, r.offset_msg_id, r.queue_offset) for r in results] == [
        ("k0", "AA", 10),
        ("k1", "BB", 11),
        ("k2", "CC", 12),
    ]
    assert {r.queue for r in results} == {MessageQueue("T", "b", 1)} and results[0].status is SendStatus.SEND_OK
    assert (
        parse_send_response(
            response(10, queueId=0, queueOffset=0, msgId="X"),
            ["k"],
            topic="T",
            broker_name="b",
            address=ADDRESS,
            request_code=310,
        )[0].status
        is SendStatus.FLUSH_DISK_TIMEOUT
    )
    with pytest.raises(SystemBusy):
        parse_send_response(
            response(2, "[REJECTREQUEST]system busy"),
            ["k"],
            topic="T",
            broker_name="b",
            address=ADDRESS,
            request_code=310,
        )
    with pytest.raises(ProtocolError, match="2 message ids"):
        parse_send_response(
            response(0, queueId=0, queueOffset=0, msgId="A,B"),
            ["k"],
            topic="T",
            broker_name="b",
            address=ADDRESS,
            request_code=320,
        )


@pytest.mark.parametrize(
    "kwargs",
    [
        {"body": b""},
        {"body": b"x" * (4 * 1024 * 1024 + 1)},
        {"properties": {"TAGS": "x"}},
        {"properties": {"k": " "}},
        {"tags": "a\x01b"},
        {"topic": "bad topic"},
        {"topic": "SCHEDULE_TOPIC_XXXX"},
        {"delay_level": 19},
    ],
)
def test_outgoing_messages_are_validated_like_java(kwargs: dict) -> None:
    with pytest.raises(InvalidArgument):
        OutgoingMessage(**{"topic": "T", "body": b"x", **kwargs})


# --------------------------------------------------------------------------- admin and heartbeat bodies


def test_consume_stats_with_object_keys_are_parsed() -> None:
    body = (
        b'{"consumeTps":1.5,"offsetTable":{{"brokerName":"b","queueId":1,"topic":"T"}:'
        b'{"brokerOffset":9,"consumerOffset":4,"lastTimestamp":77,"pullOffset":5},'
        b'{"brokerName":"a","queueId":0,"topic":"T"}:{"brokerOffset":3,"consumerOffset":0,"lastTimestamp":0,'
        b'"pullOffset":0}}}'
    )
    stats = parse_consume_stats(body)
    assert stats.consume_tps == 1.5
    assert {
        mq: (w.broker_offset, w.consumer_offset, w.pull_offset, w.last_timestamp) for mq, w in stats.offsets.items()
    } == {MessageQueue("T", "b", 1): (9, 4, 5, 77), MessageQueue("T", "a", 0): (3, 0, 0, 0)}
    assert parse_consume_stats(b'{"consumeTps":0.0,"offsetTable":{}}').offsets == {}
    with pytest.raises(ProtocolError):
        parse_consume_stats(b'{"offsetTable":{"x":1}}')


def test_fastjson_dialect_parser() -> None:
    assert loads('{0:"a", -1 : "b"}') == {0: "a", -1: "b"}
    parsed = loads('{"m":{{"k":[1,2]}:true}}')
    [key] = parsed["m"]
    assert isinstance(key, FrozenObject) and key.as_dict() == {"k": (1, 2)} and parsed["m"][key] is True
    assert loads(b" [ ] ") == [] and loads('{"s":"{not:a key}"}') == {"s": "{not:a key}"}
    for bad in ('{"a":1', '{"a" 1}', "[1,]", '{"a":1} x', ""):
        with pytest.raises(ProtocolError):
            loads(bad)


def test_lock_bodies_and_topic_and_group_requests() -> None:
    queues = [MessageQueue("T", "b", 1), MessageQueue("T", "a", 0), MessageQueue("T", "a", 0)]
    assert json.loads(encode_lock_body("g", "c1", queues)) == {
        "clientId": "c1",
        "consumerGroup": "g",
        "onlyThisBroker": False,
        "mqSet": [{"brokerName": "a", "queueId": 0, "topic": "T"}, {"brokerName": "b", "queueId": 1, "topic": "T"}],
    }
    assert parse_lock_response(b'{"lockOKMQSet":[{"brokerName":"a","queueId":0,"topic":"T"}]}') == {queues[1]}
    assert parse_lock_response(b"") == set()
    create = build_create_topic_request("T", read_queue_nums=4, write_queue_nums=2)
    assert create.ext_fields == {
        "topic": "T",
        "defaultTopic": "TBW102",
        "readQueueNums": "4",
        "writeQueueNums": "2",
        "perm": "6",
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": "0",
        "order": "false",
    }
    config = json.loads(SubscriptionGroupConfig("g", consume_enable=False).encode())
    assert config["groupName"] == "g" and config["consumeEnable"] is False and config["retryMaxTimes"] == 16


def test_heartbeat_body_has_the_java_shape() -> None:
    data = ConsumerData.of("g1", {"T1": "TagA"}, message_model=MessageModel.BROADCASTING)
    body = json.loads(encode_heartbeat("10.0.0.5@1#2", [data], ["pg"]))
    [consumer] = body["consumerDataSet"]
    assert body["clientID"] == "10.0.0.5@1#2" and body["producerDataSet"] == [{"groupName": "pg"}]
    assert {k: consumer[k] for k in ("groupName", "consumeType", "messageModel", "consumeFromWhere", "unitMode")} == {
        "groupName": "g1",
        "consumeType": "CONSUME_ACTIVELY",
        "messageModel": "BROADCASTING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
        "unitMode": False,
    }
    [sub] = consumer["subscriptionDataSet"]
    assert (sub["topic"], sub["subString"], sub["tagsSet"], sub["codeSet"]) == ("T1", "TagA", ["TagA"], [2598919])
    with pytest.raises(InvalidArgument):
        ConsumerData.of("DEFAULT_CONSUMER", {"T": "*"})
    assert new_client_id("10.1.1.1") != new_client_id("10.1.1.1")


# --------------------------------------------------------------------------- BrokerClient on a scripted peer

Script = Callable[[RemotingCommand], RemotingCommand | None]


@pytest.fixture
def scripted() -> Iterator[Callable[[Script], tuple[BrokerClient, FrameEchoPeer]]]:
    peers: list[FrameEchoPeer] = []
    pools: list[PrivateConnections] = []

    def make(script: Script) -> tuple[BrokerClient, FrameEchoPeer]:
        def reply(request: RemotingCommand) -> list[bytes]:
            answer = script(request)
            if answer is None:
                return []
            answer.opaque = request.opaque
            return [encode(answer)]

        peer = FrameEchoPeer(reply)
        pool = PrivateConnections()
        peers.append(peer)
        pools.append(pool)
        return BrokerClient(peer.address, broker_name="broker-a", timeout=2.0, connections=pool), peer

    yield make
    for pool in pools:
        pool.close()
    for peer in peers:
        peer.close()


def test_offsets_queries_and_their_special_answers(scripted) -> None:
    answers = {
        RequestCode.GET_MAX_OFFSET: response(offset=42),
        RequestCode.GET_MIN_OFFSET: response(offset=3),
        RequestCode.GET_EARLIEST_MSG_STORETIME: response(timestamp=-1),
        RequestCode.QUERY_CONSUMER_OFFSET: response(22, "Not found"),
        RequestCode.UPDATE_CONSUMER_OFFSET: response(0, "Offset has been previously reset"),
        RequestCode.GET_CONSUMER_LIST_BY_GROUP: response(1, "no consumer for this group, g"),
    }
    broker, peer = scripted(lambda r: answers[r.code])
    assert broker.get_max_offset("T", 1) == 42
    assert peer.next_received().ext_fields == {"topic": "T", "queueId": "1", "bname": "broker-a", "committed": "true"}
    assert broker.get_min_offset("T", 1) == 3
    assert broker.get_earliest_msg_store_time("T", 1) is None
    assert broker.query_consumer_offset("g", "T", 1, set_zero_if_not_found=False) is None
    assert broker.update_consumer_offset("g", "T", 1, 5) is False  # ignored by the broker: say so
    assert broker.get_consumer_list_by_group("g") == []
    assert broker.server_version == 479
    sent = [peer.next_received() for _ in range(5)]
    assert sent[2].ext_fields["setZeroIfNotFound"] == "false"
    assert sent[3].ext_fields["commitOffset"] == "5"


def test_update_for_an_unknown_group_says_to_heartbeat_first(scripted) -> None:
    broker, _ = scripted(lambda r: response(26, "Group g not exist!"))
    with pytest.raises(SubscriptionGroupNotExist, match="heart_beat"):
        broker.update_consumer_offset("g", "T", 0, 1)


@pytest.mark.parametrize(("version", "sent"), [(407, False), (439, False), (441, True), (479, True)])
def test_search_boundary_is_sent_only_to_brokers_that_know_it(scripted, version: int, sent: bool) -> None:
    broker, peer = scripted(lambda r: response(offset=7, version=version))
    assert broker.search_offset("T", 0, 1000, BoundaryType.UPPER) == 7
    requests = [peer.next_received() for _ in range(2)]
    assert requests[0].code == RequestCode.GET_MIN_OFFSET  # one cheap question to learn the version
    assert requests[1].ext_fields.get("boundaryType") == ("UPPER" if sent else None)
    assert broker.search_offset("T", 0, 1000, "lower") == 7  # version now known: no second probe
    assert peer.next_received().code == RequestCode.SEARCH_OFFSET_BY_TIMESTAMP


def test_every_call_has_a_timeout_and_long_polls_get_longer_ones(scripted) -> None:
    broker, _ = scripted(lambda r: None)  # never answers
    with pytest.raises(RequestTimeout) as caught:
        broker.get_max_offset("T", 0, timeout=0.2)
    assert caught.value.address == broker.address and "GET_MAX_OFFSET(30)" in str(caught.value)
    with pytest.raises(InvalidArgument, match="long poll"):
        broker.pull("T", 0, 0, consumer_group="g", suspend_timeout_ms=5000, timeout=1.0)


def test_pull_heartbeat_lock_and_send_over_the_wire(scripted) -> None:
    def script(r: RemotingCommand) -> RemotingCommand:
        if r.code == RequestCode.PULL_MESSAGE:
            return response(
                0,
                "FOUND",
                record(0, "A") + record(1, "B"),
                nextBeginOffset=2,
                minOffset=0,
                maxOffset=2,
                suggestWhichBrokerId=0,
            )
        if r.code == RequestCode.LOCK_BATCH_MQ:
            mqs = json.loads(r.body)["mqSet"]
            return response(body=json.dumps({"lockOKMQSet": mqs[:1]}).encode())
        if r.code == RequestCode.SEND_MESSAGE_V2:
            return response(queueId=r.ext_fields["e"], queueOffset=5, msgId="OFFSETID")
        return response(IS_SUB_CHANGE="true")

    broker, peer = scripted(script)
    result = broker.pull("T", 0, 0, consumer_group="g", sub_expression="A")
    assert [m.tags for m in result.messages] == ["A"] and result.filtered_out == 1
    assert broker.heart_beat("c1", [ConsumerData.of("g", {"T": "*"})]) == {"IS_SUB_CHANGE": "true"}
    locked = broker.lock_batch_mq("g", "c1", [MessageQueue("T", "broker-a", 1), MessageQueue("T", "broker-a", 0)])
    assert locked == {MessageQueue("T", "broker-a", 0)}
    sent = broker.send(OutgoingMessage("T", b"hi"), 3)
    assert (sent.queue, sent.queue_offset, sent.offset_msg_id) == (MessageQueue("T", "broker-a", 3), 5, "OFFSETID")
    codes = [peer.next_received().code for _ in range(4)]
    assert codes == [
        RequestCode.PULL_MESSAGE,
        RequestCode.HEART_BEAT,
        RequestCode.LOCK_BATCH_MQ,
        RequestCode.SEND_MESSAGE_V2,
    ]


def test_broker_client_pickles_without_its_sockets(scripted) -> None:
    broker, _ = scripted(lambda r: response(offset=1))
    assert broker.get_min_offset("T", 0) == 1
    copy = pickle.loads(pickle.dumps(broker))
    assert (copy.address, copy.broker_name, copy.timeout, copy.server_version) == (broker.address, "broker-a", 2.0, 479)
    assert isinstance(copy.connections, PrivateConnections) and copy.connections is not broker.connections
    assert copy.get_min_offset("T", 0) == 1
    copy.connections.close()
    with pytest.raises(InvalidArgument):
        BrokerClient("no-port")


def test_signed_pulls_sent_together_are_all_or_none() -> None:
    """Without a template (an RPC hook signs each request), send_many sends one by one; when one of them fails, those
    already sent are taken back, so the caller may ask again for every span without a second answer left waiting."""
    from rocketlake.rocketmq.broker import PullStream
    from rocketlake.rocketmq.errors import RequestTimeout
    from rocketlake.rocketmq.filter import Subscription

    cancelled: list[int] = []

    class Sent:
        def __init__(self, number: int) -> None:
            self.number = number

        def cancel(self) -> None:
            cancelled.append(self.number)

    class Connection:
        closed = False

        def __init__(self) -> None:
            self.sends = 0

        def invoke_async(self, request, timeout, *, rpc_hook=None, body_in_place=False):
            self.sends += 1
            if self.sends == 3:
                raise RequestTimeout("not sent", address="127.0.0.1:10911", request_code=11)
            return Sent(self.sends)

    class Broker:
        address = "127.0.0.1:10911"
        rpc_hook = None

        def __init__(self) -> None:
            self.connection = Connection()

        def connections(self, address):
            return self.connection

    request = dict(
        consumer_group="g",
        topic="T",
        queue_id=0,
        subscription=Subscription.parse("T", "*"),
        suspend_timeout_ms=0,
        post_subscription=True,
        broker_name="broker-a",
    )
    stream = PullStream(Broker(), request, None, None, 3.0, True)
    with pytest.raises(RequestTimeout):
        stream.send_many([(0, 32), (32, 32), (64, 32), (96, 32)])
    assert cancelled == [1, 2]
