"""Delta table features as users have them, through every path of a landing (issue 48), on real brokers, Spark and
Delta: each feature on through ``table_properties`` at the table's creation, or turned on between two runs (as a
user's ``ALTER TABLE`` or ``DELETE`` would), then a window landed again, the next window landed, the accounting, the
ledger as runs and sensors read it, compaction, VACUUM, and the reads of the demo and the change-feed follower.

Each cell of ``FEATURES`` works, on in one of three tables (``TABLES``) with two others; Iceberg compatibility
(UniForm) is refused at load (``tests/unit/test_config.py``).
``docs/reference/table-features.md`` is generated from this module's ``FEATURES`` and checked against it
(``tests/unit/test_docs.py``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from deltalake import DeltaTable

from rocketlake.delta.delta_rs import Protocol, read_columns, read_refusal
from rocketlake.delta.ledger_log import read_ledger, recent_entries
from tests.integration.engine_support import Engine, now_ms, send_in_two_windows
from tests.integration.ingestion_support import unique
from tests.unit.support import ingestion_config

pytestmark = pytest.mark.engine

PER_WINDOW = 6
DAY_MS = 24 * 3600 * 1000


@dataclass(frozen=True)
class Feature:
    """A Delta table feature: how a user turns it on, and the name the table's protocol lists it by."""

    protocol_name: str
    properties: dict[str, str] = field(default_factory=dict)  # ``table_properties``: on from the table's creation
    between_runs: str = ""  # SQL on ``{table}`` after the first landing: turned on (or used) by the user
    layout: dict = field(default_factory=dict)


FEATURES = {
    "deletion vectors": Feature(
        "deletionVectors",
        {"delta.enableDeletionVectors": "true"},
        # A DELETE of one row of a file marks it in a deletion vector instead of rewriting the file.
        between_runs="DELETE FROM {table} WHERE keys = 'o-0'",
    ),
    "row tracking": Feature("rowTracking", {"delta.enableRowTracking": "true"}),
    "column mapping (name)": Feature("columnMapping", {"delta.columnMapping.mode": "name"}),
    "type widening": Feature(
        "typeWidening",
        {"delta.enableTypeWidening": "true"},
        between_runs="ALTER TABLE {table} ALTER COLUMN amount TYPE DOUBLE",
    ),
    "v2 checkpoints": Feature("v2Checkpoint", {"delta.checkpointPolicy": "v2", "delta.checkpointInterval": "2"}),
    "in-commit timestamps": Feature("inCommitTimestamp", {"delta.enableInCommitTimestamps": "true"}),
    "liquid clustering": Feature("clustering", layout={"cluster_by": ["tags"]}),
    "change data feed": Feature("changeDataFeed", {"delta.enableChangeDataFeed": "true"}),
    "VARIANT columns": Feature("variantType", between_runs="ALTER TABLE {table} ADD COLUMNS (extra VARIANT)"),
}


#: The features in three tables of three, each feature in one: a table is what the test's time goes to (a topic,
#: six landings, compaction, VACUUM, reads), and users' tables have several on together (the largest Delta
#: platform's new tables have deletion vectors, row tracking and in-commit timestamps at once). A failure names
#: the table, whose features are few enough to try one by one.
TABLES = (
    ("deletion vectors", "row tracking", "in-commit timestamps"),
    ("column mapping (name)", "type widening", "VARIANT columns"),
    ("v2 checkpoints", "liquid clustering", "change data feed"),
)


@pytest.mark.unit
def test_every_feature_is_in_one_table():
    assert sorted(name for table in TABLES for name in table) == sorted(FEATURES)


def writer_features(path: str) -> set[str]:
    return set(DeltaTable(path).protocol().writer_features or ())


@pytest.mark.parametrize("names", TABLES, ids=", ".join)
def test_a_table_with_the_features_goes_through_every_path(
    names, local_cluster, create_topic, java_producer, spark, tmp_path
):
    features = [FEATURES[name] for name in names]
    topic, group = create_topic(queues=2), unique("g_feature")
    cfg = ingestion_config(
        topic=topic,
        consumer_group=group,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        window={"cron": "* * * * *", "start": "1970-01-01", "grace_seconds": 0},
        body={"format": "json", "schema": "order_id STRING, amount FLOAT"},
        table_properties={k: v for f in features for k, v in f.properties.items()},
        layout={k: v for f in features for k, v in f.layout.items()},
        vacuum_retention_hours=168,
    )
    path = str(tmp_path / "orders")
    engine = Engine(local_cluster, spark, path, cfg)
    (w1, w2) = send_in_two_windows(java_producer, topic, PER_WINDOW)

    engine.run("r1", [w1])  # the first landing creates the table
    for feature in features:
        if feature.between_runs:
            spark.sql(feature.between_runs.format(table=f"delta.`{path}`"))
    on = writer_features(path)
    assert {f.protocol_name for f in features} <= on, f"{names} are not all on: {on}"

    again = engine.run("r2", [w1], backfill=True)  # the window landed again replaces its slice
    assert [(a.planned, a.rows) for a in again.slice.accounting] == [(PER_WINDOW, PER_WINDOW)]
    second = engine.run("r3", [w2])
    assert [(a.planned, a.rows) for a in second.slice.accounting] == [(PER_WINDOW, PER_WINDOW)]

    # Every message once, read by Spark (which reads every feature).
    table = spark.read.format("delta").load(path)
    assert sorted(r.keys for r in table.select("keys").collect()) == sorted(f"o-{i}" for i in range(2 * PER_WINDOW))
    assert engine.offsets(topic) == {
        (q.broker_name, q.queue_id): engine.client.get_max_offset(q) for q in engine.client.queues(topic)
    }

    # The ledger, as a run reads it (the group's entries) and as the rebalance sensor does (the newest commits).
    assert {e.run_id for e in read_ledger(path)} >= {"r1", "r2", "r3"}
    assert [e.run_id for e in read_ledger(path, group)] == ["r3"]  # what the next run needs
    assert recent_entries(path)[0].run_id == "r3"

    # The table's upkeep: the days of the windows compacted once over, then VACUUM.
    compacted = engine.lake.compact(second.slice.ledger, now_ms() + 2 * DAY_MS)
    assert compacted and all(removed >= 1 for _, removed, _ in compacted), compacted
    assert engine.lake.vacuum() == 168
    assert table.count() == 2 * PER_WINDOW

    # The demo's read-back: delta-rs where it reads the table, Spark where it does not, saying why.
    read, reader = read_columns(path, ["keys"], None, lambda: spark)
    assert sorted(read.column("keys").to_pylist()) == sorted(f"o-{i}" for i in range(2 * PER_WINDOW))
    refusal = read_refusal(Protocol.of(DeltaTable(path)))
    assert reader == ("delta-rs" if refusal is None else f"Spark ({refusal})")  # delta-rs wherever it reads the table

    if "change data feed" in names:  # what the demo's customers follower reads
        changes = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 0).load(path)
        inserted = changes.where("_change_type = 'insert'").select("keys").distinct().count()
        assert inserted == 2 * PER_WINDOW


def turn_uniform_on(path: str) -> None:
    """Turn Iceberg compatibility (UniForm) on in the table's log, as a writer that carries delta-iceberg does (the
    Spark here does not, so the commit is written as that writer writes it): protocol and properties."""
    log = Path(path) / "_delta_log"
    versions = sorted(log.glob("*.json"))
    actions = [json.loads(line) for v in versions for line in v.read_text().splitlines()]
    protocol = [a["protocol"] for a in actions if "protocol" in a][-1]
    metadata = [a["metaData"] for a in actions if "metaData" in a][-1]
    protocol["writerFeatures"] = sorted({*protocol.get("writerFeatures", []), "icebergCompatV2"})
    metadata["configuration"] |= {
        "delta.enableIcebergCompatV2": "true",
        "delta.universalFormat.enabledFormats": "iceberg",
    }
    commit = [{"commitInfo": {"timestamp": now_ms(), "operation": "SET TBLPROPERTIES"}}, {"protocol": protocol}]
    (log / f"{len(versions):020d}.json").write_text("\n".join(json.dumps(a) for a in [*commit, {"metaData": metadata}]))


def test_a_table_that_already_has_uniform_on_is_refused_before_anything_is_written(
    local_cluster, create_topic, java_producer, spark, tmp_path
):
    """Delta without delta-iceberg commits to such a table and leaves its Iceberg metadata behind: Iceberg readers
    would go on reading the table as it was. rocketlake refuses it, naming the property, and writes nothing."""
    topic, group = create_topic(queues=2), unique("g_uniform")
    cfg = ingestion_config(
        topic=topic,
        consumer_group=group,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        window={"cron": "* * * * *", "start": "1970-01-01", "grace_seconds": 0},
        table_properties={"delta.columnMapping.mode": "name"},  # UniForm needs it
    )
    path = str(tmp_path / "orders")
    engine = Engine(local_cluster, spark, path, cfg)
    (w1, w2) = send_in_two_windows(java_producer, topic, PER_WINDOW)
    engine.run("r1", [w1])
    turn_uniform_on(path)
    version, offsets = DeltaTable(path).version(), engine.offsets(topic)

    with pytest.raises(ValueError) as refused:
        engine.run("r2", [w2])
    assert str(refused.value) == (
        f"the table {path} has Iceberg compatibility (UniForm) on (delta.universalFormat.enabledFormats = iceberg), "
        "which is not supported yet: Delta writes its Iceberg metadata with the delta-iceberg module, which "
        "rocketlake's Spark does not carry, so Iceberg readers would not see what lands; turn it off (ALTER TABLE "
        "... UNSET TBLPROPERTIES ('delta.universalFormat.enabledFormats')) or land into another table"
    )
    assert DeltaTable(path).version() == version and engine.offsets(topic) == offsets
