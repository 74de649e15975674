"""``readStream`` against ``readStream``: rocketlake's stream reader and Spark's Kafka source, ``Trigger.AvailableNow``
into Delta's streaming sink, on the same records (issue 51).

    .venv/bin/python -m benchmarks.stream_vs_kafka [--messages 1000000] [--rounds 3] [--per-trigger 250000]

The records, brokers and Spark session are ``ingest_vs_kafka``'s: ``--messages`` x 1 KiB into 16 queues of two
RocketMQ brokers (their pull caps raised to Kafka's fetch size) and 16 partitions of a KRaft broker. Each round runs,
interleaved, a new query of each source over the whole topic, at most ``--per-trigger`` offsets a micro-batch
(``maxOffsetsPerTrigger`` for both), with a fresh checkpoint and table: rocketlake with pulls of 1024 and with pulls of
32 (a stock broker's cap), Kafka with its defaults. Columns: each source's own (rocketlake's queue identity, offset, message id, tags, keys, store time and
body; Kafka's key, value, topic, partition, offset, timestamp and timestamp type). CPU seconds are counted per part
(brokers, Spark's JVM, Python workers); the summary is the median of the rounds after the first.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from benchmarks.common import mib
from benchmarks.ingest_vs_kafka import (
    PARTITIONS,
    both_brokers,
    cpu_text,
    fill_rocketmq,
    median_round,
    spark_side,
    timed,
    warm_rounds,
)
from benchmarks.kafka_peer import produce_with_spark

OURS, THEIRS = "rocketlake readStream -> delta", "spark kafka readStream -> delta"
#: The same stream with pulls of 32: what a stock broker answers (``maxTransferCountOnMessageInMemory``).
STOCK = "rocketlake readStream, pulls of 32"


def run_query(reader, table: Path, checkpoint: Path) -> int:
    """One AvailableNow query to its end: the rows it wrote."""
    query = (
        reader.load()
        .writeStream.format("delta")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start(str(table))
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"the query failed: {query.exception()}")
    return sum(p["numInputRows"] for p in query.recentProgress)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--body-size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--per-trigger", type=int, default=250_000, help="maxOffsetsPerTrigger of both queries")
    args = parser.parse_args()
    n, size, most = args.messages, args.body_size, args.per_trigger
    mb = n * size / 1024 / 1024

    with both_brokers("rocketlake-stream-vs-kafka-") as (tmp_path, cluster, kafka, spark, parts):
        brokers = parts["rocketmq"] | parts["kafka"]
        kafka.create_topic("bench", PARTITIONS)
        produce_with_spark(spark, kafka.bootstrap, "bench", n, size, PARTITIONS)
        fill_rocketmq(cluster, "bench", n, size)

        def ours(r: int, pulls: int = 1024) -> int:
            reader = (
                spark.readStream.format("rocketmq")
                .option("namesrv", cluster.spec.namesrv_address)
                .option("topic", "bench")
                .option("pullBatchSize", pulls)
                .option("maxOffsetsPerTrigger", most)
            )
            return run_query(reader, tmp_path / f"ours{pulls}_{r}", tmp_path / f"ours{pulls}_{r}_checkpoint")

        def stock(r: int) -> int:
            return ours(r, pulls=32)

        def theirs(r: int) -> int:
            reader = (
                spark.readStream.format("kafka")
                .option("kafka.bootstrap.servers", kafka.bootstrap)
                .option("subscribe", "bench")
                .option("startingOffsets", "earliest")
                .option("maxOffsetsPerTrigger", most)
            )
            return run_query(reader, tmp_path / f"theirs{r}", tmp_path / f"theirs{r}_checkpoint")

        figures: dict[str, list] = {}
        for r in range(args.rounds):
            print(f"round {r + 1}:", flush=True)
            for label, fn in ((OURS, ours), (STOCK, stock), (THEIRS, theirs)):
                rows, seconds, peak, cpu = timed(lambda fn=fn: fn(r), brokers, parts)
                assert rows == n, f"{label}: {rows:,} rows, expected {n:,}"
                figures.setdefault(label, []).append((seconds, peak, cpu))
                print(
                    f"  {label:<34} {n / seconds:>9,.0f} msg/s {mb / seconds:>7.1f} MB/s  peak RSS "
                    f"{mib(peak):>10}  ({seconds:.1f}s; CPU s: {cpu_text(cpu)})",
                    flush=True,
                )

    warm = {label: warm_rounds(runs) for label, runs in figures.items()}
    medians = {label: statistics.median(s for s, _, _ in runs) for label, runs in warm.items()}
    print(
        f"\nsummary: {n:,} x {size} B, {PARTITIONS} queues/partitions, maxOffsetsPerTrigger {most:,}, Spark local[2], "
        f"Delta on /dev/shm, median of the {len(warm[OURS])} warm round(s)"
    )
    for label, runs in figures.items():
        print(
            f"  {label:<34} {n / medians[label]:>9,.0f} msg/s {mb / medians[label]:>7.1f} MB/s  peak RSS "
            f"{mib(max(p for _, p, _ in runs)):>10}  CPU s: {cpu_text(median_round(warm[label])[2])}"
        )
    theirs_cpu = spark_side(median_round(warm[THEIRS])[2])
    for label in (OURS, STOCK):
        ours_cpu = spark_side(median_round(warm[label])[2])
        print(
            f"  {label} / {THEIRS}: {medians[THEIRS] / medians[label]:.2f}x end to end; Spark-side CPU (JVM + Python "
            f"workers) {ours_cpu:.1f} s against {theirs_cpu:.1f} s, {ours_cpu / theirs_cpu:.2f}x"
        )


if __name__ == "__main__":
    main()
