"""The lag sensor and the freshness check on real brokers and a Dagster instance.

After window 1 is landed, the sensor's figures per queue equal `mqadmin consumerProgress` on the same group at
the same moment (broker offset, consumer offset, diff), with the total; the `fresh` check fails because window 2
and the windows after it are past their deadline (the schedule is not running, slack 0), and so does `caught_up`:
the group's offsets trail at window 2, which no run will land (the schedule reaches back three windows only; here
it does not run at all). The tick asks for one run of window 2 .. the newest due window, of the trailing queues;
once it ran, the next tick finds every queue caught up and asks for nothing; the lag is 0 and, after the windows
that closed meanwhile (empty ones, which catch-up leaves to the schedule), `fresh` passes.

The group's dead-letter table trails the same way: its ``%DLQ%<group>`` holds dead letters in both minutes (sent
there by the Java producer, as the broker stores a dead letter), and the run of window 1 landed the first minute's
only. The tick shows `caught_up` red on `<table>_dlq` too and asks for its own catch-up run, which lands the second
minute's dead letters once each.
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from dagster import AssetCheckEvaluation, AssetKey, AssetObservation, build_sensor_context
from deltalake import DeltaTable

from rocketlake.dagster.catch_up import CAUGHT_UP_CHECK, RANGE_END, RANGE_START
from rocketlake.dagster.ingestion import CATCH_UP_TAG, QUEUES_TAG
from rocketlake.dagster.lag import (
    BROKER_MAX,
    CLOCK_CHECK,
    COMMITTED,
    FRESH_CHECK,
    LAG_MESSAGES,
    queue_figure,
    table_freshness,
)
from rocketlake.dagster.rocketmq_resource import RocketMQResource
from rocketlake.engine.config import load_config
from rocketlake.rocketmq.message_queue import MessageQueue
from tests.dagster_instance import pooled_instance
from tests.integration.ingestion_support import (
    definitions,
    in_shared_minutes,
    order,
    run_partitions,
    unique,
    write_config,
)

pytestmark = pytest.mark.dagster
SCHEDULED = {"dagster/schedule_name": "orders_windows"}
DLQ = "%DLQ%g"
#: The dead letters of the test's group (its name is the topic's after "%DLQ%"): 3 in the first shared minute, 4 in
#: the second, on the queue each broker has.
DEAD_LETTERS = in_shared_minutes(
    "lag_dead_letters",
    {DLQ: (1, None)},
    lambda t: [order(i, t[DLQ]) for i in range(3)],
    lambda t: [order(i, t[DLQ]) for i in range(3, 7)],
)


def test_lag_equals_mqadmin_and_freshness_fails_until_a_catch_up(tmp_path, local_cluster, produced, shared_minutes):
    dead = shared_minutes[DEAD_LETTERS]
    dlq_topic = dead.topics[DLQ]
    table, group = unique("t"), dlq_topic.removeprefix("%DLQ%")
    dlq_key = AssetKey(f"{table}_dlq")
    config = write_config(
        tmp_path / "rocketlake.yaml",
        local_cluster,
        tmp_path / "lake",
        {
            "orders": {
                "topic": produced.topic,
                "consumer_group": group,
                "table": table,
                "window": {
                    "cron": "* * * * *",
                    "timezone": "UTC",
                    "grace_seconds": 2,
                    "freshness_slack_seconds": 0,
                    "start": "2026-11-01T00:00:00Z",
                },
            }
        },
    )
    defs = definitions(config)
    cfg = load_config(config).ingestions["orders"]
    sensor = defs.get_sensor_def("rocketlake_test_lag")  # one a cluster
    resources = {"rocketmq_test": RocketMQResource(namesrv=local_cluster.spec.namesrv_address)}
    w1, w2 = produced.windows()
    assert dead.windows == [w1, w2]
    dlq_checks: dict[str, AssetCheckEvaluation] = {}

    def tick(instance, requested: list | None = None):
        result = sensor.evaluate_tick(
            build_sensor_context(instance=instance, resources=resources, definitions=defs, sensor_name=sensor.name)
        )
        for event in result.asset_events:  # what the daemon does with a sensor's events
            instance.report_runless_asset_event(event)
        (observation,) = [e for e in result.asset_events if isinstance(e, AssetObservation)]
        checks = {
            e.check_name: e
            for e in result.asset_events
            if isinstance(e, AssetCheckEvaluation) and e.asset_key == AssetKey(table)
        }
        dlq_checks.update(
            {
                e.check_name: e
                for e in result.asset_events
                if isinstance(e, AssetCheckEvaluation) and e.asset_key == dlq_key
            }
        )
        if requested is not None:
            requested.extend(result.run_requests or [])
        return observation.metadata, checks

    with pooled_instance() as instance:
        assert run_partitions(defs, table, instance, w1, tags=SCHEDULED).success
        metadata, checks = tick(instance)
        progress = local_cluster.mqadmin().consumer_progress(group, produced.topic)
        topic_queues = [q for q in progress if q.topic == produced.topic]
        assert topic_queues and any(q.broker_offset > q.consumer_offset for q in topic_queues), "window 2 waits"
        for q in progress:
            mq = MessageQueue(q.topic, q.broker_name, q.queue_id)
            figure = {
                k: metadata[queue_figure(k, mq, produced.topic)].value for k in (BROKER_MAX, COMMITTED, LAG_MESSAGES)
            }
            assert figure[BROKER_MAX] == q.broker_offset, q
            # -1: no offset, which mqadmin shows as 0
            assert figure[COMMITTED] == q.consumer_offset or (figure[COMMITTED] == -1 and q.consumer_offset == 0), q
            assert figure[LAG_MESSAGES] == q.broker_offset - q.consumer_offset, q
        assert metadata[LAG_MESSAGES].value == sum(q.broker_offset - q.consumer_offset for q in progress)
        assert not checks[FRESH_CHECK].passed, checks[FRESH_CHECK].description
        assert checks[FRESH_CHECK].description.endswith(f"the newest landed window is {w1}")

        # The queues with window 2's messages trail: the check is red, and the tick asked for their catch-up.
        trailing = {
            f"{q.topic}/{q.broker_name}/{q.queue_id}" for q in topic_queues if q.broker_offset > q.consumer_offset
        }
        requested = []
        due = table_freshness(cfg, instance, datetime.now(timezone.utc)).newest_due
        metadata, checks = tick(instance, requested)
        assert not checks[CAUGHT_UP_CHECK].passed and "trail window" in checks[CAUGHT_UP_CHECK].description, checks[
            CAUGHT_UP_CHECK
        ].description
        # The dead-letter table trails at window 2 as well: its check is red, and it has a catch-up of its own.
        assert not dlq_checks[CAUGHT_UP_CHECK].passed, dlq_checks.get(CAUGHT_UP_CHECK)
        by_table = {r.tags[CATCH_UP_TAG]: r for r in requested}
        assert set(by_table) == {table, dlq_key.to_user_string()}, requested
        request, dlq_request = by_table[table], by_table[dlq_key.to_user_string()]
        assert (request.tags[RANGE_START], request.asset_selection) == (w2, [AssetKey(table)])
        assert request.tags[RANGE_END] >= due and set(request.tags[QUEUES_TAG].split(",")) == trailing
        dlq_trailing = {f"{dlq_topic}/{s.broker_name}/{s.queue_id}" for s in dead.by_minute[1]}
        assert (dlq_request.tags[RANGE_START], dlq_request.asset_selection) == (w2, [dlq_key])
        assert set(dlq_request.tags[QUEUES_TAG].split(",")) == dlq_trailing
        job = defs.resolve_job_def(f"{table}_job")
        for r in (request, dlq_request):
            assert job.execute_in_process(
                instance=instance, tags=r.tags, asset_selection=r.asset_selection, raise_on_error=False
            ).success
        # Every dead letter in its table once: the first minute's landed with window 1, the second's caught up.
        landed = DeltaTable(str(tmp_path / "lake" / f"{table}_dlq")).to_pyarrow_table(columns=["msg_id"])
        assert sorted(landed.column("msg_id").to_pylist()) == sorted(s.msg_id for s in dead.sent)
        requested.clear()
        metadata, checks = tick(instance, requested)
        assert checks[CAUGHT_UP_CHECK].passed, checks[CAUGHT_UP_CHECK].description
        assert dlq_checks[CAUGHT_UP_CHECK].passed, dlq_checks[CAUGHT_UP_CHECK].description
        assert requested == [] and metadata[LAG_MESSAGES].value == 0
        # The tick read both brokers' clocks: on this host's clock, so the check is green and names each.
        clock = checks[CLOCK_CHECK]
        assert clock.passed and {"broker-a", "broker-b"} <= {k.split("/")[-1] for k in clock.metadata}, (
            clock.description
        )
        ticks = 3

        # Windows that closed since are empty: catch-up leaves them to the schedule (here: by hand), and `fresh`
        # passes once the newest due one is landed. A minute that closes meanwhile is due by the next tick.
        while not checks[FRESH_CHECK].passed:
            assert ticks < 6, checks[FRESH_CHECK].description
            due = table_freshness(cfg, instance, datetime.now(timezone.utc)).newest_due
            assert run_partitions(defs, table, instance, due, tags=SCHEDULED).success
            metadata, checks = tick(instance)
            ticks += 1
        assert checks[FRESH_CHECK].description.startswith(f"newest landed window {due}")
        assert checks[CAUGHT_UP_CHECK].passed and metadata[LAG_MESSAGES].value == 0
        stored = instance.fetch_observations(AssetKey(table), limit=20).records
        assert len([r for r in stored if LAG_MESSAGES in r.asset_observation.metadata]) == ticks
