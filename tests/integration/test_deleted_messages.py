"""on_deleted_messages on brokers that really deleted messages the group never landed.

The disruptable cluster (tests/conftest.py), whose brokers have tiny commit-log files
(rocketlake/local/spec.py SHORT_RETENTION) but keep every file until told otherwise: fileReservedTime
is set to 0 at runtime for the deletion (mqadmin updateBrokerConfig, read back with getBrokerConfig)
and back once it is done, so the clean rounds it arms delete nothing the tests after this one write.
The Java producer sends window 1, then many more messages in window 2, spanning several commit-log
files; window 1 is landed (the group commits behind window 2); then DELETE_EXPIRED_COMMITLOG
makes each broker delete every commit-log file but the one it writes, which takes most of window
2 with it. The test waits on the brokers' own state: each commit log starting at the file it
writes, then every queue's min offset exactly at its first message in that file. Then:

- ``fail``: the run fails naming each queue and its deleted offsets; table and offsets untouched;
- ``record``: the run lands what survives (as the Java consumer reads it), the ledger records the
  gaps, and the group's offsets move past them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest
from deltalake import DeltaTable

from rocketlake.delta.ledger_log import read_ledger
from rocketlake.local import peers
from rocketlake.local.cluster import LocalCluster
from rocketlake.rocketmq.client import RocketMQClient
from rocketlake.rocketmq.message_queue import MessageQueue
from tests import java_oracles
from tests.conftest import KEEP_FILES_HOURS, hand_over
from tests.dagster_instance import pooled_instance
from tests.integration.ingestion_support import (
    definitions,
    failures,
    minute_key,
    order,
    room_in_this_minute,
    run_partitions,
    unique,
    wait_for_next_minute,
    wait_until,
    write_config,
)

pytestmark = pytest.mark.dagster

W1_MESSAGES = 30
W2_MESSAGES = 200  # about 300 bytes each: several 16 KiB commit-log files per broker
DELETION_DEADLINE_S = 120.0

Queue = tuple[str, int]  # (broker name, queue id)


@pytest.fixture(scope="module")
def short_retention_cluster(disruptable_cluster: LocalCluster):
    """The disruptable cluster (SHORT_RETENTION's small commit-log files) for this module, handed over usable."""
    yield hand_over(disruptable_cluster)
    hand_over(disruptable_cluster)


@dataclass
class Scenario:
    cluster: LocalCluster
    topic: str
    group: str
    table: str
    path: str
    instance: object
    defs: dict  # on_deleted_messages -> Dagster definitions of the same ingestion
    w1: str
    w2: str
    dump: dict[str, dict]  # msgId -> Java consumer's view, read before the deletion
    end_w1: dict[Queue, int]  # where the group stands after landing window 1
    max_offset: dict[Queue, int]
    min_offset: dict[Queue, int]  # after the deletion
    first_kept: dict[str, int]  # broker -> commit-log offset of the only file left

    def gaps(self) -> dict[MessageQueue, tuple[int, int]]:
        return {
            MessageQueue(self.topic, b, q): (self.end_w1[(b, q)], self.min_offset[(b, q)])
            for (b, q) in self.max_offset
            if self.end_w1[(b, q)] < self.min_offset[(b, q)]
        }

    def progress(self) -> dict[Queue, int]:
        return {
            (p.broker_name, p.queue_id): p.consumer_offset
            for p in self.cluster.mqadmin().consumer_progress(self.group, self.topic)
            if p.topic == self.topic
        }

    def table_state(self) -> tuple[int, list[str]]:
        table = DeltaTable(self.path)
        return table.version(), sorted(r["msg_id"] for r in table.to_pyarrow_table().to_pylist())


def commit_log_offset(offset_msg_id: str) -> int:
    """An IPv4 offsetMsgId is hex of 4 address bytes, 4 port bytes and the 8-byte commit-log offset."""
    assert len(offset_msg_id) == 32, offset_msg_id
    return int(offset_msg_id[16:], 16)


def commit_log_files(cluster: LocalCluster, broker: str) -> list[int]:
    """The broker's commit-log files, by the offset each starts at (its name)."""
    folder = cluster.spec.store / broker / "commitlog"
    return sorted(int(f.name) for f in folder.iterdir() if f.name.isdigit())


def set_file_reserved_time(cluster: LocalCluster, hours: int) -> None:
    """Every broker's fileReservedTime, changed at runtime (the clean service reads it each round) and read back."""
    admin = cluster.mqadmin()
    for b in cluster.spec.brokers:
        admin.run("updateBrokerConfig", "-b", b.address, "-k", "fileReservedTime", "-v", str(hours))
        lines = admin.run("getBrokerConfig", "-b", b.address).splitlines()
        values = {k.strip(): v.strip() for k, sep, v in (line.partition("=") for line in lines) if sep and k.strip()}
        assert values.get("fileReservedTime") == str(hours), (b.name, values.get("fileReservedTime"))


def wait_for(what: str, condition, deadline: float, state) -> None:
    """Poll the brokers' state until ``condition()``; on timeout, say what the state was."""
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; last state: {state()}")
        time.sleep(0.5)  # the brokers' clean services run every second (cleanResourceInterval)


@pytest.fixture(scope="module")
def scenario(short_retention_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory, spark):
    # ``spark``: the worker's session (every jar its tests need), started before this module's runs open theirs.
    cluster = short_retention_cluster
    topic, group, table = unique("deleted"), unique("g"), unique("t")
    cluster.create_topic(topic, 2)
    tmp = tmp_path_factory.mktemp("deleted")
    lake = tmp / "lake"
    defs = {}
    for policy in ("fail", "record"):
        config = write_config(
            tmp / f"{policy}.yaml",
            cluster,
            lake,
            {"orders": {"topic": topic, "consumer_group": group, "table": table, "on_deleted_messages": policy}},
        )
        defs[policy] = definitions(config)

    def send(first: int, count: int) -> list[peers.SentMessage]:
        return peers.produce(
            cluster.spec.namesrv_address, cluster.spec.state_dir, [order(i, topic) for i in range(first, first + count)]
        )

    room_in_this_minute()
    sent = send(0, W1_MESSAGES)
    wait_for_next_minute(offset_s=1)
    w1_closes = (int(time.time()) // 60) * 60 + 3  # its end and the 2 s grace, and a second
    sent += send(W1_MESSAGES, W2_MESSAGES)
    w2_closes = (int(time.time()) // 60 + 1) * 60 + 3
    max_offset: dict[Queue, int] = {}
    for s in sent:
        max_offset[(s.broker_name, s.queue_id)] = max(
            max_offset.get((s.broker_name, s.queue_id), 0), s.queue_offset + 1
        )
    dump = {
        m["msgId"]: m
        for m in java_oracles.consume(
            cluster.spec.namesrv_address, cluster.spec.state_dir, topic, {q: (0, end) for q, end in max_offset.items()}
        )
    }
    assert len(dump) == len(sent)
    w1, w2 = sorted({minute_key(m["storeTimestamp"]) for m in dump.values()})

    with pooled_instance() as instance:
        # Land window 1 once closed, while window 2 is still open, so the group commits behind window 2. (Sending and
        # reading back window 2 took more than the grace until CI found them quicker: the run was refused as early.)
        wait_until(w1_closes)
        landed = run_partitions(defs["fail"], table, instance, w1)
        assert landed.success, failures(landed)
        path = str(lake / table)
        s = Scenario(cluster, topic, group, table, path, instance, defs, w1, w2, dump, {}, max_offset, {}, {})
        s.end_w1 = s.progress()
        in_w1: dict[Queue, int] = {}
        for m in dump.values():
            if minute_key(m["storeTimestamp"]) == w1:
                q = (m["brokerName"], m["queueId"])
                in_w1[q] = max(in_w1.get(q, 0), m["queueOffset"] + 1)
        assert s.end_w1 == {q: in_w1.get(q, 0) for q in max_offset}

        # The deletion goes on while window 2 is open (nothing writes to these brokers meanwhile): its runs wait for
        # its close below, not the deletion for it.
        # Each broker keeps the commit-log file it writes (the one holding its last message); the files
        # after it are allocated in advance (AllocateMappedFileService) and hold nothing yet.
        brokers = [b.name for b in cluster.spec.brokers]
        last_written = {
            b: max(commit_log_offset(sm.offset_msg_id) for sm in sent if sm.broker_name == b) for b in brokers
        }
        s.first_kept = {b: max(f for f in commit_log_files(cluster, b) if f <= last_written[b]) for b in brokers}
        assert all(s.first_kept.values()), f"every broker must have files to delete: {s.first_kept}"
        admin = cluster.mqadmin()
        set_file_reserved_time(cluster, 0)  # from now on every file but the one a broker writes is expired
        try:
            for b in cluster.spec.brokers:
                admin.delete_expired_commit_log(b.address)

            deadline = time.monotonic() + DELETION_DEADLINE_S
            wait_for(
                "each broker to delete every commit-log file before the one it writes",
                lambda: all(commit_log_files(cluster, b)[0] == s.first_kept[b] for b in brokers),
                deadline,
                lambda: {b: (commit_log_files(cluster, b), s.first_kept[b]) for b in brokers},
            )
            # The consume queues' min offsets follow the commit log: the first message of each queue still in it.
            expected = dict(max_offset)
            for sm in sent:
                q = (sm.broker_name, sm.queue_id)
                if commit_log_offset(sm.offset_msg_id) >= s.first_kept[sm.broker_name]:
                    expected[q] = min(expected[q], sm.queue_offset)
            client = RocketMQClient(cluster.spec.namesrv_address, timeout=10.0)
            queues = {(mq.broker_name, mq.queue_id): mq for mq in client.queues(topic)}

            def min_offsets() -> dict[Queue, int]:
                return {q: client.get_min_offset(mq) for q, mq in queues.items()}

            wait_for(
                "every queue's min offset to reach the first message left in the commit log",
                lambda: min_offsets() == expected,
                deadline,
                lambda: {"min offsets": min_offsets(), "expected": expected},
            )
        finally:
            # The request armed 20 clean rounds, one a second: with nothing expired they delete nothing more.
            set_file_reserved_time(cluster, KEEP_FILES_HOURS)
        s.min_offset = expected
        assert s.gaps(), "the deletion must take messages the group never landed"
        wait_until(w2_closes)
        yield s


def test_fail_names_the_deleted_offsets_and_changes_nothing(scenario: Scenario):
    s = scenario
    table_before, progress_before = s.table_state(), s.progress()
    result = run_partitions(s.defs["fail"], s.table, s.instance, s.w2)
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure)
    message = str(failure.event_specific_data.error)
    assert "MessagesDeleted" in message and s.group in message
    for mq, (lo, hi) in s.gaps().items():
        assert f"{mq.key}: [{lo}, {hi})" in message, message
    assert s.table_state() == table_before
    assert s.progress() == progress_before == s.end_w1


def test_record_lands_what_survives_records_the_gaps_and_moves_past_them(scenario: Scenario, spark):
    s = scenario
    _, rows_before = s.table_state()
    assert run_partitions(s.defs["record"], s.table, s.instance, s.w2).success

    entry = read_ledger(s.path)[-1]
    assert [w.partition_key for w in entry.windows] == [s.w2]
    assert entry.gaps == s.gaps()
    # Window 2 is the last one: the group now stands at the end of every queue, past every gap.
    assert s.progress() == s.max_offset
    assert all(s.max_offset[q] >= s.min_offset[q] for q in s.max_offset)

    # What the broker still holds of window 2, as the Java consumer reads it now.
    left = java_oracles.consume(
        s.cluster.spec.namesrv_address,
        s.cluster.spec.state_dir,
        s.topic,
        {q: (s.min_offset[q], end) for q, end in s.max_offset.items() if s.min_offset[q] < end},
    )
    left_w2 = sorted(m["msgId"] for m in left if minute_key(m["storeTimestamp"]) == s.w2)
    assert left_w2, "some of window 2 must survive the deletion"
    assert len(left_w2) < sum(1 for m in s.dump.values() if minute_key(m["storeTimestamp"]) == s.w2)
    table = DeltaTable(s.path).to_pyarrow_table().to_pylist()
    landed_w2 = sorted(r["msg_id"] for r in table if minute_key(int(r["window_start"].timestamp() * 1000)) == s.w2)
    assert landed_w2 == left_w2
    # Window 1's rows are as they were.
    assert sorted(r["msg_id"] for r in table if r["msg_id"] not in set(left_w2)) == rows_before
