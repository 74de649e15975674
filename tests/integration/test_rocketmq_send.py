"""Messages our client sends (SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE) read back by the Java consumer.

Same on 5.3.3 and 4.9.7: the official DefaultLitePullConsumer must decode our messages to exactly
what we sent -- ids, tags, keys, user properties, unicode, binary and compressed bodies -- so our
encoding is proven by the independent peer, not only by our own decoder.
"""

from __future__ import annotations

import base64
import re
import uuid

import pytest

from rocketlake.rocketmq.message_queue import MessageQueue
from rocketlake.rocketmq.send import OutgoingMessage, SendStatus
from tests.conftest import pull_range

pytestmark = pytest.mark.broker


def test_java_consumer_reads_what_we_send(rocketmq_client, new_topic, java_peers):
    topic = new_topic(queues=2)
    a1, b1 = MessageQueue(topic, "broker-a", 1), MessageQueue(topic, "broker-b", 1)
    big = ("zlib me " * 1000).encode()  # 8000 bytes: compressed by us like the Java producer would
    singles = [
        OutgoingMessage(
            topic,
            "héllo ✓ 你好 🚀".encode(),
            tags="TagA",
            keys=["k1", "k2"],
            properties={"region": "eu", "ünï": "çödé"},
        ),
        OutgoingMessage(topic, bytes(range(256)) * 3, tags="标签"),
        OutgoingMessage(topic, big, tags="Big", keys="one-key", flag=7),
        OutgoingMessage(topic, b"x" * 4095),  # just under the compression threshold
    ]
    sent = [rocketmq_client.send(m, a1) for m in singles]
    batch_a = [
        OutgoingMessage(topic, f"batch-a {i}".encode(), tags="TB", keys=[f"bk{i}"], properties={"i": str(i)})
        for i in range(4)
    ]
    batch_b = [OutgoingMessage(topic, f"batch-b {i}".encode()) for i in range(3)]
    sent += rocketmq_client.send_batch(batch_a, a1)
    sent += rocketmq_client.send_batch(batch_b, b1)  # the same queue id on the other broker
    messages = singles + batch_a + batch_b

    assert {r.status for r in sent} == {SendStatus.SEND_OK}
    assert [(r.queue, r.queue_offset) for r in sent] == [(a1, i) for i in range(8)] + [(b1, i) for i in range(3)]
    assert all(re.fullmatch(r"[0-9A-F]{32}", r.msg_id) for r in sent)
    assert len({r.msg_id for r in sent}) == len(sent)  # every message of a batch keeps its own id

    dump = java_peers.consume(topic, {("broker-a", 1): (0, 8), ("broker-b", 1): (0, 3)})
    java = {(d["brokerName"], d["queueOffset"]): d for d in dump}
    assert len(java) == len(sent)
    for message, result in zip(messages, sent):
        d = java[(result.queue.broker_name, result.queue_offset)]
        assert d["msgId"] == result.msg_id and d["offsetMsgId"] == result.offset_msg_id
        assert base64.b64decode(d["bodyBase64"]) == message.body
        assert d.get("tags") == message.tags
        assert d.get("keys") == (" ".join(message.keys) or None)
        user = {k: v for k, v in d["properties"].items() if k in message.properties}
        assert user == dict(message.properties)
        assert d["properties"]["UNIQ_KEY"] == result.msg_id
        if message.body is big:
            # zlib type bits; 5.x shows the compressed bit cleared after inflating, 4.9 keeps it
            assert d["sysFlag"] == (0x301 if java_peers.is_4x else 0x300)
            assert d["storeSize"] < len(big)
        else:
            assert d["sysFlag"] == 0

    # And our own decoder reads back the same.
    ours = pull_range(rocketmq_client, a1, 0, 8) + pull_range(rocketmq_client, b1, 0, 3)
    assert [(m.body, m.tags, m.msg_id) for m, _ in ours] == [(x.body, x.tags, r.msg_id) for x, r in zip(messages, sent)]
    assert [m.flag for m, _ in ours][:3] == [0, 0, 7]


def test_round_robin_send_spreads_over_writable_queues(rocketmq_client, new_topic):
    topic = new_topic(queues=2)
    results = [rocketmq_client.send(OutgoingMessage(topic, f"rr{i}".encode())) for i in range(8)]
    assert sorted(r.queue for r in results) == sorted(rocketmq_client.writable_queues(topic) * 2)


def test_rocketlake_send_creates_the_topic_and_the_java_consumer_reads_each_message(
    rocketmq_cluster, rocketmq_client, java_peers, capsys
):
    """``rocketlake send``, the tutorial's way to send test messages: the topic created on every broker when
    missing, each message numbered in its body and key, stored round robin where the command says."""
    from rocketlake.cli.main import main

    topic = f"send_cli_{uuid.uuid4().hex[:8]}"
    argv = ["send", topic, "--count", "6", "--create", "2", "--tags", "demo", "--keys", "k-{i}"]
    assert main([*argv, "--namesrv", rocketmq_cluster.spec.namesrv_address]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"created topic {topic}: 2 queue(s) on each broker"
    stored = [re.fullmatch(r"(broker-[ab]) queue (\d) offset (\d+) SEND_OK", line) for line in out[1:7]]
    assert all(stored), out
    assert re.fullmatch(rf"sent 6 message\(s\) to {topic}; one-minute window keys \(UTC\): \S+ to \S+", out[7])
    where = [(m[1], int(m[2]), int(m[3])) for m in stored]
    assert len(set(where)) == 6 and {b for b, _, _ in where} == {"broker-a", "broker-b"}  # round robin

    queues = {(b, q) for b, q, _ in where}
    ranges = {(b, q): (0, 1 + max(o for b2, q2, o in where if (b2, q2) == (b, q))) for b, q in queues}
    dump = java_peers.consume(topic, ranges)
    assert sorted(base64.b64decode(d["bodyBase64"]).decode() for d in dump) == [f'{{"n": {i}}}' for i in range(6)]
    assert sorted(d["keys"] for d in dump) == [f"k-{i}" for i in range(6)] and {d["tags"] for d in dump} == {"demo"}

    # Sent again to the topic that now exists: nothing is created, the offsets go on.
    assert main(["send", topic, "--create", "2", "--namesrv", rocketmq_cluster.spec.namesrv_address]) == 0
    assert capsys.readouterr().out.startswith("broker-")
