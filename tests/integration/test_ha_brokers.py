"""A master with a slave (classic replication): a run whose master is killed after it planned its windows reads them
from the slave, lands each message once, and once the master is back the group's offsets are where they belong.

The cluster is the local runtime's (``rocketlake local up --slaves``): broker-a as a master (brokerId 0) and a slave
(brokerId 1, ``brokerRole=SLAVE``, ``slaveReadEnable``). The master is killed with SIGKILL, as a machine dies.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from deltalake import DeltaTable

import rocketlake.pipelines.materialize as materialize
from rocketlake.pipelines.windows import Window
from rocketlake.resources.local.peers import produce
from rocketlake.resources.local.spec import SLAVE_PORT_OFFSET, BrokerSpec
from rocketlake.resources.rocketmq.broker import BrokerClient
from rocketlake.resources.rocketmq.errors import RocketMQError
from rocketlake.resources.rocketmq.client import RocketMQClient
from rocketlake.resources.jars import ROCKETMQ_VERSION
from tests.conftest import _running_cluster, free_ports
from tests.integration.test_member import until
from tests.integration.ingestion_support import order, unique, wait_until
from tests.integration.test_engine_runs import Engine, now_ms
from tests.unit.support import ingestion_config

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def ha_cluster(tmp_path_factory):
    namesrv, master = free_ports(2, block=7)  # a master's three ports and its slave's, 5 above
    yield from _running_cluster(tmp_path_factory, ROCKETMQ_VERSION, namesrv_port=namesrv, brokers=(
        BrokerSpec("broker-a", master), BrokerSpec("broker-a", master + SLAVE_PORT_OFFSET, broker_id=1)))


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


def test_a_run_whose_master_dies_reads_from_the_slave_and_lands_each_message_once(ha_cluster, spark, tmp_path,
                                                                                   monkeypatch):
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

    cfg = ingestion_config(topic=topic, consumer_group=group, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                           window={"cron": "* * * * *", "start": "1970-01-01", "grace_seconds": 0})
    engine = Engine(cluster, spark, tmp_path / "orders", cfg)
    killed = []

    def master_dies_after_planning(*args, **kwargs):  # the ranges are fixed from the master's offsets by now
        os.kill(cluster.broker_processes[master.key].pid(), signal.SIGKILL)
        killed.append(time.monotonic())
        until(lambda: client.refresh_route(topic).broker("broker-a").master_addr is None, 60,
              "the name server dropping the dead master")
        return read_plan(*args, **kwargs)

    def master_back_after_the_commit(*args, **kwargs):  # the slice is read (from the slave) and committed
        if killed and cluster.broker_processes[master.key].pid() is None:
            assert client.route(topic).broker("broker-a").master_addr is None  # it was down for the whole read
            cluster.up()  # the master restarts on its store
        return last_commit_version(*args, **kwargs)

    read_plan, last_commit_version = materialize.read_plan, materialize.last_commit_version
    monkeypatch.setattr(materialize, "read_plan", master_dies_after_planning)
    monkeypatch.setattr(materialize, "last_commit_version", master_back_after_the_commit)
    landed = engine.run("r1", [("w1", Window(start, first_end))])
    assert killed and landed.balanced
    monkeypatch.undo()

    # Once the master is back: the next window lands after it, each message once, the offsets at the queues' ends.
    second_start = now_ms()
    produce(namesrv, cluster.spec.state_dir, [order(i, topic) for i in range(40, 60)])
    second_end = now_ms() + 1
    wait_until(second_end / 1000)
    assert engine.run("r2", [("w2", Window(second_start, second_end))]).balanced
    assert_landed_once_at_the_ends(engine, cluster, client, topic, group, 60)
    client.close()


def assert_landed_once_at_the_ends(engine, cluster, client: RocketMQClient, topic: str, group: str, sent: int):
    """The table holds orders o-0 .. o-<sent - 1>, each once, and the group's offsets are the queues' ends, as the
    engine and mqadmin consumerProgress read them."""
    rows = DeltaTable(str(engine.lake.table_path)).to_pyarrow_table(columns=["keys"])
    assert sorted(rows.column("keys").to_pylist()) == sorted(f"o-{i}" for i in range(sent))  # none lost, none twice
    ends = {(q.broker_name, q.queue_id): client.get_max_offset(q) for q in client.queues(topic)}
    assert sum(ends.values()) == sent
    assert engine.offsets(topic) == ends
    assert {(p.broker_name, p.queue_id): p.consumer_offset for p in cluster.mqadmin().consumer_progress(group, topic)
            } == ends
