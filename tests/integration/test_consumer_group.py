"""Two deployments of one CLUSTERING group on real brokers, each with its own Dagster instance and member id.

They split a 16-queue topic 8/8 under AVG (the first 8 of the sorted list and the last 8), writing one
Delta table at the same time; on a 1-queue topic one takes the queue and the other idles and says so. When
the member that took the single queue leaves, the other's rebalance sensor sees the new share and asks
for the window nobody landed the queue of, and that run lands exactly that slice. Every message lands
exactly once (compared with the Java consumer's dump) and the committed offsets are the queues' ends. A Java
DefaultMQPushConsumer joining the group as a third member is given by its own strategy exactly the queues our
members compute for it.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from dagster import AssetKey, DagsterInstance, build_sensor_context
from deltalake import DeltaTable

from rocketlake.dagster.metadata import ASSIGNMENT
from rocketlake.dagster.rocketmq_resource import RocketMQResource
from rocketlake.engine.assignment import assign
from rocketlake.engine.config import load_config
from rocketlake.local.peers import produce
from rocketlake.rocketmq.client import RocketMQClient
from rocketlake.rocketmq.message_queue import MessageQueue
from tests.integration.deployment_support import Deployment, ledger
from tests.integration.ingestion_support import (
    java_dump,
    minute_key,
    order,
    room_in_this_minute,
    run_partitions,
    unique,
    until,
    wait_for_next_minute,
)
from tests.java_oracles import allocation_among, allocations, start_push_member

pytestmark = pytest.mark.stack
ROOT = Path(__file__).resolve().parents[2]


def test_two_deployments_split_the_queues_and_a_sensor_completes_what_a_departed_member_left(
    tmp_path, local_cluster, spark
):
    # `spark`: the sensor's runs land in this process, on the worker's one session (started with every jar any of
    # the worker's tests needs); a stack-tier test does not get it by itself, and a session it started would lack S3A.
    wide, single, group = unique("wide"), unique("single"), unique("g")
    local_cluster.create_topic(wide, 8)  # 8 queues on each broker: 16
    local_cluster.create_topic(single, 1, brokers=("broker-a",))  # one queue in all
    tables = {"wide": unique("t_wide"), "single": unique("t_single")}
    ingestions = {
        "wide": {"topic": wide, "consumer_group": group, "table": tables["wide"]},
        "single": {"topic": single, "consumer_group": group, "table": tables["single"]},
    }
    first = Deployment(tmp_path, local_cluster, "m1", ingestions)
    second = Deployment(tmp_path, local_cluster, "m2", ingestions)
    peer = RocketMQClient(local_cluster.spec.namesrv_address)
    try:
        # Its own minute, not a shared one: the rebalance sensor looks at the last 10 closed windows only
        # (rocketlake/dagster/rebalance.py WINDOWS_CHECKED), and this test runs too long after the shared minutes.
        room_in_this_minute()
        sent = produce(
            local_cluster.spec.namesrv_address,
            local_cluster.spec.state_dir,
            [order(i, wide) for i in range(64)] + [order(i, single) for i in range(100, 106)],
        )
        for d in (first, second):
            d.join()
        for topic in (wide, single):  # the members' first heartbeats are on their way
            until(
                lambda t=topic: peer.get_consumer_list_by_group(group, t) == [first.client_id, second.client_id],
                60,
                f"both members listed by the brokers of {topic}",
            )
        connection = local_cluster.mqadmin().consumer_connection(group)
        assert first.client_id in connection and second.client_id in connection
        dumps = {t: java_dump(local_cluster, t, [s for s in sent if s.topic == t]) for t in (wide, single)}
        (window,) = {minute_key(m["storeTimestamp"]) for d in dumps.values() for m in d.values()}
        wait_for_next_minute(offset_s=3)

        # Both deployments land the window of the wide topic at the same time, into one table.
        runs = [d.materialize(tables["wide"], window) for d in (first, second)]
        outputs = [r.communicate(timeout=600)[0] for r in runs]
        assert [r.returncode for r in runs] == [0, 0], "\n".join(o[-3000:] for o in outputs)
        print("conflicts retried:", sum(o.count("lost a race with another writer") for o in outputs))
        with DagsterInstance.from_config(str(second.home)) as two:
            path = tmp_path / "lake" / tables["wide"]
            entries = ledger(path)
            queues = sorted(peer.queues(wide))
            by_member = {
                e.member: [r.queue for w in e.windows for r in w.ranges if r.queue.topic == wide] for e in entries
            }
            assert by_member == {first.client_id: queues[:8], second.client_id: queues[8:]}
            rows = DeltaTable(str(path)).to_pyarrow_table(columns=["msg_id"]).to_pylist()
            assert Counter(r["msg_id"] for r in rows) == Counter(list(dumps[wide]))
            ends = {
                (s.broker_name, s.queue_id): s.queue_offset + 1
                for s in sorted(sent, key=lambda s: s.queue_offset)
                if s.topic == wide
            }
            assert {q: peer.query_consumer_offset(group, q) for q in queues} == {
                q: ends.get((q.broker_name, q.queue_id), 0) for q in queues
            }

            # The single queue: AVG gives it to the first member of the sorted list; the second idles.
            idle = run_partitions(second.defs, tables["single"], two, window)
            assert idle.success
            said = idle.asset_materializations_for_node(tables["single"])[0].metadata[ASSIGNMENT].value
            # (it may take a queue of the group's retry topic, which is rebalanced on its own)
            assert said.startswith(f"member {second.client_id} takes "), said
            assert f"it idles on topic {single}: none of its 1 queue(s) is its share" in said, said
            single_path = tmp_path / "lake" / tables["single"]
            assert DeltaTable(str(single_path)).to_pyarrow_table().num_rows == 0

            # The first member leaves before landing it: the second's sensor finds the slice nobody landed.
            first.leave()
            assert peer.get_consumer_list_by_group(group, single) == [second.client_id]
            sensor = second.defs.get_sensor_def("rocketlake_test_rebalance")  # one for both ingestions
            resources = {"rocketmq_test": RocketMQResource(namesrv=local_cluster.spec.namesrv_address)}
            # As the daemon evaluates it (a direct call would hand the resources over as arguments).
            result = sensor.evaluate_tick(
                build_sensor_context(
                    instance=two, resources=resources, definitions=second.defs, sensor_name=sensor.name
                )
            )
            (request,) = [r for r in result.run_requests if r.partition_key == window]
            assert request.asset_selection == [AssetKey(tables["single"])], "the wide table's window is complete"
            (queue,) = peer.queues(single)
            assert queue.key in request.tags["rocketlake/queues"].split(",")
            shares = {e.asset_key.to_user_string(): e.metadata[ASSIGNMENT].value for e in result.asset_events}
            assert set(shares) == set(tables.values()) and all("takes" in s for s in shares.values()), shares
            fill = run_partitions(second.defs, tables["single"], two, window, tags=request.tags)
            assert fill.success
            rows = DeltaTable(str(single_path)).to_pyarrow_table(columns=["msg_id"]).to_pylist()
            assert Counter(r["msg_id"] for r in rows) == Counter(list(dumps[single]))
            assert peer.query_consumer_offset(group, queue) == 6
            again = sensor.evaluate_tick(
                build_sensor_context(
                    instance=two,
                    resources=resources,
                    cursor=result.cursor,
                    definitions=second.defs,
                    sensor_name=sensor.name,
                )
            )
            assert not again.run_requests, "the window is complete now"
    finally:
        for d in (first, second):
            d.kill()
        peer.close()


def test_a_java_push_consumer_as_a_third_member_gets_what_our_members_compute_for_it(tmp_path, local_cluster):
    topic, group = unique("wide"), unique("g")
    local_cluster.create_topic(topic, 8)
    ingestions = {"wide": {"topic": topic, "consumer_group": group, "table": unique("t")}}
    ours = [Deployment(tmp_path, local_cluster, name, ingestions) for name in ("m1", "m2")]
    java_cid = "127.0.0.1@java3"
    members = sorted([d.client_id for d in ours] + [java_cid])
    peer = RocketMQClient(local_cluster.spec.namesrv_address)
    java = None
    try:
        for d in ours:
            d.join()
        until(
            lambda: peer.get_consumer_list_by_group(group, topic) == [d.client_id for d in ours],
            60,
            "our two members listed",
        )
        java = start_push_member(
            local_cluster.spec.namesrv_address,
            local_cluster.spec.state_dir,
            group,
            topic,
            client_ip="127.0.0.1",
            instance_name="java3",
        )
        lines = allocations(java)
        until(lambda: peer.get_consumer_list_by_group(group, topic) == members, 60, "the Java consumer listed too")
        allocated = allocation_among(lines, topic, members)
        assert allocated["cid"] == java_cid
        cfg = load_config(ours[0].config).ingestions["wide"]
        queues = sorted(peer.queues(topic))
        shares = {cid: assign(cfg, cid, queues, members).taken for cid in members}
        assert sorted(MessageQueue(*q) for q in allocated["queues"]) == list(shares[java_cid]), (
            "our strategy gives the Java member exactly what its own strategy gave it"
        )
        assert sorted(q for share in shares.values() for q in share) == queues, "each queue goes to one member"
        assert [len(shares[cid]) for cid in members] == [6, 5, 5]
    finally:
        if java is not None:
            java.stdin.close()
            java.wait(timeout=60)
        for d in ours:
            d.kill()
        peer.close()
