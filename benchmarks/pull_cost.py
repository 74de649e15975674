"""The fixed cost of a pull in the Spark reader's path: CPU per million with pulls of 32 and of 1024.

    .venv/bin/python -m benchmarks.pull_cost [--messages 200000] [--rounds 5] [--by-part] [--checkout DIR ...]

The reader's own code (``RocketMQReader.read`` of each queue's range, Arrow batches out, no Spark around it) in
this process, on two brokers of our own whose transfer caps are raised (1024 messages and 1 MiB a pull, as
``ingest_vs_kafka`` raises them), so that pulls of 32 are what a stock broker answers and pulls of 1024 carry the
same records in 32 times fewer answers. The rounds alternate; each figure is the median of its rounds.
``(cpu32 - cpu1024) / (pulls32 - pulls1024)`` is a pull's cost beyond its records: the request, its send, the
answer's header, the bookkeeping. Run it on two commits to compare them.

``--by-part`` then reads once more with pulls of each size, its steps timed in the CPU time of the thread that runs
them (``time.thread_time``: the connection's idle reader thread is not counted in the caller's steps): the socket
send, a read of the socket (poll, recv, frames), the answer's parsing (with the scan of its records), and the
records into Arrow (``record_batch``). The wrappers cost about a microsecond a call, so the timed round is slower.

``--checkout DIR`` (repeatable) compares commits in one run, on the same brokers and records: each round reads with
this checkout's reader and with each other checkout's (``git worktree add DIR COMMIT``, or ``git archive``), each in
a process of its own started in that directory (``benchmarks/read_checkout.py``), three reads a process of which the
first, with its connections and caches made, is left out. A figure of one run is only comparable with the figures of
the same run: from one run to the next they move by a fifth.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
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


@contextmanager
def timed_parts() -> Iterator[tuple[collections.Counter, collections.Counter]]:
    """(CPU seconds, calls) per step of the reader's path while in the block: see the module's text."""
    from rocketlake.rocketmq import broker, connection, pull
    from rocketlake.spark import source

    spent: collections.Counter = collections.Counter()
    calls: collections.Counter = collections.Counter()
    steps = [
        (connection._Channel, "send", "socket send"),
        (connection._Channel, "_read", "socket read (poll, recv, frames)"),
        (broker, "parse_pull_response", "answer parsed (with the scan)"),
        (pull, "scan_records", "records scanned"),
        (source, "record_batch", "records into Arrow"),
    ]
    originals = [(owner, name, getattr(owner, name)) for owner, name, _ in steps]

    def timed(function, label):
        def call(*args, **kwargs):
            began = time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                spent[label] += time.thread_time() - began
                calls[label] += 1

        return call

    for (owner, name, label), (_, _, function) in zip(steps, originals):
        setattr(owner, name, timed(function, label))
    try:
        yield spent, calls
    finally:
        for owner, name, function in originals:
            setattr(owner, name, function)


def compare_checkouts(namesrv: str, messages: int, rounds: int, checkouts: list[Path]) -> dict[Path, dict[int, float]]:
    """CPU seconds of a read per checkout and pull size: in each round, the checkouts alternated, the least of a
    process's second and third reads; over the rounds, the median."""
    child = Path(__file__).with_name("read_checkout.py")
    run_child = f"import runpy; runpy.run_path({str(child)!r}, run_name='__main__')"
    cpu: dict[Path, dict[int, list[float]]] = {c: {32: [], 1024: []} for c in checkouts}
    for _ in range(rounds):
        for checkout in checkouts:
            for batch in (32, 1024):
                out = subprocess.run(
                    [sys.executable, "-c", run_child, namesrv, TOPIC, str(batch), "3"],
                    cwd=checkout,
                    capture_output=True,
                    text=True,
                    check=False,
                )
                if out.returncode:
                    raise SystemExit(f"{checkout}: {out.stderr[-2000:]}")
                reads = [figure.split(":") for figure in out.stdout.split()]
                assert all(int(rows) == messages for rows, _ in reads), (checkout, batch, reads)
                cpu[checkout][batch].append(min(float(seconds) for _, seconds in reads[1:]))
    return {c: {batch: statistics.median(s) for batch, s in by_batch.items()} for c, by_batch in cpu.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--by-part", action="store_true", help="then one timed read per pull size, step by step")
    parser.add_argument(
        "--checkout", type=Path, action="append", default=[], help="another checkout's reader, compared in one run"
    )
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
        pulls = {batch: sum(-(-(r.end - r.start) // batch) for r in ranges) for batch in (32, 1024)}
        if args.checkout:
            this = Path(__file__).resolve().parent.parent
            medians = compare_checkouts(namesrv, args.messages, args.rounds, [this, *args.checkout])
            for checkout, cpu_of in medians.items():
                beyond = (cpu_of[32] - cpu_of[1024]) / (pulls[32] - pulls[1024])
                print(
                    f"{checkout}: CPU a million {cpu_of[32] / args.messages * 1e6:.2f} s with pulls of 32, "
                    f"{cpu_of[1024] / args.messages * 1e6:.2f} s with pulls of 1024; a pull beyond its records "
                    f"{beyond * 1e6:.0f} us"
                )
            return
        read_all(namesrv, ranges, 32)  # connections, routes, imports and caches warm
        cpu: dict[int, list[float]] = {32: [], 1024: []}
        for _ in range(args.rounds):
            for batch in cpu:
                rows, seconds = read_all(namesrv, ranges, batch)
                assert rows == args.messages, (batch, rows)
                cpu[batch].append(seconds)
        per_million = {batch: statistics.median(s) / args.messages * 1e6 for batch, s in cpu.items()}
        beyond = (statistics.median(cpu[32]) - statistics.median(cpu[1024])) / (pulls[32] - pulls[1024])
        for batch in cpu:
            print(
                f"pulls of {batch:>4}: {pulls[batch]:>6,} pulls, CPU {per_million[batch]:.2f} s a million "
                f"(rounds: {', '.join(f'{s:.2f}' for s in cpu[batch])} s)"
            )
        print(f"a pull beyond its records: {beyond * 1e6:.0f} us")
        if args.by_part:
            for batch in cpu:
                with timed_parts() as (spent, calls):
                    rows, seconds = read_all(namesrv, ranges, batch)
                print(f"pulls of {batch:>4}, timed by step: CPU {seconds / rows * 1e6:.2f} us a message in all")
                for label, part in spent.most_common():
                    print(
                        f"  {label:<34} {part / rows * 1e6:5.2f} us a message, {calls[label]:>6,} calls, "
                        f"{part / calls[label] * 1e6:7.1f} us a call"
                    )


if __name__ == "__main__":
    main()
