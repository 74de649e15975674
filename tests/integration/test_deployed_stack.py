"""rocketlake as production runs it: Dagster on PostgreSQL with its daemon, runs queued, pools and run retries.

The instance is `deploy/dagster.yaml` as shipped, its storage a real PostgreSQL (`LocalPostgres`, what
`rocketlake local up --postgres` starts) on a free port. Nobody launches the scheduled runs: `dagster-daemon`
ticks the schedule and launches them through the queued run coordinator.

1. The schedule materializes a closed window by itself, and a backfill of that window (`rocketlake backfill`, in
   its own process) launched beside the schedule's run of the same consumer group succeeds too, their table steps
   never overlapping: the pool `rocketmq_group_<group>` (limit 1) holds one until the other is done; their
   dead-letter steps likewise, in the group's `_dlq` pool.
2. A scheduled run killed with SIGKILL while it works is failed by the `rocketlake_dead_runs` sensor and retried
   by the instance's run-retry policy; the retry lands the window.

Each part takes one real minute (a window), the least a scheduled run can take.

Across all of it every message lands exactly once (against the Java producer's answers) and the committed offsets
are the queues' ends.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import pytest
from dagster import AssetKey, DagsterEventType, DagsterInstance, DagsterRunStatus, RunsFilter
from deltalake import DeltaTable

from rocketlake.dagster.partitions import run_windows, window_partitions
from rocketlake.dagster.run_guard import ON_ITS_WAY as PENDING
from rocketlake.dagster.run_guard import recorded_process
from rocketlake.engine.config import WindowConfig
from rocketlake.local.peers import produce
from rocketlake.local.postgres import LocalPostgres
from rocketlake.rocketmq.client import RocketMQClient
from tests.conftest import free_ports
from tests.integration.deployment_support import start_daemon, stop_daemon
from tests.integration.ingestion_support import minute_key, order, unique, until, wait_until, write_config

pytestmark = pytest.mark.stack
ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@pytest.fixture
def postgres(tmp_path):
    (port,) = free_ports(1)
    server = LocalPostgres(tmp_path / "postgres", port=port)
    server.up()
    try:
        yield server
    finally:
        assert server.down(wipe=True) == ["postgres"]


class Stack:
    """A deployment: its DAGSTER_HOME (deploy/dagster.yaml on PostgreSQL), its configuration, its daemon."""

    def __init__(self, tmp_path: Path, cluster, postgres: LocalPostgres, ingestion: dict, spark: dict | None = None):
        self.config = write_config(
            tmp_path / "rocketlake.yaml", cluster, tmp_path / "lake", {"orders": ingestion}, spark
        )
        self.home = tmp_path / "dagster_home"
        self.home.mkdir()
        (self.home / "dagster.yaml").write_text((ROOT / "deploy" / "dagster.yaml").read_text())
        # The repository on the path of every process: the configuration's listener is the tests' (tests.unit).
        self.env = dict(
            os.environ,
            ROCKETLAKE_CONFIG=str(self.config),
            DAGSTER_HOME=str(self.home),
            PYTHONPATH=str(ROOT),
            **postgres.dagster_env(),
        )
        self.daemon: subprocess.Popen | None = None

    def cli(self, *args: str) -> str:
        result = subprocess.run(
            [str(BIN / "dagster"), *args, "-m", "rocketlake.definitions"],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        return result.stdout


# One-minute windows: a scheduled run (a cold CLI-started Spark driver, 10-25 s with the tests' quick-start JVM
# options, tests/spark_jvm.py) ends well before the next one is due.
WINDOW_S = 60
# The seconds window 1 must have left when the test starts: its 20 messages sent (a Java process) and the schedule
# started (a Dagster CLI process), each a few seconds, with room for a busy machine.
WINDOW_1_ROOM_S = 40


def step_spans(instance: DagsterInstance, run_id: str) -> list[tuple[float, float, str]]:
    """(start, end, run and step) of each step of a run, as its event log says. Each step of an ingestion claims
    the group's pool slot on its own (the table's, then the dead letters'), so steps are what must not overlap."""
    events = instance.all_logs(run_id, of_type={DagsterEventType.STEP_START, DagsterEventType.STEP_SUCCESS})
    starts = {e.step_key: e.timestamp for e in events if e.dagster_event_type == DagsterEventType.STEP_START}
    ends = {e.step_key: e.timestamp for e in events if e.dagster_event_type == DagsterEventType.STEP_SUCCESS}
    assert starts and starts.keys() == ends.keys(), f"run {run_id}: steps started {starts}, ended {ends}"
    return [(starts[k], ends[k], f"{run_id[:8]}/{k}") for k in starts]


def next_window_end(margin_s: float = 30.0) -> float:
    """The end of the window we are in, or of the next one when fewer than ``margin_s`` seconds are left."""
    end = (int(time.time()) // WINDOW_S + 1) * WINDOW_S
    return end if end - time.time() >= margin_s else end + WINDOW_S


def test_daemon_schedule_pools_and_run_retries_on_postgres(
    tmp_path, local_cluster, postgres, monkeypatch, spark_connect
):
    topic, group, table = unique("stack"), unique("g"), unique("t")
    local_cluster.create_topic(topic, 2)
    # Windows start at window 1's start, closed at their end (grace 0): the schedule's tick at a window's end asks
    # for it, and there is no older window to catch up. Window 1 is the one we are in when it leaves the time to send
    # its messages and start the schedule before it closes (a CLI process: seconds), else the next one.
    start = datetime.fromtimestamp(next_window_end(margin_s=WINDOW_1_ROOM_S) - WINDOW_S, timezone.utc)
    window = {"cron": "* * * * *", "timezone": "UTC", "grace_seconds": 0, "start": start.isoformat()}
    stack = Stack(
        tmp_path,
        local_cluster,
        postgres,
        {
            "topic": topic,
            "consumer_group": group,
            "table": table,
            "window": window,
            # A batch holding a message tagged 'slow' takes 10 s: window 2's scheduled run is still working when the
            # backfill (a CLI process that takes seconds to start) is launched beside it.
            "listener": "tests.unit.listeners:pause_on_slow",
        },
        spark_connect.settings(),
    )  # the daemon's runs open their sessions on the long-lived Spark server
    for key, value in postgres.dagster_env().items():  # what deploy/dagster.yaml reads, for this process too
        monkeypatch.setenv(key, value)
    namesrv, state = local_cluster.spec.namesrv_address, local_cluster.spec.state_dir
    sent = []
    try:
        # 1. Window 1's scheduled run (10 s at least: a batch holds the slow message) lands it by itself, and a
        # backfill of the same window is started the moment the schedule launched that run.
        wait_until(start.timestamp() + 1)  # at once when window 1 is the one we are in
        w1 = minute_key(int(start.timestamp() * 1000))
        slow = [order(i, topic, tags="slow" if i == 0 else "TagA") for i in range(20)]
        sent += produce(namesrv, state, slow)
        stack.cli("schedule", "start", f"{table}_windows")
        # The schedule ticks only after it started: window 1's tick, at its end, must come after.
        assert time.time() < start.timestamp() + WINDOW_S, "window 1 closed before its schedule started"
        stack.daemon = start_daemon(stack)
        with DagsterInstance.from_config(str(stack.home)) as instance:
            partitions = window_partitions(WindowConfig(**window))

            def scheduled_run(key: str):
                # The schedule asks for a window in a run of its own, or, when its runs fall behind (a busy
                # machine), in a run over the windows closed meanwhile (a partition range): either lands it.
                return next(
                    (
                        r
                        for r in instance.get_runs(RunsFilter(tags={"dagster/schedule_name": f"{table}_windows"}))
                        if key in run_windows(partitions, r.tags)  # how the schedule reads a run's windows
                    ),
                    None,
                )

            scheduled = until(lambda: scheduled_run(w1), 300, f"the daemon's schedule to launch window {w1}")
            backfill = subprocess.run(
                [str(BIN / "rocketlake"), "backfill", "orders", w1, "--config", str(stack.config)],
                cwd=ROOT,
                env=stack.env,
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert backfill.returncode == 0, backfill.stdout[-3000:] + backfill.stderr[-3000:]
            until(
                lambda: (
                    instance.get_run_by_id(scheduled.run_id).status
                    in (DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE)
                ),
                300,
                f"the scheduled run of {w1} to end",
            )
            assert instance.get_run_by_id(scheduled.run_id).status == DagsterRunStatus.SUCCESS
            assert w1 in instance.get_materialized_partitions(AssetKey(table))
            (backfilled,) = instance.get_runs(RunsFilter(tags={"dagster/asset_partition_range_start": w1}))
            assert backfilled.status == DagsterRunStatus.SUCCESS
            a, b = instance.get_run_records(RunsFilter(run_ids=[scheduled.run_id, backfilled.run_id]))
            # Both were in progress at once (each created before the other ended) ...
            assert a.create_timestamp.timestamp() < b.end_time and b.create_timestamp.timestamp() < a.end_time
            # ... and their steps of each pool worked one after the other: the pool held each until the other's
            # was done (the table steps in rocketmq_group_<group>, the dead-letter steps in its _dlq pool).
            for step_key in (table, f"{table}_dlq"):
                steps = sorted(
                    span
                    for r in (a, b)
                    for span in step_spans(instance, r.dagster_run.run_id)
                    if span[2].endswith("/" + step_key)
                )
                assert len(steps) == 2 and steps[0][1] <= steps[1][0], steps

            # 2. Window 2's scheduled run is killed (SIGKILL) while it works; the retry lands the window.
            w2_end = next_window_end(margin_s=15)  # 20 orders are sent in a second or two; no minute lost waiting
            w2 = minute_key(int((w2_end - WINDOW_S) * 1000))
            wait_until(w2_end - WINDOW_S + 5)
            sent += produce(namesrv, state, [order(i, topic) for i in range(200, 220)])

            def working_run():
                run = scheduled_run(w2)
                return run if run is not None and recorded_process(run) else None  # recorded by the run itself

            victim = until(working_run, 300, f"the scheduled run of {w2} to start working")
            os.kill(recorded_process(victim).pid, signal.SIGKILL)
            # No more scheduled runs: on a busy machine a run of a cold Spark driver can take about a minute, and
            # the schedule's next ones would queue for the group's pool ahead of the retry.
            stack.cli("schedule", "stop", f"{table}_windows")
            until(
                lambda: instance.get_run_by_id(victim.run_id).status == DagsterRunStatus.FAILURE,
                120,
                "the dead-runs sensor to fail the killed run",
            )

            def runs_since_the_kill() -> str:
                killed_at = instance.get_run_record_by_id(victim.run_id).create_timestamp
                runs = instance.get_runs(RunsFilter(created_after=killed_at))

                def why(run) -> str:
                    failures = instance.all_logs(
                        run.run_id, of_type={DagsterEventType.RUN_FAILURE, DagsterEventType.STEP_FAILURE}
                    )
                    return " | ".join(e.message or "" for e in failures)[-600:]

                return f"a retry of the killed run to land {w2}; runs since: " + "; ".join(
                    f"{r.run_id[:8]} {r.status.value} parent={r.tags.get('dagster/parent_run_id', '-')[:8]} "
                    f"partition={r.tags.get('dagster/partition')} {why(r)}"
                    for r in runs
                )

            retry = until(
                lambda: next(
                    iter(
                        instance.get_runs(
                            RunsFilter(
                                tags={"dagster/parent_run_id": victim.run_id}, statuses=[DagsterRunStatus.SUCCESS]
                            )
                        )
                    ),
                    None,
                ),
                300,
                runs_since_the_kill,
            )
            assert retry.tags.get("dagster/retry_number") == "1"
            assert w2 in instance.get_materialized_partitions(AssetKey(table))
            assert len(instance.get_runs(RunsFilter(tags={"dagster/parent_run_id": victim.run_id}))) == 1

            # Quiesce before stopping: no run left working.
            until(lambda: not instance.get_runs(RunsFilter(statuses=PENDING)), 300, "the runs in flight to end")

        rows = DeltaTable(str(tmp_path / "lake" / table)).to_pyarrow_table(columns=["msg_id"]).to_pylist()
        assert Counter(r["msg_id"] for r in rows) == Counter(s.msg_id for s in sent), "every message exactly once"
        peer = RocketMQClient(namesrv)
        try:
            ends = Counter()
            for s in sent:
                ends[(s.broker_name, s.queue_id)] = max(ends[(s.broker_name, s.queue_id)], s.queue_offset + 1)
            queues = sorted(peer.queues(topic))
            assert {q: peer.query_consumer_offset(group, q) for q in queues} == {
                q: ends.get((q.broker_name, q.queue_id), 0) for q in queues
            }
        finally:
            peer.close()
    finally:
        stop_daemon(stack.daemon)
