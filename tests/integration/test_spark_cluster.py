"""Windows land through the executors of a Spark standalone cluster, as on a production cluster.

`LocalSparkCluster` starts a master and two workers from the installed pyspark (what `rocketlake local up
--spark` starts). The executors' Python is an environment of its own that has rocketlake's dependencies but
not rocketlake (a venv that sees the project's site-packages as a plain path, without the editable install's
finder): the reader and its client reach the executors only as the package zip the session ships. The runs are
the public CLI's `dagster asset materialize` on the README's instance configuration, from another working
directory, opening their sessions on one `rocketlake spark-server` whose application runs on the cluster (the
default warm path; a run with a JVM of its own is the same code with `spark.remote` unset). Spark's event log
(its own record of the application) says where every task ran.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import sysconfig
from collections import Counter
from pathlib import Path

import pytest
import yaml
from deltalake import DeltaTable

from rocketlake.local.process import port_in_use
from rocketlake.local.spark_cluster import LocalSparkCluster, SparkClusterSpec
from tests.conftest import free_ports
from tests.dagster_instance import recommended_home
from tests.integration.ingestion_support import (
    in_shared_minutes,
    materialize_command,
    order,
    unique,
    until,
    write_config,
)
from tests.integration.test_worker_site import INSTALLED, ON_THE_SERVER

pytestmark = pytest.mark.stack


@pytest.fixture
def spark_cluster(tmp_path):
    master, master_ui, ui_1, ui_2 = free_ports(4)
    cluster = LocalSparkCluster(
        SparkClusterSpec(tmp_path / "spark", master_port=master, master_ui_port=master_ui, worker_ui_ports=(ui_1, ui_2))
    )
    try:
        status = cluster.up()
        assert status.ready and status.alive_workers == 2, status.render()
        yield cluster
    finally:
        assert set(cluster.down()) == {"spark-master", "spark-worker-1", "spark-worker-2"}


def executor_python(root: Path) -> Path:
    """An interpreter with rocketlake's dependencies but without rocketlake."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    site = next(root.glob("lib/python*/site-packages"))
    (site / "project-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    python = root / "bin" / "python"
    probe = subprocess.run(
        [str(python), "-c", "import pyarrow, pyspark, yaml; import rocketlake"],
        cwd=root,
        capture_output=True,
        text=True,
    )
    assert "No module named 'rocketlake'" in probe.stderr, probe.stderr  # only the zip can bring it
    return python


def tasks_by_executor(event_log_dir: Path) -> tuple[Counter, dict[tuple[str, str], str]]:
    """From Spark's event logs (one per application, one application per run): tasks ended per (application,
    executor id), and each such executor's host."""
    ended: Counter = Counter()
    hosts: dict[tuple[str, str], str] = {}
    for app in event_log_dir.iterdir():
        # Spark 4 writes each application's log as a folder of rolled files (event log v2).
        files = sorted(app.iterdir()) if app.is_dir() else [app]
        assert not any(f.name.endswith(".inprogress") for f in files), f"{app.name}: the application did not end"
        logs = [f for f in files if f.name.startswith(("events_", "app-"))]  # v2 rolled files, or one v1 file
        for line in (line for f in logs for line in f.read_text().splitlines()):
            event = json.loads(line)
            if event["Event"] == "SparkListenerTaskEnd":
                ended[(app.name, event["Task Info"]["Executor ID"])] += 1
            elif event["Event"] == "SparkListenerExecutorAdded":
                hosts[(app.name, event["Executor ID"])] = event["Executor Info"]["Host"]
    return ended, hosts


#: 40 orders over 4 queues on each broker, in one shared minute
ORDERS = in_shared_minutes(
    "spark_cluster", {"cluster": (4, None)}, lambda t: [order(i, t["cluster"]) for i in range(40)]
)


def test_windows_land_through_a_spark_server_on_the_executors_of_a_standalone_cluster(
    tmp_path, local_cluster, spark_cluster, shared_minutes
):
    shared = shared_minutes[ORDERS]  # its window closed
    topic, group, table = shared.topics["cluster"], unique("g"), unique("t")
    events = tmp_path / "spark-events"
    events.mkdir()
    config = write_config(
        tmp_path / "rocketlake.yaml",
        local_cluster,
        tmp_path / "lake",
        {"orders": {"topic": topic, "consumer_group": group, "table": table}},
    )
    spark_conf = {
        "spark.pyspark.python": str(executor_python(tmp_path / "executor-env")),
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.executor.memory": "512m",
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": events.as_uri(),
        "spark.eventLog.compress": "false",
    }
    # The production shape (deploying.md): one long-lived Spark Connect server on the cluster, `rocketlake
    # spark-server` on this configuration, and the runs open their sessions on it; the executors get rocketlake
    # from the zip each session sends.
    (port,) = free_ports(1)
    body = yaml.safe_load(config.read_text())
    body["spark"] = {"master": spark_cluster.spec.master_url, "conf": spark_conf, "remote": f"sc://127.0.0.1:{port}"}
    config.write_text(yaml.safe_dump(body))
    home = recommended_home(tmp_path / "dagster_home")
    elsewhere = tmp_path / "elsewhere"  # not the checkout: nothing may rely on the driver's working directory
    elsewhere.mkdir()

    sent, dump, windows = shared.sent, shared.produced(local_cluster, "cluster").by_msg_id, shared.windows
    assert len({(s.broker_name, s.queue_id) for s in sent}) == 8, "both brokers' queues carry messages"

    env = dict(os.environ, ROCKETLAKE_CONFIG=str(config), DAGSTER_HOME=str(home))
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "rocketlake"), "spark-server", "--config", str(config)],
        cwd=elsewhere,
        env=env,
        stdout=(tmp_path / "server.log").open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        until(lambda: port_in_use(port), 180, "the Spark Connect server to listen")
        for window in windows:
            result = subprocess.run(
                materialize_command(table, window),
                cwd=elsewhere,
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        # The executors' Python workers import the installed, byte-compiled PySpark, as a local Spark's do, not the
        # zip Spark puts first on their path (compiled from source at each import; test_worker_site.py).
        ran = subprocess.run(
            [sys.executable, "-c", ON_THE_SERVER, f"sc://127.0.0.1:{port}"],
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert ran.returncode == 0, ran.stderr[-3000:]
        worker = ran.stdout.split()[-1]
        assert str(Path(worker).resolve()) == INSTALLED, worker
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)

    landed = DeltaTable(str(tmp_path / "lake" / table)).to_pandas(columns=["msg_id", "queue_offset", "broker_name"])
    assert Counter(landed["msg_id"]) == Counter(list(dump)), "every message exactly once"
    progress = {
        (q.broker_name, q.queue_id): q
        for q in local_cluster.mqadmin().consumer_progress(group, topic)
        if q.topic == topic
    }
    assert len(progress) == 8
    assert all(q.consumer_offset == q.broker_offset for q in progress.values()), progress

    until(
        lambda: not any(f.name.endswith(".inprogress") for f in events.rglob("*")),
        120,
        "the server's Spark application to end (its event log complete)",
    )
    # One application: the server's. A run that started a Spark of its own would have made a second one.
    assert len(list(events.iterdir())) == 1, sorted(events.iterdir())
    ended, hosts = tasks_by_executor(events)
    assert ended and all(executor != "driver" for _, executor in ended), ended
    assert set(ended) <= set(hosts) and set(hosts.values()) == {"127.0.0.1"}, (ended, hosts)
    # Each queue's range is a task of the read: at least 8 tasks ran, all on the workers' executors.
    assert sum(ended.values()) >= 8, ended
