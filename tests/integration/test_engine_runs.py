"""The engine's run (``pipelines.run.run``, what the asset drives) on real brokers, Spark and Delta, no Dagster.

Below Dagster a window is any store-time interval, so these scenarios use windows of a few hundred
milliseconds around what the Java producer just sent instead of waiting for cron minutes. The caller plays
Dagster's part as the asset does: it records a balanced landing before resuming the run, and records nothing
for an unbalanced one.
"""

from __future__ import annotations

import time

import pytest
from deltalake import DeltaTable
from pyspark.sql import functions as F

import rocketlake.pipelines.materialize as materialize
from rocketlake.pipelines import ingest
from rocketlake.pipelines.broker_access import group_broker
from rocketlake.pipelines.ledger_log import read_ledger
from rocketlake.pipelines.ledger import BALANCED, UNBALANCED
from rocketlake.pipelines.materialize import SparkLake
from rocketlake.pipelines.run import Alone, Committed, Landed, RunRequest, Unbalanced, run
from rocketlake.pipelines.windows import Window
from rocketlake.resources.rocketmq.client import RocketMQClient
from rocketlake.resources.rocketmq_resource import RocketMQResource
from tests.integration.ingestion_support import order, unique, wait_until
from tests.unit.support import Lines, Recorded, ingestion_config

pytestmark = pytest.mark.engine


def now_ms() -> int:
    return int(time.time() * 1000)


def send_in_two_windows(java_producer, topic: str, per_window: int) -> list[tuple[str, Window]]:
    """Two batches, each alone in a window of store time: [before the first send, after it), [then, after the
    second). The brokers stamp store times on this machine's clock, so the bounds come from it."""
    start = now_ms()
    java_producer([order(i, topic) for i in range(per_window)])
    boundary = now_ms() + 1  # every message of the first batch is stored before this instant
    wait_until(boundary / 1000)
    java_producer([order(i, topic) for i in range(per_window, 2 * per_window)])
    end = now_ms() + 1
    wait_until(end / 1000)  # the second window is closed (grace 0) once this instant has passed
    return [("w1", Window(start, boundary)), ("w2", Window(boundary, end))]


class Engine:
    """One ingestion's runs as the asset makes them, on the session's cluster, Spark and a Delta table."""

    def __init__(self, cluster, spark, path, cfg):
        resource = RocketMQResource(namesrv=cluster.spec.namesrv_address)
        self.client = RocketMQClient(cluster.spec.namesrv_address)
        self.broker = group_broker(self.client, cfg)
        self.lake = SparkLake(spark, resource.source_options(), cfg, str(path))
        self.cfg = cfg
        self.recorded = Recorded()

    def run(self, run_id: str, windows, *, backfill: bool = False):
        """Runs to the end; returns the landing's event. An unbalanced run raises ``Unbalanced``, recording nothing."""
        request = RunRequest("orders", run_id, windows, now_ms(), 0, start_at_group_position=not backfill)
        events = run(self.broker, self.lake, self.recorded, Alone(), self.cfg, request, Lines())
        landed = next(events)
        assert isinstance(landed, Landed)
        if landed.balanced:
            self.recorded.record(landed.materialization.ledger)
        committed = [e for e in events if isinstance(e, Committed)]  # raises Unbalanced when not balanced
        assert len(committed) == 1
        return landed

    def offsets(self, topic: str) -> dict[tuple[str, int], int | None]:
        return {(mq.broker_name, mq.queue_id): self.client.query_consumer_offset(self.cfg.consumer_group, mq)
                for mq in self.client.queues(topic)}


@pytest.fixture
def dropping_one_row(monkeypatch):
    """A test-only fault: the read loses queue 0's first row of broker-a between the read and the write."""

    def install():
        read_plan = materialize.read_plan

        def losing(*args, **kwargs):
            df = read_plan(*args, **kwargs)
            lost = (F.col("broker_name") == "broker-a") & (F.col("queue_id") == 0) & (F.col("queue_offset") == 0)
            return df.where(~lost)

        monkeypatch.setattr(materialize, "read_plan", losing)

    return install


def test_an_unbalanced_landing_moves_no_offset_whoever_runs_next_and_a_balanced_rerun_does(
        local_cluster, create_topic, java_producer, spark, tmp_path, dropping_one_row, monkeypatch):
    topic, group = create_topic(queues=2), unique("g_unbalanced")
    cfg = ingestion_config(topic=topic, consumer_group=group, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                           window={"cron": "* * * * *", "start": "1970-01-01", "grace_seconds": 0})
    windows = send_in_two_windows(java_producer, topic, per_window=12)
    engine = Engine(local_cluster, spark, tmp_path / "orders", cfg)
    before = engine.offsets(topic)
    assert set(before.values()) <= {None, 0}  # a new group (the broker answers 0 on a young queue)

    dropping_one_row()
    with pytest.raises(Unbalanced, match="no offset moved"):
        engine.run("r1", windows)
    assert engine.recorded.runs == {} and engine.offsets(topic) == before
    assert [e.verdict for e in read_ledger(engine.lake.table_path, group)] == [UNBALANCED]
    assert DeltaTable(engine.lake.table_path).to_pyarrow_table().num_rows == 23, "the short slice is in the table"
    # Whoever runs next, this member or another (its own Dagster instance), moves nothing over that landing.
    other = ingestion_config(topic=topic, consumer_group=group, instance_name="another_member")
    for cfg_next, recorded in ((cfg, engine.recorded), (other, Recorded())):
        prepared = ingest.prepare(engine.broker, engine.lake, recorded, cfg_next, now_ms(), 0, member=cfg_next.client_id)
        assert prepared.repaired == []
    assert engine.offsets(topic) == before

    monkeypatch.undo()  # the fault is gone: the same windows run again and balance
    landed = engine.run("r2", windows, backfill=True)
    assert landed.balanced and sum(a.rows for a in landed.materialization.accounting) == 24
    assert [e.verdict for e in read_ledger(engine.lake.table_path, group) if e.run_id == "r2"] == [BALANCED]
    progress = local_cluster.mqadmin().consumer_progress(group, topic)
    assert {(p.broker_name, p.queue_id): p.consumer_offset for p in progress if p.topic == topic} == {
        (p.broker_name, p.queue_id): p.broker_offset for p in progress if p.topic == topic}, \
        "the Java admin tool sees the group at the end of every queue"
    assert DeltaTable(engine.lake.table_path).to_pyarrow_table().num_rows == 24
