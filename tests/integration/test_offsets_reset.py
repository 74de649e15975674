"""`rocketlake offsets reset --to-time`: RocketMQ's resetOffsetByTime, forward only, never under a run in flight."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from dagster import DagsterInstance

from rocketlake.dagster.ingestion import consumer_group_pool
from rocketlake.rocketmq.client import RocketMQClient
from rocketlake.rocketmq.message_queue import MessageQueue
from tests.dagster_instance import recommended_home
from tests.integration.ingestion_support import unique, write_config

pytestmark = pytest.mark.stack
ROOT = Path(__file__).resolve().parents[2]


def targets_at(produced, at_ms: int, queues) -> dict[MessageQueue, int]:
    """Per queue, the first offset stored at or after ``at_ms`` (the queue's end if none), from the Java peer."""
    out = {}
    for mq in queues:
        mine = [
            m for m in produced.by_msg_id.values() if (m["brokerName"], m["queueId"]) == (mq.broker_name, mq.queue_id)
        ]
        later = [m["queueOffset"] for m in mine if m["storeTimestamp"] >= at_ms]
        out[mq] = min(later) if later else max((m["queueOffset"] + 1 for m in mine), default=0)
    return out


def test_reset_by_time_moves_forward_after_a_dry_run_and_refuses_backward_or_in_flight(
    tmp_path, local_cluster, produced
):
    group = unique("g")
    config = write_config(
        tmp_path / "rocketlake.yaml",
        local_cluster,
        tmp_path / "lake",
        {"orders": {"topic": produced.topic, "consumer_group": group, "table": unique("t")}},
    )
    home = recommended_home(tmp_path / "dagster_home")  # pools on, as recommended
    env = dict(os.environ, DAGSTER_HOME=str(home))

    def reset(*args):
        return subprocess.run(
            [
                str(Path(sys.executable).parent / "rocketlake"),
                "offsets",
                "reset",
                "orders",
                "--config",
                str(config),
                *args,
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    w1, w2 = produced.windows()
    first_of = {w: min(m["storeTimestamp"] for m in produced.in_window(w)) for w in (w1, w2)}
    client = RocketMQClient(local_cluster.spec.namesrv_address)
    try:
        queues = sorted(client.queues(produced.topic))
        committed = lambda: {mq: client.query_consumer_offset(group, mq) for mq in queues}  # noqa: E731
        expected = targets_at(produced, first_of[w2], queues)
        assert set(expected.values()) != {0}  # the second window starts past the first's messages
        # A new group: "not found", or 0 on a queue whose message 0 is still in the broker's memory.
        before = committed()

        dry = reset("--to-time", str(first_of[w2]), "--dry-run")
        assert dry.returncode == 0, dry.stdout + dry.stderr
        for mq, target in expected.items():
            assert f"  {mq.key}: {'-' if before[mq] is None else before[mq]} -> {target}" in dry.stdout
        assert committed() == before  # a dry run changes nothing

        with DagsterInstance.from_config(str(home)) as instance:  # a run of the group claims its pool slot
            instance.event_log_storage.claim_concurrency_slot(consumer_group_pool(group), "a-running-run", "orders")
            refused = reset("--to-time", str(first_of[w2]))
            assert refused.returncode == 2 and "a-running-run" in refused.stderr and "in flight" in refused.stderr
            assert committed() == before
            instance.event_log_storage.free_concurrency_slots_for_run("a-running-run")

        done = reset("--to-time", str(first_of[w2]))
        assert done.returncode == 0, done.stdout + done.stderr
        assert committed() == expected
        progress = {
            (q.broker_name, q.queue_id): q.consumer_offset
            for q in local_cluster.mqadmin().consumer_progress(group, produced.topic)
            if q.topic == produced.topic
        }
        assert progress == {(mq.broker_name, mq.queue_id): off for mq, off in expected.items()}  # as mqadmin sees it

        back = reset("--to-time", str(first_of[w1]))  # would move every queue with messages in w1 back
        assert back.returncode == 2 and "would move backward" in back.stderr and "rocketlake backfill" in back.stderr
        assert committed() == expected
    finally:
        client.close()
