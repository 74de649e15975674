"""rocketlake against the peer a data engineer would pick: Spark's own Kafka source writing Delta.

    .venv/bin/python -m benchmarks.ingest_vs_kafka [--messages 1000000] [--rounds 2]

Same machine, same run, same data shape: ``--messages`` x 1 KiB bodies (the RocketMQ Java producer's
pattern, and the same lines as Kafka's ProducerPerformance payload file) in 16 queues (8 on each of
two RocketMQ brokers) and in 16 Kafka partitions (one KRaft broker from Maven Central jars). One
SparkSession on ``local[2]`` serves both, with Delta and the ``spark-sql-kafka-0-10`` jars as files.

Each round lands the whole topic once per system, interleaved (rocketlake, Kafka, rocketlake, ...):

* rocketlake: ``pipelines.materialize`` as a run does it (plan the window's exact ranges, one Spark
  job through the ``rocketmq`` Python Data Source, one Delta commit carrying the ledger), a new
  consumer group and table each round;
* Kafka: ``spark.read.format("kafka")`` earliest..latest, ``.write.format("delta")`` append.

Then, to say where the time goes: each source read alone into Spark's ``noop`` sink, and the ceiling,
the same rows generated inside the JVM and written to Delta (no source at all). Peak RSS is this
process tree's (driver, Spark's JVM, its Python workers), brokers excluded, sampled every 250 ms.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.common import PeakRss, bench_cluster, cluster_pids, mib, produce_bulk
from benchmarks.ingest_end_to_end import land
from benchmarks.kafka_peer import LocalKafka, spark_kafka_jars, spark_kafka_read_noop, spark_kafka_to_delta
from rocketlake.pipelines.source import register
from rocketlake.pipelines.windows import Window
from rocketlake.resources.spark import spark_session

PARTITIONS = 16  # 8 queues on each RocketMQ broker; 16 Kafka partitions


def payload_lines(body_size: int, variants: int = 26) -> bytes:
    """Bodies shaped like ProducerPeer's (``message-<n> `` then the alphabet shifted by n) for Kafka's
    ProducerPerformance, which draws one line per record: same size, same compressibility."""
    lines = []
    for n in range(variants):
        stamp = f"message-{n} ".encode()
        body = bytes(stamp[b] if b < len(stamp) else ord("a") + (n + b) % 26 for b in range(body_size))
        lines.append(body)
    return b"\n".join(lines)


def fill_rocketmq(cluster, topic: str, count: int, body_size: int) -> Window:
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
    return Window(start_ms, end_ms)


def timed(fn, exclude: frozenset[int]) -> tuple[object, float, int]:
    with PeakRss(exclude=exclude) as rss:
        started = time.perf_counter()
        result = fn()
        seconds = time.perf_counter() - started
    return result, seconds, rss.peak


def ceiling_frame(spark, count: int, body_size: int):
    """``count`` rows like a landed message, bodies of ProducerPeer's shape, made inside the JVM."""
    from pyspark.sql import functions as F

    alphabet = "abcdefghijklmnopqrstuvwxyz" * (body_size // 26 + 2)
    return spark.range(0, count, 1, PARTITIONS).select(
        F.lit("bench").alias("topic"), (F.col("id") % PARTITIONS).cast("int").alias("queue_id"),
        F.col("id").alias("queue_offset"), F.format_string("7F0000010B2D18B4AAC2%012d", "id").alias("msg_id"),
        F.current_timestamp().alias("store_timestamp"),
        F.expr(f"cast(substring('{alphabet}', cast(id % 26 as int) + 1, {body_size}) as binary)").alias("body"),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--body-size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    n, size = args.messages, args.body_size
    mb = n * size / 1024 / 1024

    with tempfile.TemporaryDirectory(prefix="rocketlake-vs-kafka-", dir="/dev/shm") as tmp:
        tmp_path = Path(tmp)
        with bench_cluster(tmp_path / "rocketmq") as cluster, LocalKafka(tmp_path / "kafka") as kafka:
            brokers = cluster_pids(cluster) | kafka.pids()
            kafka.create_topic("bench", PARTITIONS)
            payload = tmp_path / "payload.txt"
            payload.write_bytes(payload_lines(size))
            kafka_seconds = kafka.produce("bench", n, payload_file=payload)
            assert sum(kafka.end_offsets("bench").values()) == n
            print(f"kafka: produced {n:,} x {size} B into {PARTITIONS} partitions in {kafka_seconds:.0f}s", flush=True)
            window = fill_rocketmq(cluster, "bench", n, size)

            spark = spark_session("local[2]", {"spark.driver.memory": "2g", "spark.jars": ",".join(spark_kafka_jars())})
            register(spark)
            # Warm the JVM's Parquet and Delta paths once, untimed, for both systems alike.
            ceiling_frame(spark, 100_000, size).write.format("delta").save(str(tmp_path / "warm"))

            figures: dict[str, list[tuple[float, int]]] = {}

            def record(label: str, rows: int, seconds: float, peak: int) -> None:
                assert rows == n, f"{label}: {rows:,} rows, expected {n:,}"
                figures.setdefault(label, []).append((seconds, peak))
                print(f"  {label:<34} {n / seconds:>9,.0f} msg/s {mb / seconds:>7.1f} MB/s  peak RSS {mib(peak):>10}"
                      f"  ({seconds:.1f}s)", flush=True)

            for r in range(args.rounds):
                print(f"round {r + 1}:", flush=True)
                (rows, *_), seconds, peak = timed(
                    lambda: land(cluster, spark, "bench", tmp_path / "lake", window, f"round{r}"), brokers)
                record("rocketlake -> delta", rows, seconds, peak)
                rows, seconds, peak = timed(
                    lambda: spark_kafka_to_delta(spark, kafka.bootstrap, "bench", str(tmp_path / f"kafka{r}")), brokers)
                record("spark kafka source -> delta", rows, seconds, peak)

            print("where the time goes:", flush=True)
            for r in range(args.rounds):
                _, seconds, peak = timed(lambda: rocketmq_noop(spark, cluster.spec.namesrv_address, f"noop{r}"), brokers)
                record("rocketlake source -> noop", n, seconds, peak)
                _, seconds, peak = timed(lambda: spark_kafka_read_noop(spark, kafka.bootstrap, "bench"), brokers)
                record("spark kafka source -> noop", n, seconds, peak)
                _, seconds, peak = timed(lambda: ceiling_frame(spark, n, size).write.format("delta").save(
                    str(tmp_path / f"ceiling{r}")), brokers)
                record("generated in the JVM -> delta", n, seconds, peak)

    print(f"\nsummary: {n:,} x {size} B, {PARTITIONS} queues/partitions, Spark local[2], Delta on /dev/shm, "
          f"median of {args.rounds} rounds")
    medians = {label: statistics.median(s for s, _ in runs) for label, runs in figures.items()}
    for label, runs in figures.items():
        print(f"  {label:<34} {n / medians[label]:>9,.0f} msg/s {mb / medians[label]:>7.1f} MB/s"
              f"  peak RSS {mib(max(p for _, p in runs)):>10}")
    ratio = medians["spark kafka source -> delta"] / medians["rocketlake -> delta"]
    print(f"  rocketlake / kafka peer, end to end: {ratio:.2f}x")


def rocketmq_noop(spark, namesrv: str, group: str) -> None:
    (spark.read.format("rocketmq").option("namesrv", namesrv).option("topic", "bench")
     .option("consumerGroup", f"bench_{group}").load().write.format("noop").mode("overwrite").save())


if __name__ == "__main__":
    main()
