"""Which tables delta-rs can read the data of (``delta.delta_rs``): judged on plain protocols, and on real tables
given features as Delta records them, against delta-rs's own refusal."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from deltalake import ColumnProperties, DeltaTable, WriterProperties, write_deltalake

from rocketlake.delta.delta_rs import SUPPORTED_READER_FEATURES, Protocol, read_columns, read_refusal


def test_the_protocols_delta_rs_reads_and_those_it_does_not():
    assert read_refusal(Protocol(1)) is None
    assert read_refusal(Protocol(3, frozenset({"timestampNtz"}))) is None
    assert read_refusal(Protocol(3, frozenset(SUPPORTED_READER_FEATURES))) is None  # what this delta-rs declares
    assert read_refusal(Protocol(3, frozenset({"deletionVectors", "timestampNtz"}))) == (
        "the table has reader feature(s) delta-rs does not read: deletionVectors"
    )
    assert "typeWidening, v2Checkpoint" in read_refusal(Protocol(3, frozenset({"v2Checkpoint", "typeWidening"})))
    # Reader version 2 lists no features; its column mapping is the table's configuration's.
    assert read_refusal(Protocol(2, column_mapping="name")).endswith("does not read: columnMapping")
    assert read_refusal(Protocol(4)) == "the table needs a reader of protocol version 4"


def no_spark():
    pytest.fail("read with Spark a table delta-rs reads")


class SparkAsked(Exception):
    """The read asked for a Spark session: the table is one for Spark."""


def spark_asked():
    raise SparkAsked


def test_a_table_delta_rs_reads_is_read_by_it_and_deletion_vectors_are_refused_as_delta_rs_refuses_them(tmp_path):
    """The read turns to Spark for the table delta-rs refuses (the read through Spark itself is the engine tier's:
    it needs a real session)."""
    path = str(tmp_path / "t")
    # Without statistics: pyarrow 19 (the lowest allowed) cannot read the level histograms of deltalake's pages.
    no_statistics = WriterProperties(default_column_properties=ColumnProperties(statistics_enabled="NONE"))
    write_deltalake(path, pa.table({"queue_id": [0, 1], "body": ["a", "b"]}), writer_properties=no_statistics)
    read, reader = read_columns(path, ["queue_id"], None, no_spark)
    assert reader == "delta-rs" and read.column("queue_id").to_pylist() == [0, 1]

    # Version 1 turns deletion vectors on, as Delta's writers record it.
    protocol = {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["deletionVectors"]}
    protocol["writerFeatures"] = ["deletionVectors"]
    commit = {"commitInfo": {"timestamp": 1, "operation": "SET TBLPROPERTIES"}}
    (tmp_path / "t" / "_delta_log" / "00000000000000000001.json").write_text(
        json.dumps(commit) + "\n" + json.dumps({"protocol": protocol}) + "\n"
    )
    with pytest.raises(Exception, match="(?i)deletion ?vectors"):  # delta-rs refuses to read its data
        DeltaTable(path).to_pyarrow_table()
    with pytest.raises(SparkAsked):
        read_columns(path, ["queue_id"], None, spark_asked)


def test_the_ledgers_reads_open_the_log_without_a_warning_on_this_delta_rs(tmp_path):
    """delta-rs 1.6 ignores ``without_files`` and warns at each call that does ask for it, which every landing, sensor
    tick and CLI read would repeat."""
    import warnings

    import pyarrow as pa
    from deltalake import write_deltalake

    from rocketlake.delta.ledger_log import read_ledger, table_version

    write_deltalake(str(tmp_path), pa.table({"a": [1]}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert table_version(str(tmp_path)) == 0
        assert read_ledger(str(tmp_path)) == []


def test_a_table_with_a_reader_feature_delta_rs_does_not_know_is_read_with_spark(tmp_path):
    """delta-rs does not even open a table whose protocol names a reader feature it does not know (a newer Delta's):
    the read turns to Spark, saying why, instead of failing."""
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"queue_id": [0, 1]}))
    protocol = {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["someFutureFeature"]}
    protocol["writerFeatures"] = ["someFutureFeature"]
    commit = {"commitInfo": {"timestamp": 1, "operation": "SET TBLPROPERTIES"}}
    (tmp_path / "t" / "_delta_log" / "00000000000000000001.json").write_text(
        json.dumps(commit) + "\n" + json.dumps({"protocol": protocol}) + "\n"
    )
    with pytest.raises(SparkAsked):
        read_columns(path, ["queue_id"], None, spark_asked)


def test_the_rows_of_offset_ranges_are_read_from_the_files_that_may_hold_them(tmp_path):
    """``landed_rows``: exactly the rows of the ranges (queue by queue, offsets [start, end)), with the columns asked
    for that the table has, from a table whose rows are spread over files as windows land them."""
    from rocketlake.delta.delta_rs import landed_rows
    from rocketlake.rocketmq.message_queue import MessageQueue, OffsetRange

    path = str(tmp_path / "t")
    a, b = MessageQueue("orders", "broker-a", 0), MessageQueue("orders", "broker-b", 0)
    for first in range(0, 30, 10):  # a file per ten offsets of each queue, as windows land them
        rows = [(q, o) for q in (a, b) for o in range(first, first + 10)]
        write_deltalake(
            path,
            pa.table(
                {
                    "topic": [q.topic for q, _ in rows],
                    "broker_name": [q.broker_name for q, _ in rows],
                    "queue_id": pa.array([q.queue_id for q, _ in rows], pa.int32()),
                    "queue_offset": pa.array([o for _, o in rows], pa.int64()),
                    "msg_id": [f"{q.broker_name}-{o}" for q, o in rows],
                    "keys": [None if o % 2 else f"k{o}" for _, o in rows],
                }
            ),
            mode="append",
        )
    # Two windows of queue a, back to back (read as one range), and one of b.
    ranges = [OffsetRange(a, 5, 9), OffsetRange(b, 20, 22), OffsetRange(a, 9, 15)]
    got = landed_rows(path, ranges, ("msg_id", "keys", "reconsume_times"), None)
    if int(pa.__version__.split(".")[0]) < 20:  # it aborts reading delta-rs's page histograms: Spark reads instead
        assert got is None
        return
    assert got.column_names == ["queue_offset", "msg_id", "keys"]  # reconsume_times: not a column of this table
    assert sorted(got["msg_id"].to_pylist()) == sorted(
        [f"broker-a-{o}" for o in range(5, 15)] + ["broker-b-20", "broker-b-21"]
    )
    # Files without statistics of queue_offset would be left out of a filtered read: Spark reads such a table.
    bare = str(tmp_path / "bare")
    no_statistics = WriterProperties(default_column_properties=ColumnProperties(statistics_enabled="NONE"))
    write_deltalake(bare, pa.table({"topic": ["orders"], "queue_offset": [0]}), writer_properties=no_statistics)
    assert landed_rows(bare, [OffsetRange(a, 0, 1)], ("msg_id",), None) is None
    assert landed_rows(path, [], ("msg_id",), None) is None  # no range: nothing for delta-rs to read
    assert landed_rows("s3a://lake/t", [OffsetRange(a, 0, 1)], ("msg_id",), None) is None  # Spark reads object stores


def test_the_rows_of_a_slice_are_counted_by_window_and_queue_as_the_slice_predicate_selects_them(tmp_path):
    """``slice_counts``: per (window, queue), the rows ``slice_predicate`` selects (a queue's first range bounded
    below by its start, its later windows whole), not rows of other windows, other queues or below that start."""
    from rocketlake.delta.delta_rs import PYARROW_MAJOR, slice_counts
    from rocketlake.delta.writer import slice_clauses
    from rocketlake.engine.ledger import WindowEntry
    from rocketlake.rocketmq.message_queue import MessageQueue, OffsetRange

    path = str(tmp_path / "t")
    a, b, c = (MessageQueue("orders", broker, 0) for broker in ("broker-a", "broker-b", "broker-c"))
    w1, w2, w3 = 60_000, 120_000, 180_000
    # (window, queue, offsets): per window and queue, a file of its own, as landings write them.
    stored = [(w1, a, range(0, 10)), (w2, a, range(10, 14)), (w2, b, range(0, 3)), (w3, a, range(14, 15))]
    stored += [(w2, c, range(0, 2))]  # a queue this landing does not take
    for w, q, offsets in stored:
        write_deltalake(
            path,
            pa.table(
                {
                    "topic": [q.topic] * len(offsets),
                    "broker_name": [q.broker_name] * len(offsets),
                    "queue_id": pa.array([q.queue_id] * len(offsets), pa.int32()),
                    "queue_offset": pa.array(list(offsets), pa.int64()),
                    "window_start": pa.array([w * 1000] * len(offsets), pa.timestamp("us", tz="UTC")),
                }
            ),
            mode="append",
        )
    # Window 1 from offset 6 of queue a (the group's position), window 2 whole on a and b.
    entry = [
        WindowEntry("w1", w1, w2, (OffsetRange(a, 6, 10),)),
        WindowEntry("w2", w2, w3, (OffsetRange(a, 10, 14), OffsetRange(b, 0, 3), OffsetRange(c, 2, 2))),
    ]
    got = slice_counts(path, slice_clauses(entry), None)
    if PYARROW_MAJOR < 20:  # it aborts reading delta-rs's page histograms: Spark counts instead
        assert got is None
        return
    assert got == {(w1, a): 4, (w2, a): 4, (w2, b): 3}
    assert slice_counts(path, [], None) == {}  # an empty slice: nothing to count
    assert slice_counts("s3a://lake/t", slice_clauses(entry), None) is None  # Spark counts on object stores
    bare = str(tmp_path / "bare")  # files without statistics would be left out of a filtered read: Spark counts
    no_statistics = WriterProperties(default_column_properties=ColumnProperties(statistics_enabled="NONE"))
    write_deltalake(bare, pa.table({"topic": ["orders"], "queue_offset": [0]}), writer_properties=no_statistics)
    assert slice_counts(bare, slice_clauses(entry), None) is None


def test_a_table_may_hold_the_windows_its_files_statistics_cover_and_a_missing_table_holds_none(tmp_path):
    """``may_hold_windows``: what a landing without failures asks of the failures table before it writes there (an
    empty replace is a Delta commit for nothing), and a quiet landing of its own table."""
    from rocketlake.delta.file_stats import may_hold_windows

    path = str(tmp_path / "failures")
    assert not may_hold_windows(path, [60_000])  # not created yet: nothing to replace
    minute = pa.array([60_000_000, 60_000_000], pa.timestamp("us", tz="UTC"))
    write_deltalake(path, pa.table({"window_start": minute, "queue_offset": pa.array([0, 1], pa.int64())}))
    assert may_hold_windows(path, [120_000, 60_000])
    assert not may_hold_windows(path, [120_000])
    assert not may_hold_windows(path, [])
