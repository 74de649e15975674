"""Which tables delta-rs can read the data of (``pipelines.delta_rs``): judged on plain protocols, and on real tables
whose features delta-rs itself adds, against delta-rs's own refusal."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable, TableFeatures, write_deltalake

from rocketlake.pipelines.delta_rs import Protocol, read_columns, read_refusal


def test_the_protocols_delta_rs_reads_and_those_it_does_not():
    assert read_refusal(Protocol(1)) is None
    assert read_refusal(Protocol(3, frozenset({"timestampNtz", "variantType"}))) is None
    assert read_refusal(Protocol(3, frozenset({"deletionVectors", "timestampNtz"}))) == (
        "the table has reader feature(s) delta-rs does not read: deletionVectors"
    )
    assert "typeWidening, v2Checkpoint" in read_refusal(Protocol(3, frozenset({"v2Checkpoint", "typeWidening"})))
    # Reader version 2 lists no features; its column mapping is the table's configuration's.
    assert read_refusal(Protocol(2, column_mapping="name")).endswith("does not read: columnMapping")
    assert read_refusal(Protocol(4)) == "the table needs a reader of protocol version 4"


def no_spark():
    pytest.fail("read with Spark a table delta-rs reads")


def test_a_table_delta_rs_reads_is_read_by_it_and_deletion_vectors_are_refused_as_delta_rs_refuses_them(tmp_path):
    """(The read through Spark of a table refused here is the engine tier's: it needs a real session.)"""
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"queue_id": [0, 1], "body": ["a", "b"]}))
    read, reader = read_columns(path, ["queue_id"], None, no_spark)
    assert reader == "delta-rs" and read.column("queue_id").to_pylist() == [0, 1]

    DeltaTable(path).alter.add_feature(TableFeatures.DeletionVectors, allow_protocol_versions_increase=True)
    table = DeltaTable(path)
    refusal = read_refusal(Protocol.of(table))
    assert refusal is not None and "deletionVectors" in refusal
    with pytest.raises(Exception, match="(?i)deletion ?vectors"):  # delta-rs's own check agrees
        table.to_pyarrow_table()
