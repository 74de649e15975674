"""Windowed replace on real Delta: exactly the slice changes, the ledger rides in the same commit."""

from __future__ import annotations

import json

import pytest
from deltalake import DeltaTable

from rocketlake.delta.ledger_log import read_ledger
from rocketlake.delta.writer import Layout, write_slice
from rocketlake.engine.ledger import LedgerEntry, WindowEntry
from rocketlake.rocketmq.message_queue import MessageQueue, OffsetRange

pytestmark = pytest.mark.engine

MIN = 60_000
COLUMNS = "topic STRING, broker_name STRING, queue_id INT, queue_offset BIGINT, window_start TIMESTAMP, v STRING"


def frame(spark, rows):
    from pyspark.sql import functions as F

    df = spark.createDataFrame(
        [(t, b, q, o, w, v) for t, b, q, o, w, v in rows],
        "topic STRING, broker_name STRING, queue_id INT, queue_offset BIGINT, w BIGINT, v STRING",
    )
    return df.withColumn("window_start", F.timestamp_millis("w")).drop("w")


def ledger(run, windows):
    return LedgerEntry(
        "orders",
        "g",
        run,
        tuple(
            WindowEntry(f"k{w}", w, w + MIN, tuple(OffsetRange(MessageQueue("t", b, q), s, e) for b, q, s, e in ranges))
            for w, ranges in windows
        ),
    )


def table_rows(path):
    return sorted(
        (r["broker_name"], r["queue_id"], r["queue_offset"], r["v"])
        for r in DeltaTable(path).to_pyarrow_table().to_pylist()
    )


def test_replace_only_the_slice_and_keep_the_ledger(spark, tmp_path):
    path = str(tmp_path / "t")
    w0, w1 = 0, MIN
    # Queue id 0 on two brokers: the slice must be keyed by broker too.
    write_slice(
        frame(
            spark,
            [("t", "broker-a", 0, 0, w0, "a0"), ("t", "broker-b", 0, 0, w0, "b0"), ("t", "broker-a", 0, 1, w1, "a1")],
        ),
        path,
        ledger("run-1", [(w0, [("broker-a", 0, 0, 1), ("broker-b", 0, 0, 1)]), (w1, [("broker-a", 0, 1, 2)])]),
    )
    # Re-run window 0 for broker-a only, with a changed row: broker-b and window 1 are untouched.
    write_slice(
        frame(spark, [("t", "broker-a", 0, 0, w0, "a0-again")]), path, ledger("run-2", [(w0, [("broker-a", 0, 0, 1)])])
    )
    assert table_rows(path) == [("broker-a", 0, 0, "a0-again"), ("broker-a", 0, 1, "a1"), ("broker-b", 0, 0, "b0")]

    entries = read_ledger(path)
    assert [e.run_id for e in entries] == ["run-1", "run-2"]
    assert entries[1].windows[0].ranges == (OffsetRange(MessageQueue("t", "broker-a", 0), 0, 1),)
    # delta-rs, an independent reader, sees the same ledger in the commit history.
    rs_history = [json.loads(c["userMetadata"])["run_id"] for c in DeltaTable(path).history() if c.get("userMetadata")]
    assert sorted(rs_history) == ["run-1", "run-2"]


def spark_jobs(spark) -> list[tuple[int, str]]:
    """Spark's jobs so far, (id, what it was started for: Delta names its own, "Delta: Finding files to ..."), from
    the driver's status store (kept with or without the web UI)."""
    jobs = spark.sparkContext._jsc.sc().statusStore().jobsList(None)
    found = [jobs.apply(i) for i in range(jobs.size())]
    return [(j.jobId(), j.description().get() if j.description().isDefined() else j.name()) for j in found]


def test_a_new_windows_slice_is_replaced_without_reading_the_files_of_other_windows(spark, tmp_path):
    """Delta prunes the files a replace may touch by their statistics, against literals only: a slice named by a
    function of its window's start (``timestamp_millis``) made every landing read the day's files whose queues and
    offsets overlap its own, to find none of its rows there."""
    path = str(tmp_path / "t")
    # One file for window 0: queues 0 and 1, offsets 0-19, so only its windows tell it from window 1's slice.
    write_slice(
        frame(spark, [("t", "broker-a", q, o, 0, f"w0-{q}-{o}") for q in (0, 1) for o in range(20)]),
        path,
        ledger("run-1", [(0, [("broker-a", 0, 0, 20), ("broker-a", 1, 0, 20)])]),
    )
    before = max((job for job, _ in spark_jobs(spark)), default=-1)
    write_slice(
        frame(spark, [("t", "broker-a", 1, 20, MIN, "w1-1-20")]),
        path,
        ledger("run-2", [(MIN, [("broker-a", 1, 20, 21)])]),
    )
    jobs = [what for job, what in spark_jobs(spark) if job > before]
    assert jobs and not [j for j in jobs if "Finding files to rewrite" in j], jobs
    assert len(table_rows(path)) == 41
    # Landed again, the slice is found and replaced: the same row once, window 0 untouched.
    write_slice(
        frame(spark, [("t", "broker-a", 1, 20, MIN, "w1-1-20-again")]),
        path,
        ledger("run-3", [(MIN, [("broker-a", 1, 20, 21)])]),
    )
    rows = table_rows(path)
    assert len(rows) == 41 and ("broker-a", 1, 20, "w1-1-20-again") in rows


def test_a_new_table_keeps_statistics_on_lookup_columns_and_writes_bodies_without_a_dictionary(spark, tmp_path):
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    path = str(tmp_path / "t")
    df = (
        frame(spark, [("t", "broker-a", 0, o, 0, f"order-{o}") for o in range(200)])
        .withColumn("msg_id", F.concat(F.lit("ID"), F.col("queue_offset").cast("string")))
        .withColumn("body", F.encode(F.concat(F.lit("body-"), F.col("v")), "UTF-8"))
        .withColumn("properties", F.create_map(F.lit("WAIT"), F.lit("true"), F.lit("UNIQ_KEY"), F.col("msg_id")))
    )
    write_slice(df, path, ledger("run-1", [(0, [("broker-a", 0, 0, 200)])]))

    table = DeltaTable(path)
    assert (
        table.metadata().configuration["delta.dataSkippingStatsColumns"]
        == "`topic`,`broker_name`,`queue_id`,`queue_offset`,`v`,`window_start`,`msg_id`"
    )
    log = [
        json.loads(line)
        for commit in sorted((tmp_path / "t" / "_delta_log").glob("*.json"))
        for line in commit.read_text().splitlines()
    ]
    stats = [json.loads(action["add"]["stats"]) for action in log if "add" in action]
    assert stats and all(
        set(s["maxValues"]) == {"topic", "broker_name", "queue_id", "queue_offset", "window_start", "v", "msg_id"}
        for s in stats
    )
    assert max(s["maxValues"]["queue_offset"] for s in stats) == 199
    encodings = {}
    for file in table.file_uris():
        meta = pq.ParquetFile(file).metadata
        for i in range(meta.num_columns):
            column = meta.row_group(0).column(i)
            encodings.setdefault(column.path_in_schema, set()).update(column.encodings)
    dictionary = {"PLAIN_DICTIONARY", "RLE_DICTIONARY"}
    assert not encodings["body"] & dictionary and not encodings["msg_id"] & dictionary
    assert not encodings["properties.key_value.value"] & dictionary
    assert encodings["topic"] & dictionary and encodings["properties.key_value.key"] & dictionary
    assert sorted(r["queue_offset"] for r in table.to_pyarrow_table().to_pylist()) == list(range(200))


def test_rerun_with_identical_data_changes_nothing(spark, tmp_path):
    path = str(tmp_path / "t")
    rows = [("t", "broker-a", 1, o, 0, f"m{o}") for o in range(5)]
    entry = ledger("run-1", [(0, [("broker-a", 1, 0, 5)])])
    write_slice(frame(spark, rows), path, entry)
    before = table_rows(path)
    write_slice(frame(spark, rows), path, entry)
    assert table_rows(path) == before and len(before) == 5


def test_a_range_that_starts_mid_window_keeps_the_rows_below_it_and_an_empty_range_replaces_nothing(spark, tmp_path):
    """An orderly queue resuming at offset 3 of a window replaces 3.. only; a window re-run after the group
    passed it (empty ranges) leaves the window's rows as they are; later windows are replaced whole."""
    path = str(tmp_path / "t")
    w0, w1 = 0, MIN
    write_slice(
        frame(
            spark,
            [("t", "broker-a", 0, o, w0, f"first-{o}") for o in range(3)]
            + [("t", "broker-b", 0, o, w0, f"b-{o}") for o in range(4)],
        ),
        path,
        ledger("run-1", [(w0, [("broker-a", 0, 0, 5), ("broker-b", 0, 0, 4)])]),
    )
    write_slice(
        frame(
            spark,
            [("t", "broker-a", 0, o, w0, f"resumed-{o}") for o in range(3, 5)] + [("t", "broker-a", 0, 5, w1, "w1-5")],
        ),
        path,
        ledger("run-2", [(w0, [("broker-a", 0, 3, 5), ("broker-b", 0, 4, 4)]), (w1, [("broker-a", 0, 5, 6)])]),
    )
    assert table_rows(path) == (
        [("broker-a", 0, o, f"first-{o}") for o in range(3)]
        + [("broker-a", 0, 3, "resumed-3"), ("broker-a", 0, 4, "resumed-4"), ("broker-a", 0, 5, "w1-5")]
        + [("broker-b", 0, o, f"b-{o}") for o in range(4)]
    )
    write_slice(
        frame(spark, [])[["topic", "broker_name", "queue_id", "queue_offset", "window_start", "v"]],
        path,
        ledger("run-3", [(w0, [("broker-a", 0, 5, 5), ("broker-b", 0, 4, 4)])]),
    )
    assert len(table_rows(path)) == 10
    # ... and is still a commit: its ledger entry says those queues are landed for the window.
    assert [e.run_id for e in read_ledger(path)] == ["run-1", "run-2", "run-3"]


def test_ledger_ignores_foreign_commits(spark, tmp_path):
    path = str(tmp_path / "t")
    frame(spark, [("t", "broker-a", 0, 0, 0, "x")]).write.format("delta").option("userMetadata", "hello").save(path)
    assert read_ledger(path) == []
    assert LedgerEntry.from_json("not json") is None


def test_the_ledger_survives_delta_log_cleanup(spark, tmp_path):
    """Delta deletes commits older than delta.logRetentionDuration once a checkpoint covers them; a run
    still finds every entry at stake, because the newest entry carries them."""
    import os
    import time
    from pathlib import Path

    path = str(tmp_path / "t")
    log = Path(path) / "_delta_log"

    def land(run, w, carried=()):
        e = ledger(run, [(w, [("broker-a", 0, w // MIN, w // MIN + 1)])])
        e = LedgerEntry(e.ingestion, e.consumer_group, e.run_id, e.windows, carried=tuple(carried))
        write_slice(frame(spark, [("t", "broker-a", 0, w // MIN, w, run)]), path, e)
        return e

    land("r0", 0)
    dead = land("dead", MIN)  # landed, never recorded: at stake for every later run
    land("r2", 2 * MIN, carried=[dead])
    from delta.tables import DeltaTable as SparkDeltaTable

    # The next commit (r3) is the first multiple of the checkpoint interval: a checkpoint, then the cleanup.
    next_version = SparkDeltaTable.forPath(spark, path).history(1).collect()[0]["version"] + 2
    spark.sql(
        f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ("
        "'delta.logRetentionDuration' = 'interval 1 hours', 'delta.deletedFileRetentionDuration' = 'interval 1 hours', "
        f"'delta.checkpointInterval' = '{next_version}')"
    )
    three_days_ago = time.time() - 3 * 86400
    for f in log.iterdir():  # commits 0-3 and their checksums, as if written three days ago
        if f.is_file():
            os.utime(f, (three_days_ago, three_days_ago))
    land("r3", 3 * MIN, carried=[dead])  # a checkpoint, then the expired commits go
    land("r4", 4 * MIN, carried=[dead])

    assert not (log / f"{0:020d}.json").exists(), sorted(p.name for p in log.iterdir())

    versions = sorted(r["version"] for r in SparkDeltaTable.forPath(spark, path).history().collect())
    assert {0, 1} & set(versions) == set(), versions  # r0's and dead's own commits are gone
    entries = read_ledger(path, "g")
    assert [e.run_id for e in entries] == ["dead", "r4"]
    assert entries[0].windows == dead.windows
    assert table_rows(path)[0] == ("broker-a", 0, 0, "r0")  # the data is all there, of course


def test_a_simulated_day_is_partitioned_by_day_and_compacted_to_few_files(spark, tmp_path):
    """Twelve windows of one day (two brokers each) land one by one, then the day is compacted: the files
    drop, the rows do not change, and a window replaced after compaction is still replaced exactly."""
    from rocketlake.delta.writer import DAY_COLUMN, closed_days, compact_days

    path = str(tmp_path / "t")
    day = 20_000 * 86_400_000  # 2024-10-04T00:00Z
    starts = [day + i * 2 * 3600_000 for i in range(12)]
    for i, w in enumerate(starts):
        rows = [("t", b, 0, i * 10 + o, w, f"{b}-{i}-{o}") for b in ("broker-a", "broker-b") for o in range(10)]
        write_slice(
            frame(spark, rows).repartition(4),
            path,
            ledger(f"r{i}", [(w, [("broker-a", 0, i * 10, i * 10 + 10), ("broker-b", 0, i * 10, i * 10 + 10)])]),
        )
    # The next day's first window: its day is not over, so it is never compacted with this one.
    write_slice(
        frame(spark, [("t", "broker-a", 0, 120, day + 86_400_000, "next")]),
        path,
        ledger("r12", [(day + 86_400_000, [("broker-a", 0, 120, 121)])]),
    )

    def files_per_day():
        import pyarrow as pa

        actions = pa.table(DeltaTable(path).get_add_actions(flatten=True)).to_pylist()
        days = {}
        for a in actions:
            d = str(a[f"partition.{DAY_COLUMN}"])
            days[d] = days.get(d, 0) + 1
        return days

    before = files_per_day()
    assert before == {"2024-10-04": 12, "2024-10-05": 1}, "optimized writes: one file per window, not one per task"
    rows_before = table_rows(path)
    assert closed_days(starts + [day + 86_400_000], day + 86_400_000 + 60_000) == ["2024-10-04"]
    assert compact_days(spark, path, ["2024-10-04"]) == [("2024-10-04", 12, 1)]
    assert files_per_day() == {"2024-10-04": 1, "2024-10-05": 1}
    assert table_rows(path) == rows_before

    # Re-landing one window after compaction replaces exactly its slice.
    write_slice(
        frame(spark, [("t", "broker-a", 0, 50, starts[5], "again")]),
        path,
        ledger("again", [(starts[5], [("broker-a", 0, 50, 51)])]),
    )
    after = table_rows(path)
    assert ("broker-a", 0, 50, "again") in after and len(after) == len(rows_before) - 10 + 1
    assert [r for r in after if r[3] != "again"] == [
        r for r in rows_before if not (r[0] == "broker-a" and 50 <= r[2] < 60)
    ]
    from datetime import date

    assert {r[DAY_COLUMN] for r in DeltaTable(path).to_pyarrow_table().to_pylist()} == {
        date(2024, 10, 4),
        date(2024, 10, 5),
    }


def test_table_properties_are_set_by_the_creating_commit_and_kept_and_vacuum_deletes_what_compaction_replaced(
    spark, tmp_path
):
    """An ingestion's table_properties reach a new table with its first commit (the change data feed covers the
    first slice), an existing one whose values differ gets them by a commit of their own, matching ones cost no
    commit; after a day's compaction, VACUUM with the ingestion's retention deletes the files it replaced."""
    from pathlib import Path

    from rocketlake.delta.writer import (
        compact_days,
        last_commit_version,
        set_table_properties,
        table_properties,
        vacuum,
    )

    path = str(tmp_path / "t")
    day = 20_000 * 86_400_000  # 2024-10-04T00:00Z
    wanted = {"delta.enableChangeDataFeed": "true", "team": "data"}
    for i in range(2):
        w = day + i * 3600_000
        write_slice(
            frame(spark, [("t", "broker-a", 0, i, w, f"m{i}")]),
            path,
            ledger(f"r{i}", [(w, [("broker-a", 0, i, i + 1)])]),
            properties=wanted,
        )
    got = table_properties(spark, path)
    assert got["delta.enableChangeDataFeed"] == "true" and got["team"] == "data"
    first = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", 0)
        .option("endingVersion", 0)
        .load(path)
    )
    assert [r["v"] for r in first.collect()] == ["m0"]  # CDF was on for the very first commit
    version = last_commit_version(spark, path)
    assert set_table_properties(spark, path, wanted) == {}  # all match: no commit
    assert last_commit_version(spark, path) == version
    assert set_table_properties(spark, path, {**wanted, "team": "lake"}) == {"team": "lake"}
    assert table_properties(spark, path)["team"] == "lake" and last_commit_version(spark, path) == version + 1

    def data_files_on_disk():
        return {
            str(p.relative_to(path))
            for p in Path(path).rglob("*.parquet")
            if "_delta_log" not in p.parts and "_change_data" not in p.parts
        }

    rows = table_rows(path)
    assert len(data_files_on_disk()) == 2
    assert compact_days(spark, path, ["2024-10-04"]) == [("2024-10-04", 2, 1)]
    assert len(data_files_on_disk()) == 3  # compaction only marks the two as removed
    check = "spark.databricks.delta.retentionDurationCheck.enabled"
    before = spark.conf.get(check, "true")
    vacuum(spark, path, 0)
    import pyarrow as pa

    live = set(pa.table(DeltaTable(path).get_add_actions(flatten=True))["path"].to_pylist())
    assert len(live) == 1 and data_files_on_disk() == live  # only the compacted file is left
    assert table_rows(path) == rows
    assert spark.conf.get(check, "true") == before  # Delta's check is off for that call only


LAYOUTS = {
    "partitions by hour and a column, Z-ordered": (
        Layout(partition_by=("window_hour", "v_group"), zorder_by=("queue_offset",)),
        ["window_date", "window_hour", "v_group"],
        [],
    ),
    "liquid clustering": (Layout(cluster_by=("window_date", "v_group")), [], ["window_date", "v_group"]),
}


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_every_layout_keeps_the_slice_replace_the_compaction_and_the_ledger(spark, tmp_path, name):
    """Three windows of one hour of a day, two brokers each, land in a table laid out as an ingestion may ask; one
    window is replaced before and one after the compaction. Each time exactly its slice changes, the compaction
    changes no row, and the ledger reads the same."""
    from pyspark.sql import functions as F

    from rocketlake.delta.writer import _detail, compact_days

    layout, partitions, clustering = LAYOUTS[name]
    path = str(tmp_path / "t")
    day = 20_000 * 86_400_000
    starts = [day + 3600_000 + i * 600_000 for i in range(3)]  # one hour: its partitions get several files

    def write(rows, run, windows):
        df = frame(spark, rows).withColumn("v_group", F.substring("v", 1, 8))
        write_slice(df.repartition(3), path, ledger(run, windows), layout=layout)

    for i, w in enumerate(starts):
        write(
            [("t", b, 0, i * 10 + o, w, f"{b}-{i}-{o}") for b in ("broker-a", "broker-b") for o in range(10)],
            f"r{i}",
            [(w, [("broker-a", 0, i * 10, i * 10 + 10), ("broker-b", 0, i * 10, i * 10 + 10)])],
        )
    detail = _detail(spark, path)
    assert (detail.partition_by, detail.cluster_by) == (partitions, clustering)

    def replace_window(i: int, run: str):
        write(
            [("t", "broker-a", 0, i * 10, starts[i], f"again-{run}")],
            run,
            [(starts[i], [("broker-a", 0, i * 10, i * 10 + 10)])],
        )

    replace_window(1, "x1")
    rows_before = table_rows(path)
    assert len(rows_before) == 60 - 10 + 1 and ("broker-a", 0, 10, "again-x1") in rows_before
    compacted = compact_days(spark, path, ["2024-10-04"], layout.zorder_by)
    assert len(compacted) == 1 and compacted[0][1] > compacted[0][2] >= 1, compacted
    assert table_rows(path) == rows_before
    replace_window(2, "x2")
    after = table_rows(path)
    assert [r for r in after if not r[3].startswith("again")] == [
        r for r in rows_before if not r[3].startswith("again") and not (r[0] == "broker-a" and 20 <= r[2] < 30)
    ]
    assert sorted(r[3] for r in after if r[3].startswith("again")) == ["again-x1", "again-x2"]
    assert [e.run_id for e in read_ledger(path)] == [f"r{i}" for i in range(3)] + ["x1", "x2"]


def test_a_table_laid_out_otherwise_is_refused_before_anything_is_written(spark, tmp_path):
    from rocketlake.delta.writer import LayoutMismatch, last_commit_version

    path = str(tmp_path / "t")
    rows = [("t", "broker-a", 0, 0, 0, "a")]
    write_slice(frame(spark, rows), path, ledger("r0", [(0, [("broker-a", 0, 0, 1)])]))
    version = last_commit_version(spark, path)
    with pytest.raises(
        LayoutMismatch,
        match=r"partitioned by \['window_date'\].*layout asks for partitions "
        r"\['window_date', 'v'\]",
    ):
        write_slice(
            frame(spark, rows), path, ledger("r1", [(0, [("broker-a", 0, 0, 1)])]), layout=Layout(partition_by=("v",))
        )
    assert last_commit_version(spark, path) == version
    # A layout removed from the configuration later: the table keeps its own, and slices still get its columns.
    hourly = str(tmp_path / "hourly")
    write_slice(
        frame(spark, rows),
        hourly,
        ledger("r0", [(0, [("broker-a", 0, 0, 1)])]),
        layout=Layout(partition_by=("window_hour",)),
    )
    write_slice(frame(spark, [("t", "broker-a", 0, 0, 0, "b")]), hourly, ledger("r1", [(0, [("broker-a", 0, 0, 1)])]))
    assert table_rows(hourly) == [("broker-a", 0, 0, "b")]
    with pytest.raises(LayoutMismatch, match="'nope' is not a column of the rows landed"):
        write_slice(
            frame(spark, rows),
            str(tmp_path / "new"),
            ledger("r0", [(0, [("broker-a", 0, 0, 1)])]),
            layout=Layout(zorder_by=("nope",)),
        )
