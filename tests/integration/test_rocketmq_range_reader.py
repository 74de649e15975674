"""read_ranges against real brokers (5.3.3 and 4.9.7): the Java producer's answers are the truth.

Bodies of 60 kB make the broker cut every pull at its 256 KiB transfer limit, so most pulls come
back short and the reader must ask again for the rest of each span while later spans of the same
queue are already in flight. A connection cut with pulls in flight must cost nothing either.
"""

from __future__ import annotations

import time
from collections import defaultdict

import pytest

from rocketlake.rocketmq.broker import PullStream
from rocketlake.rocketmq.connection import get_connection
from rocketlake.rocketmq.errors import RangeUnreadable
from rocketlake.rocketmq.message_queue import MessageQueue, OffsetRange
from rocketlake.rocketmq.range_reader import read_ranges

pytestmark = pytest.mark.broker

GROUP = "rocketlake_range_reader"
BODY_SIZE = 60_000


def generated_body(index: int) -> bytes:
    """The body ProducerPeer --count generates for message ``index``."""
    stamp = f"message-{index} ".encode()
    return bytes(stamp[b] if b < len(stamp) else ord("a") + (index + b) % 26 for b in range(BODY_SIZE))


def wait_for_max_offsets(client, expected: dict[MessageQueue, int]) -> None:
    deadline = time.monotonic() + 10
    while any(client.get_max_offset(mq) < n for mq, n in expected.items()):
        assert time.monotonic() < deadline, "the brokers did not dispatch what they acknowledged"


def test_every_offset_comes_back_once_in_order_though_the_broker_shortens_answers(
    rocketmq_client, new_topic, java_peers
):
    topic = new_topic(queues=2)  # two queues on each broker: queue ids repeat across brokers
    sent = java_peers.produce(
        args=["--topic", topic, "--count", "64", "--body-size", str(BODY_SIZE), "--compress-over", str(1 << 20)]
    )
    by_queue = defaultdict(list)
    for s in sent:
        by_queue[MessageQueue(topic, s.broker_name, s.queue_id)].append(s)
    assert len(by_queue) == 4 and {mq.broker_name for mq in by_queue} == {"broker-a", "broker-b"}
    wait_for_max_offsets(rocketmq_client, {mq: len(items) for mq, items in by_queue.items()})

    first = next(iter(by_queue))
    assert 0 < len(rocketmq_client.pull(first, 0, 32, consumer_group=GROUP).messages) < 32

    ranges = [OffsetRange(mq, 1, len(items) - 1) for mq, items in by_queue.items()]  # not from 0, not to the end
    chunks = list(read_ranges(rocketmq_client, ranges, consumer_group=GROUP, batch_size=32, pulls_in_flight=3))

    assert len({mq for mq, _ in chunks[:4]}) == 4  # queues are served in turn, not one after another
    read = defaultdict(list)
    for mq, messages in chunks:
        read[mq].extend(messages)
    for r in ranges:
        mq, start, end = r.queue, r.start, r.end
        expected = sorted(by_queue[mq], key=lambda s: s.queue_offset)[start:end]
        got = read[mq]
        assert [m.queue_offset for m in got] == [s.queue_offset for s in expected] == list(range(start, end))
        assert [m.msg_id for m in got] == [s.msg_id for s in expected]
        assert all(m.body == generated_body(s.index) for m, s in zip(got, expected))
        assert {(m.topic, m.queue_id) for m in got} == {(topic, mq.queue_id)}


def test_a_range_past_the_end_of_the_queue_fails_naming_queue_and_offsets(rocketmq_client, new_topic, java_peers):
    topic = new_topic(queues=1, brokers=("broker-a",))
    sent = java_peers.produce(args=["--topic", topic, "--count", "5", "--body-size", "100"])
    mq = MessageQueue(topic, "broker-a", 0)
    wait_for_max_offsets(rocketmq_client, {mq: len(sent)})

    read = []
    with pytest.raises(RangeUnreadable) as caught:
        for _, messages in read_ranges(rocketmq_client, [OffsetRange(mq, 0, 8)], consumer_group=GROUP):
            read.extend(messages)
    assert [m.queue_offset for m in read] == [0, 1, 2, 3, 4]  # everything that exists came first
    text = str(caught.value)
    assert str(mq) in text and "offset 5 of the range [0, 8)" in text and "ends before the range does" in text


def test_a_connection_cut_with_pulls_in_flight_loses_and_repeats_nothing(
    rocketmq_client, new_topic, java_peers, monkeypatch
):
    topic = new_topic(queues=2)
    sent = java_peers.produce(args=["--topic", topic, "--count", "400", "--body-size", "200"])
    by_queue = defaultdict(list)
    for s in sent:
        by_queue[MessageQueue(topic, s.broker_name, s.queue_id)].append(s)
    wait_for_max_offsets(rocketmq_client, {mq: len(items) for mq, items in by_queue.items()})

    # Cut the broker connection right after the 6th pull is written, holding the channel's read lead from before
    # the write to the cut: the broker may answer at once, but nobody reads the answer, so at least that pull fails
    # in flight and must be repeated. (Without the lead, the idle reader thread once took every answer first: CI.)
    # Every write of pulls goes through send_many (a queue's first pulls, its refills, a rest): the cut follows the
    # write that holds the 6th pull.
    real_send_many, real_pull = PullStream.send_many, rocketmq_client.pull
    sends, repeats, cut = [0], [], []

    def send_many_then_cut(self, spans):
        before = sends[0]
        sends[0] += len(spans)
        if not before < 6 <= sends[0]:
            return real_send_many(self, spans)
        channel = get_connection(self._broker.address)._channel
        with channel._lead:
            pending = real_send_many(self, spans)
            channel.fail("cut by the test")
        cut.append(channel)
        return pending

    def counted_pull(mq, offset, *args, **kwargs):
        repeats.append((mq, offset))
        return real_pull(mq, offset, *args, **kwargs)

    monkeypatch.setattr(PullStream, "send_many", send_many_then_cut)
    monkeypatch.setattr(rocketmq_client, "pull", counted_pull)
    ranges = [OffsetRange(mq, 0, len(items)) for mq, items in by_queue.items()]
    read = defaultdict(list)
    for mq, messages in read_ranges(rocketmq_client, ranges, consumer_group=GROUP, batch_size=8):
        read[mq].extend(messages)

    assert cut and repeats  # the cut happened with pulls in flight, and they were pulled again
    assert all(not channel.alive for channel in cut)
    for mq, items in by_queue.items():
        expected = sorted(items, key=lambda s: s.queue_offset)
        assert [m.queue_offset for m in read[mq]] == list(range(len(items)))
        assert [m.msg_id for m in read[mq]] == [s.msg_id for s in expected]
