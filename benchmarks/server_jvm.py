"""What the Spark Connect server's JVM options cost a window (issue 46): the same runs on servers started with each.

    .venv/bin/python -m benchmarks.server_jvm [--variant NAME=JVM_OPTIONS ...] [--windows 40] [--rounds 2]
        [--big 300000] [--big-landings 3]

Each variant is a Spark Connect server of its own, started as ``rocketlake local up`` starts it
(``LocalSparkServer``, ``local[2]``) with the variant's options in ``spark.driver.extraJavaOptions``. On it,
``--windows`` runs as the asset makes them below Dagster (``engine.run``: the landing, the ledger's verdict, the
offsets), each of one message in a window of its own, a new session each (as a run opens and releases one), on the
demo's table (JSON bodies, the change data feed). Then ``--big-landings`` runs of ``--big`` messages each (the Java
producer's 1 KiB bodies, which are text: another topic, into a table of raw bodies). Printed per variant and round:
the server's CPU seconds (its JVM and its Python workers, from ``/proc``) from its start to its first run's end, a
window after the first quarter of the windows, and each big run's CPU and wall seconds. Variants alternate round by
round; nothing else should run on the machine. A diagnostic of the server against itself: no peer runs a Spark
server.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.common import bench_cluster, produce_bulk, tree_cpu_seconds
from rocketlake.engine.windows import StoreTimeWindow
from rocketlake.local.spark_server import LocalSparkServer
from rocketlake.rocketmq.client import RocketMQClient
from rocketlake.rocketmq.send import OutgoingMessage
from rocketlake.spark.session import connect_session
from tests.integration.engine_support import Engine, from_first, now_ms
from tests.integration.ingestion_support import wait_until

PORT = 29302
#: The demo's table (rocketlake.yaml's ``orders``): bodies decoded from JSON, so a landing is judged, and the change
#: data feed its followers read.
DEMO_TABLE = {
    "body": {"format": "json", "schema": "order_id STRING, customer STRING, amount DOUBLE, region STRING"},
    "table_properties": {"delta.enableChangeDataFeed": True},
}
DEFAULT_VARIANTS = ("jvm-defaults=-XX:TieredStopAtLevel=4", "quick-compiler=-XX:TieredStopAtLevel=1")


class Ingestion:
    """One topic of 8 queues landed by a new group into a new table, a run at a time, each run a window of its own
    (from the last run's end to now) on a new session of the server at ``url``."""

    def __init__(self, cluster, client: RocketMQClient, url: str, state: Path, topic: str, table: dict):
        client.create_topic(topic, 8)
        self.cluster, self.url, self.topic = cluster, url, topic
        self.cfg = from_first(topic, f"g_{topic}", **table)
        self.table = state / f"{topic}-table"
        self.start = now_ms()

    def run(self, run_id: str) -> None:
        end = now_ms() + 1
        wait_until(end / 1000)  # the window is closed (grace 0)
        spark = connect_session(self.url)
        Engine(self.cluster, spark, self.table, self.cfg).run(run_id, [(run_id, StoreTimeWindow(self.start, end))])
        spark.stop()  # as the run's resource releases its session
        self.start = end


def run_variant(cluster, state: Path, name: str, options: str, windows: int, big: int, big_landings: int) -> dict:
    server = LocalSparkServer(state / name, port=PORT, conf={"spark.driver.extraJavaOptions": options})
    server.up()
    try:
        pid = server.process.pid()
        client = RocketMQClient(cluster.spec.namesrv_address)
        topic = f"jvm_{name.replace('-', '_')}_{int(time.time())}"
        small = Ingestion(cluster, client, server.url, state, topic, DEMO_TABLE)
        big_runs = Ingestion(cluster, client, server.url, state, f"{topic}_big", {})  # the producer's bodies are text
        after = []
        for i in range(windows):
            client.send(OutgoingMessage(topic, b'{"order_id": "o-%d", "amount": 1.5}' % i, tags="TagA"))
            small.run(f"w{i}")
            after.append(tree_cpu_seconds(pid))
        skip = max(1, windows // 4)
        result = {"first": after[0], "window": (after[-1] - after[skip - 1]) / (windows - skip), "big": []}
        for b in range(big_landings):
            produce_bulk(cluster, big_runs.topic, big)
            cpu, began = tree_cpu_seconds(pid), time.monotonic()
            big_runs.run(f"big{b}")
            result["big"].append((tree_cpu_seconds(pid) - cpu, time.monotonic() - began))
        client.close()
        return result
    finally:
        server.down()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", action="append", help="NAME=JVM_OPTIONS (repeatable)")
    parser.add_argument("--windows", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--big", type=int, default=300_000, help="messages in each big run")
    parser.add_argument("--big-landings", type=int, default=3)
    args = parser.parse_args()
    variants = dict(v.split("=", 1) for v in (args.variant or DEFAULT_VARIANTS))
    results: dict[str, list[dict]] = {name: [] for name in variants}
    with tempfile.TemporaryDirectory(dir="/dev/shm") as tmp, bench_cluster(Path(tmp) / "cluster") as cluster:
        for r in range(args.rounds):
            for name, options in variants.items() if r % 2 == 0 else reversed(variants.items()):
                got = run_variant(cluster, Path(tmp), name, options, args.windows, args.big, args.big_landings)
                results[name].append(got)
                bigs = ", ".join(f"{cpu:.1f} CPU-s / {wall:.1f} s" for cpu, wall in got["big"])
                print(
                    f"round {r + 1} {name:16s} start and first run {got['first']:.1f} CPU-s, a one-message window "
                    f"{got['window']:.2f} CPU-s; runs of {args.big:,}: {bigs}",
                    flush=True,
                )
    print("\nmedians over the rounds (the server's JVM and Python workers):")
    for name, rounds in results.items():
        last_big = [r["big"][-1] for r in rounds if r["big"]]
        print(
            f"  {name:16s} start and first run {statistics.median(r['first'] for r in rounds):.1f} CPU-s, "
            f"a one-message window {statistics.median(r['window'] for r in rounds):.2f} CPU-s"
            + (
                f", the last run of {args.big:,} {statistics.median(c for c, _ in last_big):.1f} CPU-s / "
                f"{statistics.median(w for _, w in last_big):.1f} s"
                if last_big
                else ""
            )
        )


if __name__ == "__main__":
    main()
