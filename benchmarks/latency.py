"""How long after a window closes its offsets are committed, with the daemon running: p50 and p95, and where the
seconds go.

    .venv/bin/python -m benchmarks.latency [--windows 30] [--rate 1000] [--grace 60]

A name server and two brokers of our own; one topic of 8 queues fed by the official Java producer at a steady
``--rate`` messages a second (1 KiB each, batches of 10, paced from its start) for the whole run; one ingestion of
one-minute windows (``window.grace_seconds`` = ``--grace``) in a code location of its own, its schedule started,
``dagster-daemon run`` (on a code server of its own) launching each window's run as a process of its own (the default run launcher, the
instance settings the project recommends: ``rocketlake/dagster/dagster.yaml``), Delta on ``/dev/shm``. Spark ``local[2]``: by
default one long-lived ``rocketlake spark-server`` the runs open sessions on (``spark.remote``); ``--spark local``
gives each run a Spark of its own, as before.
The first two windows are left out (the producer starts within the first, the daemon's code server within the
second), then ``--windows`` windows are measured.

For each window, from the instance's event log of its run (every timestamp is the run's own record):

* **close**: the window's end plus the grace: the earliest a run may plan it;
* **tick**: the schedule's run created (the daemon evaluates the schedule at each minute's start);
* **dequeued**: the run queue's daemon handed it to the launcher (RUN_STARTING; every ``dequeue_interval_seconds``);
* **launch**: the run's process started (RUN_START);
* **plan**: the window's ranges planned (the Spark session and the broker calls before it included);
* **write**: the Delta commit made (the Spark job that reads and writes the slice);
* **materialized**: the materialization recorded;
* **committed**: the offsets committed to the brokers (the observation the run logs right after).

The latency is committed - close. The offsets the run committed are then checked against the broker's, read
with ``QUERY_CONSUMER_OFFSET``: each queue's committed offset must be the first offset stored at or after the
last measured window's end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import yaml

from benchmarks.common import bench_cluster, free_port
from rocketlake.local.code_server import LocalCodeServer
from rocketlake.local.peers import java_command
from rocketlake.local.process import ManagedProcess, accepts_connections, stop_all, wait_for

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
QUEUES_PER_BROKER = 4
WARM_UP_WINDOWS = 2
CONNECT_PORT = 29002  # the Spark Connect server's, with --spark connect
KEY_FORMAT = "%Y-%m-%d-%H:%M"  # the partition keys of one-minute windows
#: Marks of a run, in order: (name, how its event is recognised in the run's event log).
MARKS = ("created", "dequeued", "launch", "plan", "write", "materialized", "committed")


@dataclass
class WindowRun:
    key: str
    close: float
    marks: dict[str, float]

    @property
    def latency(self) -> float:
        return self.marks["committed"] - self.close

    def segments(self) -> dict[str, float]:
        """Seconds between consecutive marks, from the close: what each part of the path costs."""
        out, before = {}, self.close
        for name in MARKS:
            out[name] = self.marks[name] - before
            before = self.marks[name]
        return out


def write_config(path: Path, namesrv: str, lake: Path, grace: int, start: datetime, remote: str | None) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "clusters": {"bench": {"namesrv": namesrv}},
                "lake": {"root": str(lake)},
                "spark": {"master": "local[2]", **({"remote": remote} if remote else {})},
                "ingestions": {
                    "latency": {
                        "cluster": "bench",
                        "topic": "latency",
                        "consumer_group": "latency_group",
                        "table": "latency_raw",
                        "consume_from_where": "CONSUME_FROM_FIRST_OFFSET",
                        "window": {
                            "cron": "* * * * *",
                            "timezone": "UTC",
                            "grace_seconds": grace,
                            "start": start.isoformat(),
                        },
                    }
                },
            }
        )
    )
    return path


def run_marks(instance, record) -> dict[str, float]:
    """The marks of one run (see the module text) from its record and event log; a mark not reached is absent."""
    marks = {"created": record.create_timestamp.timestamp()}
    materialized = None
    for entry in instance.all_logs(record.dagster_run.run_id):
        event = entry.dagster_event
        kind = event.event_type_value if event is not None else None
        text = entry.user_message or ""
        if kind in ("RUN_STARTING", "PIPELINE_STARTING"):
            marks.setdefault("dequeued", entry.timestamp)
        elif kind in ("RUN_START", "PIPELINE_START"):
            marks.setdefault("launch", entry.timestamp)
        elif "offsets planned" in text:
            marks.setdefault("plan", entry.timestamp)
        elif text.startswith("Delta commit version"):
            marks.setdefault("write", entry.timestamp)
        elif kind == "ASSET_MATERIALIZATION" and materialized is None:
            materialized = marks["materialized"] = entry.timestamp
        elif kind == "ASSET_OBSERVATION" and materialized is not None:
            marks.setdefault("committed", entry.timestamp)
    return marks


def collect(home: Path, grace: int, keys: list[str]) -> list[WindowRun]:
    from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

    os.environ["DAGSTER_HOME"] = str(home)
    with DagsterInstance.get() as instance:
        found = {}  # the successful run of each window
        for record in instance.get_run_records(RunsFilter(statuses=[DagsterRunStatus.SUCCESS])):
            key = record.dagster_run.tags.get("dagster/partition")
            if key in keys:
                found[key] = run_marks(instance, record)
    runs = []
    for key in keys:
        marks = found.get(key, {})
        missing = [m for m in MARKS if m not in marks]
        if missing:
            raise RuntimeError(f"window {key}: its run has no {', '.join(missing)} (marks found: {marks})")
        runs.append(WindowRun(key, window_end(key) + grace, marks))
    return runs


def window_end(key: str) -> float:
    """Epoch seconds at which the one-minute window of partition ``key`` (``%Y-%m-%d-%H:%M``, UTC) ends."""
    return datetime.strptime(key, KEY_FORMAT).replace(tzinfo=timezone.utc).timestamp() + 60


def materialized_keys(home: Path) -> set[str]:
    from dagster import AssetKey, DagsterInstance

    os.environ["DAGSTER_HOME"] = str(home)
    with DagsterInstance.get() as instance:
        return set(instance.get_materialized_partitions(AssetKey("latency_raw")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows", type=int, default=30)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--grace", type=int, default=60)  # window.grace_seconds' default
    parser.add_argument(
        "--spark",
        choices=["connect", "local"],
        default="connect",
        help="connect: the runs open sessions on one `rocketlake spark-server` (spark.remote); "
        "local: each run starts Spark local[2] of its own",
    )
    args = parser.parse_args()
    total = args.windows + WARM_UP_WINDOWS

    with tempfile.TemporaryDirectory(prefix="rocketlake-latency-", dir="/dev/shm") as tmp:
        tmp_path = Path(tmp)
        home = tmp_path / "dagster_home"
        home.mkdir()
        shutil.copy(ROOT / "rocketlake" / "dagster.yaml", home / "dagster.yaml")
        with bench_cluster(tmp_path / "rocketmq") as cluster:
            cluster.create_topic("latency", QUEUES_PER_BROKER)
            namesrv = cluster.spec.namesrv_address
            now = datetime.now(timezone.utc)
            first = now.replace(second=0, microsecond=0)
            remote = f"sc://127.0.0.1:{CONNECT_PORT}" if args.spark == "connect" else None
            config = write_config(tmp_path / "rocketlake.yaml", namesrv, tmp_path / "lake", args.grace, first, remote)
            env = dict(os.environ, DAGSTER_HOME=str(home), ROCKETLAKE_CONFIG=str(config))
            server = ManagedProcess("spark-connect", tmp_path)
            if remote:
                server.start([str(BIN / "rocketlake"), "spark-server", "--config", str(config)], env, cwd=ROOT)
                wait_for(
                    lambda: accepts_connections(CONNECT_PORT),
                    time.monotonic() + 180,
                    [server],
                    "the Spark Connect server",
                )
            # The daemon loads the location from a long-lived code server, as `rocketlake local up --stack` runs it
            # (a daemon given -m replaces its own code server every minute).
            code_server = LocalCodeServer(tmp_path / "code-server", free_port())
            code_server.start(env, cwd=ROOT)
            location = ["-w", str(code_server.workspace)]
            started = subprocess.run(
                [str(BIN / "dagster"), "schedule", "start", "--start-all", *location],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
            if started.returncode != 0:
                raise RuntimeError(f"starting the schedule failed:\n{started.stderr[-3000:]}")
            count = args.rate * 60 * (total + 3)
            producer_args = [
                "--namesrv",
                namesrv,
                "--topic",
                "latency",
                "--count",
                str(count),
                "--body-size",
                "1024",
                "--batch",
                "10",
                "--rate",
                str(args.rate),
                "--compress-over",
                str(1 << 20),
            ]
            producer, daemon = (ManagedProcess(role, tmp_path) for role in ("producer", "dagster-daemon"))
            producer.start(java_command("ProducerPeer", cluster.spec.state_dir, producer_args), dict(os.environ))
            daemon.start([str(BIN / "dagster-daemon"), "run", *location], env, cwd=ROOT)
            keys = [
                datetime.fromtimestamp(first.timestamp() + 60 * i, timezone.utc).strftime(KEY_FORMAT)
                for i in range(total)
            ]
            print(
                f"windows {keys[0]} .. {keys[-1]}: {args.rate} msg/s, grace {args.grace}s; "
                f"measuring {keys[WARM_UP_WINDOWS]} onwards",
                flush=True,
            )
            try:
                # The daemon writes the runs' materializations to the instance: polled, it has no notification.
                wait_for(
                    lambda: set(keys) <= materialized_keys(home),
                    time.monotonic() + 60 * (total + 4),
                    [producer, daemon],
                    f"the windows {keys[0]} .. {keys[-1]} to land",
                    interval=5,
                )
                time.sleep(5)  # the last run's commit and its observation
            finally:
                stop_all([daemon, producer, server])
                code_server.stop()
            runs = collect(home, args.grace, keys[WARM_UP_WINDOWS:])
            check_offsets(namesrv, runs[-1].key)
    report(runs, args)


def check_offsets(namesrv: str, last_key: str) -> None:
    """Every queue's committed offset (the broker's answer) is the first offset stored at or after the end of the
    last window measured, or later (a window after it may have landed too)."""
    from rocketlake.rocketmq.client import RocketMQClient

    end_ms = int(window_end(last_key) * 1000)
    with RocketMQClient(namesrv) as client:
        for queue in client.queues("latency"):
            committed = client.query_consumer_offset("latency_group", queue)
            boundary = client.search_offset(queue, end_ms, "LOWER")
            if committed < boundary:
                raise RuntimeError(f"{queue}: committed offset {committed} is before the window end's {boundary}")


def report(runs: list[WindowRun], args) -> None:
    latencies = sorted(r.latency for r in runs)
    p50 = statistics.median(latencies)
    p95 = latencies[min(len(latencies) - 1, int(round(0.95 * (len(latencies) - 1))))]
    print(
        f"\n{len(runs)} windows of one minute, {args.rate} msg/s, grace {args.grace}s, Spark {args.spark}: from "
        "close to offsets "
        f"committed p50 {p50:.1f}s, p95 {p95:.1f}s, min {latencies[0]:.1f}s, max {latencies[-1]:.1f}s"
    )
    print("window            latency   " + "  ".join(f"{m:>12}" for m in MARKS))
    for r in runs:
        seg = r.segments()
        print(f"{r.key}  {r.latency:7.1f}s   " + "  ".join(f"{seg[m]:11.1f}s" for m in MARKS))
    medians = {m: statistics.median(r.segments()[m] for r in runs) for m in MARKS}
    print("median            " + " " * 9 + "  ".join(f"{medians[m]:11.1f}s" for m in MARKS))
    print("(each column: seconds from the previous mark; the first from the close)")


if __name__ == "__main__":
    main()
