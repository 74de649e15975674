"""BROADCASTING on real brokers: two members of one group each land every message in their own table, each with
its own progress in its local offset store; nothing is committed to the brokers; a store cut short by a kill is
repaired from the ledger by the member's next run."""

from __future__ import annotations

from collections import Counter

import pytest
from dagster import AssetKey
from deltalake import DeltaTable

from rocketlake.engine.offset_store import LocalOffsetStore, store_path
from rocketlake.rocketmq.client import RocketMQClient
from rocketlake.rocketmq.errors import TopicNotExist
from tests.dagster_instance import pooled_instance
from tests.integration.ingestion_support import definitions, run_partitions, unique, write_config

pytestmark = pytest.mark.dagster


def test_two_broadcasting_members_each_land_every_message_with_their_own_progress(tmp_path, local_cluster, produced):
    group, stores = unique("g"), tmp_path / "offsets"
    members = {name: unique("t") for name in ("eu1", "eu2")}
    config = write_config(
        tmp_path / "rocketlake.yaml",
        local_cluster,
        tmp_path / "lake",
        {
            name: {
                "topic": produced.topic,
                "consumer_group": group,
                "table": table,
                "message_model": "BROADCASTING",
                "client_ip": "127.0.0.1",
                "instance_name": name,
                "local_offset_store_dir": str(stores),
            }
            for name, table in members.items()
        },
    )
    defs = definitions(config)
    w1, w2 = produced.windows()
    expected = produced.in_window(w1) + produced.in_window(w2)
    ends: Counter = Counter()
    for m in expected:
        key = f"{produced.topic}/{m['brokerName']}/{m['queueId']}"
        ends[key] = max(ends[key], m["queueOffset"] + 1)
    client = RocketMQClient(local_cluster.spec.namesrv_address)
    try:
        queues = client.queues(produced.topic)
        with pooled_instance() as instance:
            for key in (w1, w2):
                assert run_partitions(defs, members["eu1"], instance, key).success
            assert run_partitions(defs, members["eu2"], instance, w1, w2).success  # one run of both windows

            for name, table in members.items():
                rows = DeltaTable(str(tmp_path / "lake" / table)).to_pyarrow_table(columns=["msg_id"]).to_pylist()
                assert Counter(r["msg_id"] for r in rows) == Counter(m["msgId"] for m in expected), name
                store = store_path(stores, f"127.0.0.1@{name}", group)
                assert {mq.key: offset for mq, offset in LocalOffsetStore(store).offsets.items()} == dict(ends), name
                [observed] = instance.fetch_observations(AssetKey(table), limit=1).records
                metadata = observed.asset_observation.metadata
                assert metadata["rocketlake/member"].value == f"127.0.0.1@{name}"
                assert metadata["rocketlake/offset_store"].value == str(store)
            # Progress is the members' own: the brokers answer for the group as for one that never committed
            # ("not found", or 0 on a queue whose message 0 is still in memory).
            never = unique("g")
            assert {mq: client.query_consumer_offset(group, mq) for mq in queues} == {
                mq: client.query_consumer_offset(never, mq) for mq in queues
            }

            # eu1 killed between the two renames of a store write: only the backup is left, one commit behind.
            store = store_path(stores, "127.0.0.1@eu1", group)
            store.unlink()
            assert store.with_name("offsets.json.bak").exists()
            assert {mq.key: o for mq, o in LocalOffsetStore(store).offsets.items()} != dict(ends)  # the last move lost
            result = run_partitions(defs, members["eu1"], instance, w2)
            assert result.success
            assert {mq.key: offset for mq, offset in LocalOffsetStore(store).offsets.items()} == dict(ends)
            rows = DeltaTable(str(tmp_path / "lake" / members["eu1"])).to_pyarrow_table(columns=["msg_id"]).to_pylist()
            assert Counter(r["msg_id"] for r in rows) == Counter(m["msgId"] for m in expected)
    finally:
        client.close()


def test_broadcasting_failures_are_kept_not_sent_back(tmp_path, local_cluster, produced):
    """A member whose listener fails every third message once: those are not landed and not sent back (RocketMQ
    drops them in BROADCASTING); they are rows of its failures table, and the windows' accounting counts them."""
    group, table = unique("g"), unique("t")
    config = write_config(
        tmp_path / "rocketlake.yaml",
        local_cluster,
        tmp_path / "lake",
        {
            "eu3": {
                "topic": produced.topic,
                "consumer_group": group,
                "table": table,
                "message_model": "BROADCASTING",
                "client_ip": "127.0.0.1",
                "instance_name": "eu3",
                "local_offset_store_dir": str(tmp_path / "offsets"),
                "listener": "tests.unit.listeners:fail_every_third_once",
            }
        },
    )
    w1, w2 = produced.windows()
    expected = produced.in_window(w1) + produced.in_window(w2)
    failing = {m["msgId"] for m in expected if int(m["properties"]["seq"]) % 3 == 0}
    with pooled_instance() as instance:
        result = run_partitions(definitions(config), table, instance, w1, w2)
        assert result.success
        [check] = result.get_asset_check_evaluations()
        assert check.passed
        windows = {r.data["window"]: r.data for r in check.metadata["windows"].value.records}
    assert sum(w["failed"] for w in windows.values()) == len(failing)
    assert sum(w["sent_back"] + w["dead_lettered"] for w in windows.values()) == 0
    rows = DeltaTable(str(tmp_path / "lake" / table)).to_pyarrow_table(columns=["msg_id"]).to_pylist()
    assert Counter(r["msg_id"] for r in rows) == Counter(m["msgId"] for m in expected if m["msgId"] not in failing)
    kept = DeltaTable(str(tmp_path / "lake" / f"{table}_failures")).to_pyarrow_table().to_pylist()
    assert sorted(r["msg_id"] for r in kept) == sorted(failing)
    assert {(r["outcome"], r["error"]) for r in kept} == {("failed", "listener answered RECONSUME_LATER")}
    with RocketMQClient(local_cluster.spec.namesrv_address) as client:
        with pytest.raises(TopicNotExist):
            client.queues(f"%RETRY%{group}")  # nothing was ever sent back
