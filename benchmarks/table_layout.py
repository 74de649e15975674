"""Files per day and the read time of one day: the earlier layout against the day-partitioned one, before and
after compaction.

A day of windows is simulated with Spark alone (no broker: the layout is what is measured): every window is
landed by its own ``replaceWhere`` commit, from one Spark task per queue, as a run lands it. The earlier layout
is reproduced as rocketlake wrote it up to 0.1 (an unpartitioned table, one file per task); the current one is
``delta.writer.write_slice`` (day partitions, optimized writes), then ``compact_days``. Reading one day
is timed with Spark (filter on ``window_start``, sum of the body lengths) and with delta-rs.

    .venv/bin/python -m benchmarks.table_layout --windows 1440 --queues 8 --rows 40

``--windows`` below 1440 lands that many one-minute windows and also prints the count scaled to a day.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from rocketlake.delta.writer import compact_days, slice_predicate, write_slice
from rocketlake.engine.ledger import LedgerEntry, WindowEntry
from rocketlake.rocketmq.message_queue import MessageQueue, OffsetRange
from rocketlake.spark.session import spark_session

DAY_MS = 86_400_000
MIN = 60_000
DAY = 20_000 * DAY_MS  # a UTC midnight


def window_frame(spark, start_ms: int, queues: int, rows: int, body: int):
    from pyspark.sql import functions as F

    return (
        spark.range(queues * rows, numPartitions=queues)
        .select(
            F.lit("t").alias("topic"),
            F.concat(F.lit("broker-"), (F.col("id") % 2).cast("string")).alias("broker_name"),
            (F.col("id") % queues).cast("int").alias("queue_id"),
            F.col("id").alias("queue_offset"),
            F.timestamp_millis(F.lit(start_ms)).alias("window_start"),
            F.expr(f"unhex(repeat('ab', {body}))").alias("body"),
        )
        .repartition(queues, "queue_id")
    )  # one task per queue, as the RocketMQ source plans them


def entry(start_ms: int, queues: int, rows: int, run: str) -> LedgerEntry:
    ranges = tuple(OffsetRange(MessageQueue("t", f"broker-{q % 2}", q), 0, rows) for q in range(queues))
    return LedgerEntry("bench", "g", run, (WindowEntry(str(start_ms), start_ms, start_ms + MIN, ranges),))


def earlier_write(df, path: str, ledger: LedgerEntry, first: bool) -> None:
    """The layout of rocketlake 0.1: no partitions, no optimized writes (one file per task)."""
    writer = df.write.format("delta").option("userMetadata", ledger.to_json())
    if first:
        writer.mode("append").save(path)
    else:
        predicate = slice_predicate(ledger.windows)
        writer.mode("overwrite").option("replaceWhere", predicate).save(path)


def files(path: str) -> int:
    from deltalake import DeltaTable

    return len(DeltaTable(path).file_uris())


def read_day(spark, path: str) -> tuple[float, float]:
    """Seconds to read one day with Spark (filter + sum of body lengths) and with delta-rs."""
    from deltalake import DeltaTable
    from pyspark.sql import functions as F

    started = time.perf_counter()
    (
        spark.read.format("delta")
        .load(path)
        .where(
            F.col("window_start").between(F.timestamp_millis(F.lit(DAY)), F.timestamp_millis(F.lit(DAY + DAY_MS - 1)))
        )
        .agg(F.sum(F.length("body")))
        .collect()
    )
    spark_s = time.perf_counter() - started
    started = time.perf_counter()
    DeltaTable(path).to_pyarrow_table(columns=["queue_offset", "body"])
    return spark_s, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows", type=int, default=120, help="one-minute windows to land (default: 120)")
    parser.add_argument("--queues", type=int, default=8, help="queues per window (default: 8)")
    parser.add_argument("--rows", type=int, default=40, help="messages per queue per window (default: 40)")
    parser.add_argument("--body", type=int, default=512, help="body bytes (default: 512)")
    args = parser.parse_args()
    spark = spark_session("local[2]", {"spark.driver.memory": "2g"})
    spark.range(1).count()
    scale = 1440 / args.windows
    print(
        f"{args.windows} one-minute windows x {args.queues} queues x {args.rows} messages of {args.body} B, "
        f"each window its own commit; local[2]"
    )
    print(f"{'layout':<34} {'files':>7} {'files/day':>10} {'land s':>8} {'day read, Spark s':>18} {'delta-rs s':>11}")
    with tempfile.TemporaryDirectory(prefix="rocketlake-layout-") as tmp:
        for name in ("earlier (unpartitioned)", "day partitions, optimized writes"):
            path = str(Path(tmp) / name.split()[0])
            started = time.perf_counter()
            for i in range(args.windows):
                start = DAY + i * MIN
                df, e = (
                    window_frame(spark, start, args.queues, args.rows, args.body),
                    entry(start, args.queues, args.rows, f"r{i}"),
                )
                if name.startswith("earlier"):
                    earlier_write(df, path, e, first=i == 0)
                else:
                    write_slice(df, path, e)
            landed = time.perf_counter() - started
            n = files(path)
            spark_s, rs_s = read_day(spark, path)
            print(f"{name:<34} {n:>7} {round(n * scale):>10} {landed:>8.1f} {spark_s:>18.2f} {rs_s:>11.2f}")
            if not name.startswith("earlier"):
                compact_days(spark, path, ["2024-10-04"])
                n = files(path)
                spark_s, rs_s = read_day(spark, path)
                print(f"{'  ... after compacting the day':<34} {n:>7} {n:>10} {'':>8} {spark_s:>18.2f} {rs_s:>11.2f}")


if __name__ == "__main__":
    main()
