"""The orderly resume sensor, evaluated as the daemon does, on a Dagster instance holding the table's
materializations (reported here as a run would report them)."""

from __future__ import annotations

import time

from dagster import AssetKey, AssetMaterialization, DagsterInstance, RunRequest, build_sensor_context

from rocketlake.dagster.definitions import build_definitions
from rocketlake.dagster.ingestion import RESUME_TAG
from rocketlake.dagster.metadata import SUSPENDED, suspended_table
from rocketlake.engine.config import parse_config

ORDERLY = {
    "listener": "tests.unit.listeners:orderly_fail_by_tag",
    "consume_orderly": True,
    "suspend_current_queue_time_millis": 2000,
}


def definitions(**ingestion):
    return build_definitions(
        parse_config(
            {
                "clusters": {"local": {"namesrv": "127.0.0.1:9876"}},
                "ingestions": {
                    "orders": {
                        "cluster": "local",
                        "topic": "orders",
                        "consumer_group": "g",
                        "table": "orders",
                        "window": {"cron": "* * * * *", "start": "2026-01-01"},
                        **ingestion,
                    }
                },
            }
        )
    )


def tick(defs, instance):
    sensor = defs.get_sensor_def("orders_orderly_resume")
    return sensor.evaluate_tick(build_sensor_context(instance=instance, definitions=defs, sensor_name=sensor.name))


def report(instance, partition: str, suspended: dict | None):
    metadata = {SUSPENDED: suspended_table(suspended)} if suspended is not None else {}
    instance.report_runless_asset_event(
        AssetMaterialization(AssetKey("orders"), partition=partition, metadata=metadata)
    )


def test_a_due_suspension_asks_for_a_run_of_its_partition_from_the_group_position_once():
    defs = definitions(**ORDERLY)
    with DagsterInstance.ephemeral() as instance:
        assert "no materialization yet" in tick(defs, instance).skip_message
        report(instance, "2026-11-23-10:00", None)
        assert "no queue of orders is suspended" in tick(defs, instance).skip_message

        later = int(time.time() * 1000) + 60_000
        report(
            instance, "2026-11-23-10:01", {"orders/broker-a/0": {"offset": 7, "attempts": 1, "retry_after_ms": later}}
        )
        assert "wait until" in tick(defs, instance).skip_message

        due = int(time.time() * 1000) - 1
        report(
            instance,
            "2026-11-23-10:02",
            {
                "orders/broker-a/0": {"offset": 7, "attempts": 2, "retry_after_ms": due},
                "orders/broker-b/1": {"offset": 3, "attempts": 1, "retry_after_ms": later},
            },
        )
        result = tick(defs, instance)
        [request] = result.run_requests
        assert isinstance(request, RunRequest)
        assert request.partition_key == "2026-11-23-10:02"
        assert request.tags[RESUME_TAG] == "orders/broker-a/0"
        assert tick(defs, instance).run_requests[0].run_key == request.run_key  # the same request: Dagster dedupes it


def test_only_orderly_ingestions_that_can_fail_have_the_sensor():
    names = {s.name for s in definitions(**ORDERLY).sensors}
    assert "orders_orderly_resume" in names
    assert "orders_orderly_resume" not in {s.name for s in definitions(consume_orderly=True).sensors}
    assert "orders_orderly_resume" not in {s.name for s in definitions(listener=ORDERLY["listener"]).sensors}
