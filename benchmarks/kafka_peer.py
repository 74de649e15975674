"""Spark's own Kafka source landing a topic in Delta: the peer rocketlake's figures are set against.

    .venv/bin/python -m benchmarks.kafka_peer [--messages 20000] [--data-dir /dev/shm]

rocketlake lands RocketMQ in Delta through its own Python reader; the question a reader of the
benchmarks asks is "how does that compare with what Spark does for Kafka out of the box?". This
module holds everything that answer needs, and nothing of rocketlake's pipeline:

* the jars of a single-node Kafka broker (KRaft, Maven Central) and of Spark's Kafka source,
  resolved and cached with ``rocketlake.jars`` like every other jar of the project;
* ``LocalKafka``, one broker+controller JVM on free loopback ports, with the official Java tools
  to create topics, fill them (``ProducerPerformance``) and read end offsets;
* ``spark_kafka_to_delta`` / ``spark_kafka_read_noop``: Spark's batch Kafka read, written to Delta or
  to the ``noop`` sink (the read's own cost).

Run as a module it is a smoke test: start Kafka, produce, land in Delta, check the count, print msg/s.
"""

from __future__ import annotations

import argparse
import base64
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
import zipfile
from functools import lru_cache
from pathlib import Path

from rocketlake import jars
from rocketlake.jars import Artifact, JarSet
from rocketlake.local.process import TOOL_HEAP, accepts_connections, port_in_use

# Spark 4.2's Kafka source is built against kafka-clients 3.9.2; a 4.x broker serves 3.x clients.
# 4.1.1 is served here for both the broker (kafka_2.13) and its tools (kafka-tools).
KAFKA_VERSION = "4.1.1"
# kafka_2.13's POM brings log4j-core but no SLF4J binding, and pins slf4j-api 1.7 (which cannot see a
# 2.x binding): without these two the broker logs nothing at all, its errors included. Same log4j
# version as the log4j-core Kafka 4.1.1 depends on.
LOG4J_VERSION = "2.24.3"
SLF4J_VERSION = "2.0.17"

BROKER_HEAP = ["-Xms256m", "-Xmx1g"]
# The producer is the thing timed while filling a topic: full JIT, default GC, room for its buffers.
PRODUCER_HEAP = ["-Xms128m", "-Xmx512m"]

# WARN and up on the console (the JVM's log file): quiet, yet a broker that fails says why.
LOG4J2_PROPERTIES = """\
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.stdout.ref = STDOUT
"""


class KafkaError(RuntimeError):
    """The local Kafka broker or one of its tools failed; the message carries the tail of its output."""


# ---------------------------------------------------------------------------------------------- jars


def kafka_server_jar_set(version: str = KAFKA_VERSION) -> JarSet:
    """A KRaft broker (``kafka.Kafka``), the admin/perf tools, and a log4j2 binding for both."""
    return JarSet(
        f"kafka-server-{version}-log4j2",
        (
            Artifact("org.apache.kafka", "kafka_2.13", version),
            Artifact("org.apache.kafka", "kafka-tools", version),
            Artifact("org.slf4j", "slf4j-api", SLF4J_VERSION),
            Artifact("org.apache.logging.log4j", "log4j-slf4j2-impl", LOG4J_VERSION),
        ),
    )


def spark_kafka_jar_set() -> JarSet:
    """Spark's Kafka source for the installed pyspark (Scala 2.13), with its full Maven closure."""
    import pyspark

    return JarSet(
        f"spark-kafka-{pyspark.__version__}",
        (Artifact("org.apache.spark", "spark-sql-kafka-0-10_2.13", pyspark.__version__),),
    )


def spark_kafka_jars() -> list[str]:
    """The jars to add to ``spark.jars``: the closure minus every artifact pyspark already ships.

    The POM's closure holds spark-tags, scala-library, hadoop-client-*, an old slf4j-api, lz4 and
    snappy: a second copy of those, at another version, on Spark's classpath breaks Spark. What is
    left is the source itself, the token provider, kafka-clients and commons-pool2.
    """
    shipped = {_artifact_name(j) for j in _pyspark_jars_dir().glob("*.jar")}
    return [str(j) for j in jars.resolve(spark_kafka_jar_set()) if _artifact_name(j) not in shipped]


def _pyspark_jars_dir() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


@lru_cache(maxsize=None)
def _artifact_name(jar: Path) -> str:
    """The Maven artifactId of a jar file, without its version.

    File names cannot be split reliably (``log4j-1.2-api-2.25.4``, ``zstd-jni-1.5.7-7``), so the
    jar's own ``META-INF/maven/<group>/<artifact>/`` entry is preferred: the longest artifactId the
    file name starts with (shaded jars carry their dependencies' entries too). Jars built without
    Maven metadata (kafka-clients is built with Gradle) fall back to the name up to the first
    ``-<digit>`` whose remainder has no ``_`` (so a ``_2.13`` Scala suffix stays in the name).
    """
    name = jar.name
    try:
        with zipfile.ZipFile(jar) as zf:
            ids = {
                m.group(1)
                for m in map(re.compile(r"META-INF/maven/[^/]+/([^/]+)/pom\.properties$").match, zf.namelist())
                if m
            }
    except (OSError, zipfile.BadZipFile):
        ids = set()
    matching = [a for a in ids if name.startswith(a + "-")]
    if matching:
        return max(matching, key=len)
    m = re.match(r"(.+?)-(\d[^_]*)\.jar$", name)
    return m.group(1) if m else name.removesuffix(".jar")


# --------------------------------------------------------------------------------------------- kafka


def free_port() -> int:
    """A loopback port nobody listens on now (the kernel's pick, checked on the wildcard too)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if not port_in_use(port):
            return port


def cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding, as ``random-uuid`` prints.

    Kafka rejects ids starting with '-' (they read as a command-line flag); draw again then.
    """
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


class LocalKafka:
    """One KRaft broker+controller JVM on free loopback ports, its data under ``data_dir``.

    ``data_dir`` is created and, on ``stop()``, removed whole: give a directory of its own (the
    benchmark puts it on ``/dev/shm`` so the broker's disk is not what is measured).
    """

    def __init__(self, data_dir: Path, version: str = KAFKA_VERSION, start_timeout: float = 120.0):
        self.data_dir = Path(data_dir)
        self.version = version
        self.start_timeout = start_timeout
        self.port = 0
        self.controller_port = 0
        self._proc: subprocess.Popen | None = None
        self._classpath = ""

    # -- lifecycle

    def __enter__(self) -> "LocalKafka":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "kafka.out"

    def start(self) -> None:
        if self.data_dir.exists() and any(self.data_dir.iterdir()):
            raise KafkaError(f"{self.data_dir} is not empty; LocalKafka formats a fresh store and removes it on stop")
        self._classpath = jars.classpath(kafka_server_jar_set(self.version))
        self.port, self.controller_port = free_port(), free_port()
        while self.controller_port == self.port:
            self.controller_port = free_port()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "log4j2.properties").write_text(LOG4J2_PROPERTIES)
        props = self._write_server_properties()
        try:
            # KRaft refuses an unformatted log dir: stamp it with a cluster id and the static voter set.
            self._tool("kafka.tools.StorageTool", ["format", "-t", cluster_id(), "-c", str(props)], timeout=120)
            with open(self.log_file, "wb") as out:
                # Own session: a Ctrl-C in the benchmark's terminal does not reach the broker half-way,
                # and stop() can signal the whole group.
                self._proc = subprocess.Popen(
                    ["java", *BROKER_HEAP, *self._log_flags(), "-cp", self._classpath, "kafka.Kafka", str(props)],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        print(f"kafka broker up at {self.bootstrap} (Kafka {self.version}, data in {self.data_dir})", flush=True)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM the broker's process group, SIGKILL it after ``timeout``, then remove ``data_dir``."""
        proc, self._proc = self._proc, None
        # poll() also reaps: once it returned a code the pid may be reused, so never signal after that.
        if proc is not None and proc.poll() is None:
            _killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                _killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def _write_server_properties(self) -> Path:
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            # A static voter set of one: formatting needs no --standalone and no dynamic quorum.
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir / "kafka-logs"),
            "num.partitions": "16",
            # One broker: internal topics default to 3 replicas and would never be created.
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            # The benchmark creates its topics with an exact partition count; a typo must fail, not create.
            "auto.create.topics.enable": "false",
        }
        path = self.data_dir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        return path

    def _wait_ready(self) -> None:
        """Poll until the listener accepts, then until the broker answers an admin request."""
        deadline = time.monotonic() + self.start_timeout
        while not accepts_connections(self.port):
            self._check_alive()
            if time.monotonic() > deadline:
                raise KafkaError(
                    f"Kafka did not listen on {self.bootstrap} within {self.start_timeout:.0f}s; "
                    f"last lines of {self.log_file}:\n{self._log_tail()}"
                )
            time.sleep(0.2)  # polling a port with a deadline; the JVM gives no other signal
        # The listener opens before the broker has caught up with the metadata log; listing topics
        # succeeds only once it serves requests (the admin client retries within its own timeout).
        remaining = max(10.0, deadline - time.monotonic())
        self._tool(
            "org.apache.kafka.tools.TopicCommand", ["--bootstrap-server", self.bootstrap, "--list"], timeout=remaining
        )
        self._check_alive()

    def _check_alive(self) -> None:
        if self._proc is not None and self._proc.poll() is not None:
            raise KafkaError(
                f"the Kafka broker exited with code {self._proc.returncode}; "
                f"last lines of {self.log_file}:\n{self._log_tail()}"
            )

    def _log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_file.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log written)"
        return "\n".join(text.strip().splitlines()[-lines:]) or "(log is empty)"

    # -- tools

    def _log_flags(self) -> list[str]:
        return [f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}"]

    def _tool(self, main_class: str, args: list[str], heap: list[str] = TOOL_HEAP, timeout: float = 300) -> str:
        """Run one of Kafka's Java tools to completion; its stdout, or KafkaError with its output's tail."""
        cmd = ["java", *heap, *self._log_flags(), "-cp", self._classpath, main_class, *args]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as e:
            raise KafkaError(
                f"{main_class.rsplit('.', 1)[-1]} {' '.join(args)} did not finish in {timeout:.0f}s; "
                f"broker log:\n{self._log_tail()}"
            ) from e
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-20:])
            raise KafkaError(
                f"{main_class.rsplit('.', 1)[-1]} {' '.join(args)} failed (exit {proc.returncode}):\n{tail}"
            )
        return proc.stdout

    def create_topic(self, name: str, partitions: int) -> None:
        self._tool(
            "org.apache.kafka.tools.TopicCommand",
            [
                "--bootstrap-server",
                self.bootstrap,
                "--create",
                "--topic",
                name,
                "--partitions",
                str(partitions),
                "--replication-factor",
                "1",
            ],
        )

    def pids(self) -> frozenset[int]:
        """The broker's pid while it runs (for RSS sampling that must leave it out)."""
        return frozenset() if self._proc is None or self._proc.poll() is not None else frozenset({self._proc.pid})

    def produce(self, topic: str, count: int, record_size: int = 1024) -> float:
        """Fill ``topic`` with ``count`` records of ``record_size`` bytes as fast as the producer goes.

        Returns wall seconds, JVM start included (as ``benchmarks.common.produce_bulk`` does). Records
        have no key, so the producer spreads batches over all partitions.
        """
        started = time.perf_counter()
        self._tool(
            "org.apache.kafka.tools.ProducerPerformance",
            [
                "--topic",
                topic,
                "--num-records",
                str(count),
                "--record-size",
                str(record_size),
                "--throughput",
                "-1",
                "--producer-props",
                f"bootstrap.servers={self.bootstrap}",
                "acks=1",
                "linger.ms=5",
                "batch.size=262144",
                "compression.type=none",
            ],
            heap=PRODUCER_HEAP,
            timeout=3600,
        )
        return time.perf_counter() - started

    def end_offsets(self, topic: str) -> dict[int, int]:
        """Latest offset of every partition of ``topic`` (GetOffsetShell prints ``topic:partition:offset``)."""
        out = self._tool(
            "org.apache.kafka.tools.GetOffsetShell",
            ["--bootstrap-server", self.bootstrap, "--topic", topic, "--time", "-1"],
        )
        offsets = {}
        for line in out.splitlines():
            name, partition, offset = line.strip().rsplit(":", 2)
            if name == topic:
                offsets[int(partition)] = int(offset)
        if not offsets:
            raise KafkaError(f"GetOffsetShell listed no partition of {topic!r}; it printed:\n{out.strip()}")
        return offsets


def _killpg(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


# --------------------------------------------------------------------------------------------- spark

KAFKA_COLUMNS = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]


#: The writer settings rocketlake's tables get (``delta.writer``), applied to Kafka's columns of the same
#: kind, so that neither system gains from a setting the other lacks: no Parquet dictionary for the columns where
#: nearly every value is new (key, value, header values: rocketlake's keys, body, ids and property values);
#: Delta statistics on the lookup columns only (topic, partition, offset, timestamp); tables partitioned by the UTC
#: day of the record's time (rocketlake's ``window_date``); no optimized write (rocketlake skips it for large ranges).
KAFKA_PLAIN_COLUMNS = ("key", "value", "headers.element.value")
KAFKA_STATS_COLUMNS = "topic,partition,offset,timestamp,timestampType"


def _kafka_batch(spark, bootstrap: str, topic: str, headers: bool = False):
    """Everything in ``topic`` now: earliest to latest offsets, one Spark task per partition; with ``headers``, the
    source's ``includeHeaders`` (an eighth column)."""
    return (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .option("includeHeaders", str(headers).lower())
        .load()
        .select(*KAFKA_COLUMNS, *(["headers"] if headers else []))
    )


def producer_peer_records(spark, count: int, body_size: int, partitions: int):
    """The records ``ProducerPeer --count N --body-size B`` sends to RocketMQ, made in the JVM: message ``k`` has the
    key ``key-k`` and the body ``message-k `` followed by the alphabet shifted by ``k``, padded to ``body_size``
    bytes (every body distinct, as a real topic's are), and goes to partition ``k % partitions``."""
    from pyspark.sql import functions as F

    alphabet = "abcdefghijklmnopqrstuvwxyz" * (body_size // 26 + 2)
    stamp = "concat('message-', cast(id as string), ' ')"
    body = (
        f"cast(substring(concat({stamp}, substring('{alphabet}', cast((id + length({stamp})) % 26 as int) + 1, "
        f"{body_size})), 1, {body_size}) as binary)"
    )
    return spark.range(0, count, 1, partitions).select(
        F.concat(F.lit("key-"), F.col("id").cast("string")).cast("binary").alias("key"),
        F.expr(body).alias("value"),
        (F.col("id") % partitions).cast("int").alias("partition"),
    )


def with_headers(records, names: list[str]):
    """``records`` with the headers a RocketMQ message of the same producer carries as properties (``names``): KEYS
    (the key), UNIQ_KEY (32 hex digits, distinct per record), WAIT ("true"), any other name its literal value."""
    from pyspark.sql import functions as F

    values = {
        "KEYS": F.col("key"),
        "UNIQ_KEY": F.upper(F.md5(F.col("value"))).cast("binary"),
        "WAIT": F.lit("true").cast("binary"),
    }
    return records.withColumn(
        "headers",
        F.array(
            *[
                F.struct(
                    F.lit(name).alias("key"), values.get(name, F.lit("DefaultCluster").cast("binary")).alias("value")
                )
                for name in names
            ]
        ),
    )


def produce_with_spark(
    spark, bootstrap: str, topic: str, count: int, body_size: int, partitions: int, headers: list[str] | None = None
) -> float:
    """Fill ``topic`` with :func:`producer_peer_records` (with ``headers``: :func:`with_headers`) through Spark's
    Kafka sink; returns wall seconds."""
    started = time.perf_counter()
    records = producer_peer_records(spark, count, body_size, partitions)
    if headers:
        records = with_headers(records, headers)
    (
        records.write.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .option("kafka.linger.ms", "5")
        .option("kafka.batch.size", "262144")
        .option("kafka.acks", "1")
        .save()
    )
    return time.perf_counter() - started


def spark_kafka_to_delta(spark, bootstrap: str, topic: str, path: str | Path, headers: bool = False) -> int:
    """Land ``topic`` in the Delta table at ``path`` (append, with ``KAFKA_PLAIN_COLUMNS`` and ``KAFKA_STATS_COLUMNS``,
    partitioned by day); returns the table's row count read back."""
    from pyspark.sql import functions as F

    for column in KAFKA_PLAIN_COLUMNS:
        spark.conf.set(f"parquet.enable.dictionary#{column}", "false")
    (
        _kafka_batch(spark, bootstrap, topic, headers)
        .withColumn("window_date", F.to_date(F.col("timestamp")))
        .write.format("delta")
        .option("delta.dataSkippingStatsColumns", KAFKA_STATS_COLUMNS)
        .option("optimizeWrite", "false")
        .partitionBy("window_date")
        .mode("append")
        .save(str(path))
    )
    return spark.read.format("delta").load(str(path)).count()


def spark_kafka_read_noop(spark, bootstrap: str, topic: str) -> None:
    """The same read into the ``noop`` sink: every record fetched and materialised, nothing written."""
    _kafka_batch(spark, bootstrap, topic).write.format("noop").mode("overwrite").save()


# ---------------------------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--record-size", type=int, default=1024)
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--data-dir", default="/dev/shm", help="where the broker's store and the Delta table go")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    topic, count = "bench_kafka", args.messages

    with LocalKafka(Path(args.data_dir) / f"rocketlake-kafka-{os.getpid()}") as kafka:
        kafka.create_topic(topic, args.partitions)
        produced_s = kafka.produce(topic, count, args.record_size)
        landed = sum(kafka.end_offsets(topic).values())
        if landed != count:
            raise SystemExit(f"produced {count:,} records but the end offsets of {topic} sum to {landed:,}")
        print(
            f"produced {count:,} x {args.record_size} B into {args.partitions} partitions in {produced_s:.1f}s",
            flush=True,
        )

        from rocketlake.spark.session import spark_session

        spark = spark_session("local[2]", {"spark.driver.memory": "2g", "spark.jars": ",".join(spark_kafka_jars())})
        try:
            spark.range(1).count()  # JVM warm before timing
            with tempfile.TemporaryDirectory(prefix="rocketlake-kafka-delta-", dir=args.data_dir) as lake:
                started = time.perf_counter()
                rows = spark_kafka_to_delta(spark, kafka.bootstrap, topic, Path(lake) / "table")
                delta_s = time.perf_counter() - started
            assert rows == count, f"Delta table holds {rows:,} rows, expected {count:,}"
            started = time.perf_counter()
            spark_kafka_read_noop(spark, kafka.bootstrap, topic)
            noop_s = time.perf_counter() - started
        finally:
            spark.stop()
    print(
        f"spark kafka -> delta: {rows:,} rows in {delta_s:.1f}s = {rows / delta_s:,.0f} msg/s "
        f"(count read back included) | kafka -> noop: {count / noop_s:,.0f} msg/s",
        flush=True,
    )


if __name__ == "__main__":
    main()
