"""Orderly failures on real brokers: a message the listener suspends holds its queue (later messages wait, the
other queues land), the queue resumes at that message in a later run and lands in order what it missed; after
max_reconsume_times the message goes to %DLQ%<group> and the queue goes on. Each queue's committed offset stands
at its suspended message until the message is passed."""

from __future__ import annotations

import os
from collections import Counter, defaultdict

import pytest
from dagster import build_sensor_context
from deltalake import DeltaTable

from rocketlake.dagster.metadata import HELD, SUSPENDED, suspended_from
from rocketlake.rocketmq.client import RocketMQClient
from tests.dagster_instance import pooled_instance
from tests.integration.ingestion_support import (
    dead_letters,
    definitions,
    in_shared_minutes,
    order,
    run_partitions,
    unique,
    write_config,
)
from tests.unit.listeners import calls_file

pytestmark = pytest.mark.dagster
SCHEDULED = {"dagster/schedule_name": "every_minute"}  # a scheduled run starts where the group stands
A, B = ("broker-a", 0), ("broker-b", 1)  # A: a message fails once; B: one always fails


def group_offsets(cluster, group: str, topic: str) -> dict[tuple[str, int], int]:
    """QUERY_CONSUMER_OFFSET per queue: what a Java push consumer of the group would resume from."""
    with RocketMQClient(cluster.spec.namesrv_address) as client:
        return {(mq.broker_name, mq.queue_id): client.query_consumer_offset(group, mq) for mq in client.queues(topic)}


def table_offsets(path) -> dict[tuple[str, int], list[tuple[int, str]]]:
    """Per queue, (offset, window) of every row, in offset order."""
    found = defaultdict(list)
    for r in (
        DeltaTable(str(path))
        .to_pyarrow_table(columns=["broker_name", "queue_id", "queue_offset", "window_start"])
        .to_pylist()
    ):
        found[(r["broker_name"], r["queue_id"])].append(
            (r["queue_offset"], r["window_start"].strftime("%Y-%m-%d-%H:%M"))
        )
    return {q: sorted(v) for q, v in found.items()}


QUEUES = [("broker-a", 0), ("broker-a", 1), ("broker-b", 0), ("broker-b", 1)]


def orders_on_each_queue(topic: str, first: int, tags_at: dict) -> list[dict]:
    """3 orders (window 1) or 2 (window 2) on each queue, tagged "ok" but where ``tags_at`` says otherwise."""
    return [
        {**order(i, topic, tags_at.get((broker, queue_id, i), "ok")), "broker": broker, "queue_id": queue_id}
        for broker, queue_id in QUEUES
        for i in range(first, first + (3 if first == 0 else 2))
    ]


#: window 1: A's message at offset 1 fails once ("hold"), B's always ("poison"); window 2: all pass
ORDERLY = in_shared_minutes(
    "orderly_failures",
    {"orderly": (2, None)},
    lambda t: orders_on_each_queue(t["orderly"], 0, {(*A, 1): "hold", (*B, 1): "poison"}),
    lambda t: orders_on_each_queue(t["orderly"], 3, {}),
)


def test_a_suspended_message_holds_only_its_queue_which_resumes_in_order_or_sends_it_to_the_dlq(
    tmp_path, local_cluster, shared_minutes
):
    shared = shared_minutes[ORDERLY]  # both windows closed
    topic, group, table = shared.topics["orderly"], unique("g"), unique("t")
    config = write_config(
        tmp_path / "rocketlake.yaml",
        local_cluster,
        tmp_path / "lake",
        {
            "orders": {
                "topic": topic,
                "consumer_group": group,
                "table": table,
                "consume_orderly": True,
                "listener": "tests.unit.listeners:orderly_fail_by_tag",
                "max_reconsume_times": 2,
                "suspend_current_queue_time_millis": 1000,
                "run_retry": {"max_retries": 0},
            }
        },
    )
    defs, path = definitions(config), tmp_path / "lake" / table
    calls = calls_file(topic)
    if os.path.exists(calls):
        os.remove(calls)
    queues = QUEUES
    sent, (w1, w2) = shared.sent, shared.windows
    poison = next(s for s in sent if (s.broker_name, s.queue_id, s.queue_offset) == (*B, 1))
    assert {(s.broker_name, s.queue_id) for s in sent} == set(queues)

    with pooled_instance() as instance:
        # Window 1: A and B stop at their failing message (offset 1); the other queues land all of it.
        first = run_partitions(defs, table, instance, w1, tags=SCHEDULED)
        assert first.success, [e.message for e in first.all_events if e.is_failure]
        [m] = first.asset_materializations_for_node(table)
        assert set(suspended_from(m.metadata[SUSPENDED])) == {f"{topic}/broker-a/0", f"{topic}/broker-b/1"}
        assert m.metadata[HELD].value == 4  # offsets 1 and 2 of A and B
        assert group_offsets(local_cluster, group, topic) == {A: 1, B: 1, ("broker-a", 1): 3, ("broker-b", 0): 3}
        assert {q: [o for o, _ in v] for q, v in table_offsets(path).items()} == {
            A: [0],
            B: [0],
            ("broker-a", 1): [0, 1, 2],
            ("broker-b", 0): [0, 1, 2],
        }

        # The pause is over: the resume sensor asks for a run of window 1 from the group's position. A's message
        # succeeds on its second attempt and A lands the rest of window 1; B's fails again; nothing else moves.
        sensor = defs.get_sensor_def(f"{table}_orderly_resume")
        [request] = sensor.evaluate_tick(
            build_sensor_context(instance=instance, definitions=defs, sensor_name=sensor.name)
        ).run_requests
        assert request.partition_key == w1
        second = run_partitions(defs, table, instance, w1, tags=request.tags)
        assert second.success, [e.message for e in second.all_events if e.is_failure]
        assert group_offsets(local_cluster, group, topic) == {A: 3, B: 1, ("broker-a", 1): 3, ("broker-b", 0): 3}
        landed = table_offsets(path)
        assert landed[A] == [(0, w1), (1, w1), (2, w1)]
        assert [o for o, _ in landed[B]] == [0]

        # Window 2 on schedule: B's message fails a third time, past max_reconsume_times (2): it goes to the DLQ and
        # B lands the rest of window 1 and window 2, in order; every other queue lands window 2.
        third = run_partitions(defs, table, instance, w2, tags=SCHEDULED)
        assert third.success, [e.message for e in third.all_events if e.is_failure]
        assert group_offsets(local_cluster, group, topic) == {q: 5 for q in queues}
        landed = table_offsets(path)
        assert landed[B] == [(0, w1), (2, w1), (3, w2), (4, w2)]  # each row in the window of its store time
        assert landed[A] == [(0, w1), (1, w1), (2, w1), (3, w2), (4, w2)]
        assert all([o for o, _ in landed[q]] == list(range(5)) for q in queues if q != B)
        rows = DeltaTable(str(path)).to_pyarrow_table(columns=["msg_id"]).to_pylist()
        assert Counter(r["msg_id"] for r in rows) == Counter(s.msg_id for s in sent if s.msg_id != poison.msg_id)

    with RocketMQClient(local_cluster.spec.namesrv_address) as client:
        [dead] = dead_letters(client, group)  # straight to the DLQ: never through %RETRY%<group>
    assert dead.msg_id == poison.msg_id and dead.topic == f"%DLQ%{group}"
    assert dead.body == order(1, topic, "poison")["body"].encode()

    # The listener saw each queue in offset order, the suspended message again on each attempt (its
    # reconsume_times counting the failed ones), and nothing after a suspended message before it was passed.
    seen = defaultdict(list)
    for line in open(calls).read().splitlines():
        queue, offset, attempts = line.split()
        broker, queue_id = queue.split("/")
        seen[(broker, int(queue_id))].append((int(offset), int(attempts)))
    assert seen[A] == [(0, 0), (1, 0), (1, 1), (2, 0), (3, 0), (4, 0)]
    assert seen[B] == [(0, 0), (1, 0), (1, 1), (1, 2), (2, 0), (3, 0), (4, 0)]
    assert seen[("broker-a", 1)] == [(o, 0) for o in range(5)]
