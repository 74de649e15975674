"""A master with a slave (classic replication): a run whose master is killed after it planned its windows reads them
from the slave, lands each message once, and once the master is back the group's offsets are where they belong.

The cluster is the local runtime's (``rocketlake local up --slaves``): broker-a as a master (brokerId 0) and a slave
(brokerId 1, ``brokerRole=SLAVE``, ``slaveReadEnable``). The master is killed with SIGKILL, as a machine dies.

A slave that has not copied everything the table landed is no truncated tail (``engine.tails``), whether the name
server routes no master while the master is down (classic) or routes the slave as brokerId 0 in its place (5.x slave
acting as master). The brokers have ``enableSlaveActingMaster``; the name server's ``supportActingMaster`` is off
except in the test that turns it on, so the routes are classic otherwise.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time

import pytest
from deltalake import DeltaTable

import rocketlake.spark.materialize as materialize
from rocketlake.engine.ingest import SlaveBehind
from rocketlake.engine.run import BrokersSilent
from rocketlake.engine.windows import StoreTimeWindow
from rocketlake.jars import ROCKETMQ_VERSION
from rocketlake.local.cluster import LocalCluster
from rocketlake.local.peers import produce
from rocketlake.local.spec import SLAVE_PORT_OFFSET, BrokerSpec
from rocketlake.rocketmq.broker import BrokerClient
from rocketlake.rocketmq.client import BrokerNotFound, RocketMQClient
from rocketlake.rocketmq.errors import RocketMQError, TopicNotExist
from rocketlake.rocketmq.message_queue import OffsetRange
from rocketlake.rocketmq.range_reader import read_ranges
from tests.conftest import _running_cluster, free_ports
from tests.integration.engine_support import Engine, assert_landed_once_at_the_ends, now_ms
from tests.integration.ingestion_support import order, unique, until, wait_until
from tests.unit.support import ingestion_config

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def ha_cluster(tmp_path_factory):
    namesrv, master = free_ports(2, block=7)  # a master's three ports and its slave's, 5 above
    yield from _running_cluster(
        tmp_path_factory,
        ROCKETMQ_VERSION,
        namesrv_port=namesrv,
        brokers=(BrokerSpec("broker-a", master), BrokerSpec("broker-a", master + SLAVE_PORT_OFFSET, broker_id=1)),
        extra_broker_properties=(("enableSlaveActingMaster", "true"),),
    )


def copied(slave: BrokerClient, client: RocketMQClient, topic: str) -> bool:
    """The slave holds every message of the topic (copied asynchronously) and serves it."""
    try:
        for q in client.queues(topic):
            if slave.get_max_offset(q.topic, q.queue_id) != client.get_max_offset(q):
                return False
            slave.pull(q.topic, q.queue_id, 0, 1, consumer_group="rocketlake_test_reader")
        return True
    except RocketMQError:
        return False


def test_a_run_whose_master_dies_reads_from_the_slave_and_lands_each_message_once(
    ha_cluster, spark, tmp_path, monkeypatch
):
    cluster, namesrv = ha_cluster, ha_cluster.spec.namesrv_address
    master, slave_spec = ha_cluster.spec.brokers
    client = RocketMQClient(namesrv)
    slave = BrokerClient(slave_spec.address, broker_name="broker-a")
    topic, group = unique("t_ha"), unique("g_ha")
    cluster.create_topic(topic, 2)
    start = now_ms()
    produce(namesrv, cluster.spec.state_dir, [order(i, topic) for i in range(40)])
    first_end = now_ms() + 1
    until(lambda: copied(slave, client, topic), 60, f"the slave's copy of {topic}")
    wait_until(first_end / 1000)

    cfg = ingestion_config(
        topic=topic,
        consumer_group=group,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        window={"cron": "* * * * *", "start": "1970-01-01", "grace_seconds": 0},
    )
    engine = Engine(cluster, spark, tmp_path / "orders", cfg)
    killed = []

    def master_dies_after_planning(*args, **kwargs):  # the ranges are fixed from the master's offsets by now
        os.kill(cluster.broker_processes[master.key].pid(), signal.SIGKILL)
        killed.append(time.monotonic())
        until(
            lambda: client.refresh_route(topic).broker("broker-a").master_addr is None,
            60,
            "the name server dropping the dead master",
        )
        return read_plan(*args, **kwargs)

    def master_back_after_the_commit(*args, **kwargs):  # the slice is read (from the slave) and committed
        if killed and cluster.broker_processes[master.key].pid() is None:
            assert client.route(topic).broker("broker-a").master_addr is None  # it was down for the whole read
            cluster.up()  # the master restarts on its store
        return table_version(*args, **kwargs)

    # The landing asks the table's version right after its commit (and once before planning, when nothing is killed).
    read_plan, table_version = materialize.read_plan, materialize.table_version
    monkeypatch.setattr(materialize, "read_plan", master_dies_after_planning)
    monkeypatch.setattr(materialize, "table_version", master_back_after_the_commit)
    landed = engine.run("r1", [("w1", StoreTimeWindow(start, first_end))])
    assert killed and landed.balanced
    monkeypatch.undo()

    # Once the master is back: the next window lands after it, each message once, the offsets at the queues' ends.
    second_start = now_ms()
    produce(namesrv, cluster.spec.state_dir, [order(i, topic) for i in range(40, 60)])
    second_end = now_ms() + 1
    wait_until(second_end / 1000)
    assert engine.run("r2", [("w2", StoreTimeWindow(second_start, second_end))]).balanced
    assert_landed_once_at_the_ends(engine, cluster, client, topic, group, 60)
    client.close()


@pytest.mark.broker
def test_a_range_the_slave_has_not_copied_is_read_from_its_master_once_back_whatever_the_route_cached(ha_cluster):
    """A reader that read broker-a's queue from the slave while the master was down keeps that route for a while
    (the Spark workers' clients cache routes for 30 s, as the Java client does between its refreshes). Once the
    master is back, a range the slave has not copied, planned from the master's offsets, is read from the master:
    the slave's empty answer is not the end of the range (a CI run failed so: RangeUnreadable, NO_NEW_MSG). The
    slave here never copies: it restarts with an HA master address nobody listens on (``haMasterAddress`` fixed, so
    it does not take the master's from the name server), which makes the copy's delay deterministic."""
    cluster, namesrv = ha_cluster, ha_cluster.spec.namesrv_address
    master, slave_spec = cluster.spec.brokers
    watcher = RocketMQClient(namesrv)  # asks the name server; the reader below keeps the route it cached
    reader = RocketMQClient(namesrv, route_ttl=3600)
    slave = BrokerClient(slave_spec.address, broker_name="broker-a")
    topic, group = unique("t_lag"), unique("g_lag")
    cluster.create_topic(topic, 1)
    produce(namesrv, cluster.spec.state_dir, [order(i, topic) for i in range(10)])
    until(lambda: copied(slave, watcher, topic), 60, f"the slave's copy of {topic}")
    (mq,) = watcher.queues(topic)
    try:
        os.kill(cluster.broker_processes[slave_spec.key].pid(), signal.SIGKILL)
        until(lambda: 1 not in routed(watcher, topic), 60, "the name server dropping the dead slave")
        produce(namesrv, cluster.spec.state_dir, [order(i, topic) for i in range(10, 20)])  # on the master alone
        os.kill(cluster.broker_processes[master.key].pid(), signal.SIGKILL)
        until(lambda: routed(watcher, topic) == {}, 60, "the name server dropping the dead master")
        (nobody,) = free_ports(1)
        never_copies = (*cluster.spec.extra_broker_properties, ("haMasterAddress", f"127.0.0.1:{nobody}"))
        LocalCluster(
            dataclasses.replace(cluster.spec, brokers=(slave_spec,), extra_broker_properties=never_copies)
        ).up()
        until(lambda: routed(watcher, topic) == {1: slave_spec.address}, 60, "the slave alone in the route")

        # The master is down: the queue is read from the slave, which has what it copied before it died.
        first = list(read_ranges(reader, [OffsetRange(mq, 0, 10)], consumer_group=group))
        assert [m.queue_offset for _, chunk in first for m in chunk] == list(range(10))
        assert reader.reader(mq).address == slave_spec.address

        cluster.up()  # the master, on its store of 20 messages
        until(lambda: routed(watcher, topic) == {0: master.address, 1: slave_spec.address}, 60, "both routed")
        assert slave.get_max_offset(topic, 0) == 10 < watcher.get_max_offset(mq) == 20  # the slave is behind
        assert reader.route(topic).broker("broker-a").broker_addrs == {1: slave_spec.address}  # cached

        second = list(read_ranges(reader, [OffsetRange(mq, 10, 20)], consumer_group=group))
        assert [m.queue_offset for _, chunk in second for m in chunk] == list(range(10, 20))
        # Read from the master: the slave still holds none of them. (Where the reader's next pull would go is the
        # master's last answer's suggestion, which may name the slave again: not what this test is about.)
        assert slave.get_max_offset(topic, 0) == 10
    finally:
        watcher.close()
        reader.close()
        pid = cluster.broker_processes[slave_spec.key].pid()
        if pid is not None:
            os.kill(pid, signal.SIGKILL)  # it restarts as the module's other tests know it, copying
        until(lambda: cluster.broker_processes[slave_spec.key].pid() is None, 30, "the slave's exit")
        cluster.up()


def routed(client: RocketMQClient, topic: str) -> dict[int, str]:
    """broker-a's brokerId -> address in the topic's route, as the name server gives it now ({} when it routes none)."""
    try:
        data = client.refresh_route(topic).broker("broker-a")
    except TopicNotExist:  # neither broker-a nor its slave is registered
        return {}
    return dict(data.broker_addrs) if data is not None else {}


def test_a_slave_behind_the_table_answering_for_its_dead_master_is_no_truncated_tail(ha_cluster, spark, tmp_path):
    """The table landed broker-a's queues in two windows, the second up to E from the master while the slave was
    down; the master dies and the slave comes back with its older copy, below E. Routed classically (no master), the
    run fails before reading, as whenever the master is down when a run plans. Routed as brokerId 0 in the master's
    place (a slave acting as master), it is not taken for a truncated tail: no offset goes back below E, nothing is
    landed from it, and the run waits for the master. Once the master is back, every message lands once."""
    cluster, namesrv = ha_cluster, ha_cluster.spec.namesrv_address
    master, slave_spec = cluster.spec.brokers
    client = RocketMQClient(namesrv)
    slave = BrokerClient(slave_spec.address, broker_name="broker-a")
    topic, group = unique("t_behind"), unique("g_behind")
    cluster.create_topic(topic, 2)
    cfg = ingestion_config(
        topic=topic,
        consumer_group=group,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        window={"cron": "* * * * *", "start": "1970-01-01", "grace_seconds": 0},
    )
    engine = Engine(cluster, spark, tmp_path / "orders", cfg)
    start = now_ms()
    produce(namesrv, cluster.spec.state_dir, [order(i, topic) for i in range(10)])
    until(lambda: copied(slave, client, topic), 60, f"the slave's copy of {topic}")
    first_end = now_ms() + 1
    wait_until(first_end / 1000)
    assert engine.run("r1", [("w1", StoreTimeWindow(start, first_end))]).balanced
    os.kill(cluster.broker_processes[slave_spec.key].pid(), signal.SIGKILL)  # it copies nothing more
    until(lambda: 1 not in routed(client, topic), 60, "the name server dropping the dead slave")
    produce(namesrv, cluster.spec.state_dir, [order(i, topic) for i in range(10, 20)])
    landed_end = now_ms() + 1
    wait_until(landed_end / 1000)
    assert engine.run("r2", [("w2", StoreTimeWindow(first_end, landed_end))]).balanced
    ends = {q: client.get_max_offset(q) for q in client.queues(topic)}

    os.kill(cluster.broker_processes[master.key].pid(), signal.SIGKILL)
    until(lambda: routed(client, topic) == {}, 60, "the name server dropping the dead master")
    LocalCluster(dataclasses.replace(cluster.spec, brokers=(slave_spec,))).up()  # the slave alone, on its old copy
    behind = {q: slave.get_max_offset(q.topic, q.queue_id) for q in ends}
    assert all(behind[q] < ends[q] for q in ends), (behind, ends)
    before = {q: slave.query_consumer_offset(group, q.topic, q.queue_id) for q in ends}
    version = DeltaTable(str(engine.lake.table_path)).version()
    after_failover = StoreTimeWindow(landed_end, now_ms())

    # Classic: the name server routes no master of broker-a, and planning needs one (the run's client may still try
    # the dead master's address it knew: the broker is then silent).
    assert routed(client, topic) == {1: slave_spec.address}
    with pytest.raises((BrokerNotFound, BrokersSilent)):
        engine.run("r3", [("w3", after_failover)])
    # A slave acting as master: routed as brokerId 0, still registered as brokerId 1.
    cluster.mqadmin().run("updateNamesrvConfig", "-k", "supportActingMaster", "-v", "true")
    try:
        until(lambda: routed(client, topic) == {0: slave_spec.address}, 30, "the slave routed as brokerId 0")
        assert engine.broker.masters(list(ends)) == {}
        with pytest.raises(SlaveBehind, match="master of broker-a does not answer"):
            engine.run("r3", [("w3", after_failover)])
    finally:
        cluster.mqadmin().run("updateNamesrvConfig", "-k", "supportActingMaster", "-v", "false")
    assert {q: slave.query_consumer_offset(group, q.topic, q.queue_id) for q in ends} == before
    assert DeltaTable(str(engine.lake.table_path)).version() == version  # nothing written

    # The master is back: the windows since the failover land what was sent after it, and nothing twice.
    cluster.up()
    engine.client.refresh_route(topic)  # as a new run's client finds it (the engine keeps one client across runs)
    assert engine.broker.masters(list(ends)) == {"broker-a": master.address}
    produce(namesrv, cluster.spec.state_dir, [order(i, topic) for i in range(20, 30)])
    later = now_ms() + 1
    wait_until(later / 1000)
    landed = engine.run("r4", [("w3", after_failover), ("w4", StoreTimeWindow(after_failover.end_ms, later))])
    assert landed.balanced and landed.prepared.replaced == ()
    assert_landed_once_at_the_ends(engine, cluster, client, topic, group, 30)
    client.close()
