"""A ledger entry committed by delta-rs carries the table's checksum forward, and Delta Spark finds it equal to the
state it replays from the log: the next session reads the table from the checksum instead of rebuilding it."""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

import pytest
from deltalake import DeltaTable

from rocketlake.delta.ledger_commit import commit_ledger_alone
from rocketlake.delta.writer import write_slice
from tests.integration.test_delta_writer import MIN, frame, ledger

pytestmark = pytest.mark.engine

#: Delta compares a checksum's files, sizes, protocol and metadata with its replay of the log when it loads a version,
#: and fails the read on a difference (instead of logging it).
VERIFYING = {
    "spark.databricks.delta.allFilesInCrc.verificationMode.enabled": "true",
    "spark.databricks.delta.incremental.commit.verify": "true",
    "spark.databricks.delta.checksum.mismatch.fatal": "true",
}


@contextmanager
def verifying_checksums(spark):
    before = {key: spark.conf.get(key, None) for key in VERIFYING}
    for key, value in VERIFYING.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            spark.conf.unset(key) if value is None else spark.conf.set(key, value)


def checksum_file(path: str, version: int) -> Path:
    return Path(path) / "_delta_log" / f"{version:020d}.crc"


def checksum(path: str, version: int) -> dict:
    return json.loads(checksum_file(path, version).read_text())


def test_a_delta_rs_ledger_commit_carries_the_checksum_that_delta_spark_verifies(spark, tmp_path):
    path = str(tmp_path / "t")
    write_slice(frame(spark, [("t", "broker-a", 0, 0, 0, "a0")]), path, ledger("run-1", [(0, [("broker-a", 0, 0, 1)])]))
    assert DeltaTable(path).version() == 0

    # A verdict, then a quiet window's entry: two delta-rs commits in a row, each adding nothing.
    assert commit_ledger_alone(path, ledger("run-1", [(0, [("broker-a", 0, 0, 1)])]))
    assert commit_ledger_alone(path, ledger("run-2", [(MIN, [("broker-a", 0, 1, 1)])]))
    assert DeltaTable(path).version() == 2
    spark_state = {k: v for k, v in checksum(path, 0).items() if k != "txnId"}
    assert checksum(path, 1) == spark_state and checksum(path, 2) == spark_state

    with verifying_checksums(spark):
        assert spark.read.format("delta").load(path).count() == 1
        # Spark's next commit derives its checksum from the carried one and compares it with the log's replay.
        write_slice(
            frame(spark, [("t", "broker-a", 0, 1, MIN, "a1")]), path, ledger("run-3", [(MIN, [("broker-a", 0, 1, 2)])])
        )
        assert spark.read.format("delta").load(path).count() == 2
        assert checksum(path, 3)["numFiles"] == 2

        # The check can fail: a checksum that lies about the files is refused by name.
        assert commit_ledger_alone(path, ledger("run-3", [(MIN, [("broker-a", 0, 1, 2)])]))
        wrong = checksum(path, 4)
        wrong["numFiles"] += 1
        checksum_file(path, 4).write_text(json.dumps(wrong))
        with pytest.raises(Exception, match="DELTA_TXN_LOG_FAILED_INTEGRITY"):
            write_slice(
                frame(spark, [("t", "broker-a", 0, 2, MIN, "a2")]),
                path,
                ledger("run-4", [(MIN, [("broker-a", 0, 1, 3)])]),
            )


def test_a_delta_rs_ledger_commit_on_a_checkpoint_version_writes_the_checkpoint_delta_spark_reads(spark, tmp_path):
    """Delta Spark checkpoints a table only when its own commit lands on a multiple of the interval (10 unless the
    table says otherwise). A window's slice is Spark's commit and its verdict delta-rs's, a quiet window's entry
    delta-rs's alone: where those land on the multiples, no checkpoint was ever written, and every later snapshot
    replayed the whole log since the table began (a cost that grew with the table's age)."""
    path = str(tmp_path / "t")
    write_slice(frame(spark, [("t", "broker-a", 0, 0, 0, "a0")]), path, ledger("run-0", [(0, [("broker-a", 0, 0, 1)])]))
    for minute in range(1, 11):  # a quiet stretch: ledger entries alone, the tenth on version 10
        assert commit_ledger_alone(path, ledger(f"run-{minute}", [(minute * MIN, [("broker-a", 0, 1, 1)])]))
    log = Path(path) / "_delta_log"
    # On the interval's multiples only (the table names none: Delta's default, 10).
    assert sorted(p.name for p in log.glob("*.checkpoint*")) == [f"{10:020d}.checkpoint.parquet"], sorted(
        p.name for p in log.iterdir()
    )
    assert json.loads((log / "_last_checkpoint").read_text())["version"] == 10

    # Delta Spark reads the table from that checkpoint: the commits before it, gone as log cleanup removes them, are
    # not needed for the state, and its next commit verifies its checksum against that replay.
    for version in range(10):
        (log / f"{version:020d}.json").unlink()
    with verifying_checksums(spark):
        assert spark.read.format("delta").load(path).count() == 1
        write_slice(
            frame(spark, [("t", "broker-a", 0, 1, 11 * MIN, "a1")]),
            path,
            ledger("run-11", [(11 * MIN, [("broker-a", 0, 1, 2)])]),
        )
        assert sorted(r.v for r in spark.read.format("delta").load(path).collect()) == ["a0", "a1"]
