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
    client = subprocess.Popen([sys.executable, "-c", SLOW_WRITER, spark_connect.url, str(table), str(heartbeat)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
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
        f"the dead client's write committed after its death: {versions(table)}")
    assert rows < 60 and stopped_after < 30, (rows, stopped_after)
