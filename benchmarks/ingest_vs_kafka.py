"""rocketlake against the peer a data engineer would pick: Spark's own Kafka source writing Delta.

    .venv/bin/python -m benchmarks.ingest_vs_kafka [--messages 1000000] [--rounds 3]

Same machine, same run, same records: ``--messages`` x 1 KiB, message ``k`` with the key ``key-k`` and the
body ``message-k `` then the alphabet shifted by ``k`` (every body distinct), sent by the RocketMQ Java
producer (``ProducerPeer``) into 16 queues (8 on each of two brokers) and by Spark's Kafka sink into 16
partitions of one KRaft broker from Maven Central jars. One SparkSession on ``local[2]`` serves both, with
Delta and the ``spark-sql-kafka-0-10`` jars as files.

Each round lands the whole topic once per system, interleaved, at equal information:

* rocketlake: ``spark.materialize`` as a run does it (plan the window's exact ranges, one Spark job
  through the ``rocketmq`` Python Data Source, one Delta commit carrying the ledger), a new consumer group
  and table each time, with the default columns (queue identity, offset, store time, key, body, plus
  message id, tags and window), twice: with ``pull_batch_size`` 32 (the Java consumer's default, within the
  broker's default transfer caps of 32 messages and 256 KiB a pull: what a stock broker gives) and with
  ``pull_batch_size`` 1024, on brokers whose caps are raised to 1024 messages and 1 MiB a pull, Kafka's
  default ``max.partition.fetch.bytes`` (the caps are maxima: pulls of 32 are served the same either way);
* Kafka: ``spark.read.format("kafka")`` earliest..latest (its 7 columns), ``.write.format("delta")`` append;
* the second pair: rocketlake with ``metadata_columns: [properties]`` (pulls of 1024) against Kafka with
  ``includeHeaders=true`` on a second topic whose records carry, as headers, the property names and values the
  RocketMQ messages carry (KEYS, UNIQ_KEY, WAIT, ...: listed in the output).

Both systems write with the same Delta settings (``kafka_peer.KAFKA_PLAIN_COLUMNS``): no Parquet dictionary for
unique-valued columns, statistics on lookup columns only, partitioned by day, no optimized write.

Then, to say where the time goes: each source read alone into Spark's ``noop`` sink, and the ceiling,
the same rows generated inside the JVM and written to Delta (no source at all). Peak RSS is this
process tree's (driver, Spark's JVM, its Python workers), brokers excluded, sampled every 250 ms; CPU
seconds are counted per part (brokers, Spark's JVM, Python workers), since all of them share the 2 cores.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from benchmarks.common import CpuSeconds, PeakRss, bench_cluster, cluster_pids, mib, produce_bulk
from benchmarks.ingest_end_to_end import land
from benchmarks.kafka_peer import (
    LocalKafka,
    produce_with_spark,
    producer_peer_records,
    spark_kafka_jars,
    spark_kafka_read_noop,
    spark_kafka_to_delta,
)
from rocketlake.engine.windows import StoreTimeWindow
from rocketlake.spark.session import spark_session
from rocketlake.spark.source import register

PARTITIONS = 16  # 8 queues on each RocketMQ broker; 16 Kafka partitions
#: Transfer caps of a pull (MessageStoreConfig) raised to Kafka's default fetch size per partition (1 MiB).
RAISED_TRANSFER_CAPS = {"maxTransferCountOnMessageInMemory": 1024, "maxTransferBytesOnMessageInMemory": 1 << 20}
CPU_PARTS = ("rocketmq", "kafka", "spark jvm", "python workers", "this python (driver)")


def fill_rocketmq(cluster, topic: str, count: int, body_size: int) -> StoreTimeWindow:
    """Produce ``count`` messages inside one window and wait until it is closed; the window."""
    cluster.create_topic(topic, PARTITIONS // 2)
    while time.time() % 60 > 5:  # start on a fresh minute: the whole topic then lies in one window
        time.sleep(0.5)
    start_ms = int(time.time()) // 60 * 60_000
    seconds = produce_bulk(cluster, topic, count, body_size=body_size)
    end_ms = start_ms + 60_000 * (1 + int((time.time() * 1000 - start_ms) // 60_000))
    print(f"rocketmq: produced {count:,} x {body_size} B into {PARTITIONS} queues in {seconds:.0f}s", flush=True)
    while time.time() * 1000 < end_ms + 1000:
        time.sleep(0.5)
    return StoreTimeWindow(start_ms, end_ms)


def timed(fn, exclude: frozenset[int], brokers: dict[str, frozenset[int]]) -> tuple[object, float, int, dict]:
    with PeakRss(exclude=exclude) as rss, CpuSeconds(brokers) as cpu:
        started = time.perf_counter()
        result = fn()
        seconds = time.perf_counter() - started
    return result, seconds, rss.peak, cpu.seconds


def ceiling_frame(spark, count: int, body_size: int):
    """``count`` rows like a landed message, with the very keys and bodies the brokers hold, made in the JVM."""
    from pyspark.sql import functions as F

    records = producer_peer_records(spark, count, body_size, PARTITIONS)
    return records.select(
        F.lit("bench").alias("topic"),
        F.col("partition").alias("queue_id"),
        F.monotonically_increasing_id().alias("queue_offset"),
        F.col("key").cast("string").alias("keys"),
        F.current_timestamp().alias("store_timestamp"),
        F.col("value").alias("body"),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--body-size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3, help="the summary is the median of the rounds after the first")
    args = parser.parse_args()
    n, size = args.messages, args.body_size
    mb = n * size / 1024 / 1024

    with both_brokers("rocketlake-vs-kafka-") as (tmp_path, cluster, kafka, spark, parts):
        brokers = parts["rocketmq"] | parts["kafka"]
        kafka.create_topic("bench", PARTITIONS)
        kafka_seconds = produce_with_spark(spark, kafka.bootstrap, "bench", n, size, PARTITIONS)
        assert sum(kafka.end_offsets("bench").values()) == n
        print(f"kafka: produced {n:,} x {size} B into {PARTITIONS} partitions in {kafka_seconds:.0f}s", flush=True)
        window = fill_rocketmq(cluster, "bench", n, size)
        names = property_names(cluster.spec.namesrv_address)
        kafka.create_topic("bench_headers", PARTITIONS)
        kafka_seconds = produce_with_spark(spark, kafka.bootstrap, "bench_headers", n, size, PARTITIONS, names)
        assert sum(kafka.end_offsets("bench_headers").values()) == n
        print(
            f"kafka: produced {n:,} records with the headers {names} (the properties of the RocketMQ "
            f"messages) in {kafka_seconds:.0f}s",
            flush=True,
        )
        # Warm the JVM's Parquet and Delta paths once, untimed, for both systems alike.
        ceiling_frame(spark, 100_000, size).write.format("delta").save(str(tmp_path / "warm"))

        figures: dict[str, list[tuple[float, int, dict]]] = {}

        def record(label: str, rows: int, seconds: float, peak: int, cpu: dict) -> None:
            assert rows == n, f"{label}: {rows:,} rows, expected {n:,}"
            figures.setdefault(label, []).append((seconds, peak, cpu))
            print(
                f"  {label:<40} {n / seconds:>9,.0f} msg/s {mb / seconds:>7.1f} MB/s  peak RSS {mib(peak):>10}"
                f"  ({seconds:.1f}s; CPU s: {cpu_text(cpu)})",
                flush=True,
            )

        def rocketlake(r: int, batch: int, metadata: tuple[str, ...] = ()):
            return land(
                cluster,
                spark,
                "bench",
                tmp_path / "lake",
                window,
                f"round{r}_{batch}{'_'.join(metadata)}",
                batch,
                metadata,
            )[0]

        for r in range(args.rounds):
            print(f"round {r + 1}:", flush=True)
            for batch in (32, 1024):
                rows, seconds, peak, cpu = timed(lambda: rocketlake(r, batch), brokers, parts)
                record(f"rocketlake -> delta (pulls of {batch})", rows, seconds, peak, cpu)
            rows, seconds, peak, cpu = timed(
                lambda: spark_kafka_to_delta(spark, kafka.bootstrap, "bench", str(tmp_path / f"kafka{r}")),
                brokers,
                parts,
            )
            record("spark kafka source -> delta", rows, seconds, peak, cpu)
            rows, seconds, peak, cpu = timed(lambda: rocketlake(r, 1024, ("properties",)), brokers, parts)
            record(WITH_PROPERTIES, rows, seconds, peak, cpu)
            rows, seconds, peak, cpu = timed(
                lambda: spark_kafka_to_delta(
                    spark, kafka.bootstrap, "bench_headers", str(tmp_path / f"kafka_headers{r}"), headers=True
                ),
                brokers,
                parts,
            )
            record(WITH_HEADERS, rows, seconds, peak, cpu)

        print("where the time goes:", flush=True)
        for r in range(args.rounds):
            for batch in (32, 1024):
                _, seconds, peak, cpu = timed(
                    lambda: rocketmq_noop(spark, cluster.spec.namesrv_address, f"noop{r}_{batch}", batch),
                    brokers,
                    parts,
                )
                record(f"rocketlake source -> noop (pulls of {batch})", n, seconds, peak, cpu)
            _, seconds, peak, cpu = timed(
                lambda: spark_kafka_read_noop(spark, kafka.bootstrap, "bench"), brokers, parts
            )
            record("spark kafka source -> noop", n, seconds, peak, cpu)
            _, seconds, peak, cpu = timed(
                lambda: ceiling_frame(spark, n, size).write.format("delta").save(str(tmp_path / f"ceiling{r}")),
                brokers,
                parts,
            )
            record("generated in the JVM -> delta", n, seconds, peak, cpu)

    warm = {label: warm_rounds(runs) for label, runs in figures.items()}
    print(
        f"\nsummary: {n:,} x {size} B, {PARTITIONS} queues/partitions, Spark local[2], Delta on /dev/shm, "
        f"median of the {len(next(iter(warm.values())))} warm round(s) (after the first, which pays the JIT and "
        "the caches); CPU seconds of that median round; peak RSS of every round"
    )
    medians = {label: statistics.median(s for s, _, _ in runs) for label, runs in warm.items()}
    for label, runs in figures.items():
        print(
            f"  {label:<40} {n / medians[label]:>9,.0f} msg/s {mb / medians[label]:>7.1f} MB/s"
            f"  peak RSS {mib(max(p for _, p, _ in runs)):>10}  CPU s: {cpu_text(median_round(warm[label])[2])}"
        )
    spark_cpu = {label: spark_side(median_round(runs)[2]) for label, runs in warm.items()}
    pairs = [(f"rocketlake -> delta (pulls of {batch})", "spark kafka source -> delta") for batch in (32, 1024)]
    for ours, theirs in pairs + [(WITH_PROPERTIES, WITH_HEADERS)]:
        print(
            f"  {ours} / {theirs}: {medians[theirs] / medians[ours]:.2f}x end to end; Spark-side CPU "
            f"(JVM + Python workers) {spark_cpu[ours]:.1f} s against {spark_cpu[theirs]:.1f} s, "
            f"{spark_cpu[ours] / spark_cpu[theirs]:.2f}x"
        )


@contextmanager
def both_brokers(prefix: str):
    """A RocketMQ cluster with the pull caps raised, a Kafka broker and one Spark session on ``local[2]`` with
    Delta and Spark's Kafka jars, in a temporary folder on /dev/shm: (folder, cluster, kafka, spark, pids by part)."""
    with tempfile.TemporaryDirectory(prefix=prefix, dir="/dev/shm") as tmp:
        tmp_path = Path(tmp)
        with (
            bench_cluster(tmp_path / "rocketmq", broker_properties=RAISED_TRANSFER_CAPS) as cluster,
            LocalKafka(tmp_path / "kafka") as kafka,
        ):
            parts = {"rocketmq": cluster_pids(cluster), "kafka": kafka.pids()}
            spark = spark_session("local[2]", {"spark.driver.memory": "2g", "spark.jars": ",".join(spark_kafka_jars())})
            register(spark)
            yield tmp_path, cluster, kafka, spark, parts


def warm_rounds(runs: list) -> list:
    """The rounds after the first (a cold round: the JVM's JIT, the page cache, the brokers' pools); the only round
    when there is one. With two rounds, a median of all would be the mean of a cold and a warm round."""
    return runs[1:] or runs


def median_round(runs: list) -> tuple:
    """The round whose time is the median (the lower of the two middle ones for an even count)."""
    return sorted(runs, key=lambda run: run[0])[(len(runs) - 1) // 2]


WITH_PROPERTIES = "rocketlake -> delta, + properties (1024)"
WITH_HEADERS = "spark kafka source -> delta, + headers"


def spark_side(cpu: dict[str, float]) -> float:
    """CPU seconds of Spark's JVM and its Python workers (the brokers run on machines of their own in production)."""
    return cpu.get("spark jvm", 0) + cpu.get("python workers", 0)


def property_names(namesrv: str) -> list[str]:
    """The property names of the first message of a queue (the same for every message the producer sent; Java
    stamps MIN_OFFSET and MAX_OFFSET on pulled messages client-side, the broker does not store them)."""
    from rocketlake.rocketmq.client import RocketMQClient

    with RocketMQClient(namesrv) as client:
        queue = client.queues("bench")[0]
        (message,) = client.pull(queue, 0, 1, consumer_group="bench_properties").messages[:1]
    return sorted(message.properties)


def cpu_text(cpu: dict[str, float]) -> str:
    return " ".join(f"{part.split(' ')[0]} {cpu.get(part, 0):.1f}" for part in CPU_PARTS)


def rocketmq_noop(spark, namesrv: str, group: str, batch: int) -> None:
    (
        spark.read.format("rocketmq")
        .option("namesrv", namesrv)
        .option("topic", "bench")
        .option("consumerGroup", f"bench_{group}")
        .option("pullBatchSize", batch)
        .load()
        .write.format("noop")
        .mode("overwrite")
        .save()
    )


if __name__ == "__main__":
    main()
