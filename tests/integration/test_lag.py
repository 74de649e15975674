"""The lag sensor and the freshness check on real brokers and a Dagster instance.

After window 1 is landed, the sensor's figures per queue equal `mqadmin consumerProgress` on the same group at
the same moment (broker offset, consumer offset, diff), with the total; the `fresh` check fails because window 2
and the windows after it are past their deadline (the schedule is not running, slack 0); after a catch-up
backfill up to the newest due window it passes and the lag is 0.
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from dagster import AssetCheckEvaluation, AssetKey, AssetObservation, build_sensor_context, instance_for_test

from rocketlake.assets.lag import BROKER_MAX, COMMITTED, FRESH_CHECK, LAG_MESSAGES, queue_figure, table_freshness
from rocketlake.pipelines.config import load_config
from rocketlake.resources.rocketmq.message_queue import MessageQueue
from rocketlake.resources.rocketmq_resource import RocketMQResource
from tests.integration.ingestion_support import definitions, run_partitions, unique, write_config

pytestmark = pytest.mark.dagster
SCHEDULED = {"dagster/schedule_name": "orders_windows"}


def test_lag_equals_mqadmin_and_freshness_fails_until_a_catch_up(tmp_path, local_cluster, produced):
    table, group = unique("t"), unique("g")
    config = write_config(tmp_path / "rocketlake.yaml", local_cluster, tmp_path / "lake", {"orders": {
        "topic": produced.topic, "consumer_group": group, "table": table,
        "window": {"cron": "* * * * *", "timezone": "UTC", "grace_seconds": 2, "freshness_slack_seconds": 0,
                   "start": "2026-11-01T00:00:00Z"}}})
    defs = definitions(config)
    cfg = load_config(config).ingestions["orders"]
    sensor = defs.get_sensor_def("rocketlake_test_lag")  # one a cluster
    resources = {"rocketmq_test": RocketMQResource(namesrv=local_cluster.spec.namesrv_address)}
    w1, _ = produced.windows()

    def tick(instance):
        events = sensor.evaluate_tick(build_sensor_context(instance=instance, resources=resources, definitions=defs,
                                                           sensor_name=sensor.name)).asset_events
        for event in events:  # what the daemon does with a sensor's events
            instance.report_runless_asset_event(event)
        (observation,) = [e for e in events if isinstance(e, AssetObservation)]
        checks = {e.check_name: e for e in events if isinstance(e, AssetCheckEvaluation)}
        return observation.metadata, checks

    with instance_for_test() as instance:
        assert run_partitions(defs, table, instance, w1, tags=SCHEDULED).success
        metadata, checks = tick(instance)
        progress = local_cluster.mqadmin().consumer_progress(group, produced.topic)
        topic_queues = [q for q in progress if q.topic == produced.topic]
        assert topic_queues and any(q.broker_offset > q.consumer_offset for q in topic_queues), "window 2 waits"
        for q in progress:
            mq = MessageQueue(q.topic, q.broker_name, q.queue_id)
            figure = {k: metadata[queue_figure(k, mq, produced.topic)].value
                      for k in (BROKER_MAX, COMMITTED, LAG_MESSAGES)}
            assert figure[BROKER_MAX] == q.broker_offset, q
            # -1: no offset, which mqadmin shows as 0
            assert figure[COMMITTED] == q.consumer_offset or (figure[COMMITTED] == -1 and q.consumer_offset == 0), q
            assert figure[LAG_MESSAGES] == q.broker_offset - q.consumer_offset, q
        assert metadata[LAG_MESSAGES].value == sum(q.broker_offset - q.consumer_offset for q in progress)
        assert not checks[FRESH_CHECK].passed, checks[FRESH_CHECK].description
        assert checks[FRESH_CHECK].description.endswith(f"the newest landed window is {w1}")

        # Catch up: a backfill from the first window not landed to the newest one past its deadline. A minute
        # that closes during the backfill is due by the next tick, so catch up again, as a schedule would.
        first, ticks = produced.windows()[1], 1
        while True:
            due = table_freshness(cfg, instance, datetime.now(timezone.utc)).newest_due
            assert run_partitions(defs, table, instance, first, due).success
            metadata, checks = tick(instance)
            ticks += 1
            if checks[FRESH_CHECK].passed:
                break
            assert ticks < 5, checks[FRESH_CHECK].description
            first = table_freshness(cfg, instance, datetime.now(timezone.utc)).newest_due
        assert checks[FRESH_CHECK].description.startswith(f"newest landed window {due}")
        assert metadata[LAG_MESSAGES].value == 0
        stored = instance.fetch_observations(AssetKey(table), limit=20).records
        assert len([r for r in stored if LAG_MESSAGES in r.asset_observation.metadata]) == ticks
