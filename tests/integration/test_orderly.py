"""consume_orderly on real brokers: a run reads only queues it holds the broker's lock on, never while another
member holds one, releases them at the end, and lands the windows of each queue in order."""

from __future__ import annotations

from collections import Counter

import pytest
from deltalake import DeltaTable

from rocketlake.engine.ledger import LedgerEntry
from rocketlake.rocketmq.client import RocketMQClient
from tests.dagster_instance import pooled_instance
from tests.integration.ingestion_support import definitions, run_partitions, unique, write_config

pytestmark = pytest.mark.dagster


def failure_message(result) -> str:
    return next(e for e in result.all_events if e.is_step_failure).event_specific_data.error.message


def test_an_orderly_run_holds_its_queues_and_lands_the_windows_of_each_queue_in_order(
    tmp_path, local_cluster, produced
):
    table, group, member = unique("t"), unique("g"), unique("member")
    config = write_config(
        tmp_path / "rocketlake.yaml",
        local_cluster,
        tmp_path / "lake",
        {
            # No retries: the refusals below are the first attempt's (a retry would wait for the lock again).
            "orders": {
                "topic": produced.topic,
                "consumer_group": group,
                "table": table,
                "consume_orderly": True,
                "run_retry": {"max_retries": 0},
                "client_ip": "127.0.0.1",
                "instance_name": member,
            }
        },
    )
    defs, path = definitions(config), tmp_path / "lake" / table
    w1, w2 = produced.windows()
    client = RocketMQClient(local_cluster.spec.namesrv_address)
    queues = sorted(client.queues(produced.topic))
    other, held = "127.0.0.1@another-member", queues[0]
    # What the broker answers for the group before any run: "not found", or 0 on a queue still young.
    untouched = {mq: client.query_consumer_offset(group, mq) for mq in queues}
    try:
        # Another member of the group holds one queue: the run reads nothing at all.
        assert client.lock_batch_mq(group, other, [held]) == {held}
        with pooled_instance() as instance:
            refused = run_partitions(defs, table, instance, w1)
            assert not refused.success
            message = failure_message(refused)
            assert "locked by another member" in message and held.key in message, message
            assert not path.exists()
            assert client.lock_batch_mq(group, other, queues) == set(queues)  # the run left the others free again
            client.unlock_batch_mq(group, other, queues)

            # The second window before the first would skip messages of every queue: refused, nothing read.
            early = run_partitions(defs, table, instance, w2)
            assert not early.success and "cannot land before the earlier ones" in failure_message(early)
            assert not path.exists()
            assert {mq: client.query_consumer_offset(group, mq) for mq in queues} == untouched  # no offset moved

            for key in (w1, w2):
                assert run_partitions(defs, table, instance, key).success
                # The run released its locks: another member gets every queue at once.
                assert client.lock_batch_mq(group, other, queues) == set(queues)
                client.unlock_batch_mq(group, other, queues)

        landed = DeltaTable(str(path))
        rows = landed.to_pyarrow_table(columns=["msg_id"]).to_pylist()
        expected = produced.in_window(w1) + produced.in_window(w2)
        assert Counter(r["msg_id"] for r in rows) == Counter(m["msgId"] for m in expected)
        # Per queue, each commit's range starts where the previous one ended: the windows landed in order.
        entries = [LedgerEntry.from_json(c.get("userMetadata")) for c in reversed(landed.history())]
        ends: dict = {}
        for entry in filter(None, entries):
            for w in entry.windows:
                for r in w.ranges:
                    assert r.start == ends.get(r.queue, 0), (w.partition_key, r)
                    ends[r.queue] = r.end
        assert [w.partition_key for e in filter(None, entries) for w in e.windows] == [w1, w2]
        assert {mq: client.query_consumer_offset(group, mq) for mq in queues} == {mq: ends.get(mq, 0) for mq in queues}
    finally:
        client.close()
