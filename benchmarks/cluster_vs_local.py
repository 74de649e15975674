"""The same window landed by a Spark standalone cluster (two workers) and by ``local[2]``, in one run.

    .venv/bin/python -m benchmarks.cluster_vs_local [--messages 1000000] [--rounds 2]

The Java producer fills 16 queues (8 on each of two brokers) with 1 KiB messages inside one window;
``spark.materialize`` lands it as a run does (exact ranges, one Spark job, one Delta commit carrying
the ledger), alternately on ``local[2]`` and on ``spark://`` with two workers of one core and 1 GiB each
(``LocalSparkCluster``, what ``rocketlake local up --spark`` starts), a new group and table each time. One
SparkSession at a time: the driver stops it between modes. Peak RSS is sampled every 250 ms for the driver's
process tree (its JVM and Python workers; the brokers and the Spark daemons left out) and, on the cluster,
for the workers' trees (their executors and the executors' Python workers).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.common import PeakRss, bench_cluster, cluster_pids, mib, produce_bulk
from benchmarks.ingest_end_to_end import land
from rocketlake.engine.windows import StoreTimeWindow
from rocketlake.local.spark_cluster import LocalSparkCluster, SparkClusterSpec
from rocketlake.spark.session import spark_session

QUEUES_PER_BROKER = 8


def fill(cluster, topic: str, count: int) -> StoreTimeWindow:
    cluster.create_topic(topic, QUEUES_PER_BROKER)
    while time.time() % 60 > 5:  # start on a fresh minute: the whole topic then lies in one window
        time.sleep(0.5)
    start_ms = int(time.time()) // 60 * 60_000
    seconds = produce_bulk(cluster, topic, count)
    end_ms = start_ms + 60_000 * (1 + int((time.time() * 1000 - start_ms) // 60_000))
    print(f"produced {count:,} x 1 KiB into {2 * QUEUES_PER_BROKER} queues in {seconds:.0f}s", flush=True)
    while time.time() * 1000 < end_ms + 1000:
        time.sleep(0.5)
    return StoreTimeWindow(start_ms, end_ms)


def session(master: str):
    conf = {"spark.driver.memory": "2g"}
    if master.startswith("spark://"):
        conf.update(
            {
                "spark.driver.host": "127.0.0.1",
                "spark.driver.bindAddress": "127.0.0.1",
                "spark.executor.memory": "1g",
                "spark.ui.showConsoleProgress": "false",
            }
        )
    spark = spark_session(master, conf)
    spark.range(1).count()  # JVM and executors up before timing
    return spark


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    n = args.messages
    with tempfile.TemporaryDirectory(prefix="rocketlake-cluster-", dir="/dev/shm") as tmp:
        tmp_path = Path(tmp)
        spark_cluster = LocalSparkCluster(
            SparkClusterSpec(
                tmp_path / "spark", master_port=27077, master_ui_port=28080, worker_ui_ports=(28081, 28082)
            )
        )
        with bench_cluster(tmp_path / "rocketmq") as cluster:
            window = fill(cluster, "bench_cluster", n)
            spark_cluster.up(progress=lambda line: print(line, flush=True))
            try:
                brokers = cluster_pids(cluster)
                daemons = spark_cluster.pids()
                figures: dict[str, list[tuple[float, int, int]]] = {}
                for r in range(args.rounds):
                    for label, master, name in (
                        ("local[2]", "local[2]", "local"),
                        ("standalone, 2 workers", spark_cluster.spec.master_url, "cluster"),
                    ):
                        spark = session(master)
                        workers = [PeakRss(root_pid=pid) for pid in (w.pid() for w in spark_cluster.workers) if pid]
                        for sampler in workers:
                            sampler.__enter__()
                        with PeakRss(exclude=brokers | daemons) as driver:
                            rows, seconds, *_ = land(
                                cluster, spark, "bench_cluster", tmp_path / "lake", window, f"r{r}_{name}"
                            )
                        for sampler in workers:
                            sampler.__exit__(None, None, None)
                        executors = sum(s.peak for s in workers) if master.startswith("spark://") else 0
                        assert rows == n, f"{label}: {rows:,} rows, expected {n:,}"
                        figures.setdefault(label, []).append((seconds, driver.peak, executors))
                        print(
                            f"  {label:<24} {n / seconds:>9,.0f} msg/s {n / 1024 / seconds:>7.1f} MB/s  "
                            f"driver peak RSS {mib(driver.peak):>10}  workers+executors {mib(executors):>10}"
                            f"  ({seconds:.1f}s)",
                            flush=True,
                        )
                        spark.stop()
            finally:
                spark_cluster.down()
    print(f"\nsummary: {n:,} x 1 KiB, 16 queues on 2 brokers, median of {args.rounds} rounds")
    for label, runs in figures.items():
        median = statistics.median(s for s, _, _ in runs)
        print(
            f"  {label:<24} {n / median:>9,.0f} msg/s  driver peak {mib(max(d for _, d, _ in runs)):>10}  "
            f"workers+executors peak {mib(max(e for _, _, e in runs)):>10}"
        )


if __name__ == "__main__":
    main()
