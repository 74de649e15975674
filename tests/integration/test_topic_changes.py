"""The topic changes under a running ingestion: expanded from 4 to 8 queues per broker between two windows,
then broker-b stopped during a window and restarted. Across all of it every message the Java producer sent
lands exactly once, in the window of its store time, and the committed offsets on both brokers end at the
queues' ends.

- Window 1 is landed on 4 + 4 queues. The topic is expanded; the rebalance sensor finds window 1 incomplete
  for the 8 new queues and asks for exactly them (empty ranges: they did not exist).
- Window 2: messages on all 16 queues, then broker-b stops (clean shutdown: it unregisters) and more go to
  broker-a only. Window 2's scheduled run, while broker-b is down, lands broker-a's queues and commits nothing
  on broker-b; the sensor, once broker-b is back, asks for broker-b's slices of window 2.
- Window 3 (broker-b back, messages on all 16 queues) is landed by its scheduled run before window 2 is
  completed: the group's offsets on broker-b cannot pass window 2's unlanded messages until the sensor's run
  lands them, and then they move to the ends.
- New queues start at offset 0 because the broker says so (CONSUME_FROM_LAST_OFFSET on a young queue).

It stops broker-b of the disruptable cluster (tests/conftest.py ``disruptable``), not of the session cluster, which
other tests use meanwhile; the fixture hands it over with broker-b running and registered again.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timezone

import pytest
from dagster import build_sensor_context
from deltalake import DeltaTable

from rocketlake.dagster.rocketmq_resource import RocketMQResource
from rocketlake.local.peers import produce
from rocketlake.rocketmq.client import RocketMQClient
from rocketlake.rocketmq.message_queue import MessageQueue
from tests.dagster_instance import pooled_instance
from tests.integration.ingestion_support import (
    definitions,
    java_dump,
    minute_key,
    order,
    room_in_this_minute,
    run_partitions,
    unique,
    until,
    wait_for_next_minute,
    write_config,
)

pytestmark = pytest.mark.dagster
SCHEDULED = {"dagster/schedule_name": "orders_windows"}


def current_minute() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d-%H:%M")


def test_topic_expanded_and_a_broker_restarted_every_message_lands_once(tmp_path, disruptable):
    cluster = disruptable
    topic, group, table = unique("grow"), unique("g"), unique("t")
    namesrv, state = cluster.spec.namesrv_address, cluster.spec.state_dir
    path = str(tmp_path / "lake" / table)
    cluster.create_topic(topic, 4)
    config = write_config(
        tmp_path / "rocketlake.yaml",
        cluster,
        tmp_path / "lake",
        {
            "orders": {
                "topic": topic,
                "consumer_group": group,
                "table": table,
                "consume_from_where": "CONSUME_FROM_LAST_OFFSET",
            }
        },
    )
    defs = definitions(config)
    sensor = defs.get_sensor_def("rocketlake_test_rebalance")  # one a cluster
    resources = {"rocketmq_test": RocketMQResource(namesrv=namesrv)}
    peer = RocketMQClient(namesrv)

    def send(first: int, count: int) -> list:
        return produce(namesrv, state, [order(i, topic) for i in range(first, first + count)])

    def tick(instance, cursor=None):
        # As the daemon evaluates it (a direct call would hand the resources over as arguments).
        return sensor.evaluate_tick(
            build_sensor_context(
                instance=instance, resources=resources, cursor=cursor, definitions=defs, sensor_name=sensor.name
            )
        )

    with pooled_instance() as instance:
        # Window 1 on 4 + 4 queues, landed by its scheduled run.
        room_in_this_minute()
        w1, sent = current_minute(), send(0, 24)
        wait_for_next_minute(offset_s=3)
        assert run_partitions(defs, table, instance, w1, tags=SCHEDULED).success

        # Expanded to 8 + 8: window 1 lacks the 8 new queues, which the sensor asks for.
        cluster.create_topic(topic, 8)
        old = {MessageQueue(topic, b, q) for b in ("broker-a", "broker-b") for q in range(4)}
        new = {MessageQueue(topic, b, q) for b in ("broker-a", "broker-b") for q in range(4, 8)}
        assert set(peer.queues(topic)) == old | new
        result = tick(instance)
        (request,) = result.run_requests
        assert request.partition_key == w1
        assert set(request.tags["rocketlake/queues"].split(",")) == {q.key for q in new}
        assert run_partitions(defs, table, instance, w1, tags=request.tags).success
        assert not tick(instance, result.cursor).run_requests, "window 1 is complete"

        # Window 2: all 16 queues, then broker-b stops and more go to broker-a alone (seconds: a clean shutdown
        # unregisters at once), in the rest of this minute when half of it is left.
        room_in_this_minute(seconds=30)
        w2 = current_minute()
        sent += send(100, 32)
        assert cluster.broker_processes["broker-b"].stop()
        until(lambda: cluster._routed_queue_counts(topic) == {"broker-a": 8}, 60, "broker-b to leave the route")
        sent += send(200, 16)
        assert {s.broker_name for s in sent[-16:]} == {"broker-a"}
        wait_for_next_minute(offset_s=3)
        assert run_partitions(defs, table, instance, w2, tags=SCHEDULED).success

        # broker-b comes back (same store); window 3 has messages on all 16 queues.
        cluster.up()
        until(
            lambda: cluster._routed_queue_counts(topic) == {"broker-a": 8, "broker-b": 8},
            60,
            "broker-b to route the topic again",
        )
        room_in_this_minute()
        w3 = current_minute()
        sent += send(300, 32)
        wait_for_next_minute(offset_s=3)
        assert run_partitions(defs, table, instance, w3, tags=SCHEDULED).success
        b_queues = sorted(q for q in old | new if q.broker_name == "broker-b")
        before_fill = {q: peer.query_consumer_offset(group, q) for q in b_queues}

        # The sensor finds broker-b's slices of window 2 that nobody landed, and its run lands them.
        result = tick(instance)
        (request,) = result.run_requests
        assert request.partition_key == w2
        assert set(request.tags["rocketlake/queues"].split(",")) == {q.key for q in b_queues}
        assert run_partitions(defs, table, instance, w2, tags=request.tags).success
        assert not tick(instance, result.cursor).run_requests, "every window run is complete"

    dump = java_dump(cluster, topic, sent)
    assert len(dump) == len(sent) == 104
    windows = Counter(minute_key(m["storeTimestamp"]) for m in dump.values())
    assert windows == Counter({w1: 24, w2: 48, w3: 32}), windows
    rows = DeltaTable(path).to_pyarrow_table(columns=["msg_id", "window_start"]).to_pylist()
    assert Counter(r["msg_id"] for r in rows) == Counter(list(dump)), "every message exactly once"
    for r in rows:
        assert minute_key(int(r["window_start"].timestamp() * 1000)) == minute_key(
            dump[r["msg_id"]]["storeTimestamp"]
        ), r

    ends = Counter()
    for s in sent:
        ends[MessageQueue(topic, s.broker_name, s.queue_id)] = max(
            ends[MessageQueue(topic, s.broker_name, s.queue_id)], s.queue_offset + 1
        )
    assert all(ends[q] > 0 for q in new), "new queues got messages (they start at offset 0)"
    # Before window 2 was completed the group could not pass broker-b's unlanded window-2 messages.
    w2_starts = {
        q: min(
            m["queueOffset"]
            for m in dump.values()
            if (m["brokerName"], m["queueId"]) == (q.broker_name, q.queue_id) and minute_key(m["storeTimestamp"]) == w2
        )
        for q in b_queues
    }
    assert all(before_fill[q] is None or before_fill[q] <= w2_starts[q] for q in b_queues), (before_fill, w2_starts)
    assert {q: peer.query_consumer_offset(group, q) for q in old | new} == {q: ends[q] for q in old | new}
    peer.close()
