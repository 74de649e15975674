"""What consume traces cost a landing (issue 50): the same window landed without and with a cluster's ``trace: true``.

    .venv/bin/python -m benchmarks.trace_cost [--sizes 1000,60000] [--body-sizes 1024,100] [--rounds 3]

For each window size and body size the Java producer fills one window of 8 queues (4 a broker). Each round lands it
twice, each time by a new group into a new table, on one ``local[2]`` Spark: the landing alone (planning, the Spark job,
the Delta commit: ``land_entry``), and the landing followed by what the asset does after the offsets when the cluster
traces (``engine.traces.trace_landing``: the read-back of up to ``trace_max_per_window`` landed ids and keys, the trace
messages sent to ``RMQ_SYS_TRACE_TOPIC``). The two alternate in order from round to round; the first round is cold and
left out of the medians. Printed per size: wall seconds and CPU seconds (Spark's JVM, its Python workers, this
process, the brokers) of the landing and of the traces after it, the traces' share of each, and the trace bytes sent
against the bodies landed.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.common import CpuSeconds, bench_cluster, cluster_pids, produce_bulk
from rocketlake.engine.broker_access import GroupBroker
from rocketlake.engine.config import parse_config
from rocketlake.engine.ingest import plan_windows
from rocketlake.engine.ledger import LedgerEntry
from rocketlake.engine.traces import trace_messages
from rocketlake.engine.windows import StoreTimeWindow
from rocketlake.rocketmq.client import RocketMQClient
from rocketlake.spark.materialize import SparkLake, land_entry
from rocketlake.spark.session import spark_session

TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
QUEUES_PER_BROKER = 4


def fill(cluster, topic: str, count: int, body_size: int) -> StoreTimeWindow:
    """``count`` messages in a window of store time of their own, closed when this returns."""
    cluster.create_topic(topic, QUEUES_PER_BROKER)
    start = int(time.time() * 1000)
    produce_bulk(cluster, topic, count, body_size=body_size)
    end = int(time.time() * 1000) + 1
    time.sleep(max(0.0, end / 1000 - time.time()) + 0.01)  # the window's end is past: it is closed (grace 0)
    return StoreTimeWindow(start, end)


def config(namesrv: str, topic: str, group: str, most: int):
    return parse_config(
        {
            "clusters": {"bench": {"namesrv": namesrv, "trace": True, "trace_max_per_window": most}},
            "ingestions": {
                "bench": {
                    "cluster": "bench",
                    "topic": topic,
                    "consumer_group": group,
                    "table": group,
                    "consume_from_where": "CONSUME_FROM_FIRST_OFFSET",
                    "window": {"cron": "* * * * *", "start": "1970-01-01", "grace_seconds": 0},
                }
            },
        }
    )


def land_once(cluster, spark, lake: Path, topic: str, window: StoreTimeWindow, group: str, trace: bool, most: int):
    """(seconds, CPU by part) of the landing, then of its traces (zero without): ``traced``, ``bytes sent``."""
    namesrv = cluster.spec.namesrv_address
    cfg = config(namesrv, topic, group, most).ingestions["bench"]
    options = {"namesrv": namesrv}
    table = str(lake / group)
    parts = {"rocketmq": cluster_pids(cluster)}
    client = RocketMQClient(namesrv, timeout=10)
    try:
        with CpuSeconds(parts) as landing_cpu:
            began = time.perf_counter()
            broker = GroupBroker(client, topic, cfg.consumer_group, with_retry_topic=False)
            queues = broker.subscribed_queues()
            entry = LedgerEntry("bench", group, group, plan_windows(broker, queues, [("w", window)]))
            report = land_entry(spark, options, cfg, table, entry, len(queues), lambda *_: None)
            landing_s = time.perf_counter() - began
        (accounting,) = report.accounting
        assert accounting.balanced and accounting.rows == accounting.planned, accounting
        if not trace:
            return accounting.rows, landing_s, landing_cpu.seconds, 0.0, {}, 0, 0
        with CpuSeconds(parts) as trace_cpu:
            began = time.perf_counter()
            # engine.traces.trace_landing, unrolled to count the bytes it sends
            consumed = SparkLake(spark, options, cfg, table).landed_messages(entry, most)
            sent_bytes = 0
            from rocketlake.rocketmq.send import OutgoingMessage

            for message in trace_messages(group, consumed, int(time.time() * 1000), 0):
                body = message.body.encode("utf-8")
                client.send(OutgoingMessage(topic=TRACE_TOPIC, body=body, keys=message.keys))
                sent_bytes += len(body)
            trace_s = time.perf_counter() - began
        return accounting.rows, landing_s, landing_cpu.seconds, trace_s, trace_cpu.seconds, len(consumed), sent_bytes
    finally:
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,60000", help="messages a window")
    parser.add_argument("--body-sizes", default="1024,100")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--most", type=int, default=10_000, help="trace_max_per_window (its default)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    bodies = [int(s) for s in args.body_sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="rocketlake-traces-") as tmp:
        tmp_path = Path(tmp)
        with bench_cluster(tmp_path / "state", broker_properties={"traceTopicEnable": "true"}) as cluster:
            spark = spark_session("local[2]", {"spark.driver.memory": "2g"})
            spark.range(1).count()
            summary = []
            for body_size in bodies:
                for size in sizes:
                    topic = f"bench_traces_{size}_{body_size}"
                    window = fill(cluster, topic, size, body_size)
                    rounds: dict[bool, list] = {False: [], True: []}
                    for r in range(args.rounds):
                        for trace in (False, True) if r % 2 == 0 else (True, False):
                            group = f"g_{size}_{body_size}_{r}_{'on' if trace else 'off'}"
                            figures = land_once(
                                cluster, spark, tmp_path / "lake", topic, window, group, trace, args.most
                            )
                            rounds[trace].append(figures)
                            rows, landing_s, landing_cpu, trace_s, trace_cpu, traced, sent = figures
                            print(
                                f"{size:>7,} x {body_size:>4} B, round {r + 1}, trace {'on ' if trace else 'off'}: "
                                f"landing {landing_s:5.2f} s, CPU {sum(landing_cpu.values()):5.2f} s; traces "
                                f"{trace_s:5.2f} s, CPU {sum(trace_cpu.values()) if trace else 0:5.2f} s "
                                f"({traced:,} traced, {sent:,} bytes)",
                                flush=True,
                            )
                    summary.append((size, body_size, rounds))
            print(
                "\nsummary (medians of the rounds after the first; CPU: Spark's JVM + Python workers + this process "
                "+ brokers):"
            )
            for size, body_size, rounds in summary:
                warm = {t: runs[1:] or runs for t, runs in rounds.items()}
                landing = statistics.median(f[1] for f in warm[False] + warm[True])
                landing_cpu = statistics.median(sum(f[2].values()) for f in warm[False] + warm[True])
                trace_s = statistics.median(f[3] for f in warm[True])
                trace_cpu = statistics.median(sum(f[4].values()) for f in warm[True])
                sent = statistics.median(f[6] for f in warm[True])
                print(
                    f"  {size:>7,} x {body_size:>4} B: landing {landing:.2f} s / {landing_cpu:.2f} CPU-s; traces after "
                    f"it {trace_s:.2f} s / {trace_cpu:.2f} CPU-s = {100 * trace_s / landing:.1f}% of the wall time, "
                    f"{100 * trace_cpu / landing_cpu:.1f}% of the CPU; trace bytes {sent / (size * body_size):.1%} "
                    f"of the bodies"
                )


if __name__ == "__main__":
    main()
