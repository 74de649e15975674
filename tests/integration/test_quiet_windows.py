"""A quiet window (no offset in any queue's range) lands as its ledger commit alone, without a Spark read, a slice
write or a read-back (``materialize.quiet_landing``); a window the table holds rows of never does."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from deltalake import DeltaTable

import rocketlake.spark.materialize as materialize
from rocketlake.delta.ledger_log import read_ledger
from rocketlake.engine.windows import StoreTimeWindow
from rocketlake.spark.materialize import LazySession, quiet_landing
from tests.integration.engine_support import Engine, now_ms, send_window
from tests.integration.ingestion_support import unique, wait_until
from tests.unit.support import ingestion_config

pytestmark = pytest.mark.engine


def test_a_quiet_window_is_a_ledger_commit_alone_and_a_window_with_rows_is_never_skipped(
    local_cluster, create_topic, java_producer, spark, tmp_path, monkeypatch
):
    topic, group = create_topic(queues=2), unique("g_quiet")
    cfg = ingestion_config(
        topic=topic,
        consumer_group=group,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        window={"cron": "* * * * *", "start": "1970-01-01", "grace_seconds": 0},
    )
    engine = Engine(local_cluster, spark, tmp_path / "orders", cfg)
    busy = send_window(java_producer, topic, [{"n": i} for i in range(5)])
    first = engine.run("r1", [("w1", busy)])
    assert [w.rows for w in first.slice.accounting] == [5]
    table = DeltaTable(engine.lake.table_path)
    files, version = set(table.file_uris()), table.version()

    start = now_ms()
    wait_until((start + 50) / 1000)
    quiet = StoreTimeWindow(start, now_ms() + 1)
    wait_until(quiet.end_ms / 1000)

    def no_read(*args, **kwargs):
        raise AssertionError("a quiet window read its empty ranges with Spark")

    monkeypatch.setattr(materialize, "read_plan", no_read)
    opened = []
    engine.lake._spark = LazySession(lambda: opened.append("session") or spark)  # as a run hands its session over
    second = engine.run("r2", [("w2", quiet)])
    assert [w.rows for w in second.slice.accounting] == [0]
    assert opened == []  # the quiet window's run opened no Spark session: its ledger commits are delta-rs's
    table = DeltaTable(engine.lake.table_path)
    assert set(table.file_uris()) == files and table.to_pyarrow_table().num_rows == 5
    for v in (version + 1, version + 2):  # the landing's entry, then its verdict: commitInfo alone, no file action
        commit = [json.loads(line) for line in (tmp_path / "orders" / "_delta_log" / f"{v:020d}.json").open()]
        assert [list(action) for action in commit] == [["commitInfo"]], commit
        assert commit[0]["commitInfo"]["operationParameters"]["mode"] == "Append"
    # Spark reads the table and its history after them as before.
    assert spark.read.format("delta").load(engine.lake.table_path).count() == 5
    assert spark.sql(f"DESCRIBE HISTORY delta.`{engine.lake.table_path}`").count() == version + 3
    entries = read_ledger(engine.lake.table_path, group)
    newest = entries[-1]
    assert [w.partition_key for w in newest.windows] == ["w2"] and newest.version == version + 1
    assert all(r.size == 0 for w in newest.windows for r in w.ranges) and newest.windows[0].ranges

    # The same entry with the busy window's start: the files' statistics say they hold its rows, so its empty ranges
    # would have to replace them; it takes the slice write, never the ledger commit alone.
    over_rows = replace(newest, windows=tuple(replace(w, start_ms=busy.start_ms) for w in newest.windows))
    assert not quiet_landing(cfg, engine.lake.table_path, over_rows)
    assert quiet_landing(cfg, engine.lake.table_path, newest)
    assert not quiet_landing(cfg, engine.lake.table_path, first.slice.ledger)  # it has offsets to read
    assert not quiet_landing(cfg, str(tmp_path / "no_table_yet"), newest)  # the first landing creates the table
