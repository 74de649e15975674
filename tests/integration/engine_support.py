"""The engine's runs as the asset makes them, below Dagster: the helpers the engine-tier tests share."""

from __future__ import annotations

import base64
import json
import subprocess
import time
from pathlib import Path

from deltalake import DeltaTable

from rocketlake import jars
from rocketlake.dagster.rocketmq_resource import RocketMQResource
from rocketlake.engine.broker_access import group_broker
from rocketlake.engine.run import Alone, Committed, Landed, LandingRequest, run
from rocketlake.engine.windows import StoreTimeWindow
from rocketlake.rocketmq.client import RocketMQClient
from rocketlake.rocketmq.message_queue import MessageQueue
from rocketlake.spark.materialize import SparkLake
from tests.integration.ingestion_support import order, wait_until
from tests.unit.support import Lines, Recorded, ingestion_config

#: Windows of any store time, closed at their end: the engine tests hand the engine windows of their own.
ANY_WINDOW = {"cron": "* * * * *", "start": "1970-01-01", "grace_seconds": 0}


def from_first(topic: str, group: str, **ingestion):
    """The ingestion of ``topic`` by a new ``group`` from the queues' first offsets, windows as the test gives them,
    with ``ingestion``'s keys on top."""
    return ingestion_config(
        topic=topic,
        consumer_group=group,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        window=ANY_WINDOW,
        **ingestion,
    )


def now_ms() -> int:
    return int(time.time() * 1000)


def send_in_two_windows(java_producer, topic: str, per_window: int) -> list[tuple[str, StoreTimeWindow]]:
    """Two batches, each alone in a window of store time: [before the first send, after it), [then, after the
    second). The brokers stamp store times on this machine's clock, so the bounds come from it."""
    start = now_ms()
    java_producer([order(i, topic) for i in range(per_window)])
    boundary = now_ms() + 1  # every message of the first batch is stored before this instant
    wait_until(boundary / 1000)
    java_producer([order(i, topic) for i in range(per_window, 2 * per_window)])
    end = now_ms() + 1
    wait_until(end / 1000)  # the second window is closed (grace 0) once this instant has passed
    return [("w1", StoreTimeWindow(start, boundary)), ("w2", StoreTimeWindow(boundary, end))]


class Engine:
    """One ingestion's runs as the asset makes them, on the session's cluster, Spark and a Delta table."""

    def __init__(self, cluster, spark, path, cfg, *, resource: RocketMQResource | None = None, **lake_options):
        """``resource``: the cluster's settings (default: its name server alone)."""
        resource = resource or RocketMQResource(namesrv=cluster.spec.namesrv_address)
        self.client = RocketMQClient(cluster.spec.namesrv_address, namespace_v2=resource.namespace_v2)
        self.broker = group_broker(self.client, cfg)
        self.lake = SparkLake(spark, resource.source_options(), cfg, str(path), **lake_options)
        self.cfg = cfg
        self.recorded = Recorded()

    def run(self, run_id: str, windows, *, backfill: bool = False, now: int | None = None, only=None):
        """Runs to the end; returns the landing's event. An unbalanced run raises ``Unbalanced``, recording nothing.
        ``now``: the planner's clock (default: this machine's, which the brokers stamp store times with). ``only``:
        the queues a narrowed run takes (a catch-up's, a rebalance run's)."""
        request = LandingRequest(
            "orders", run_id, windows, now or now_ms(), 0, start_at_group_position=not backfill, only_queues=only
        )
        events = run(self.broker, self.lake, self.recorded, Alone(), self.cfg, request, Lines())
        landed = next(events)
        assert isinstance(landed, Landed)
        if landed.balanced:
            self.recorded.record(landed.slice.ledger)
        committed = [e for e in events if isinstance(e, Committed)]  # raises Unbalanced when not balanced
        assert len(committed) == 1
        return landed

    def offsets(self, topic: str) -> dict[tuple[str, int], int | None]:
        return {
            (mq.broker_name, mq.queue_id): self.client.query_consumer_offset(self.cfg.consumer_group, mq)
            for mq in self.client.queues(topic)
        }


def stored(client: RocketMQClient, mq: MessageQueue, count: int, within: float = 10) -> None:
    """Return once ``mq`` holds ``count`` messages (the broker indexes what it stored asynchronously)."""
    deadline = time.monotonic() + within
    while client.get_max_offset(mq) < count:
        assert time.monotonic() < deadline, f"{mq} did not hold {count} messages within {within} s"
        time.sleep(0.05)  # polling the broker's queue, bounded by the deadline above


def send_window(java_producer, topic: str, bodies: list[dict], raw: list[bytes] = ()) -> StoreTimeWindow:
    """``bodies`` (as JSON) and ``raw`` bodies alone in a window of store time, closed when this returns."""
    start = now_ms()
    java_producer(
        [{"topic": topic, "tags": "TagA", "keys": [f"k{i}"], "body": json.dumps(body)} for i, body in enumerate(bodies)]
        + [
            {"topic": topic, "tags": "TagA", "keys": [f"r{i}"], "body_base64": base64.b64encode(body).decode()}
            for i, body in enumerate(raw)
        ]
    )
    end = now_ms() + 1
    wait_until(end / 1000)
    return StoreTimeWindow(start, end)


def assert_landed_once_at_the_ends(engine, cluster, client: RocketMQClient, topic: str, group: str, sent: int):
    """The table holds orders o-0 .. o-<sent - 1>, each once, and the group's offsets are the queues' ends, as the
    engine and mqadmin consumerProgress read them."""
    rows = DeltaTable(str(engine.lake.table_path)).to_pyarrow_table(columns=["keys"])
    assert sorted(rows.column("keys").to_pylist()) == sorted(f"o-{i}" for i in range(sent))  # none lost, none twice
    ends = {(q.broker_name, q.queue_id): client.get_max_offset(q) for q in client.queues(topic)}
    assert sum(ends.values()) == sent
    assert engine.offsets(topic) == ends
    assert {
        (p.broker_name, p.queue_id): p.consumer_offset for p in cluster.mqadmin().consumer_progress(group, topic)
    } == ends


#: The 5.x gRPC client (rocketmq-client-java), one shaded jar with its gRPC and Protobuf inside.
GRPC_CLIENT_JAVA = jars.JarSet(
    "rocketmq-client-java-5.0.8", (jars.Artifact("org.apache.rocketmq", "rocketmq-client-java", "5.0.8"),)
)


def grpc_client(classes: Path):
    """``run([command, endpoint, ...], stdin="")``: ``GrpcClient.java``, a 5.x application on the gRPC client
    (``consume`` as a SimpleConsumer, ``produce-fifo`` as a FIFO producer), compiled into ``classes``."""
    return java_program(classes, "GrpcClient", ":".join(map(str, jars.resolve(GRPC_CLIENT_JAVA))))


def java_program(classes: Path, program: str, classpath: str):
    """``run(args, stdin="")``: what a Java program of ``tests/integration/java`` (compiled here, once, into
    ``classes`` against ``classpath``) prints on stdout; it must exit 0."""
    source = Path(__file__).parent / "java" / f"{program}.java"
    subprocess.run(
        ["javac", "-nowarn", "-cp", classpath, "-d", str(classes), str(source)],
        check=True,
        capture_output=True,
        timeout=120,
    )

    def run(args: list[str], stdin: str = "") -> str:
        done = subprocess.run(
            ["java", "-cp", f"{classes}:{classpath}", program, *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    return run


def java_body_encoder(classes: Path, program: str, classpath: str):
    """``encode(args, records)``: the bodies a Java program of ``tests/integration/java`` encodes, one JSON record
    a line in, one body in base64 a line out."""
    run = java_program(classes, program, classpath)

    def encode(args: list[str], records: list[dict]) -> list[bytes]:
        return [base64.b64decode(line) for line in run(args, "\n".join(map(json.dumps, records))).split()]

    return encode
