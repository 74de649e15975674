"""``spark.readStream.format("rocketmq")`` on real brokers, Spark 4.2 and Delta's streaming sink: admission control,
``Trigger.AvailableNow``, restarts from the checkpoint, the group's offsets one batch behind the sink, and the
same rows as the batch windows."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyspark
import pytest
from deltalake import DeltaTable

from rocketlake.engine.broker_access import group_broker
from rocketlake.engine.stream_options import spark_refusal
from rocketlake.rocketmq.client import RocketMQClient
from rocketlake.spark.source import register
from tests.integration.engine_support import Engine, now_ms
from tests.integration.ingestion_support import order, unique, wait_until
from tests.integration.stream_driver import available_now_query
from tests.unit.support import ingestion_config

pytestmark = pytest.mark.engine

#: Python sources stream with read limits and Trigger.AvailableNow from Spark 4.2 on; the lowest supported pyspark
#: (``make test-lowest``) is older, and there the source refuses to stream (the last test).
STREAMS = spark_refusal(pyspark.__version__) is None
needs_streams = pytest.mark.skipif(not STREAMS, reason=f"readStream needs Spark 4.2; this is {pyspark.__version__}")

COLUMNS = ["topic", "broker_name", "queue_id", "queue_offset", "msg_id", "keys", "tags", "body", "store_timestamp"]


def stream_until_done(spark, namesrv: str, topic: str, group: str, table: str, checkpoint: str, most, **limits):
    """One ``Trigger.AvailableNow`` query to the end; its progress reports, one per micro-batch with rows."""
    query = available_now_query(spark, namesrv, topic, group, table, checkpoint, most, **limits)
    assert query.awaitTermination(180), "the AvailableNow query did not stop at the offsets it captured"
    assert query.exception() is None
    return [p for p in query.recentProgress if p["numInputRows"] > 0]


def ends(progress) -> dict[tuple[str, int], int]:
    """A progress report's end offsets, per (broker, queue)."""
    (offsets,) = json.loads(progress["sources"][0]["endOffset"]).values()
    return {(broker, int(q)): o for broker, queues in offsets.items() for q, o in queues.items()}


@needs_streams
def test_a_stream_lands_every_message_once_in_capped_batches_and_commits_the_group_a_batch_behind(
    local_cluster, create_topic, java_producer, spark, tmp_path
):
    namesrv = local_cluster.spec.namesrv_address
    topic, group = create_topic(queues=4), unique("g_stream")
    start = now_ms()
    java_producer([order(i, topic) for i in range(200)])
    table, checkpoint = str(tmp_path / "stream"), str(tmp_path / "checkpoint")

    batches = stream_until_done(spark, namesrv, topic, group, table, checkpoint, most=60)
    assert [p["numInputRows"] for p in batches] == [60, 60, 60, 20]  # the cap, then the rest, then it stops
    rows = DeltaTable(table).to_pyarrow_table(columns=["keys", "broker_name", "queue_id", "queue_offset"])
    assert sorted(rows.column("keys").to_pylist()) == sorted(f"o-{i}" for i in range(200))

    # Spark commits a batch to the source when it plans the next one: the brokers' view lags one batch.
    progress = {
        (p.broker_name, p.queue_id): p.consumer_offset for p in local_cluster.mqadmin().consumer_progress(group)
    }
    assert progress == ends(batches[-2]) != ends(batches[-1])

    # Restarted from its checkpoint: only what came since, each once; the group catches up to the batch before.
    java_producer([order(i, topic) for i in range(200, 250)])
    more = stream_until_done(spark, namesrv, topic, group, table, checkpoint, most=60)
    assert [p["numInputRows"] for p in more] == [50]
    keys = DeltaTable(table).to_pyarrow_table(columns=["keys"]).column("keys").to_pylist()
    assert sorted(keys) == sorted(f"o-{i}" for i in range(250))
    client = RocketMQClient(namesrv)
    assert sum(client.query_consumer_offset(group, mq) for mq in client.queues(topic)) == 200

    # The same rows as rocketlake's windows land: one window over everything sent, below Dagster.
    end = now_ms() + 1
    wait_until(end / 1000)
    cfg = ingestion_config(
        topic=topic,
        consumer_group=unique("g_windows"),
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        window={"cron": "* * * * *", "start": "1970-01-01", "grace_seconds": 0},
    )
    from rocketlake.engine.windows import StoreTimeWindow

    engine = Engine(local_cluster, spark, tmp_path / "windows", cfg)
    assert group_broker(engine.client, cfg) is not None
    engine.run("w", [("w", StoreTimeWindow(start, end))])
    streamed = DeltaTable(table).to_pyarrow_table(columns=COLUMNS).sort_by([("queue_offset", "ascending")])
    windowed = DeltaTable(engine.lake.table_path).to_pyarrow_table(columns=COLUMNS)
    order_by = [(c, "ascending") for c in ("broker_name", "queue_id", "queue_offset")]
    assert streamed.sort_by(order_by).to_pylist() == windowed.sort_by(order_by).to_pylist()


def stored_sizes(mqadmin, topic: str, count: int) -> list[int]:
    """The stored size of each message of ``topic``'s queue 0, as ``mqadmin queryCq`` prints them (``physicSize``)."""
    out = mqadmin.run("queryCq", "-t", topic, "-q", "0", "-i", "0", "-c", str(count))
    return [int(size) for size in re.findall(r"physicSize=(\d+)", out)]


def landed_keys(spark, table: Path, checkpoint: Path, **options) -> list[str]:
    """One ``Trigger.AvailableNow`` query of the ``rocketmq`` stream with ``options`` into Delta at ``table`` (from
    ``checkpoint``: a second call goes on where the first stopped), to its end; every key the table holds, sorted."""
    register(spark)
    query = (
        spark.readStream.format("rocketmq")
        .options(**options)
        .load()
        .writeStream.format("delta")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start(str(table))
    )
    assert query.awaitTermination(180), "the AvailableNow query did not stop at the offsets it captured"
    assert query.exception() is None
    if not (table / "_delta_log").exists():
        return []  # no batch had a row: the sink wrote nothing
    return sorted(DeltaTable(str(table)).to_pyarrow_table(columns=["keys"]).column("keys").to_pylist())


def keys_of(numbers) -> list[str]:
    return sorted(f"o-{i}" for i in numbers)


@needs_streams
def test_a_stream_starts_where_it_is_told_and_reads_the_queues_and_topics_found_after_its_start(
    local_cluster, create_topic, java_producer, spark, tmp_path
):
    namesrv = local_cluster.spec.namesrv_address
    prefix = unique("grows")
    first = create_topic(queues=2, brokers=("broker-a",), prefix=prefix)
    java_producer([order(i, first) for i in range(10)])
    since = now_ms() + 1
    wait_until(since / 1000 + 0.01)  # o-10 on are stored at `since` or later, o-0 to o-9 before
    java_producer([order(i, first) for i in range(10, 20)])

    def stream(name: str, **options) -> list[str]:
        return landed_keys(spark, tmp_path / name, tmp_path / f"{name}_checkpoint", namesrv=namesrv, **options)

    # startingTimestamp: each queue from its first message stored at or after it.
    assert stream("since", topic=first, startingTimestamp=str(since)) == keys_of(range(10, 20))
    # latest: nothing of what was there; what comes later, once.
    assert stream("latest", topic=first, startingOffsets="latest") == []
    java_producer([order(i, first) for i in range(20, 24)])
    assert stream("latest", topic=first, startingOffsets="latest") == keys_of(range(20, 24))
    # group: where the group's committed offsets are, here 3 messages into each queue.
    group = unique("g_start")
    local_cluster.mqadmin().run("updateSubGroup", "-c", local_cluster.spec.cluster_name, "-g", group)
    client = RocketMQClient(namesrv)
    queues = client.queues(first)
    for mq in queues:
        assert client.update_consumer_offset(group, mq, 3)
    from_group = stream("group", topic=first, startingOffsets="group", consumerGroup=group)
    assert len(from_group) == 24 - 3 * len(queues) and set(from_group) < set(keys_of(range(24)))
    # A pattern, from the earliest offsets: then the topic grows by two queues and a second topic matches.
    pattern = {"topicPattern": f"{re.escape(prefix)}_.*", "startingOffsets": "earliest"}
    assert stream("pattern", **pattern) == keys_of(range(24))
    client.create_topic(first, 4, brokers=["broker-a"])  # grown in place (UPDATE_AND_CREATE_TOPIC), routed
    second = create_topic(queues=2, brokers=("broker-b",), prefix=prefix)
    java_producer([order(i, first) for i in range(24, 32)] + [order(i, second) for i in range(32, 36)])
    assert stream("pattern", **pattern) == keys_of(range(36))  # each once: the new queues and topic from earliest
    landed = DeltaTable(str(tmp_path / "pattern")).to_pyarrow_table(columns=["topic", "queue_id"]).to_pylist()
    assert {(r["topic"], r["queue_id"]) for r in landed} >= {(first, 2), (first, 3), (second, 0), (second, 1)}


@needs_streams
def test_a_byte_limit_makes_batches_of_whole_messages_within_it_as_mqadmin_measures_them(
    local_cluster, create_topic, java_producer, spark, tmp_path
):
    topic, group = create_topic(queues=1, brokers=("broker-a",)), unique("g_bytes")
    lengths = random.Random(7).choices(range(100, 3000), k=40)
    java_producer([{"topic": topic, "keys": [f"m-{i}"], "body": "x" * n} for i, n in enumerate(lengths)])
    sizes = stored_sizes(local_cluster.mqadmin(), topic, len(lengths))
    assert len(sizes) == len(lengths) and all(size > n for size, n in zip(sizes, lengths, strict=True))

    limit = 8 * 1024
    expected, batch, used = [], 0, 0  # whole messages, in order, while they fit
    for size in sizes:
        if batch and used + size > limit:
            expected, batch, used = [*expected, batch], 0, 0
        batch, used = batch + 1, used + size
    expected.append(batch)

    table, checkpoint = str(tmp_path / "stream"), str(tmp_path / "checkpoint")
    batches = stream_until_done(
        spark, local_cluster.spec.namesrv_address, topic, group, table, checkpoint, None, maxBytesPerTrigger="8k"
    )
    assert [p["numInputRows"] for p in batches] == expected
    keys = DeltaTable(table).to_pyarrow_table(columns=["keys"]).column("keys").to_pylist()
    assert sorted(keys) == sorted(f"m-{i}" for i in range(len(lengths)))


@needs_streams
def test_a_driver_killed_at_random_instants_goes_on_from_its_checkpoint_and_lands_every_message_once(
    local_cluster, create_topic, java_producer, tmp_path
):
    """Each of two rounds kills the driver (its Python process and its JVM) as a batch is planned but not written, or written
    to Delta but not yet marked committed in the checkpoint; the next driver goes on from the checkpoint."""
    namesrv = local_cluster.spec.namesrv_address
    topic, group = create_topic(queues=4), unique("g_stream_kill")
    java_producer([order(i, topic) for i in range(150)])
    table, checkpoint = tmp_path / "stream", tmp_path / "checkpoint"
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    root = Path(__file__).resolve().parents[2]

    def driver() -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.integration.stream_driver", namesrv, topic, group, str(table)]
            + [str(checkpoint), "25"],
            cwd=root,
            start_new_session=True,  # its JVM in its process group: killed with it
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def committed_batches() -> int:
        return len([p for p in (checkpoint / "commits").glob("[0-9]*")]) if (checkpoint / "commits").exists() else 0

    kills = []
    for _ in range(2):  # each round a driver's start (a JVM): two rounds and the last run keep the test near a minute
        batch = committed_batches() + rng.randint(0, 2)
        instant = rng.choice(["planned", "written"])
        marker = (
            checkpoint / "offsets" / str(batch) if instant == "planned" else table / "_delta_log" / f"{batch:020d}.json"
        )
        process = driver()
        deadline = time.monotonic() + 180
        while not marker.exists():
            assert process.poll() is None, (
                f"seed {seed}: the driver ended before batch {batch}: {process.stderr.read()[-2000:]}"
            )
            assert time.monotonic() < deadline, f"seed {seed}: batch {batch} was not {instant} within 180 s"
            time.sleep(0.01)  # polling the checkpoint and the table for the instant to kill at
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        kills.append((instant, batch))

    process = driver()
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0 and "done" in out, f"seed {seed}, kills {kills}: {err[-2000:]}"
    keys = DeltaTable(str(table)).to_pyarrow_table(columns=["keys"]).column("keys").to_pylist()
    assert sorted(keys) == sorted(f"o-{i}" for i in range(150)), f"seed {seed}, kills {kills}"


@pytest.mark.skipif(STREAMS, reason="this Spark streams: the refusal is for Spark 4.0 and 4.1")
def test_an_older_spark_is_refused_in_one_sentence_naming_the_version_needed(local_cluster, create_topic):
    """What Spark's streaming planner calls first, on this (older) pyspark. Not through a query on the session: a
    streaming query that fails in its planner on Spark 4.0 leaves the session's Python worker factory with a closed
    channel, and the next Python task of the session fails (``ClosedChannelException``)."""
    from pyspark.sql.types import StructType

    from rocketlake.engine.options import SourceOptionError
    from rocketlake.spark.source import RocketMQDataSource

    source = RocketMQDataSource({"namesrv": local_cluster.spec.namesrv_address, "topic": create_topic(queues=1)})
    with pytest.raises(SourceOptionError, match=r"needs Spark 4\.2 or later \(this is Spark 4\.[01]"):
        source.streamReader(StructType())


@needs_streams
def test_foreach_batch_with_deltas_idempotent_writes_lands_a_replayed_batch_once(
    local_cluster, create_topic, java_producer, spark, tmp_path
):
    """The docs' ``foreachBatch`` example: each batch appended with ``txnAppId`` and ``txnVersion`` (the batch id), so
    a batch Spark runs again after a crash (its commit missing from the checkpoint) is not written twice."""
    topic = create_topic(queues=2)
    java_producer([order(i, topic) for i in range(40)])
    table, checkpoint = str(tmp_path / "orders"), tmp_path / "checkpoint"

    def append_once(batch, batch_id: int) -> None:
        (
            batch.write.format("delta")
            .option("txnAppId", "orders-stream")  # one id per query, kept across its restarts
            .option("txnVersion", batch_id)
            .mode("append")
            .save(table)
        )

    def run() -> None:
        register(spark)
        query = (
            spark.readStream.format("rocketmq")
            .option("namesrv", local_cluster.spec.namesrv_address)
            .option("topic", topic)
            .option("maxOffsetsPerTrigger", 15)
            .load()
            .writeStream.foreachBatch(append_once)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(180) and query.exception() is None

    run()
    last = max(int(p.name) for p in (checkpoint / "commits").glob("[0-9]*"))
    # As if the driver died after the batch's write, before its commit mark (the mark and its checksum file).
    (checkpoint / "commits" / str(last)).unlink()
    (checkpoint / "commits" / f".{last}.crc").unlink(missing_ok=True)
    run()  # Spark runs the last batch again; Delta skips it
    keys = DeltaTable(table).to_pyarrow_table(columns=["keys"]).column("keys").to_pylist()
    assert sorted(keys) == sorted(f"o-{i}" for i in range(40))
