"""Where a group starts: consume_from_where for a new group, exact resume for an existing one.

Scheduled runs start from the group's position; an explicit backfill always takes whole windows.
The schedule tag is set the way Dagster's daemon sets it on the runs a schedule launches.
"""

from __future__ import annotations

from collections import Counter

import pytest
from deltalake import DeltaTable

from tests.dagster_instance import pooled_instance
from tests.integration.ingestion_support import definitions, run_partitions, unique, write_config

pytestmark = pytest.mark.dagster
SCHEDULED = {"dagster/schedule_name": "orders_windows"}


def setup(tmp_path, local_cluster, produced, **extra):
    table, group = unique("t"), unique("g")
    config = write_config(
        tmp_path / "rocketlake.yaml",
        local_cluster,
        tmp_path / "lake",
        {"orders": {"topic": produced.topic, "consumer_group": group, "table": table, **extra}},
    )
    return definitions(config), table, group, str(tmp_path / "lake" / table)


def landed(path: str) -> Counter:
    return Counter(r["msg_id"] for r in DeltaTable(path).to_pyarrow_table(columns=["msg_id"]).to_pylist())


def committed(local_cluster, group, topic) -> dict:
    return {
        (q.broker_name, q.queue_id): q.consumer_offset
        for q in local_cluster.mqadmin().consumer_progress(group, topic)
        if q.topic == topic
    }


def queue_ends(messages) -> dict:
    ends = Counter()
    for m in messages:
        ends[(m["brokerName"], m["queueId"])] = max(ends[(m["brokerName"], m["queueId"])], m["queueOffset"] + 1)
    return dict(ends)


@pytest.mark.parametrize("where", ["CONSUME_FROM_LAST_OFFSET", "CONSUME_FROM_TIMESTAMP"])
def test_new_group_on_a_young_queue_starts_at_zero_like_the_java_client(where, tmp_path, local_cluster, produced):
    # QUERY_CONSUMER_OFFSET, asked as Java asks it, answers 0 for a group with no offset on a queue whose
    # message 0 is still in memory (ConsumerManageProcessor), and RebalancePushImpl then starts at 0 whatever
    # consume_from_where says. rocketlake does the same; consume_from_where applies on "not found" only.
    from rocketlake.rocketmq.client import RocketMQClient
    from rocketlake.rocketmq.message_queue import MessageQueue

    defs, table, group, path = setup(
        tmp_path, local_cluster, produced, consume_from_where=where, consume_timestamp="20991231000000"
    )
    client = RocketMQClient(local_cluster.spec.namesrv_address)
    queues = {(m["brokerName"], m["queueId"]) for m in produced.by_msg_id.values()}
    assert {client.query_consumer_offset(group, MessageQueue(produced.topic, b, q)) for b, q in queues} == {0}
    w1, w2 = produced.windows()
    with pooled_instance() as instance:
        for key in (w1, w2):
            assert run_partitions(defs, table, instance, key, tags=SCHEDULED).success
    assert landed(path) == Counter(produced.by_msg_id.keys())


def test_new_group_from_first_offset_takes_everything(tmp_path, local_cluster, produced):
    defs, table, group, path = setup(tmp_path, local_cluster, produced, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    w1, w2 = produced.windows()
    with pooled_instance() as instance:
        for key in (w1, w2):
            assert run_partitions(defs, table, instance, key, tags=SCHEDULED).success
    assert landed(path) == Counter(produced.by_msg_id.keys())
    assert {k: v for k, v in committed(local_cluster, group, produced.topic).items() if v} == queue_ends(
        produced.by_msg_id.values()
    )


def test_explicit_backfill_takes_whole_windows_even_behind_the_group(tmp_path, local_cluster, produced):
    from rocketlake.local import peers

    defs, table, group, path = setup(tmp_path, local_cluster, produced)
    w1, w2 = produced.windows()
    # The group already stands at the end of the topic (set by the Java admin API).
    local_cluster.mqadmin().run("updateSubGroup", "-c", local_cluster.spec.cluster_name, "-g", group)
    ends = queue_ends(produced.by_msg_id.values())
    answers = peers.admin(
        local_cluster.spec.namesrv_address,
        local_cluster.spec.state_dir,
        [
            {
                "op": "updateConsumeOffset",
                "group": group,
                "topic": produced.topic,
                "broker": b,
                "queue_id": q,
                "offset": o,
            }
            for (b, q), o in ends.items()
        ],
    )
    assert all(a["ok"] for a in answers), answers
    with pooled_instance() as instance:
        assert run_partitions(defs, table, instance, w1).success  # backfill: the whole window
        assert run_partitions(defs, table, instance, w2, tags=SCHEDULED).success  # scheduled: from the group on
    assert landed(path) == Counter(m["msgId"] for m in produced.in_window(w1))
    # Landing older windows never moves the group backward.
    assert {k: v for k, v in committed(local_cluster, group, produced.topic).items() if k in ends} == ends


def test_existing_group_resumes_exactly_where_the_java_admin_put_it(tmp_path, local_cluster, produced):
    from rocketlake.local import peers

    defs, table, group, path = setup(tmp_path, local_cluster, produced, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    w1, _ = produced.windows()
    first = produced.in_window(w1)
    # The group exists and sits two messages into window 1 on every queue that has any there.
    local_cluster.mqadmin().run("updateSubGroup", "-c", local_cluster.spec.cluster_name, "-g", group)
    starts = {}
    for m in sorted(first, key=lambda m: m["queueOffset"]):
        starts.setdefault((m["brokerName"], m["queueId"]), m["queueOffset"] + 2)
    answers = peers.admin(
        local_cluster.spec.namesrv_address,
        local_cluster.spec.state_dir,
        [
            {
                "op": "updateConsumeOffset",
                "group": group,
                "topic": produced.topic,
                "broker": b,
                "queue_id": q,
                "offset": o,
            }
            for (b, q), o in starts.items()
        ],
    )
    assert all(a["ok"] for a in answers), answers

    with pooled_instance() as instance:
        assert run_partitions(defs, table, instance, w1, tags=SCHEDULED).success
    expected = [m for m in first if m["queueOffset"] >= starts[(m["brokerName"], m["queueId"])]]
    assert landed(path) == Counter(m["msgId"] for m in expected)
    assert {k: v for k, v in committed(local_cluster, group, produced.topic).items() if k in starts} == queue_ends(
        first
    )
