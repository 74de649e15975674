"""The fixed cost of a pull in the Spark reader's path: CPU per million with pulls of 32 and of 1024.

    .venv/bin/python -m benchmarks.pull_cost [--messages 200000] [--rounds 5]

The reader's own code (``RocketMQReader.read`` of each queue's range, Arrow batches out, no Spark around it) in
this process, on two brokers of our own whose transfer caps are raised (1024 messages and 1 MiB a pull, as
``ingest_vs_kafka`` raises them), so that pulls of 32 are what a stock broker answers and pulls of 1024 carry the
same records in 32 times fewer answers. The rounds alternate; each figure is the median of its rounds.
``(cpu32 - cpu1024) / (pulls32 - pulls1024)`` is a pull's cost beyond its records: the request, its send, the
answer's header, the bookkeeping. Run it on two commits to compare them.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.common import bench_cluster, produce_bulk
from benchmarks.ingest_vs_kafka import RAISED_TRANSFER_CAPS
from rocketlake.engine.options import parse_options
from rocketlake.rocketmq.client import RocketMQClient
from rocketlake.rocketmq.message_queue import OffsetRange
from rocketlake.spark.source import Chunk, RocketMQReader

TOPIC = "bench_pull_cost"


def read_all(namesrv: str, ranges: list[OffsetRange], batch: int) -> tuple[int, float]:
    """(rows, CPU seconds of this process) reading every range through the reader."""
    reader = RocketMQReader(parse_options({"namesrv": namesrv, "topic": TOPIC, "pullBatchSize": str(batch)}))
    rows, began = 0, time.process_time()
    for offsets in ranges:
        for batch_out in reader.read(Chunk(offsets)):
            rows += batch_out.num_rows
    return rows, time.process_time() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="rocketlake-bench-") as tmp,
        bench_cluster(Path(tmp), broker_properties=RAISED_TRANSFER_CAPS) as cluster,
    ):
        cluster.create_topic(TOPIC, 8, ("broker-a", "broker-b"))
        produce_bulk(cluster, TOPIC, args.messages, 1024)
        namesrv = cluster.spec.namesrv_address
        client = RocketMQClient(namesrv)
        ranges = [OffsetRange(mq, 0, client.get_max_offset(mq)) for mq in client.queues(TOPIC)]
        read_all(namesrv, ranges, 32)  # connections, routes, imports and caches warm
        cpu: dict[int, list[float]] = {32: [], 1024: []}
        for _ in range(args.rounds):
            for batch in cpu:
                rows, seconds = read_all(namesrv, ranges, batch)
                assert rows == args.messages, (batch, rows)
                cpu[batch].append(seconds)
        per_million = {batch: statistics.median(s) / args.messages * 1e6 for batch, s in cpu.items()}
        pulls = {batch: sum(-(-(r.end - r.start) // batch) for r in ranges) for batch in cpu}
        beyond = (statistics.median(cpu[32]) - statistics.median(cpu[1024])) / (pulls[32] - pulls[1024])
        for batch in cpu:
            print(
                f"pulls of {batch:>4}: {pulls[batch]:>6,} pulls, CPU {per_million[batch]:.2f} s a million "
                f"(rounds: {', '.join(f'{s:.2f}' for s in cpu[batch])} s)"
            )
        print(f"a pull beyond its records: {beyond * 1e6:.0f} us")


if __name__ == "__main__":
    main()
