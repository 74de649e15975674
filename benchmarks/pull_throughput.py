"""Pull throughput: rocketlake's Python client against the Java client, same broker, same data, same run.

    .venv/bin/python -m benchmarks.pull_throughput [--messages 200000] [--body-size 1024]

Two cases: every message in one queue, and the same number spread over 16 queues (8 per broker).
Python: one process and one thread, ``rocketmq.read_ranges`` over the exact ranges (several
pulls in flight per queue on each broker's one connection), messages fully decoded (body,
properties, ids). Java: DefaultLitePullConsumer with assign + seek (``ConsumerPeer --mode bench``),
timed from its first poll to the last message.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from benchmarks.common import bench_cluster, produce_bulk
from rocketlake.rocketmq.client import RocketMQClient
from rocketlake.rocketmq.message_queue import MessageQueue, OffsetRange
from rocketlake.rocketmq.range_reader import DEFAULT_PULLS_IN_FLIGHT, read_ranges
from tests.java_oracles import consume

GROUP = "rocketlake_bench"


def python_pull(namesrv: str, queues: dict[MessageQueue, int], batch: int, in_flight: int) -> tuple[int, int, float]:
    """Read [0, end) of every queue; returns (messages, body bytes, seconds)."""
    client = RocketMQClient(namesrv, timeout=10)
    for mq in queues:  # routes and connections warm, as the Java consumer's start() does before timing
        client.get_max_offset(mq)
    count, size = 0, 0
    started = time.perf_counter()
    for _, messages in read_ranges(
        client,
        [OffsetRange(mq, 0, end) for mq, end in queues.items()],
        consumer_group=GROUP,
        batch_size=batch,
        pulls_in_flight=in_flight,
    ):
        count += len(messages)
        for m in messages:
            size += len(m.body)
    seconds = time.perf_counter() - started
    client.close()
    return count, size, seconds


def java_pull(cluster, topic: str, queues: dict[MessageQueue, int], batch: int) -> tuple[int, int, float]:
    (line,) = consume(
        cluster.spec.namesrv_address,
        cluster.spec.state_dir,
        topic,
        {(mq.broker_name, mq.queue_id): (0, end) for mq, end in queues.items()},
        bench=True,
        pull_batch_size=batch,
    )
    return line["messages"], line["bytes"], line["seconds"]


def report(label: str, python: tuple[int, int, float], java: tuple[int, int, float]) -> str:
    def rates(r):
        return r[0] / r[2], r[1] / r[2] / 1024 / 1024

    (pm, pb), (jm, jb) = rates(python), rates(java)
    return (
        f"{label:<12} python {python[0]:>9,} msgs {pm:>10,.0f} msg/s {pb:>7.1f} MB/s | "
        f"java {java[0]:>9,} msgs {jm:>10,.0f} msg/s {jb:>7.1f} MB/s | ratio {pm / jm:.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--body-size", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=32, help="messages per pull (the broker caps 1 KiB at 32)")
    parser.add_argument("--in-flight", type=int, default=DEFAULT_PULLS_IN_FLIGHT, help="pulls in flight per queue")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds; the best of each is reported")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rocketlake-bench-") as tmp, bench_cluster(Path(tmp)) as cluster:
        lines = []
        for label, topic, queue_count, brokers in (
            ("1 queue", "bench_1q", 1, ("broker-a",)),
            ("16 queues", "bench_16q", 8, ("broker-a", "broker-b")),
        ):
            cluster.create_topic(topic, queue_count, brokers)
            seconds = produce_bulk(cluster, topic, args.messages, args.body_size)
            print(
                f"produced {args.messages:,} x {args.body_size} B into {topic} with the Java producer "
                f"in {seconds:.1f}s",
                flush=True,
            )
            client = RocketMQClient(cluster.spec.namesrv_address)
            queues = {mq: client.get_max_offset(mq) for mq in client.queues(topic)}
            best_py, best_java = None, None
            for _ in range(args.rounds):
                py = python_pull(cluster.spec.namesrv_address, queues, args.batch, args.in_flight)
                java = java_pull(cluster, topic, queues, args.batch)
                assert py[0] == java[0] == args.messages, (py, java)
                best_py = py if best_py is None or py[2] < best_py[2] else best_py
                best_java = java if best_java is None or java[2] < best_java[2] else best_java
            lines.append(report(label, best_py, best_java))
            print(lines[-1], flush=True)
        print("\nsummary (best of rounds, same broker and data, decode included on both sides):")
        print("\n".join(lines))


if __name__ == "__main__":
    main()
