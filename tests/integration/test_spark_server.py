"""The long-lived Spark Connect server (``spark.remote``, the local runtime's default): a run that dies while the
server works for it leaves nothing behind that lands later."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.stack
ROOT = Path(__file__).resolve().parents[2]

#: A client writing a Delta table through a Python function that takes a second a row and records each row in a
#: heartbeat file: the test sees the server's work going on, and stopping.
SLOW_WRITER = """
import sys, time
from pyspark.sql import SparkSession
from pyspark.sql.functions import col, udf

url, table, heartbeat = sys.argv[1:4]
spark = SparkSession.builder.remote(url).getOrCreate()
spark.range(0, 3).write.format("delta").save(table)  # version 0: the table before the run

def slow(x):
    import time
    time.sleep(1.0)
    with open(heartbeat, "a") as f:
        f.write(f"{x}\\n")
    return x

print("writing", flush=True)
(spark.range(0, 60, 1, 1).select(udf(slow, "long")(col("id")).alias("id"))
 .write.format("delta").mode("overwrite").option("replaceWhere", "id >= 0").save(table))
print("committed", flush=True)
"""


def versions(table: Path) -> list[str]:
    return sorted(p.name for p in (table / "_delta_log").glob("*.json"))


def test_a_client_killed_mid_write_has_its_work_stopped_by_the_server_and_nothing_lands_later(tmp_path, spark_connect):
    table, heartbeat = tmp_path / "table", tmp_path / "heartbeat"
    client = subprocess.Popen(
        [sys.executable, "-c", SLOW_WRITER, spark_connect.url, str(table), str(heartbeat)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        while not (heartbeat.exists() and heartbeat.read_text().count("\n") >= 2):  # the server's task is working
            assert client.poll() is None, client.stdout.read()
            assert time.monotonic() < deadline, "the slow write never started on the server"
            time.sleep(0.2)
        os.killpg(client.pid, signal.SIGKILL)  # the run's process dies, as a machine losing power
        client.wait()
        killed_at = time.monotonic()
        # The server's work stops: no row for 6 s (a row takes 1 s). Uninterrupted, the write runs 60 s and commits.
        last_row, rows = time.monotonic(), heartbeat.read_text().count("\n")
        while time.monotonic() - last_row < 6:
            assert time.monotonic() - killed_at < 90, "the server went on with the dead client's write"
            now_rows = heartbeat.read_text().count("\n")
            if now_rows != rows:
                last_row, rows = time.monotonic(), now_rows
            time.sleep(0.2)
    finally:
        if client.poll() is None:
            os.killpg(client.pid, signal.SIGKILL)
    stopped_after = last_row - killed_at
    assert versions(table) == ["00000000000000000000.json"], (
        f"the dead client's write committed after its death: {versions(table)}"
    )
    assert rows < 60 and stopped_after < 30, (rows, stopped_after)


#: A client passing rows through the listener's mapInArrow (the rows are not matched, so no listener call is
#: made) and writing them to a Delta table, as a run with a listener does on the server.
LISTENED_WRITER = """
import sys, types
from pyspark.sql import SparkSession
from rocketlake.spark.consume import listen

url, table = sys.argv[1:3]
spark = SparkSession.builder.remote(url).getOrCreate()
cfg = types.SimpleNamespace(listener="tests.unit.listeners:fail_poison", consume_message_batch_max_size=1,
                            consume_thread_min=1, consume_thread_max=2, consume_timeout_seconds=60.0)
df = spark.createDataFrame([("orders", "TagA", ("EU",), False, None, False)],
                           "topic STRING, tags STRING, `ship-to` STRUCT<`region-code`: STRING>, matched BOOLEAN, "
                           "_rl_error STRING, _rl_duplicate BOOLEAN")
listen(df, cfg).write.format("delta").save(table)
"""


def test_a_table_landed_through_a_listener_on_the_server_is_readable_by_delta_rs(tmp_path, spark_connect):
    """On Spark Connect a DataFrame's schema comes back with each string's collation spelled out; handed back as
    the listener's output schema, the server wrote it into the table as ``string collate UTF8_BINARY``, a type
    delta-rs (the sensors' and the CLI's reader) refuses: every rebalance sensor tick failed on the chaos soak."""
    from deltalake import DeltaTable

    table = tmp_path / "table"
    done = subprocess.run(
        [sys.executable, "-c", LISTENED_WRITER, spark_connect.url, str(table)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    schema = (table / "_delta_log" / "00000000000000000000.json").read_text()
    assert "collate" not in schema, schema[:2000]
    assert DeltaTable(str(table)).to_pyarrow_table().to_pylist() == [
        {
            "topic": "orders",
            "tags": "TagA",
            "ship-to": {"region-code": "EU"},
            "matched": False,
            "_rl_error": None,
            "_rl_duplicate": False,
        }
    ]


#: A run's Python work on the server, as rocketlake's runs have it: a Python data source planned and read, and a
#: Python function in a write.
PYTHON_WORK = """
import sys
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.functions import col, udf

class Numbers(DataSource):
    @classmethod
    def name(cls):
        return "numbers"
    def schema(self):
        return "n long"
    def reader(self, schema):
        return NumbersReader()

class NumbersReader(DataSourceReader):
    def partitions(self):
        return [InputPartition(i) for i in range(2)]
    def read(self, partition):
        for n in range(10):
            yield (partition.value * 10 + n,)

spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
spark.dataSource.register(Numbers)
df = spark.read.format("numbers").load().select(udf(lambda n: n + 1, "long")(col("n")).alias("n"))
df.write.format("delta").mode("append").save(sys.argv[2])
spark.stop()
"""


def python_workers(server_pid: int) -> set[int]:
    """The pids of the server's Python worker daemons (``pyspark.daemon``, the JVM's children: one per kind of work
    and set of sessions that may share it)."""
    from rocketlake.local.process import stat_fields

    found = set()
    for entry in Path("/proc").iterdir():
        try:
            daemon = entry.name.isdigit() and b"pyspark.daemon" in (entry / "cmdline").read_bytes()
        except OSError:
            continue  # it exited while being read
        fields = stat_fields(int(entry.name)) if daemon else None
        if fields is not None and int(fields[1]) == server_pid:  # proc(5) field 4, the parent
            found.add(int(entry.name))
    return found


def test_runs_sessions_share_the_servers_python_workers(tmp_path, spark_connect):
    """Each run is a session of its own on the server; its Python work (the reader, a listener) runs in the
    server's Python workers, which a session of its own would start anew (importing PySpark, pyarrow and the reader
    again) unless sessions share them."""
    table = tmp_path / "table"
    seen = []
    for _ in range(3):
        subprocess.run([sys.executable, "-c", PYTHON_WORK, spark_connect.url, str(table)], check=True, timeout=180)
        seen.append(python_workers(spark_connect.server.process.pid()))
    assert seen[0], "the server ran the runs' Python work without a Python worker daemon"
    assert seen[1] == seen[0] and seen[2] == seen[0], f"later runs started Python workers of their own: {seen}"
    assert len(versions(table)) == 3


def python(script: str, *args: str) -> str:
    """What ``script`` printed, run with ``args`` in a Python process of its own (PySpark keeps one kind of session
    per process), in the repository; it must succeed."""
    ran = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    return ran.stdout


#: A Dagster run of one asset on the server through SparkResource: it prints its session's id.
RUN_ON_THE_SERVER = """
import sys
from dagster import asset, materialize
from rocketlake.dagster.spark_resource import SparkResource

@asset
def counted(spark: SparkResource) -> int:
    session = spark.session()
    print("session", session.session_id, flush=True)
    return session.range(3).count()

assert materialize([counted], resources={"spark": SparkResource(remote=sys.argv[1])}).success
"""

#: A client that asks the server to serve a session again, by its id.
SESSION_AGAIN = """
import sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.remote(sys.argv[1] + "/;session_id=" + sys.argv[2]).getOrCreate()
try:
    print("served", spark.range(1).count())
except Exception as e:
    print("refused:", e)
"""


def test_a_run_releases_its_session_on_the_server_when_it_ends(spark_connect):
    """The server keeps a session, its analyzed plans and its local checkpoints until it has been idle for an hour
    (``spark.connect.session.manager.defaultSessionTimeout``) unless the client releases it. Runs a minute apart that
    left theirs filled the server's heap: after 45 minutes of ``make ui``, 100 sessions were open and the server spent
    more CPU on G1's concurrent marking than on the windows. A run's sessions are released when its step ends."""
    ran = python(RUN_ON_THE_SERVER, spark_connect.url)
    (session_id,) = [line.split()[1] for line in ran.splitlines() if line.startswith("session ")]
    again = python(SESSION_AGAIN, spark_connect.url, session_id)
    assert "refused:" in again and "SESSION_CLOSED" in again, (
        f"the run's session {session_id} is still open on the server after the run ended: {again[-2000:]}"
    )


#: A process with a Connect session of its own (a notebook's, a test's) that runs a Dagster job through SparkResource,
#: then uses its session again.
RUN_BESIDE_A_SESSION = """
import sys
from dagster import asset, materialize
from pyspark.sql import SparkSession
from rocketlake.dagster.spark_resource import SparkResource

mine = SparkSession.builder.remote(sys.argv[1]).getOrCreate()

@asset
def counted(spark: SparkResource) -> int:
    return spark.session().range(3).count()

assert materialize([counted], resources={"spark": SparkResource(remote=sys.argv[1])}).success
print("still mine", mine.range(2).count(), flush=True)
"""


def test_a_run_leaves_a_session_it_did_not_open_to_its_owner(spark_connect):
    """PySpark hands a process's Connect session to whoever asks for one: a run in a process that already has one (a
    notebook's) uses it, and must not release it when its step ends."""
    assert "still mine 2" in python(RUN_BESIDE_A_SESSION, spark_connect.url)


#: A client that counts five rows on the server.
COUNT = """
import sys
from pyspark.sql import SparkSession
print("counted", SparkSession.builder.remote(sys.argv[1]).getOrCreate().range(5).count())
"""


def test_a_local_server_outlives_its_machine_standing_still_past_the_heartbeat_timeout(tmp_path, spark_jvm_options):
    """A machine that stands still (a laptop's lid closed, a VM its host paused) wakes with every heartbeat late. The
    driver then sees none from its executor for longer than Spark's timeout (``spark.network.timeout``, 120 s) and
    removes it. On a local master that executor lives in the driver's JVM and cannot register again (since
    SPARK-41360 a block manager asks the cluster scheduler, which a local master has none of): its heartbeats fail,
    and after 60 of them (10 minutes) it exits the JVM, the server with it. In CI the machine stood still for 130 s
    and the shared server died 10 minutes later. Here the server's timeout is 6 s (its heartbeats 5 s apart, checked
    every 100 ms) and the test stops its JVM for 8 s (SIGSTOP): it must not lose its executor, and must go on
    serving."""
    from rocketlake.local.spark_server import LocalSparkServer
    from tests.conftest import free_ports

    server = LocalSparkServer(
        tmp_path / "server",
        port=free_ports(1)[0],
        master="local[1]",
        conf={
            "spark.network.timeout": "6s",
            "spark.executor.heartbeatInterval": "5s",
            "spark.network.timeoutInterval": "100ms",
        },
    )
    server.up()
    log = server.process.log_file
    try:
        assert "counted 5" in python(COUNT, server.url)
        pid = server.process.pid()
        os.kill(pid, signal.SIGSTOP)  # the machine stands still, for longer than the timeout
        try:
            time.sleep(8)  # the length of the pause is what is tested
        finally:
            os.kill(pid, signal.SIGCONT)
        # On waking, the driver's check (every 100 ms) finds the last heartbeat 8 s old; it removes the executor
        # at once, or never. Bounded by that, not a synchronisation.
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            assert "no recent heartbeats" not in log.read_text(errors="replace"), log.read_text()[-3000:]
            time.sleep(0.2)
        assert "counted 5" in python(COUNT, server.url)
        assert "no recent heartbeats" not in log.read_text(errors="replace"), log.read_text()[-3000:]
    finally:
        assert server.down() == ["spark-connect"]
