"""Listeners, retry and dead letters on real brokers, next to a Java DefaultMQPushConsumer with the same failures.

The test brokers use delay levels of n seconds (``SHORT_DELAY_LEVELS``), so a message sent back returns within
seconds; each window run lands what came back in the window before.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter

import pytest
from dagster import AssetCheckKey, AssetKey, build_sensor_context
from deltalake import DeltaTable

from rocketlake.dagster.backlog import DLQ_OLDEST_AGE, DLQ_WAITING, RETRY_WAITING
from rocketlake.dagster.metadata import DEAD_LETTERED as DEAD_LETTERED_KEY
from rocketlake.dagster.rocketmq_resource import RocketMQResource
from rocketlake.local import peers
from rocketlake.rocketmq.client import RocketMQClient
from tests import java_oracles
from tests.dagster_instance import pooled_instance
from tests.integration.ingestion_support import (
    dead_letters,
    definitions,
    minute_key,
    room_in_this_minute,
    run_partitions,
    unique,
    wait_until,
    write_config,
)
from tests.unit.listeners import FAIL_UNTIL

pytestmark = pytest.mark.dagster
#: One retry: a message failed in a window's run comes back in the next window, so each retry costs a real minute;
#: the poison messages go from their first window to the dead-letter table in three (fail, fail and dead-letter,
#: land the dead letter).
MAX_RECONSUME = 1
#: Dead letters: 2 poison messages, one of them stored twice, and the malformed body.
DEAD = 4


def dlq_rows(path) -> list[dict]:
    return DeltaTable(str(path)).to_pyarrow_table().to_pylist() if (path / "_delta_log").exists() else []


def backlog_metadata(defs, instance, table: str, cluster) -> dict:
    """What the retry-backlog sensor records, evaluated as the daemon does."""
    sensor = defs.get_sensor_def("rocketlake_test_retry_backlog")  # one a cluster
    resources = {"rocketmq_test": RocketMQResource(namesrv=cluster.spec.namesrv_address)}
    result = sensor.evaluate_tick(
        build_sensor_context(instance=instance, resources=resources, definitions=defs, sensor_name=sensor.name)
    )
    (observation,) = result.asset_events
    return observation.metadata


def test_failures_come_back_then_land_once_or_end_in_the_dead_letter_table(tmp_path, local_cluster):
    namesrv = local_cluster.spec.namesrv_address
    topic, group, java_group, table = unique("retries"), unique("g"), unique("j"), unique("t")
    local_cluster.create_topic(topic, 2)
    config = write_config(
        tmp_path / "rocketlake.yaml",
        local_cluster,
        tmp_path / "lake",
        {
            "orders": {
                "topic": topic,
                "consumer_group": group,
                "table": table,
                "listener": "tests.unit.listeners:fail_by_tag",
                "max_reconsume_times": MAX_RECONSUME,
                "consume_message_batch_max_size": 1,
                "metadata_columns": ["reconsume_times", "properties"],
            }
        },
    )
    defs = definitions(config)

    # The Java peer fails the same messages: poison always, flaky once, and the malformed body (tag "bad") always,
    # as a listener that parses JSON would.
    java = java_oracles.start_retry_consumer(
        namesrv,
        local_cluster.spec.state_dir,
        java_group,
        topic,
        max_reconsume_times=MAX_RECONSUME,
        fail_until={**FAIL_UNTIL, "bad": 99},
    )
    deliveries: list[dict] = []
    threading.Thread(
        target=lambda: deliveries.extend(json.loads(line) for line in java.stdout if line.startswith('{"msgId"')),
        daemon=True,
    ).start()
    try:
        room_in_this_minute()
        first_window_ms = int(time.time()) // 60 * 60_000
        messages = [
            {"topic": topic, "tags": "good", "keys": [f"k{i}"], "body": json.dumps({"order_id": f"o{i}", "amount": i})}
            for i in range(8)
        ]
        messages += [
            {"topic": topic, "tags": "flaky", "keys": [f"f{i}"], "body": json.dumps({"order_id": f"f{i}", "amount": 1})}
            for i in range(2)
        ]
        messages += [
            {
                "topic": topic,
                "tags": "poison",
                "keys": [f"p{i}"],
                "body": json.dumps({"order_id": f"p{i}", "amount": 2}),
            }
            for i in range(2)
        ]
        messages.append({"topic": topic, "tags": "bad", "keys": ["b0"], "body": '{"order_id": "b0", "amount": '})
        # A poison and a flaky message each stored twice with one msgId, as a producer's retry after a lost answer
        # stores it: two messages (two offsets), each failed, sent back and landed or dead-lettered on its own.
        messages[-2]["repeat"] = messages[-4]["repeat"] = 2
        sent = peers.produce(namesrv, local_cluster.spec.state_dir, messages)
        tag_of = {s.msg_id: m["tags"] for s, m in zip(sent, (m for m in messages for _ in range(m.get("repeat", 1))))}
        assert len(sent) == len(messages) + 2 and len(tag_of) == len(messages)

        path = str(tmp_path / "lake" / table)
        with pooled_instance() as instance:
            # Window by window, as the schedule runs them: what fails is sent back and returns seconds later, in
            # the window being written then, which a later run lands (and fails again, or not). Runs go on until the
            # dead letters are landed, at most 8 windows.
            dlq_path = tmp_path / "lake" / f"{table}_dlq"
            dead_lettered, sensor_checked = 0, False
            for n in range(6):
                start_ms = first_window_ms + n * 60_000
                wait_until((start_ms + 60_000) / 1000 + 3)
                result = run_partitions(defs, table, instance, minute_key(start_ms))
                assert result.success, [e.message for e in result.all_events if e.is_failure]
                checks = [c for c in result.get_asset_check_evaluations() if c.check_name == "offsets_accounted"]
                assert len(checks) == 2 and all(c.passed for c in checks)
                [main] = [m for m in result.asset_materializations_for_node(table)]
                dead_lettered += main.metadata[DEAD_LETTERED_KEY].value
                landed_dead = dlq_rows(dlq_path)
                if dead_lettered == DEAD and not sensor_checked:
                    # In the broker's DLQ, not all landed yet: the backlog sensor says how many wait.
                    waiting = backlog_metadata(defs, instance, table, local_cluster)
                    assert waiting[DLQ_WAITING].value == DEAD - len(landed_dead) > 0
                    assert waiting[RETRY_WAITING].value == 0 and waiting[DLQ_OLDEST_AGE].value > 0
                    sensor_checked = True
                if len(landed_dead) == DEAD:
                    break
            assert sensor_checked and len(dlq_rows(dlq_path)) == DEAD

            landed = DeltaTable(path).to_pyarrow_table().to_pylist()
            by_origin = Counter(r["origin_msg_id"] for r in landed)
            expected = [s.msg_id for s in sent if tag_of[s.msg_id] in ("good", "flaky")]
            assert by_origin == Counter(expected)  # each stored message exactly once, no failed one
            for row in landed:
                assert row["origin_topic"] == topic
                if tag_of[row["origin_msg_id"]] == "flaky":
                    # It came back through the retry topic and the broker's delay service, counted once.
                    assert row["topic"] == f"%RETRY%{group}" and row["reconsume_times"] == 1
                    assert dict(row["properties"])["REAL_TOPIC"] == f"%RETRY%{group}"
                else:
                    assert row["topic"] == topic and row["reconsume_times"] == 0

            dlq = dlq_rows(dlq_path)
            ours = sorted((r["origin_msg_id"], r["reconsume_times"], r["origin_topic"]) for r in dlq)
            assert ours == sorted(
                (s.msg_id, MAX_RECONSUME + 1, topic) for s in sent if tag_of[s.msg_id] in ("poison", "bad")
            )
            errors = {tag_of[r["origin_msg_id"]]: r["last_error"] for r in dlq}
            assert errors["poison"] == "listener answered RECONSUME_LATER"
            assert errors["bad"].startswith("body is not JSON matching body.schema")
            warn = instance.get_latest_asset_check_evaluation_record(
                AssetCheckKey(AssetKey(f"{table}_dlq"), "no_dead_letters")
            )
            assert warn is not None and warn.event.dagster_event.event_specific_data.passed is False

            assert backlog_metadata(defs, instance, table, local_cluster)[DLQ_WAITING].value == 0  # landed now
            failures = DeltaTable(str(tmp_path / "lake" / f"{table}_failures")).to_pyarrow_table().to_pylist()
            flaky = sum(tag_of[s.msg_id] == "flaky" for s in sent)
            assert Counter(r["outcome"] for r in failures) == Counter(
                {"sent_back": DEAD * MAX_RECONSUME + flaky, "dead_lettered": DEAD}
            )

        # The Java consumer, same failures on the same brokers: the same dead letters, counted the same.
        with RocketMQClient(namesrv) as client:
            deadline = time.monotonic() + 120
            while len(dead_letters(client, java_group)) < DEAD:
                assert time.monotonic() < deadline, f"the Java consumer did not dead-letter its {DEAD} messages"
                time.sleep(0.5)
            java_dlq = sorted(
                (m.msg_id, m.reconsume_times, m.properties.get("RETRY_TOPIC")) for m in dead_letters(client, java_group)
            )
            assert java_dlq == ours
            assert sorted((m.msg_id, m.reconsume_times) for m in dead_letters(client, group)) == sorted(
                (o, t) for o, t, _ in ours
            )
        java_ok = Counter(d["msgId"] for d in deliveries if d["status"] == "CONSUME_SUCCESS")
        assert java_ok == Counter(expected)
        assert {
            d["reconsumeTimes"]
            for d in deliveries
            if d["status"] == "CONSUME_SUCCESS" and tag_of[d["msgId"]] == "flaky"
        } == {1}
    finally:
        java.stdin.close()
        java.wait(timeout=60)
