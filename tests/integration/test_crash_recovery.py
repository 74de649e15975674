"""A run SIGKILLed at the worst places: the next run repairs everything, nothing lost or duplicated.

Each case runs the real `dagster asset materialize` CLI in its own process group with a failpoint
armed (``pipelines.failpoints``); the point kills the whole group (Dagster, Spark's JVM and its
Python workers). The second run, without a failpoint, must leave exactly one row per message and
the consumer group's offsets where mqadmin says they belong.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from deltalake import DeltaTable

from tests.integration.ingestion_support import unique, write_config

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def materialize_cli(env: dict, table: str, partition: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(Path(sys.executable).parent / "dagster"), "asset", "materialize", "-m", "rocketlake.assets",
                           "--select", table, "--partition", partition],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, start_new_session=True)


@pytest.mark.parametrize("point", ["during_pull", "during_write", "after_delta_commit", "before_offset_commit"])
def test_killed_run_is_repaired_by_the_next(point, tmp_path, local_cluster, produced):
    table, group = unique("t"), unique("g")
    config = write_config(tmp_path / "rocketlake.yaml", local_cluster, tmp_path / "lake", {
        # Small tasks, so a kill during the write lands while some task files already exist.
        "orders": {"topic": produced.topic, "consumer_group": group, "table": table, "max_messages_per_task": 3}})
    home = tmp_path / "dagster_home"
    home.mkdir()
    env = dict(os.environ, ROCKETLAKE_CONFIG=str(config), DAGSTER_HOME=str(home))
    path = tmp_path / "lake" / table
    window, _ = produced.windows()
    expected = produced.in_window(window)
    admin = local_cluster.mqadmin()

    killed = materialize_cli(dict(env, ROCKETLAKE_FAILPOINT=point), table, window)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    progress = [q for q in admin.consumer_progress(group, produced.topic) if q.topic == produced.topic]
    assert all(q.consumer_offset == 0 for q in progress)  # no offset moved before the data was recorded
    if point in ("during_pull", "during_write"):
        assert not list(path.glob("_delta_log/*.json"))  # no Delta commit: the table is as it was (absent)
    else:
        assert DeltaTable(str(path)).to_pyarrow_table().num_rows == len(expected)

    repaired = materialize_cli(env, table, window)
    assert repaired.returncode == 0, repaired.stderr[-3000:]
    rows = DeltaTable(str(path)).to_pyarrow_table(columns=["msg_id"]).to_pylist()
    assert Counter(r["msg_id"] for r in rows) == Counter(m["msgId"] for m in expected)
    ends = Counter()
    for m in expected:
        ends[(m["brokerName"], m["queueId"])] = max(ends[(m["brokerName"], m["queueId"])], m["queueOffset"] + 1)
    progress = {(q.broker_name, q.queue_id): q.consumer_offset
                for q in admin.consumer_progress(group, produced.topic) if q.topic == produced.topic}
    assert {k: v for k, v in progress.items() if v} == dict(ends)
