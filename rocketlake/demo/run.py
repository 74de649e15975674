"""The README's first command (`make demo`): the whole product on its embedded defaults.

Start the local cluster, write the demo's configuration (the project's, with windows starting a few
minutes before the demo's data, so the UI's partitions show them), create the demo topic (4 queues on each broker), produce JSON orders
with the official Java client across several one-minute windows (store time is the broker's
clock, so this waits for real minutes to pass), wait until the last window is closed, materialize
all windows through Dagster as one single-run backfill, then print rows per window and the
consumer group's committed offsets per queue, read back from the broker.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import yaml

from rocketlake.dagster.launch import dagster_home, run_windows
from rocketlake.dagster.translator import table_job_name
from rocketlake.local.cluster import LocalCluster
from rocketlake.local.peers import produce
from rocketlake.local.spark_server import server_for
from rocketlake.local.spec import ClusterSpec

REGIONS = ("north", "south", "east", "west")
DEMO_CONFIG = Path(".rocketlake/demo/rocketlake.yaml")
DEMO_MODULE = "rocketlake.demo.definitions"  # rocketlake's definitions and the demo's downstream asset


def sample_orders(topic: str, count: int, seed: int = 7, first: int = 0) -> list[dict]:
    rng = random.Random(seed + first)
    orders = []
    for i in range(first, first + count):
        region = REGIONS[i % len(REGIONS)]
        body = {
            "order_id": f"o-{i:06d}",
            "customer": f"c-{rng.randrange(1000):04d}",
            "amount": round(rng.uniform(1, 500), 2),
            "region": region,
        }
        orders.append({"topic": topic, "tags": region, "keys": [body["order_id"]], "body": json.dumps(body)})
    return orders


def wait_until(epoch_s: float) -> None:
    # Waiting for wall-clock time to pass is the point here: windows are minutes of broker time.
    while time.time() < epoch_s:
        time.sleep(min(1.0, max(0.0, epoch_s - time.time())))


#: Seconds a window's batch of orders is given to be sent (a few dozen from the warm Java peer take one or two; more
#: on a loaded machine): the first batch waits for the next minute when fewer are left in this one, so that a window
#: holds its batch whole (each later batch starts a second into a minute of its own).
SEND_MARGIN_S = 10


def batch_start(now: float, first: bool) -> float:
    """When a window's batch may be sent: at once for the first one if ``SEND_MARGIN_S`` are left in the current
    minute, else one second into the next minute."""
    next_minute = (int(now) // 60 + 1) * 60
    return now if first and next_minute - now >= SEND_MARGIN_S else next_minute + 1


def minute_key(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, tz=timezone.utc).strftime("%Y-%m-%d-%H:%M")


def run_demo(spec: ClusterSpec, topic: str, messages: int, windows: int = 3, s3_port: int | None = None) -> int:
    """``s3_port``: land in the local S3 server's bucket (started on that port) instead of the local lake."""
    from rocketlake.engine.config import CONFIG_ENV, config_path, load_config
    from rocketlake.local.s3 import LocalS3

    s3 = None if s3_port is None else LocalS3(spec.state_dir / "s3", port=s3_port)
    # The demo's partitions start a few minutes before its data, so the UI's partition bar shows its windows.
    demo_config = write_demo_config(
        config_path(),
        datetime.fromtimestamp((time.time() // 60 - 3) * 60, tz=timezone.utc),
        lake=None if s3 is None else s3.lake_settings("demo"),
    )
    os.environ[CONFIG_ENV] = str(demo_config.absolute())
    config = load_config(demo_config)
    ingestion_name, ingestion = next((n, i) for n, i in config.ingestions.items() if i.topic == topic)
    cluster = LocalCluster(spec)
    print(f"1/5 starting the local RocketMQ cluster (state in {spec.state_dir}) ...", flush=True)
    cluster.up(progress=lambda line: print(line, flush=True))
    if s3 is not None:
        print("    and the local S3 server, the lake's bucket ...", flush=True)
        s3.up(progress=lambda line: print(line, flush=True))
        os.environ.update(s3.credentials_env())  # the variables the demo's lake.s3 names, for its runs and server
    connect = server_for(config.spark, spec.state_dir, config.lake, metastore=bool(config.catalog_tables))
    if connect is not None:
        if connect.lake_refusal() is not None:  # the last demo's, on the local lake: this one's lake is on S3
            print("    restarting the Spark Connect server with the S3 lake's settings ...", flush=True)
            connect.down()
        print("    and the Spark Connect server every run opens its session on (spark.remote) ...", flush=True)
        connect.up(progress=lambda line: print(line, flush=True))
    print(f"2/5 creating topic {topic} with 4 queues on each broker ...", flush=True)
    cluster.create_topic(topic, 4)

    print(
        f"3/5 producing {messages} JSON orders over {windows} one-minute windows (this waits for the minutes "
        "to pass: windows are broker store time) ...",
        flush=True,
    )
    keys, per_window = [], messages // windows
    for w in range(windows):
        wait_until(batch_start(time.time(), first=w == 0))
        batch = sample_orders(topic, per_window if w < windows - 1 else messages - per_window * w, first=w * per_window)
        began = time.time()
        produce(spec.namesrv_address, spec.state_dir, batch)
        window = minute_key(began)
        # A batch that still crossed into the next minute (a stalled machine) is in both windows: both are landed.
        keys += sorted({window, minute_key(time.time())})
        print(f"    window {window}: sent {len(batch)}", flush=True)
    close_at = (int(time.time()) // 60 + 1) * 60 + ingestion.window.grace_seconds + 1
    print(
        f"4/5 waiting until window {keys[-1]} is closed (end + {ingestion.window.grace_seconds}s grace) ...", flush=True
    )
    wait_until(close_at)

    print(
        f"5/5 materializing {keys[0]} .. {keys[-1]} through Dagster (one run, one Spark job), then the "
        f"downstream {ingestion.table}_by_region and {ingestion.table}_customers ...",
        flush=True,
    )
    result = run_windows(ingestion.table, sorted(set(keys)), module=DEMO_MODULE)
    if result.success:
        result = run_windows(
            ingestion.table,
            sorted(set(keys)),
            module=DEMO_MODULE,
            job_name=table_job_name(f"{ingestion.table}_by_region"),
        )
    if result.success:  # unpartitioned: it reads what changed in the table since its last run
        result = run_windows(
            ingestion.table, [], module=DEMO_MODULE, job_name=table_job_name(f"{ingestion.table}_customers")
        )
    if not result.success:
        print("the Dagster run failed; see the events above")
        return 1
    _report(config, cluster, ingestion)
    print(
        f"\nopen the Dagster UI on the demo's instance, with orders flowing and windows landing: make ui\n"
        f"  (.venv/bin/rocketlake ui: dg dev on DAGSTER_HOME={dagster_home().absolute()} with {CONFIG_ENV}="
        f"{demo_config.absolute()})\n"
        f"stop the cluster with: .venv/bin/rocketlake local down   [ingestion {ingestion_name}]"
    )
    return 0


def write_demo_config(source: Path, start: datetime, lake: dict | None = None) -> Path:
    """The project's configuration with every window starting at ``start`` (and ``lake`` as its lake, if given),
    validated, in ``DEMO_CONFIG``."""
    from rocketlake.engine.config import load_config

    raw = yaml.safe_load(source.read_text())
    if lake is not None:
        raw["lake"] = lake  # on S3 too, the runs keep the Spark Connect server: it starts with the lake's settings
    for ingestion in raw.get("ingestions", {}).values():
        ingestion.setdefault("window", {})["start"] = start.isoformat()
    DEMO_CONFIG.parent.mkdir(parents=True, exist_ok=True)
    DEMO_CONFIG.write_text(
        f"# Written by `rocketlake demo` from {source}: windows start at the demo's data.\n"
        + yaml.safe_dump(raw, sort_keys=False)
    )
    load_config(DEMO_CONFIG)
    return DEMO_CONFIG


def _report(config, cluster: LocalCluster, ingestion) -> None:
    from rocketlake.dagster.spark_resource import SparkResource
    from rocketlake.delta.delta_rs import read_columns
    from rocketlake.delta.storage import apply_lake, delta_rs_options

    lake = config.lake

    def spark_session():  # only for a table whose features delta-rs does not read
        opened = SparkResource.of_config(config.spark, lake).session()
        apply_lake(opened, lake)
        return opened

    path = lake.table_path(ingestion.table)
    print(f"\nthe table: {path}")
    read, reader = read_columns(
        path, ["window_start", "broker_name", "queue_id"], delta_rs_options(lake), spark_session
    )
    rows = read.to_pylist()
    print(f"\nrows per window (Delta, read with {reader}):")
    for window, n in sorted(Counter(r["window_start"] for r in rows).items()):
        print(f"  {window:%Y-%m-%d %H:%M}  {n:>6}")
    print(f"\ncommitted offsets of group {ingestion.consumer_group} (mqadmin consumerProgress):")
    print(f"  {'broker':<10} {'queue':>5} {'broker max':>11} {'committed':>10}")
    for q in sorted(
        cluster.mqadmin().consumer_progress(ingestion.consumer_group, ingestion.topic),
        key=lambda q: (q.topic, q.broker_name, q.queue_id),
    ):
        print(f"  {q.broker_name:<10} {q.queue_id:>5} {q.broker_offset:>11} {q.consumer_offset:>10}")
