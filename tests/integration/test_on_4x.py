"""The Dagster and Spark tiers end to end on RocketMQ 4.9.7, the line many users still run.

Every other Dagster and Spark test runs on 5.3.3. What differs between the lines below rocketlake's wire client
is run here once, through a real Dagster run of real Spark on the 4.9.7 cluster:

- finding a window's offsets by store time: 4.9 has no LOWER/UPPER boundary in SEARCH_OFFSET_BY_TIMESTAMP, so the
  exact boundary is read from store times by another path;
- sending a failed message back (CONSUMER_SEND_MSG_BACK): 4.9's broker creates ``%RETRY%<group>`` itself;
- the group's heartbeat, membership and offset commits, as the asset makes them;
- the pull answers and the records 4.9 stores.

The rest is the same on both lines, because it happens in rocketlake, Spark or Delta and not on the wire: the
ledger, windows, Delta commits, listeners and schedules. So it is tested on 5.3.3 only. The wire client itself
is tested on both lines (the ``rocketmq_cluster`` tests). What only 5.x has is tested on 5.x only: server-side
offset resets, LZ4/ZSTD bodies and ACL 2.0.
"""

from __future__ import annotations

import pytest
from dagster import AssetKey
from deltalake import DeltaTable

from rocketlake.local.peers import produce
from rocketlake.rocketmq.client import RocketMQClient
from tests.dagster_instance import pooled_instance
from tests.integration.engine_support import now_ms
from tests.integration.ingestion_support import (
    definitions,
    minute_key,
    order,
    run_partitions,
    unique,
    wait_for_next_minute,
    write_config,
)

pytestmark = pytest.mark.dagster


def test_windows_land_end_to_end_on_4_9_with_a_tag_filter_and_a_failed_body_sent_back(tmp_path, local_cluster_4x):
    cluster = local_cluster_4x
    namesrv = cluster.spec.namesrv_address
    client = RocketMQClient(namesrv)
    topic, group, table = unique("t4x"), unique("g4x"), unique("t")
    cluster.create_topic(topic, 2)
    first = minute_key(now_ms())
    produce(
        namesrv,
        cluster.spec.state_dir,
        [order(i, topic) for i in range(10)]
        + [order(10, topic, tags="TagB")]  # filtered by the subscription
        + [{"topic": topic, "tags": "TagA", "keys": ["bad"], "body": "not json"}],  # fails to decode
        version=cluster.spec.version,
    )
    last = minute_key(now_ms())
    wait_for_next_minute(offset_s=3)  # the window(s) of the sends are closed (grace 2 s)

    config = write_config(
        tmp_path / "rocketlake.yaml",
        cluster,
        tmp_path / "lake",
        {"orders": {"topic": topic, "consumer_group": group, "table": table, "subscription": "TagA"}},
    )
    with pooled_instance() as instance:
        assert run_partitions(definitions(config), table, instance, first, last).success
        records = instance.fetch_materializations(AssetKey(table), limit=10).records
        sent_back = sum(r.asset_materialization.metadata["rocketlake/sent_back"].value for r in records)
    assert sent_back == 1  # the bad body, through 4.9's CONSUMER_SEND_MSG_BACK (its delay level holds it a while)

    keys = DeltaTable(str(tmp_path / "lake" / table)).to_pyarrow_table(columns=["keys"]).column("keys").to_pylist()
    assert sorted(keys) == sorted(f"o-{i}" for i in range(10))  # each once; TagB filtered, the bad body sent back
    ends = {(q.broker_name, q.queue_id): client.get_max_offset(q) for q in client.queues(topic)}
    committed = {(q.broker_name, q.queue_id): client.query_consumer_offset(group, q) for q in client.queues(topic)}
    assert committed == ends  # every offset passed, the filtered one's included
    # 4.9.7's own mqadmin agrees, on the brokers it asks: those of %RETRY%<group>'s route (4.9 has no -t).
    progress = {
        (p.broker_name, p.queue_id): p.consumer_offset
        for p in cluster.mqadmin().consumer_progress(group)
        if p.topic == topic
    }
    assert progress and progress == {q: ends[q] for q in progress}
    client.close()
