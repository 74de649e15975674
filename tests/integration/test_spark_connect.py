"""spark.remote: runs open their sessions on one long-lived Spark Connect server (`rocketlake spark-server`) instead of
starting Spark each; they land what a run with Spark of its own lands, and settings the server cannot take are refused
by name."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml
from deltalake import DeltaTable

from rocketlake.resources.local.process import ManagedProcess, accepts_connections, stop_all, wait_for
from tests.conftest import free_ports
from tests.integration.ingestion_support import minute_key, unique, write_config

pytestmark = pytest.mark.stack  # the server and the runs are processes of their own

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def test_runs_on_a_spark_connect_server_land_each_window_exactly(tmp_path, local_cluster, produced):
    port = free_ports(1)[0]
    table, group = unique("t"), unique("g")
    config = write_config(tmp_path / "rocketlake.yaml", local_cluster, tmp_path / "lake", {
        "orders": {"topic": produced.topic, "consumer_group": group, "table": table}})
    body = yaml.safe_load(config.read_text())
    body["spark"] = {"master": "local[2]", "remote": f"sc://127.0.0.1:{port}",
                     "conf": {"spark.sql.session.timeZone": "UTC"}}
    config.write_text(yaml.safe_dump(body))

    server = ManagedProcess("spark-connect", tmp_path)
    server.start([str(BIN / "rocketlake"), "spark-server", "--config", str(config)], dict(os.environ), cwd=ROOT)
    try:
        wait_for(lambda: accepts_connections(port), time.monotonic() + 180, [server], "the Spark Connect server")
        # A run that tried to start Spark of its own would fail: its SPARK_HOME leads nowhere.
        env = dict(os.environ, DAGSTER_HOME=str(tmp_path / "home"), SPARK_HOME=str(tmp_path / "no-spark-here"))
        (tmp_path / "home").mkdir()

        def backfill(windows: list[str], config_file: Path = config) -> subprocess.CompletedProcess:
            return subprocess.run([str(BIN / "rocketlake"), "backfill", "orders", *windows, "--config",
                                   str(config_file)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)

        path = str(tmp_path / "lake" / table)
        result = backfill(produced.windows())
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        rows = DeltaTable(path).to_pyarrow_table().to_pylist()
        landed = Counter(minute_key(int(r["window_start"].timestamp() * 1000)) for r in rows)
        assert landed == {w: len(produced.in_window(w)) for w in produced.windows()}
        assert sorted(r["msg_id"] for r in rows) == sorted(m["msgId"] for w in produced.windows()
                                                           for m in produced.in_window(w))
        # The JSON bodies decoded by Spark's functions, through the server.
        assert sorted(r["order_id"] for r in rows) == sorted(
            json.loads(base64.b64decode(m["bodyBase64"]))["order_id"] for w in produced.windows()
            for m in produced.in_window(w))
        assert server.pid() is not None  # the reader ran in the server's Python workers: it is still up

        # A static setting the running server does not have cannot apply to a session on it: refused by name, and
        # the run leaves the table as it was.
        body["spark"]["conf"]["spark.executor.memory"] = "7g"
        other = tmp_path / "other.yaml"
        other.write_text(yaml.safe_dump(body))
        version = DeltaTable(path).version()
        refused = backfill(produced.windows()[:1], other)  # a second run on the same server
        said = refused.stdout + refused.stderr
        assert refused.returncode != 0
        assert f"the Spark Connect server at sc://127.0.0.1:{port} cannot take spark.executor.memory='7g'" in said, \
            said[-3000:]
        assert DeltaTable(path).version() == version
    finally:
        stop_all([server])
