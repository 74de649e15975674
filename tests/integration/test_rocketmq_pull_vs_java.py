"""Messages sent by the official Java producer, pulled by our client, compared with the Java consumer.

Each test runs on the 5.3.3 and on the 4.9.7 cluster. The Java ConsumerPeer (DefaultLitePullConsumer,
assign + seek) reads the same offset ranges and dumps every field; ours must be identical, field by
field. Known, documented differences between what the two clients *present* (not what they read):

* Java adds ``MIN_OFFSET``/``MAX_OFFSET`` properties to each pulled message (``PullAPIWrapper``);
  ours carries them on the PullResult instead, so they are compared with those.
* The 4.9 Java decoder keeps ``COMPRESSED_FLAG`` (0x1) in the sysFlag of an inflated message;
  5.x clears it, and so do we (message.py), on both lines.
"""

from __future__ import annotations

import base64
import datetime as dt
import random
import re
from pathlib import Path

import pytest

from rocketlake.local.process import LocalClusterError
from rocketlake.rocketmq.message_queue import MessageQueue
from tests.conftest import pull_range

pytestmark = pytest.mark.broker

COMPRESSED_FLAG = 0x1
COMPRESSION_TYPE_BITS = 0x700


def java_sys_flag(ours: int, is_4x: bool) -> int:
    """The sysFlag the Java consumer of that line shows for a message we show as ``ours``."""
    if is_4x and ours & COMPRESSION_TYPE_BITS:
        return ours | COMPRESSED_FLAG
    return ours


def as_java_dump(message, result, mq: MessageQueue, is_4x: bool) -> dict:
    """Our message in the shape of ConsumerPeer's dump line."""
    line = {
        "topic": message.topic,
        "brokerName": mq.broker_name,
        "queueId": message.queue_id,
        "queueOffset": message.queue_offset,
        "msgId": message.msg_id,
        "offsetMsgId": message.offset_msg_id,
        "properties": {
            **message.properties,
            "MIN_OFFSET": str(result.min_offset),
            "MAX_OFFSET": str(result.max_offset),
        },
        "bornTimestamp": message.born_timestamp,
        "storeTimestamp": message.store_timestamp,
        "bornHost": message.born_host,
        "storeHost": message.store_host,
        "reconsumeTimes": message.reconsume_times,
        "commitLogOffset": message.commit_log_offset,
        "sysFlag": java_sys_flag(message.sys_flag, is_4x),
        "bodyCRC": message.body_crc,
        "storeSize": message.store_size,
        "bodyBase64": base64.b64encode(message.body).decode(),
    }
    if message.tags is not None:
        line["tags"] = message.tags
    if "KEYS" in message.properties:
        line["keys"] = message.properties["KEYS"]
    return line


def varied_messages(topic: str) -> list[dict]:
    """Java ProducerPeer input: tags, keys, unicode and binary bodies, > 4 KiB bodies, user
    properties, a batch, and the same queue id on both brokers."""
    rng = random.Random(20240601)
    binary = bytes(range(256)) + bytes(rng.getrandbits(8) for _ in range(300))
    big_text = ("rocketlake ünïcödé 大数据 " * 300).strip()  # ~8 KiB UTF-8: the Java producer compresses it
    big_random = base64.b64encode(rng.randbytes(6000)).decode()  # compresses only a little, still compressed
    a0 = {"broker": "broker-a", "queue_id": 0}
    b0 = {"broker": "broker-b", "queue_id": 0}
    return [
        {
            "topic": topic,
            "tags": "TagA",
            "keys": ["order-1", "cust-9"],
            "properties": {"region": "eu", "ünï": "çödé"},
            "body": "héllo wörld ✓ 你好 🚀",
            **a0,
        },
        {"topic": topic, "tags": "标签", "body_base64": base64.b64encode(binary).decode(), **a0},
        {"topic": topic, "tags": "TagB", "keys": ["big"], "body": big_text, **a0},
        {"topic": topic, "body": big_random, **a0},
        {
            "batch": [
                {
                    "topic": topic,
                    "tags": "TagBatch",
                    "keys": [f"bk{i}"],
                    "properties": {"i": str(i)},
                    "body": f"batch message {i}",
                }
                for i in range(3)
            ],
            **a0,
        },
        # the same queue id on the other broker: different messages
        {"topic": topic, "tags": "TagA", "keys": ["order-2"], "body": "on broker-b, queue 0", **b0},
        {"topic": topic, "body_base64": base64.b64encode(b"\x00\x01\x02\xff" * 10).decode(), **b0},
        {"batch": [{"topic": topic, "body": f"b-batch {i}"} for i in range(2)], **b0},
    ]


_produced: dict[str, tuple[str, list]] = {}


@pytest.fixture
def java_sent(new_topic, java_peers):
    """One topic per cluster filled by the Java producer, shared by this module's read-only tests."""
    if java_peers.version not in _produced:
        topic = new_topic(queues=2)
        sent = java_peers.produce(varied_messages(topic))
        assert len(sent) == 11 and {s.status for s in sent} == {"SEND_OK"}
        _produced[java_peers.version] = (topic, sent)
    return _produced[java_peers.version]


def test_pulled_messages_equal_the_java_consumer_field_for_field(java_sent, rocketmq_client, java_peers):
    topic, sent = java_sent
    queues = {MessageQueue(topic, "broker-a", 0): 7, MessageQueue(topic, "broker-b", 0): 4}

    ours = {mq: pull_range(rocketmq_client, mq, 0, n) for mq, n in queues.items()}
    dump = java_peers.consume(topic, {(mq.broker_name, mq.queue_id): (0, n) for mq, n in queues.items()})

    assert len(dump) == sum(queues.values())
    by_queue = {(d["brokerName"], d["queueId"], d["queueOffset"]): d for d in dump}
    for mq, pulled in ours.items():
        assert [m.queue_offset for m, _ in pulled] == list(range(queues[mq]))
        for message, result in pulled:
            java = by_queue[(mq.broker_name, mq.queue_id, message.queue_offset)]
            assert as_java_dump(message, result, mq, java_peers.is_4x) == java, (mq, message.queue_offset)

    # What the producer was told matches what both consumers read (queue, offset, store id).
    pulled_by_offset_id = {m.offset_msg_id: (mq, m) for mq, pulled in ours.items() for m, _ in pulled}
    assert set(pulled_by_offset_id) == {s.offset_msg_id for s in sent}
    for s in sent:
        mq, m = pulled_by_offset_id[s.offset_msg_id]
        assert (mq.broker_name, mq.queue_id, m.queue_offset) == (s.broker_name, s.queue_id, s.queue_offset)
    single = [s for s in sent if s.index in (0, 1, 2, 3, 7, 8)]  # not part of a batch
    assert all(pulled_by_offset_id[s.offset_msg_id][1].msg_id == s.msg_id for s in single)


def test_java_bodies_properties_and_compression_decode_as_sent(java_sent, rocketmq_client, java_peers):
    topic, sent = java_sent
    specs = varied_messages(topic)
    pulled = [m for m, _ in pull_range(rocketmq_client, MessageQueue(topic, "broker-a", 0), 0, 7)]

    first, binary, big_text, big_random, *batch = pulled
    assert first.body.decode() == "héllo wörld ✓ 你好 🚀"
    assert first.tags == "TagA" and first.keys == ("order-1", "cust-9")
    assert first.user_properties == {"region": "eu", "ünï": "çödé"}
    assert binary.tags == "标签" and binary.body == base64.b64decode(specs[1]["body_base64"])
    # > 4 KiB bodies were zlib-compressed by the Java producer: type bits ZLIB, inflated by us.
    for message, spec in ((big_text, specs[2]["body"]), (big_random, specs[3]["body"])):
        assert message.body == spec.encode()
        assert message.sys_flag & COMPRESSION_TYPE_BITS == 0x300 and not message.sys_flag & COMPRESSED_FLAG
        assert message.store_size < len(message.body)  # stored compressed
    assert [(m.tags, m.keys, m.user_properties, m.body) for m in batch] == [
        ("TagBatch", (f"bk{i}",), {"i": str(i)}, f"batch message {i}".encode()) for i in range(3)
    ]
    # Upstream quirk of the 5.x Java producer: it also gives the batch itself a UNIQ_KEY, the broker
    # appends the batch's properties to every message and the later key wins, so all messages of a
    # 5.x Java batch read back with one msgId (the Java consumer reads the same). 4.9 has no batch key.
    batch_sent = [s for s in sent if s.index in (4, 5, 6)]
    if java_peers.is_4x:
        assert [m.msg_id for m in batch] == [s.msg_id for s in batch_sent]
    else:
        assert len({m.msg_id for m in batch}) == 1
        assert batch[0].msg_id not in {s.msg_id for s in batch_sent}
    assert len({m.offset_msg_id for m in batch}) == 3

    other = [m for m, _ in pull_range(rocketmq_client, MessageQueue(topic, "broker-b", 0), 0, 4)]
    assert [m.body for m in other] == [b"on broker-b, queue 0", b"\x00\x01\x02\xff" * 10, b"b-batch 0", b"b-batch 1"]
    assert {m.queue_id for m in pulled + other} == {0}
    assert {m.store_host for m in pulled}.isdisjoint({m.store_host for m in other})  # two brokers


_FIELD = re.compile(r"^([A-Z][A-Za-z ]*?):\s+(.*)$")


def parse_query_msg(text: str) -> dict[str, str]:
    """``Name:   value`` lines of mqadmin queryMsgByOffset (first occurrence of each name)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        match = _FIELD.match(line)
        if match:
            fields.setdefault(match.group(1), match.group(2).strip())
    return fields


def java_date(ms: int) -> str:
    """``UtilAll.timeMillisToHumanString2``: yyyy-MM-dd HH:mm:ss,SSS in the JVM's (= our) time zone."""
    return dt.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S,") + f"{ms % 1000:03d}"


def java_map(text: str) -> dict[str, str]:
    assert text.startswith("{") and text.endswith("}"), text
    return dict(item.split("=", 1) for item in text[1:-1].split(", ") if item)


def test_a_sample_equals_mqadmin_query_msg_by_offset(java_sent, rocketmq_client, java_peers):
    topic, _ = java_sent
    sample = [
        (MessageQueue(topic, "broker-a", 0), 0),
        (MessageQueue(topic, "broker-a", 0), 2),
        (MessageQueue(topic, "broker-b", 0), 0),
    ]
    mqadmin = java_peers.mqadmin()
    for mq, offset in sample:
        [(message, result)] = pull_range(rocketmq_client, mq, offset, offset + 1)
        args = ["queryMsgByOffset", "-t", topic, "-b", mq.broker_name, "-i", str(mq.queue_id), "-o", str(offset)]
        if not java_peers.is_4x:
            args += ["-f", "UTF-8"]  # 5.x prints the body; 4.9 only writes it to a file
        shown = parse_query_msg(mqadmin.run(*args))

        assert shown["OffsetID"] == message.offset_msg_id
        assert shown["Topic"] == topic
        assert shown["Tags"] == f"[{message.tags}]"
        assert shown["Keys"] == f"[{message.properties.get('KEYS', 'null')}]"
        assert int(shown["Queue ID"]) == mq.queue_id and int(shown["Queue Offset"]) == offset
        assert int(shown["CommitLog Offset"]) == message.commit_log_offset
        assert int(shown["Reconsume Times"]) == message.reconsume_times
        assert shown["Born Timestamp"] == java_date(message.born_timestamp)
        assert shown["Store Timestamp"] == java_date(message.store_timestamp)
        assert shown["Born Host"] == message.born_host and shown["Store Host"] == message.store_host
        assert int(shown["System Flag"]) == java_sys_flag(message.sys_flag, java_peers.is_4x)
        expected_props = {
            **message.properties,
            "MIN_OFFSET": str(result.min_offset),
            "MAX_OFFSET": str(result.max_offset),
        }
        assert java_map(shown["Properties"]) == expected_props
        if java_peers.is_4x:
            assert Path(shown["Message Body Path"]).read_bytes() == message.body
        else:
            assert shown["Message Body"] == message.body.decode()


@pytest.mark.parametrize(("kind", "type_bits"), [("LZ4", 0x100), ("ZSTD", 0x200), ("ZLIB", 0x300)])
def test_bodies_the_5x_producer_compresses_with_its_own_setting_decode_as_sent(
    kind, type_bits, new_topic, java_peers, rocketmq_client
):
    """``DefaultMQProducer.setCompressType``: the 5.x Java producer compresses with LZ4, ZSTD or zlib and says which
    in the message's sysFlag; the Java consumer and we inflate each to the body sent."""
    topic = new_topic(queues=1)
    rng = random.Random(kind)
    bodies = [("compress me with " + kind + " ") * 200, base64.b64encode(rng.randbytes(3000)).decode()]
    messages = [{"topic": topic, "body": body, "broker": "broker-a", "queue_id": 0} for body in bodies]
    args = ["--compress-over", "1024", "--compress-type", kind]
    if java_peers.is_4x:  # the 4.x client compresses with zlib only: it has no such setting
        with pytest.raises(LocalClusterError, match="CompressionType"):
            java_peers.produce(messages, args=args)
        return
    sent = java_peers.produce(messages, args=args)
    assert [s.status for s in sent] == ["SEND_OK", "SEND_OK"]
    pulled = [m for m, _ in pull_range(rocketmq_client, MessageQueue(topic, "broker-a", 0), 0, 2)]
    assert [m.body for m in pulled] == [b.encode() for b in bodies]
    assert all(m.sys_flag & COMPRESSION_TYPE_BITS == type_bits for m in pulled), [hex(m.sys_flag) for m in pulled]
    assert pulled[0].store_size < len(pulled[0].body)  # stored compressed
    dump = java_peers.consume(topic, {("broker-a", 0): (0, 2)})
    assert [base64.b64decode(d["bodyBase64"]) for d in dump] == [b.encode() for b in bodies]
