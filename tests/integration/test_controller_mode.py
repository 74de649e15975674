"""5.x controller mode (automatic master/slave switch): a master that dies is replaced by a replica the controller
promotes, and runs follow the name server's route to it; each message lands once across two switches.

The cluster is the local runtime's (``ClusterSpec(controller=True)``): a controller embedded in the name server
(DLedger, one peer) and two replicas of broker-a, started as RocketMQ's quick start starts them (brokerId -1, the
controller gives the ids; ``allAckInSyncStateSet``). Masters are killed with SIGKILL, as a machine dies.

1. The master dies after a run planned its window: the run reads the window from the promoted replica, which the
   route now lists as brokerId 0, and commits its offsets there.
2. The dead replica restarts and rejoins as a slave. The next window lands; then its master dies right after the
   run committed, and the other replica is promoted again. The third window lands on it. A promoted replica may
   hold the group's offsets as they were when it last copied them (it copies them every few seconds): whether this
   one copied window 2's commit depends on timing, so the test puts the offsets it holds back to window 1's ends,
   what a copy from before that commit holds, and the run repairs them from the ledger (nothing is landed twice).

Each promoted replica here holds every message the table landed (a message is acknowledged once every in-sync
replica has it): no run may take it for a replica that lacks the old master's tail (``engine.tails``, which reads
the store time of the message below each queue's newest window boundary), yet each run examines it: the promoted
replica registers as brokerId 0, so its offsets count as the master's. The truncated replica itself is tested on
plain data (tests/unit/test_replaced_tail.py): this cluster elects only in-sync replicas, so it never promotes one.
"""

from __future__ import annotations

import os
import signal

import pytest

import rocketlake.spark.materialize as materialize
from rocketlake.engine.windows import StoreTimeWindow
from rocketlake.jars import ROCKETMQ_VERSION
from rocketlake.local.peers import produce
from rocketlake.local.spec import SLAVE_PORT_OFFSET, BrokerSpec
from rocketlake.rocketmq.client import RocketMQClient
from tests.conftest import _running_cluster, free_ports
from tests.integration.engine_support import Engine, assert_landed_once_at_the_ends, now_ms
from tests.integration.ingestion_support import order, unique, until, wait_until
from tests.unit.support import ingestion_config

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def controlled_cluster(tmp_path_factory):
    namesrv, replica = free_ports(2, block=7)  # the name server and its controller (2 above); two replicas, 5 apart
    yield from _running_cluster(
        tmp_path_factory,
        ROCKETMQ_VERSION,
        namesrv_port=namesrv,
        controller=True,
        brokers=(BrokerSpec("broker-a", replica), BrokerSpec("broker-a", replica + SLAVE_PORT_OFFSET, broker_id=1)),
    )


def kill_the_master(cluster) -> str:
    """SIGKILL broker-a's master; return its address once the controller promoted the other replica (the name
    server routes a new brokerId 0)."""
    dead = cluster.registered_ids("broker-a")[0]
    [spec] = [b for b in cluster.spec.brokers if b.address == dead]
    os.kill(cluster.broker_processes[spec.key].pid(), signal.SIGKILL)
    until(
        lambda: cluster.registered_ids("broker-a").get(0) not in (None, dead),
        60,
        lambda: f"a replica promoted in {dead}'s place (route: {cluster.registered_ids('broker-a')})",
    )
    return dead


def send_window(cluster, topic: str, numbers: range) -> StoreTimeWindow:
    start = now_ms()
    produce(cluster.spec.namesrv_address, cluster.spec.state_dir, [order(i, topic) for i in numbers])
    end = now_ms() + 1
    wait_until(end / 1000)
    return StoreTimeWindow(start, end)


@pytest.fixture
def client(controlled_cluster):
    client = RocketMQClient(controlled_cluster.spec.namesrv_address)
    yield client
    client.close()


def test_runs_follow_the_master_the_controller_promotes_and_land_each_message_once(
    controlled_cluster, client, spark, tmp_path, monkeypatch
):
    cluster = controlled_cluster
    topic, group = unique("t_ctl"), unique("g_ctl")
    cluster.create_topic(topic, 2)
    cfg = ingestion_config(
        topic=topic,
        consumer_group=group,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        window={"cron": "* * * * *", "start": "1970-01-01", "grace_seconds": 0},
    )
    engine = Engine(cluster, spark, tmp_path / "orders", cfg)
    first_master = cluster.registered_ids("broker-a")[0]
    examined = []  # which masters each run's detection found answering: the promoted replica, registered as brokerId 0
    masters = engine.broker.masters
    engine.broker.masters = lambda queues: examined.append(masters(queues)) or examined[-1]

    # 1. The master dies once the run's ranges are fixed; the run reads them from the promoted replica.
    w1 = send_window(cluster, topic, range(0, 40))
    killed = []

    def master_dies_after_planning(*args, **kwargs):
        if not killed:  # once: a read asked again must not kill the promoted replica too
            killed.append(kill_the_master(cluster))
        return read_plan(*args, **kwargs)

    read_plan = materialize.read_plan
    monkeypatch.setattr(materialize, "read_plan", master_dies_after_planning)
    assert engine.run("r1", [("w1", w1)]).balanced
    monkeypatch.undo()
    assert killed == [first_master]
    second_master = cluster.registered_ids("broker-a")[0]
    after_w1 = {q: client.get_max_offset(q) for q in client.queues(topic)}
    assert engine.offsets(topic) == {(q.broker_name, q.queue_id): top for q, top in after_w1.items()}

    # 2. The dead replica rejoins (as a slave); window 2 lands, then its master dies right after the run's commit.
    cluster.up()  # restarts it on its store and waits until both replicas are in sync again
    assert cluster.registered_ids("broker-a")[0] == second_master
    w2 = send_window(cluster, topic, range(40, 60))
    landed = engine.run("r2", [("w2", w2)])
    assert landed.balanced and landed.prepared.replaced == () and examined[-1] == {"broker-a": second_master}
    assert kill_the_master(cluster) == second_master
    assert cluster.registered_ids("broker-a")[0] == first_master

    after_w2 = {q: client.get_max_offset(q) for q in client.queues(topic)}
    assert after_w2 != after_w1
    for q, offset in after_w1.items():  # the promoted replica's copy of the offsets from before window 2's commit
        client.update_consumer_offset(group, q, offset)
    assert engine.offsets(topic) == {(q.broker_name, q.queue_id): top for q, top in after_w1.items()}

    # 3. StoreTimeWindow 3 lands on the replica promoted again: the run first moves the stale offsets forward to where the
    # ledger says window 2 was landed; nothing was lost or landed twice across both switches.
    w3 = send_window(cluster, topic, range(60, 80))
    landed = engine.run("r3", [("w3", w3)])
    assert landed.balanced and landed.prepared.replaced == () and examined[-1] == {"broker-a": first_master}
    assert {(m.queue, m.before, m.after) for m in landed.prepared.repaired} == {
        (q, after_w1[q], after_w2[q]) for q in after_w1 if after_w2[q] != after_w1[q]
    }
    assert_landed_once_at_the_ends(engine, cluster, client, topic, group, 80)
