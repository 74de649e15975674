"""The seeds' experiment with `dagster-daemon` doing the work: two deployments of one group, each with its own
Dagster instance, member process, schedule and daemon, and nobody launching runs by hand.

Both schedules run the window on a 16-queue topic: the members split it 8/8 under AVG (the first 8 of the sorted
list and the last 8), writing one table. Then the first deployment stops (its member process unregisters, its
daemon ends): the second's next scheduled run takes all 16 queues, and its rebalance sensor, evaluated by its
daemon, records the new share. Every message lands exactly once and the committed offsets are the queues' ends.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from dagster import AssetKey, DagsterInstance
from deltalake import DeltaTable

from rocketlake.dagster.metadata import ASSIGNMENT
from rocketlake.local.peers import produce
from rocketlake.rocketmq.client import RocketMQClient
from tests.integration.deployment_support import Deployment, ledger, start_daemon, stop_daemon
from tests.integration.ingestion_support import minute_key, order, room_in_this_minute, unique, until, wait_until

pytestmark = pytest.mark.stack
ROOT = Path(__file__).resolve().parents[2]
DAGSTER = str(Path(sys.executable).parent / "dagster")


def dagster_cli(deployment: Deployment, *args: str) -> None:
    result = subprocess.run(
        [DAGSTER, *args, "-m", "rocketlake.definitions"],
        cwd=ROOT,
        env=deployment.env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]


def test_two_deployments_run_by_their_daemons_split_the_queues_and_hand_them_over(
    tmp_path, local_cluster, spark_connect
):
    topic, group, table = unique("wide"), unique("g"), unique("t")
    local_cluster.create_topic(topic, 8)
    # Windows start at the next minute (no older window to catch up), closed at their end (grace 0), so the
    # schedule's tick at the end of a window asks for it.
    start = (datetime.now(timezone.utc) + timedelta(minutes=1)).replace(second=0, microsecond=0)
    window = {"cron": "* * * * *", "timezone": "UTC", "grace_seconds": 0, "start": start.isoformat()}
    ingestions = {"wide": {"topic": topic, "consumer_group": group, "table": table, "window": window}}
    # Both deployments' runs open their sessions on one long-lived Spark server, as on the local runtime.
    first = Deployment(tmp_path, local_cluster, "d1", ingestions, spark_connect.settings())
    second = Deployment(tmp_path, local_cluster, "d2", ingestions, spark_connect.settings())
    peer = RocketMQClient(local_cluster.spec.namesrv_address)
    daemons: dict[str, subprocess.Popen] = {}
    try:
        for d in (first, second):
            d.join()
            dagster_cli(d, "schedule", "start", f"{table}_windows")
        dagster_cli(second, "sensor", "start", "rocketlake_test_rebalance")
        until(
            lambda: peer.get_consumer_list_by_group(group, topic) == [first.client_id, second.client_id],
            60,
            "both members listed by the brokers",
        )
        for name, d in (("d1", first), ("d2", second)):
            daemons[name] = start_daemon(d)

        # Within the first window: a setup quicker than the rest of the minute it began in would otherwise send the
        # orders before the windows start, where no window of the group takes them (seen with runs on a warm Spark).
        wait_until(start.timestamp())
        room_in_this_minute()
        w1 = minute_key(int(datetime.now(timezone.utc).timestamp() * 1000))
        sent = produce(
            local_cluster.spec.namesrv_address, local_cluster.spec.state_dir, [order(i, topic) for i in range(64)]
        )
        # The daemons' schedules launch the window's runs once it closes; wait on their instances' records.
        # Each instance opened once: opening one costs about 0.2 CPU-s, which a poll every 0.2 s would pay for
        # minutes, taking a core from the other worker.
        with DagsterInstance.from_config(str(first.home)) as one, DagsterInstance.from_config(str(second.home)) as two:
            until(
                lambda: all(w1 in i.get_materialized_partitions(AssetKey(table)) for i in (one, two)),
                480,
                f"both deployments' daemons to land window {w1}",
            )
        path = tmp_path / "lake" / table
        queues = sorted(peer.queues(topic))
        by_member = {
            e.member: sorted(r.queue for w in e.windows for r in w.ranges if r.queue.topic == topic)
            for e in ledger(path)
            if w1 in e.partition_keys
        }
        assert by_member == {first.client_id: queues[:8], second.client_id: queues[8:]}

        # The first deployment stops: member process, daemon. The second's next window takes every queue.
        first.leave()
        stop_daemon(daemons.pop("d1"))
        until(lambda: peer.get_consumer_list_by_group(group, topic) == [second.client_id], 60, "d1 to leave")
        room_in_this_minute()
        w2 = minute_key(int(datetime.now(timezone.utc).timestamp() * 1000))
        sent += produce(
            local_cluster.spec.namesrv_address, local_cluster.spec.state_dir, [order(i, topic) for i in range(100, 148)]
        )
        with DagsterInstance.from_config(str(second.home)) as two:
            until(
                lambda: w2 in two.get_materialized_partitions(AssetKey(table)), 480, f"d2's daemon to land window {w2}"
            )
        w2_entries = [e for e in ledger(path) if w2 in e.partition_keys]
        assert {e.member for e in w2_entries} == {second.client_id}
        assert (
            sorted(
                r.queue
                for e in w2_entries
                for w in e.windows
                if w.partition_key == w2
                for r in w.ranges
                if r.queue.topic == topic
            )
            == queues
        )
        with DagsterInstance.from_config(str(second.home)) as instance:
            said = [
                r.asset_observation.metadata[ASSIGNMENT].value
                for r in instance.fetch_observations(AssetKey(table), limit=50).records
                if ASSIGNMENT in r.asset_observation.metadata
            ]
        # (the retry topic's queues, rebalanced on their own, may be in the share too)
        assert any(
            s.startswith(f"member {second.client_id} takes ")
            and f"(members: {second.client_id})" in s
            and all(q.key in s for q in queues)
            for s in said
        ), said

        rows = DeltaTable(str(path)).to_pyarrow_table(columns=["msg_id"]).to_pylist()
        assert Counter(r["msg_id"] for r in rows) == Counter(s.msg_id for s in sent), "every message exactly once"
        ends = Counter()
        for s in sent:
            ends[(s.broker_name, s.queue_id)] = max(ends[(s.broker_name, s.queue_id)], s.queue_offset + 1)
        assert {q: peer.query_consumer_offset(group, q) for q in queues} == {
            q: ends.get((q.broker_name, q.queue_id), 0) for q in queues
        }
    finally:
        for process in daemons.values():
            stop_daemon(process)
        for d in (first, second):
            d.kill()
        peer.close()
