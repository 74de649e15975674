"""End to end: messages/s and peak memory landing a topic in Delta through the real pipeline.

    .venv/bin/python -m benchmarks.ingest_end_to_end [--messages 1000000] [--backlog-factor 10]

The Java producer fills 16 queues (8 per broker) with 1 KiB messages, all inside one one-minute
window; once it is closed, ``spark.materialize`` lands the window in Delta with Spark on
``local[2]`` (plan, exact ranges, one Spark job, one commit) and the accounting is checked. Peak
memory is the RSS of this process tree (driver, Spark's JVM, its Python workers; not the broker
and name server the benchmark itself started), sampled every 250 ms, in all and per part. It runs
again with ``--backlog-factor`` times the messages, then the 1x window once more on the now warm
JVM: with the per-queue thresholds bounding what a task holds, peak memory must stay flat while
the backlog grows. The Java DefaultLitePullConsumer reading the same ranges in the same run is
printed as the peer's figure.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from benchmarks.common import PeakRss, bench_cluster, cluster_pids, mib, produce_bulk
from rocketlake.engine.broker_access import GroupBroker
from rocketlake.engine.config import parse_config
from rocketlake.engine.ingest import plan_windows
from rocketlake.engine.ledger import LedgerEntry
from rocketlake.engine.windows import StoreTimeWindow
from rocketlake.rocketmq.client import RocketMQClient
from rocketlake.spark.materialize import land_entry
from rocketlake.spark.session import spark_session
from tests.java_oracles import consume


def land(
    cluster,
    spark,
    topic: str,
    lake: Path,
    window: StoreTimeWindow,
    run: str,
    pull_batch_size: int = 32,
    metadata_columns: tuple[str, ...] = (),
):
    cfg = parse_config(
        {
            "clusters": {"bench": {"namesrv": cluster.spec.namesrv_address}},
            "ingestions": {
                "bench": {
                    "cluster": "bench",
                    "topic": topic,
                    "consumer_group": f"bench_{run}",
                    "table": f"bench_{run}",
                    "pull_batch_size": pull_batch_size,
                    "metadata_columns": list(metadata_columns),
                    "window": {"cron": "* * * * *", "start": "2026-01-01"},
                }
            },
        }
    ).ingestions["bench"]
    client = RocketMQClient(cluster.spec.namesrv_address, timeout=10)
    with PeakRss(exclude=cluster_pids(cluster)) as rss:
        started = time.perf_counter()
        broker = GroupBroker(client, topic, cfg.consumer_group, with_retry_topic=False)
        queues = broker.subscribed_queues()
        entry = LedgerEntry("bench", cfg.consumer_group, run, plan_windows(broker, queues, [("w", window)]))
        result = land_entry(
            spark, {"namesrv": cluster.spec.namesrv_address}, cfg, str(lake / cfg.table), entry, len(queues), print
        )
        seconds = time.perf_counter() - started
    (acct,) = result.accounting
    assert acct.balanced and acct.rows == acct.planned, acct
    return acct.rows, seconds, rss.peak, rss.peaks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--backlog-factor", type=int, default=10)
    parser.add_argument(
        "--store-dir",
        default=None,
        help="broker store (default /dev/shm; a 10x backlog of 1 KiB messages needs ~11 GB)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rocketlake-e2e-", dir=args.store_dir) as tmp:
        tmp_path = Path(tmp)
        with bench_cluster(tmp_path / "state", Path(args.store_dir) / "store" if args.store_dir else None) as cluster:
            spark = spark_session("local[2]", {"spark.driver.memory": "2g"})
            spark.range(1).count()  # JVM warm before timing
            figures = []
            windows: dict[int, StoreTimeWindow] = {}
            # 1x on a fresh JVM, the backlog, then 1x again (its topic landed anew by a new group): Spark's JVM
            # grows its heap towards spark.driver.memory as it works, whatever it reads, so only the warm 1x
            # says whether a larger backlog holds more memory.
            for factor, when in ((1, "first"), (args.backlog_factor, "after it"), (1, "again, warm JVM")):
                count = args.messages * factor
                topic = f"bench_e2e_{factor}x"
                if factor not in windows:
                    cluster.create_topic(topic, 8)
                    # One window: start on a fresh minute so the whole backlog is stored inside it.
                    while time.time() % 60 > 5:
                        time.sleep(0.5)
                    start_ms = int(time.time()) // 60 * 60_000
                    produced_s = produce_bulk(cluster, topic, count)
                    end_ms = start_ms + 60_000 * (1 + int((time.time() * 1000 - start_ms) // 60_000))
                    while time.time() * 1000 < end_ms + 1000:
                        time.sleep(0.5)
                    windows[factor] = StoreTimeWindow(start_ms, end_ms)
                    print(f"produced {count:,} x 1 KiB into 16 queues in {produced_s:.0f}s", flush=True)
                rows, seconds, peak, peaks = land(
                    cluster, spark, topic, tmp_path / "lake", windows[factor], f"{factor}x_{len(figures)}"
                )
                client = RocketMQClient(cluster.spec.namesrv_address)
                ranges = {(mq.broker_name, mq.queue_id): (0, client.get_max_offset(mq)) for mq in client.queues(topic)}
                (java,) = consume(cluster.spec.namesrv_address, cluster.spec.state_dir, topic, ranges, bench=True)
                figures.append((f"{factor}x, {when}", rows, seconds, peak, peaks, java))
                print(
                    f"{factor:>3}x ({when}) landed {rows:,} rows in {seconds:.1f}s = {rows / seconds:,.0f} msg/s, "
                    f"peak RSS {mib(peak)} ({_parts(peaks)}) | java pull only: "
                    f"{java['messages'] / java['seconds']:,.0f} msg/s",
                    flush=True,
                )
            print(
                "\nsummary (local[2], 1 KiB messages, 16 queues, one window; peak RSS of the tree, then of each part):"
            )
            for label, rows, seconds, peak, peaks, java in figures:
                print(
                    f"  {label:<20} {rows:>11,} messages: {rows / seconds:>9,.0f} msg/s end to end, peak RSS "
                    f"{mib(peak):>10} ({_parts(peaks)}); java pull-only peer "
                    f"{java['messages'] / java['seconds']:,.0f} msg/s"
                )
            warm, backlog = figures[2][3], figures[1][3]
            print(
                f"  peak RSS at {args.backlog_factor}x / at 1x with a warm JVM: {backlog / warm:.2f}x "
                f"(against the first 1x, on a fresh JVM: {backlog / figures[0][3]:.2f}x)"
            )


def _parts(peaks: dict[str, int]) -> str:
    return ", ".join(f"{part} {mib(rss)}" for part, rss in sorted(peaks.items()))


if __name__ == "__main__":
    main()
