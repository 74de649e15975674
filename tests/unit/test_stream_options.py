"""readStream's options, positions and rate limit (``engine.stream_options``, ``spark.stream``): pure logic."""

from __future__ import annotations

import pytest

from rocketlake.engine.options import SourceOptionError
from rocketlake.engine.stream_options import parse_stream_options, shaping_options, spark_refusal
from rocketlake.rocketmq.message_queue import MessageQueue
from rocketlake.spark.stream import bytes_capped, capped, offset_of, positions_of

pytestmark = pytest.mark.unit

BASE = {"namesrv": "127.0.0.1:9876"}


def test_one_of_topic_topics_and_pattern_is_required():
    assert parse_stream_options({**BASE, "topic": "orders"}).topics == ("orders",)
    assert parse_stream_options({**BASE, "topics": "a, b"}).topics == ("a", "b")
    assert parse_stream_options({**BASE, "topicPattern": "orders_.*"}).topic_pattern == "orders_.*"
    with pytest.raises(SourceOptionError, match="exactly one of the options topic, topics, topicPattern"):
        parse_stream_options({**BASE, "topic": "a", "topics": "b"})
    with pytest.raises(SourceOptionError, match="given: none"):
        parse_stream_options(BASE)
    with pytest.raises(SourceOptionError, match=r"topicPattern='\(' is not a regular expression"):
        parse_stream_options({**BASE, "topicPattern": "("})


def test_starting_positions_and_limits():
    opts = parse_stream_options({**BASE, "topic": "o", "startingOffsets": "latest", "maxOffsetsPerTrigger": "500"})
    assert (opts.starting, opts.max_offsets_per_trigger, opts.commit_group) == ("latest", 500, None)
    assert parse_stream_options({**BASE, "topic": "o", "startingOffsets": "group"}).starting == "group"
    given = parse_stream_options({**BASE, "topic": "o", "startingOffsets": '{"o": {"broker-a": {"0": 12}}}'})
    assert given.starting == {"o": {"broker-a": {"0": 12}}}
    assert parse_stream_options({**BASE, "topic": "o", "startingTimestamp": "1700000000000"}).starting_timestamp
    assert parse_stream_options({**BASE, "topic": "o", "consumerGroup": "g1"}).commit_group == "g1"
    with pytest.raises(SourceOptionError, match="maxOffsetsPerTrigger=0 is out of range"):
        parse_stream_options({**BASE, "topic": "o", "maxOffsetsPerTrigger": "0"})
    with pytest.raises(SourceOptionError, match="startingOffsets='soon' is not valid for a stream"):
        parse_stream_options({**BASE, "topic": "o", "startingOffsets": "soon"})
    with pytest.raises(SourceOptionError, match="endingOffsets is a batch read's"):
        parse_stream_options({**BASE, "topic": "o", "endingOffsets": "latest"})
    assert parse_stream_options({**BASE, "topic": "o", "maxBytesPerTrigger": "1000"}).max_bytes_per_trigger == 1000
    assert parse_stream_options({**BASE, "topic": "o", "maxBytesPerTrigger": "64m"}).max_bytes_per_trigger == 64 << 20
    assert parse_stream_options({**BASE, "topic": "o", "maxBytesPerTrigger": "2KB"}).max_bytes_per_trigger == 2048
    for bad in ("0", "-5", "1.5g", "ten", "5x"):
        with pytest.raises(SourceOptionError, match=f"maxBytesPerTrigger='{bad}' is not a size"):
            parse_stream_options({**BASE, "topic": "o", "maxBytesPerTrigger": bad})
    with pytest.raises(SourceOptionError, match="exclusive"):
        parse_stream_options({**BASE, "topic": "o", "startingOffsets": "earliest", "startingTimestamp": "1"})


def test_spark_before_4_2_is_refused_by_name():
    assert "needs Spark 4.2 or later (this is Spark 4.1.1)" in spark_refusal("4.1.1")
    assert "4.0.1" in spark_refusal("4.0.1")
    assert spark_refusal("4.2.0") is None and spark_refusal("5.0.0.dev0") is None


A0, A1, B0 = MessageQueue("o", "broker-a", 0), MessageQueue("o", "broker-a", 1), MessageQueue("o", "broker-b", 0)


def test_positions_round_trip_as_sorted_json():
    positions = {B0: 3, A1: 7, A0: 5}
    offset = offset_of(positions)
    assert offset == {"o": {"broker-a": {"0": 5, "1": 7}, "broker-b": {"0": 3}}}
    assert list(offset["o"]) == ["broker-a", "broker-b"]  # the same position is the same text
    assert positions_of(offset) == positions


def test_a_cap_is_spread_over_the_queues_by_backlog_and_never_exceeded():
    start = {A0: 0, A1: 100, B0: 10}
    available = {A0: 300, A1: 200, B0: 10}  # backlogs 300, 100, 0
    end = capped(start, available, 100)
    assert end == {A0: 75, A1: 125, B0: 10}
    assert capped(start, available, 10_000) == available
    one = capped(start, available, 1)
    assert sum(one[q] - start[q] for q in start) == 1 and one[A0] == 1  # progress, to the largest backlog
    for most in range(1, 400, 7):
        end = capped(start, available, most)
        assert sum(end[q] - start[q] for q in start) == min(most, 400)
        assert all(start[q] <= end[q] <= available[q] for q in start)


def stored(table: dict[MessageQueue, list[int]]):
    """``sizes(mq, index, count)`` over plain lists (a queue's stored sizes from offset 0), counting the asks."""
    asked = []

    def sizes(mq: MessageQueue, index: int, count: int) -> list[int]:
        asked.append((mq, index, count))
        return table[mq][index : index + count]

    return sizes, asked


def test_a_byte_limit_admits_whole_messages_up_to_the_limit_in_queue_order():
    sizes, asked = stored({A0: [100, 300, 200, 50, 400]})
    assert bytes_capped({A0: 1}, {A0: 5}, 600, sizes) == {A0: 4}  # 300 + 200 + 50 = 550; the next 400 would pass
    assert asked == [(A0, 1, 4)]  # the backlog's sizes at once, from the start
    assert bytes_capped({A0: 0}, {A0: 5}, 10_000, sizes) == {A0: 5}
    assert bytes_capped({A0: 4}, {A0: 5}, 100, sizes) == {A0: 5}  # larger than the limit: a batch of its own
    assert bytes_capped({A0: 5}, {A0: 5}, 100, sizes) == {A0: 5}  # nothing waits: nothing admitted


def test_a_byte_limit_is_shared_by_backlog_and_what_one_queue_leaves_goes_to_the_others():
    sizes, _ = stored({A0: [10] * 100, A1: [500, 500], B0: [10] * 10})
    end = bytes_capped({A0: 0, A1: 0, B0: 0}, {A0: 100, A1: 2, B0: 10}, 1000, sizes)
    # Budgets by backlog (112 offsets): A0 892, A1 17 (its 500-byte message does not fit), B0 89. A1's and B0's
    # leftovers (17 + 9) go to the largest backlog left, A0 (now 11 messages behind): 2 more of its 10-byte messages.
    assert end == {A0: 91, A1: 0, B0: 8}  # 990 bytes


def test_a_byte_limit_never_asks_the_broker_past_what_waits():
    sizes, asked = stored({A0: [1] * 5000})
    assert bytes_capped({A0: 0}, {A0: 5000}, 10_000, sizes) == {A0: 5000}
    assert [count for _, _, count in asked] == [2048, 2048, 904]


def test_the_schema_is_read_from_a_streams_options_and_a_batch_reads_errors_stay_its_own():
    """Spark asks the source for its schema before it knows a batch from a stream: a stream's start and topics are
    accepted there, a batch read's mistakes are still named as a batch read's."""
    for start in ({"startingOffsets": "latest"}, {"startingOffsets": "group"}, {"startingOffsets": '{"o": {}}'}):
        assert shaping_options({**BASE, "topic": "o", **start}).metadata_columns == ()
    assert shaping_options({**BASE, "topicPattern": "o_.*", "metadataColumns": "properties"}).metadata_columns == (
        "properties",
    )
    with pytest.raises(SourceOptionError, match="startingOffsets=.bad. is not valid for a stream"):
        shaping_options({**BASE, "topicPattern": "o_.*", "startingOffsets": "bad"})
    with pytest.raises(SourceOptionError, match="option endingOffsets=earliest makes no sense for a batch read"):
        shaping_options({**BASE, "topic": "o", "endingOffsets": "earliest"})
    # Neither a batch read's nor a stream's, with nothing a stream alone takes: both sentences, as either read gets it.
    with pytest.raises(
        SourceOptionError, match=r"broker name then queue id.*; for readStream: .*not valid for a stream"
    ):
        shaping_options({**BASE, "topic": "o", "startingOffsets": "{bad"})
    with pytest.raises(SourceOptionError) as refused:  # the same sentence from both: said once
        shaping_options({**BASE, "topic": "o", "pullBatchSize": "0"})
    assert "readStream" not in str(refused.value)
