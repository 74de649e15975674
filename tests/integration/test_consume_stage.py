"""The consume stage on real Spark (no broker needed): decode failures, listener verdicts, redelivered copies."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from pyspark.sql import functions as F

from rocketlake.engine.columns import METADATA_COLUMNS, schema_ddl
from rocketlake.engine.config import BodyConfig
from rocketlake.spark.consume import DUPLICATE, ERROR, decode_checked, listen, mark_known, with_last_error
from tests.unit.support import ingestion_config

pytestmark = pytest.mark.engine
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def message(
    offset: int,
    body: bytes,
    *,
    topic: str = "orders",
    tags: str = "TagA",
    matched: bool = True,
    props: dict | None = None,
    msg_id: str | None = None,
) -> tuple:
    properties = {"UNIQ_KEY": msg_id or f"U{offset}", **(props or {})}
    origin_topic = properties.get("RETRY_TOPIC", topic) if topic.startswith("%RETRY%") else topic
    stored = f"{offset:032X}"  # its offset id; a copy's original's is its ORIGIN_MESSAGE_ID
    origin_stored = properties.get("ORIGIN_MESSAGE_ID", stored) if topic.startswith(("%RETRY%", "%DLQ%")) else stored
    return (
        topic,
        "broker-a",
        0,
        offset,
        msg_id or f"U{offset}",
        stored,
        tags,
        None,
        properties,
        T0,
        T0,
        "127.0.0.1:1",
        "127.0.0.1:10911",
        0,
        body,
        origin_topic,
        msg_id or f"U{offset}",
        origin_stored,
        properties.get("__SHARDINGKEY"),  # message_group
        matched,
        T0,
    )


def frame(spark, rows):
    """Rows as the source gives them with every metadata column (as it reads for a listener)."""
    return spark.createDataFrame(rows, schema_ddl(METADATA_COLUMNS, matched=True, window=True))


def test_bodies_that_do_not_decode_are_failures_not_nulls(spark):
    df = frame(
        spark,
        [
            message(0, b'{"a": "x"}'),
            message(1, b'{"a": '),
            message(2, b"\xff\xfe"),
            message(3, b"{oops", matched=False),
            message(4, b""),
        ],
    )
    out = {r["queue_offset"]: r for r in decode_checked(df, BodyConfig(format="json", schema="a STRING")).collect()}
    assert out[0][ERROR] is None and out[0]["a"] == "x"
    assert out[1][ERROR].startswith('body is not JSON matching body.schema (a STRING): {"a": ')
    assert out[2][ERROR] == "body is not valid UTF-8"
    assert out[3][ERROR] is None  # filtered by tag: not consumed, not failed
    assert out[4][ERROR].startswith("body is not JSON")
    text = {r["queue_offset"]: r[ERROR] for r in decode_checked(df, BodyConfig(format="text")).collect()}
    assert text == {0: None, 1: None, 2: "body is not valid UTF-8", 3: None, 4: None}


def test_listeners_judge_only_messages_still_to_consume(spark):
    rows = [
        message(0, b"a"),
        message(1, b"b", tags="poison"),
        message(2, b"c"),
        message(3, b"d", tags="poison", matched=False),
    ]
    df = decode_checked(frame(spark, rows), BodyConfig()).withColumn(DUPLICATE, F.lit(False))
    per_batch = ingestion_config(listener="tests.unit.listeners:fail_poison", consume_message_batch_max_size=1)
    verdicts = {r["queue_offset"]: r[ERROR] for r in listen(df, per_batch).collect()}
    assert verdicts == {0: None, 1: "listener answered RECONSUME_LATER", 2: None, 3: None}

    vectorised = ingestion_config(listener="tests.unit.listeners:vectorised_upper")
    out = {r["queue_offset"]: r for r in listen(df, vectorised).collect()}
    assert [out[i][ERROR] for i in range(4)] == [None, "listener answered RECONSUME_LATER", None, None]
    assert (out[0]["shout"], out[2]["shout"], out[3]["shout"]) == ("A", "C", None)


def test_a_redelivered_copy_of_a_landed_message_is_a_duplicate(spark, tmp_path):
    path = str(tmp_path / "t")
    landed = frame(spark, [message(0, b"x", msg_id="M0")])
    landed.drop("matched").write.format("delta").save(path)
    retry = "%RETRY%g"
    rows = [
        message(5, b"x", topic=retry, msg_id="M0", props={"RETRY_TOPIC": "orders", "ORIGIN_MESSAGE_ID": f"{0:032X}"}),
        message(6, b"y", topic=retry, msg_id="M9", props={"RETRY_TOPIC": "orders", "ORIGIN_MESSAGE_ID": f"{1:032X}"}),
        message(7, b"z", msg_id="M0"),  # the main topic is never a copy
        # a copy of offset 7: msgId M0 too (a producer's retry stored it twice), another stored message
        message(8, b"z", topic=retry, msg_id="M0", props={"RETRY_TOPIC": "orders", "ORIGIN_MESSAGE_ID": f"{7:032X}"}),
    ]
    df = frame(spark, rows)
    marked = {r["queue_offset"]: r for r in mark_known(df, path, "false", int(T0.timestamp() * 1000)).collect()}
    assert [marked[i][DUPLICATE] for i in (5, 6, 7, 8)] == [True, False, False, False]
    assert marked[5]["origin_topic"] == "orders" and marked[5]["origin_msg_id"] == "M0"
    # The slice being replaced does not count: its rows are about to be rewritten.
    replaced = mark_known(df, path, "true", int(T0.timestamp() * 1000)).where(F.col(DUPLICATE)).count()
    assert replaced == 0


def test_each_dead_letter_gets_the_error_of_the_stored_message_it_came_from(spark, tmp_path):
    """Two messages a producer's retry stored with one msgId (offsets 0 and 1) failed each with its own error; their
    dead letters (offsets 5 and 6 of %DLQ%g) name them in ORIGIN_MESSAGE_ID, and each gets its own."""
    path = str(tmp_path / "failures")
    failed = frame(spark, [message(0, b"x", msg_id="M0"), message(1, b"x", msg_id="M0")])
    errors = F.when(F.col("queue_offset") == 0, F.lit("first")).otherwise(F.lit("second"))
    (
        failed.drop("matched")
        .withColumn("outcome", F.lit("dead_lettered"))
        .withColumn("error", errors)
        .write.format("delta")
        .save(path)
    )
    dlq = "%DLQ%g"
    letters = frame(
        spark,
        [
            message(6, b"x", topic=dlq, msg_id="M0", props={"ORIGIN_MESSAGE_ID": f"{1:032X}"}),
            message(5, b"x", topic=dlq, msg_id="M0", props={"ORIGIN_MESSAGE_ID": f"{0:032X}"}),
        ],
    )
    last = {r["queue_offset"]: r["last_error"] for r in with_last_error(letters, path).collect()}
    assert last == {5: "first", 6: "second"}


def test_a_listener_call_over_consume_timeout_is_a_retry_and_the_task_finishes(spark):
    import re

    rows = [message(0, b"a"), message(1, b"b", tags="slow"), message(2, b"c")]
    df = decode_checked(frame(spark, rows), BodyConfig()).withColumn(DUPLICATE, F.lit(False))
    cfg = ingestion_config(listener="tests.unit.listeners:sleep_on_slow", consume_timeout=0.05)  # 3 s
    verdicts = {r["queue_offset"]: r[ERROR] for r in listen(df, cfg).collect()}  # returns: nothing hangs
    assert verdicts[0] is None and verdicts[2] is None
    ran = float(re.match(r"consume_timeout: the listener call ran ([\d.]+)s, over the limit of 3s", verdicts[1])[1])
    assert 3.0 <= ran < 4.0  # counted as a retry within a second of the limit
