"""spark.read.format("rocketmq") on the real cluster, judged against the Java producer's answers."""

from __future__ import annotations

import json

import pytest

from rocketlake import register
from rocketlake.engine.columns import CORE_COLUMNS
from rocketlake.engine.options import SourceOptionError, parse_options

pytestmark = pytest.mark.engine


@pytest.fixture
def rocketmq_reader(spark, local_cluster):
    register(spark)

    def reader(topic: str, **options):
        r = spark.read.format("rocketmq").option("namesrv", local_cluster.spec.namesrv_address).option("topic", topic)
        for k, v in options.items():
            r = r.option(k, v)
        return r.load()

    return reader


def keys(rows):
    return sorted((r.broker_name, r.queue_id, r.queue_offset) for r in rows)


def test_reads_exactly_what_the_java_producer_sent(create_topic, java_producer, rocketmq_reader):
    topic = create_topic(queues=2)
    sent = java_producer(
        [
            {
                "topic": topic,
                "tags": "TagA" if i % 3 else "TagB",
                "keys": [f"k{i}", "x"],
                "properties": {"n": str(i)},
                "body": f"héllo {i}",
            }
            for i in range(60)
        ]
    )
    rows = rocketmq_reader(topic, bodyFormat="text", metadataColumns="offset_msg_id, properties").collect()
    assert list(rows[0].asDict()) == [
        "topic",
        "broker_name",
        "queue_id",
        "queue_offset",
        "msg_id",
        "offset_msg_id",
        "tags",
        "keys",
        "properties",
        "store_timestamp",
        "body",
        "body_text",
    ]
    assert keys(rows) == sorted((s.broker_name, s.queue_id, s.queue_offset) for s in sent)
    by_id = {r.msg_id: r for r in rows}
    for s in sent:
        row = by_id[s.msg_id]
        assert (row.broker_name, row.queue_id, row.queue_offset, row.offset_msg_id) == (
            s.broker_name,
            s.queue_id,
            s.queue_offset,
            s.offset_msg_id,
        )
        i = int(row.properties["n"])
        assert row.body_text == f"héllo {i}" and row.keys == f"k{i} x"
        assert row.tags == ("TagA" if i % 3 else "TagB")


def test_subscription_filter_and_included_verdicts(create_topic, java_producer, rocketmq_reader):
    topic = create_topic(queues=1, brokers=("broker-a",))
    java_producer([{"topic": topic, "tags": f"T{i % 3}", "body": str(i)} for i in range(30)])
    assert rocketmq_reader(topic, subscription="T1 || T2").count() == 20
    verdicts = rocketmq_reader(topic, subscription="T1", includeFiltered="true").collect()
    assert len(verdicts) == 30  # every offset of the range, each with its verdict
    assert sum(r.matched for r in verdicts) == 10
    assert all(r.matched == (r.tags == "T1") for r in verdicts)
    assert list(verdicts[0].asDict()) == [*CORE_COLUMNS, "matched"]  # no metadata column unless asked for


def test_offsets_json_and_split_by_threshold(create_topic, java_producer, rocketmq_reader):
    topic = create_topic(queues=1)  # queue 0 on both brokers
    sent = java_producer(
        [
            {"topic": topic, "body": str(i), "broker": b, "queue_id": 0}
            for b in ("broker-a", "broker-b")
            for i in range(20)
        ]
    )
    assert len(sent) == 40
    df = rocketmq_reader(
        topic,
        startingOffsets=json.dumps({"broker-a": {"0": 5}, "broker-b": {"0": 0}}),
        endingOffsets=json.dumps({"broker-a": {"0": 15}, "broker-b": {"0": 3}}),
        maxMessagesPerPartition="4",
        pullThresholdForQueue="2",
    )
    assert df.rdd.getNumPartitions() == 4  # [5,9) [9,13) [13,15) on broker-a, [0,3) on broker-b
    assert keys(df.collect()) == [("broker-a", 0, o) for o in range(5, 15)] + [("broker-b", 0, o) for o in range(3)]


def test_timestamps_are_exact_store_time_boundaries(create_topic, java_producer, rocketmq_reader):
    topic = create_topic(queues=1, brokers=("broker-b",))
    java_producer([{"topic": topic, "body": str(i)} for i in range(40)])
    everything = sorted(rocketmq_reader(topic).collect(), key=lambda r: r.queue_offset)
    stamps = [int(r.store_timestamp.timestamp() * 1000) for r in everything]
    t0, t1 = stamps[10], stamps[30]
    window = rocketmq_reader(topic, startingTimestamp=str(t0), endingTimestamp=str(t1)).collect()
    expected = [r.queue_offset for r, ts in zip(everything, stamps) if t0 <= ts < t1]
    assert sorted(r.queue_offset for r in window) == expected


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"topic": "t"}, "option namesrv is required"),
        ({"namesrv": "x:1", "topic": "t", "pullBatchSize": "0"}, "pullBatchSize=0 is out of range [1, 1024]"),
        ({"namesrv": "x:1", "topic": "t", "startingOffsets": "{bad"}, "keyed by broker name then queue id"),
        ({"namesrv": "x:1", "topic": "t", "startingOffsets": "latest"}, "startingOffsets=latest"),
        ({"namesrv": "x:1", "topic": "t", "bodyFormat": "xml"}, "bodyFormat='xml' is not allowed"),
        (
            {"namesrv": "x:1", "topic": "t", "metadataColumns": "properties,tags"},
            "metadataColumns='properties,tags': 'tags' is not a metadata column .always there.; allowed: offset_msg_id, ",
        ),
    ],
)
def test_bad_options_are_named(options, message):
    with pytest.raises(SourceOptionError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_options(options)


def test_an_empty_range_reads_nothing(create_topic, java_producer, rocketmq_reader):
    topic = create_topic(queues=1, brokers=("broker-a",))
    java_producer([{"topic": topic, "body": "x"}])
    empty = rocketmq_reader(topic, startingOffsets=json.dumps({"broker-a": {"0": 1}}))
    assert empty.count() == 0


def test_a_reused_python_worker_leaves_what_it_keeps_out_of_the_collections_after_its_tasks(
    spark, local_cluster, create_topic, java_producer
):
    """PySpark's daemon runs a full ``gc.collect()`` after every task of a reused Python worker. After a worker's
    first two reads, that collection walks only what tasks left behind: the read path's modules and the client's
    pools, loaded by the first read, are frozen with PySpark's and pyarrow's (30,000 objects walked at every task
    before: 5-10 ms a task)."""
    topic = create_topic(queues=1, brokers=("broker-a",))
    java_producer([{"topic": topic, "body": f"m{i}"} for i in range(20)])
    namesrv = local_cluster.spec.namesrv_address

    def two_tasks(batches):  # in a real Spark Python worker, the reads a reused worker's tasks make
        import gc

        import pyarrow as pa

        from rocketlake.engine.options import parse_options
        from rocketlake.rocketmq.message_queue import MessageQueue, OffsetRange
        from rocketlake.spark.source import Chunk, RocketMQReader

        for _ in batches:
            pass
        reader = RocketMQReader(parse_options({"namesrv": namesrv, "topic": topic}))
        task = Chunk(OffsetRange(MessageQueue(topic, "broker-a", 0), 0, 20))
        rows, walked = [], []
        for _ in range(3):
            rows.append(sum(b.num_rows for b in reader.read(task)))
            gc.collect()  # as the daemon does after each task
            walked.append(len(gc.get_objects()))  # what the next collection walks (frozen objects are in none)
        yield pa.RecordBatch.from_pydict({"rows": rows, "walked": walked})

    got = spark.range(1, numPartitions=1).mapInArrow(two_tasks, "rows long, walked long").collect()
    assert [r.rows for r in got] == [20, 20, 20]
    assert got[2].walked < 5_000, [r.walked for r in got]
