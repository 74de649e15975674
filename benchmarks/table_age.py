"""What a one-message window costs the Spark server as its table ages (issue 46): with the ledger's checkpoints, and
without them, as before.

    .venv/bin/python -m benchmarks.table_age [--windows 120] [--block 20]

Delta Spark checkpoints a table only when its own commit lands on a multiple of the interval (10). A window's slice
is Spark's commit and its verdict delta-rs's (a quiet window's entry and verdict are two delta-rs commits): any
single commit more, such as a compaction's (``OPTIMIZE``, once a day) or a run killed between its slice and verdict
(the short chaos soak's table), puts every later slice on an odd version. Then no Spark commit falls on a multiple,
and only the ledger's delta-rs commits can checkpoint the table (``delta.ledger_commit``). Here two windows and a
compaction of their files do it. Each variant is a Spark Connect server
of its own (``LocalSparkServer``, as ``rocketlake local up`` starts it) and a new table, landed a window at a time as
the asset does below Dagster (the demo's table: JSON bodies, the change data feed), a new session each. Printed per
block of windows: the server's CPU seconds a window (its JVM and Python workers, from ``/proc``), the run's own (this
process: the engine, its broker client, delta-rs reading the ledger and committing the verdict) and the versions since
the table's last checkpoint at the block's end. ``without checkpoints`` turns the ledger's checkpoints off in
this process (the code before them). A diagnostic of the server against itself: no peer runs a Spark server.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path
from unittest import mock

from benchmarks.common import bench_cluster, tree_cpu_seconds
from benchmarks.server_jvm import DEMO_TABLE, PORT, Ingestion
from rocketlake.delta import ledger_commit
from rocketlake.local.spark_server import LocalSparkServer
from rocketlake.rocketmq.client import RocketMQClient
from rocketlake.rocketmq.send import OutgoingMessage
from rocketlake.spark.session import connect_session


def since_checkpoint(table: Path) -> int:
    """Commits after the table's last checkpoint (all of them when it has none)."""
    log = table / "_delta_log"
    newest = max(int(p.name[:20]) for p in log.glob("*.json") if p.name[:20].isdigit())
    try:
        return newest - json.loads((log / "_last_checkpoint").read_text())["version"]
    except FileNotFoundError:
        return newest + 1


def run_variant(cluster, state: Path, name: str, checkpoints: bool, windows: int, block: int) -> list[tuple]:
    server = LocalSparkServer(state / name.replace(" ", "-"), port=PORT)
    server.up()
    client = RocketMQClient(cluster.spec.namesrv_address)
    off = nullcontext() if checkpoints else mock.patch.object(ledger_commit, "_checkpoint_on_interval")
    try:
        pid = server.process.pid()
        topic = f"age_{'with' if checkpoints else 'without'}_{int(time.time())}"
        small = Ingestion(cluster, client, server.url, state, topic, DEMO_TABLE)
        blocks = []
        with off:
            for first in ("first", "second"):  # versions 0 to 3: a slice by Spark, its verdict by delta-rs, twice
                client.send(OutgoingMessage(topic, b'{"order_id": "%s", "amount": 1.5}' % first.encode(), tags="TagA"))
                small.run(first)
            spark = connect_session(server.url)
            spark.sql(f"OPTIMIZE delta.`{small.table}`").collect()  # version 4: every later slice is odd
            spark.stop()
            began, own = tree_cpu_seconds(pid), time.process_time()
            for i in range(1, windows + 1):
                client.send(OutgoingMessage(topic, b'{"order_id": "o-%d", "amount": 1.5}' % i, tags="TagA"))
                small.run(f"w{i}")
                if i % block == 0:
                    now, own_now = tree_cpu_seconds(pid), time.process_time()
                    blocks.append((i, (now - began) / block, (own_now - own) / block, since_checkpoint(small.table)))
                    began, own = now, own_now
        return blocks
    finally:
        client.close()
        server.down()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows", type=int, default=120)
    parser.add_argument("--block", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir="/dev/shm") as tmp, bench_cluster(Path(tmp) / "cluster") as cluster:
        for name, checkpoints in (("without checkpoints", False), ("with checkpoints", True)):
            for last, cpu, run, behind in run_variant(cluster, Path(tmp), name, checkpoints, args.windows, args.block):
                print(
                    f"{name:20s} windows {last - args.block + 1:4d}-{last:<4d} the server {cpu:5.2f} CPU-s a window, "
                    f"the run's own code {run:5.2f}; {behind:4d} commits since the last checkpoint",
                    flush=True,
                )


if __name__ == "__main__":
    main()
