"""A cluster on IPv6's loopback (``ClusterSpec(host="::1")``, the local runtime's name server and broker listening on
``::1``), as dual-stack and IPv6-only deployments look to a client: the route names the broker ``::1:<port>``, and
every message the Java producer sends over it carries IPv6 born and store hosts (sysFlag's BORNHOST_V6_FLAG and
STOREHOSTADDRESS_V6_FLAG), which widen the stored record by 24 bytes and make its offset id 56 hex characters.

One engine run lands a window of them through the wire client's IPv6 connections: each message once, its ids and
hosts as the Java consumer reads them, the body that fails to decode sent back to the group's retry topic, and the
group's offsets committed where mqadmin (a Java client of ::1 too) reports them.
"""

from __future__ import annotations

import ipaddress

import pytest
from deltalake import DeltaTable

from rocketlake.engine.windows import StoreTimeWindow
from rocketlake.jars import ROCKETMQ_VERSION
from rocketlake.local.peers import produce
from rocketlake.local.spec import LOOPBACK_V6, BrokerSpec
from rocketlake.rocketmq.client import RocketMQClient
from rocketlake.rocketmq.message import BORNHOST_V6_FLAG, STOREHOSTADDRESS_V6_FLAG
from tests import java_oracles
from tests.conftest import SHORT_DELAY_LEVELS, _running_cluster, free_ports
from tests.integration.engine_support import Engine, from_first, now_ms
from tests.integration.ingestion_support import BODY_SCHEMA, order, unique, until, wait_until

pytestmark = pytest.mark.engine

SENT = 20


@pytest.fixture(scope="module")
def v6_cluster(tmp_path_factory):
    namesrv, broker = free_ports(2, block=2)
    yield from _running_cluster(
        tmp_path_factory,
        ROCKETMQ_VERSION,
        host=LOOPBACK_V6,
        namesrv_port=namesrv,
        brokers=(BrokerSpec("broker-a", broker),),
        extra_broker_properties=SHORT_DELAY_LEVELS,
    )


def host_port(address: str) -> tuple[ipaddress.IPv6Address | ipaddress.IPv4Address, int]:
    """``[::1]:port``, ``::1:port`` or Java's ``0:0:0:0:0:0:0:1:port`` -> (address, port), to compare spellings."""
    host, _, port = address.rpartition(":")
    return ipaddress.ip_address(host.strip("[]")), int(port)


def test_a_cluster_on_ipv6_loopback_lands_each_message_once_with_its_v6_hosts(v6_cluster, spark, tmp_path):
    cluster = v6_cluster
    namesrv = cluster.spec.namesrv_address
    assert namesrv.startswith("[::1]:")
    client = RocketMQClient(namesrv)
    topic, group = unique("t_v6"), unique("g_v6")
    cluster.create_topic(topic, 2)
    assert {mq.broker_name for mq in client.queues(topic)} == {"broker-a"}
    [address] = client.namesrv.cluster_info().broker_addr_table["broker-a"].broker_addrs.values()
    assert host_port(address) == (ipaddress.ip_address("::1"), cluster.spec.brokers[0].port)

    start = now_ms()
    sent = produce(
        namesrv,
        cluster.spec.state_dir,
        [order(i, topic) for i in range(SENT)] + [{"topic": topic, "tags": "TagA", "keys": ["bad"], "body": "{"}],
    )
    end = now_ms() + 1
    wait_until(end / 1000)
    ends = {(s.broker_name, s.queue_id): 0 for s in sent}
    for s in sent:
        ends[(s.broker_name, s.queue_id)] = max(ends[(s.broker_name, s.queue_id)], s.queue_offset + 1)
    java = {
        m["msgId"]: m
        for m in java_oracles.consume(namesrv, cluster.spec.state_dir, topic, {q: (0, e) for q, e in ends.items()})
    }
    assert len(java) == SENT + 1
    v6_flags = BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG
    assert all(m["sysFlag"] & v6_flags == v6_flags for m in java.values())  # the v6 record layout, both hosts

    cfg = from_first(
        topic,
        group,
        body={"format": "json", "schema": BODY_SCHEMA},
        metadata_columns=["offset_msg_id", "born_host", "store_host"],
    )
    engine = Engine(cluster, spark, tmp_path / "orders", cfg)
    landed = engine.run("r1", [("w1", StoreTimeWindow(start, end))])
    assert landed.balanced and [a.sent_back for a in landed.slice.accounting] == [1]

    rows = DeltaTable(str(engine.lake.table_path)).to_pyarrow_table().to_pylist()
    assert sorted(r["keys"] for r in rows) == sorted(f"o-{i}" for i in range(SENT))  # each once; the bad body not
    for r in rows:
        m = java[r["msg_id"]]
        assert len(r["offset_msg_id"]) == 56 and r["offset_msg_id"] == m["offsetMsgId"]
        assert host_port(r["born_host"]) == host_port(m["bornHost"])
        assert (
            host_port(r["store_host"])
            == host_port(m["storeHost"])
            == (ipaddress.ip_address("::1"), host_port(address)[1])
        )

    # The bad body went back through ::1 to the group's retry topic; the offsets are the queues' ends, as the
    # engine reads them and as mqadmin does.
    # It reaches the retry topic once the broker's delay level (3 s here) has passed.
    until(
        lambda: sum(client.get_max_offset(mq) for mq in client.queues(f"%RETRY%{group}")) == 1,
        30,
        lambda: f"the sent-back body in %RETRY%{group}",
    )
    queue_ends = {(q.broker_name, q.queue_id): client.get_max_offset(q) for q in client.queues(topic)}
    assert queue_ends == ends
    assert engine.offsets(topic) == queue_ends
    progress = {
        (p.broker_name, p.queue_id): p.consumer_offset for p in cluster.mqadmin().consumer_progress(group, topic)
    }
    assert progress == queue_ends
