"""The demo's second downstream example: a table kept up to date from the landed table's change data feed.

``<table>_customers`` holds, per customer, the orders and the amount landed so far. It is not partitioned: each
materialization reads only what changed in the landed table since the version it read last (Delta's change data
feed, ``delta.enableChangeDataFeed`` in the ingestion's ``table_properties``) and MERGEs the difference in. A window
rocketlake lands again (a re-run, a rebalance) replaces its slice: the feed shows the old rows deleted and the new
ones inserted, so counting inserts +1 and deletes -1 keeps every figure exact, where appending new rows would count
them twice. Compactions and ledger-only commits change no row and bring nothing.

The source version read last travels in the MERGE's own commit (``userMetadata``), so the figures and the position
cannot disagree. Where the feed cannot answer (the table had no feed at that version, or its files were vacuumed),
the table is computed again from a snapshot, and the run says so.

What only the Delta logs hold (the versions, the position, the source's properties) is read with delta-rs in the
run's own process: asked of Spark, each was a round trip to the server and a query on its driver, every window.
"""

# No "from __future__ import annotations" here: Dagster inspects the context annotation at runtime.
import json
from dataclasses import dataclass

from dagster import AssetExecutionContext, MaterializeResult, MetadataValue, asset

POSITION_KEY = "source_version"
CHANGE_FEED = "delta.enableChangeDataFeed"
USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
#: The target's newest commits looked at for the position (see ``position``).
HISTORY_LOOKED_AT = 10


@dataclass(frozen=True)
class Followed:
    """What one materialization did: the source versions read, how, and the figures."""

    from_version: int | None  # first source version read (None: from a snapshot)
    to_version: int | None  # the source version now reflected (None: no source table yet)
    changed_rows: int  # change-feed rows read (inserts and deletes)
    how: str  # "change feed", "snapshot (...)", or "nothing new"


def _sql_path(path: str) -> str:
    return "delta.`" + path.replace("`", "``") + "`"


def position(target: str, storage_options: "dict[str, str] | None" = None) -> "int | None":
    """The source version the target reflects: its latest commit's ``userMetadata``, None without a target."""
    from rocketlake.delta.ledger_log import open_log

    table = open_log(target, storage_options)
    if table is None:
        return None
    # The newest commits only: each of the target's commits is a MERGE or a snapshot that carries the position, so
    # the newest has it unless others committed since (an OPTIMIZE, a VACUUM: past ten of them, the table is computed
    # again from a snapshot). The whole history grows by a commit a window: reading it all cost more every run.
    for commit in sorted(table.history(HISTORY_LOOKED_AT), key=lambda c: c.get("version", -1), reverse=True):
        try:
            return int(json.loads(commit.get("userMetadata") or "{}")[POSITION_KEY])
        except (ValueError, KeyError, TypeError):
            continue
    return None


def _totals(rows, sign):
    from pyspark.sql import functions as F

    return rows.groupBy("customer").agg(
        F.sum(sign).cast("bigint").alias("orders"),
        F.sum(sign * F.col("amount").cast("decimal(18,2)")).cast("decimal(18,2)").alias("amount"),
    )


def follow(spark, source: str, target: str, log=print, storage_options: "dict[str, str] | None" = None) -> Followed:
    """Bring the target up to the source's latest version; what was done. ``storage_options``: delta-rs's, for a lake
    on S3 (``rocketlake.delta.storage.delta_rs_options``)."""
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F

    from rocketlake.delta.ledger_log import open_log

    landed = open_log(source, storage_options)
    if landed is None:
        return Followed(None, None, 0, "nothing new (no landed table yet)")
    now = landed.version()
    done = position(target, storage_options)
    if done is not None and done >= now:
        return Followed(None, now, 0, "nothing new")
    why_snapshot = None
    if done is None:
        why_snapshot = "first materialization"
    elif landed.metadata().configuration.get(CHANGE_FEED) != "true":
        why_snapshot = f"{CHANGE_FEED} is not on for the landed table"
    changes = None
    if why_snapshot is None:
        changes = (
            spark.read.format("delta")
            .option("readChangeFeed", "true")
            .option("startingVersion", done + 1)
            .option("endingVersion", now)
            .load(source)
            .where(F.col("_change_type").isin("insert", "delete"))
        )
        try:
            changes = changes.localCheckpoint(eager=True)  # read once: counted, then merged
        except AnalysisException as e:  # the feed does not cover those versions (enabled later, vacuumed)
            why_snapshot = f"the change feed does not cover versions {done + 1}..{now}: {e.getCondition()}"
    spark.conf.set(USER_METADATA, json.dumps({POSITION_KEY: now}))
    try:
        if why_snapshot is not None:
            snapshot = spark.read.format("delta").option("versionAsOf", now).load(source)
            (
                _totals(snapshot, F.lit(1))
                .write.format("delta")
                .mode("overwrite")
                .option("overwriteSchema", "true")
                .save(target)
            )
            log(f"computed from a snapshot of version {now} ({why_snapshot})")
            return Followed(None, now, 0, f"snapshot ({why_snapshot})")
        sign = F.when(F.col("_change_type") == "insert", F.lit(1)).otherwise(F.lit(-1))
        _totals(changes, sign).createOrReplaceTempView("rl_customer_changes")
        spark.sql(f"""
            MERGE INTO {_sql_path(target)} t USING rl_customer_changes s ON t.customer <=> s.customer
            WHEN MATCHED AND t.orders + s.orders = 0 THEN DELETE
            WHEN MATCHED THEN UPDATE SET orders = t.orders + s.orders, amount = t.amount + s.amount
            WHEN NOT MATCHED AND s.orders <> 0 THEN INSERT (customer, orders, amount) VALUES (s.customer, s.orders, s.amount)
        """)
        changed = changes.count()
        log(f"merged {changed} changed row(s) of versions {done + 1}..{now} from the change feed")
        return Followed(done + 1, now, changed, "change feed")
    finally:
        spark.conf.unset(USER_METADATA)


def build_customers(ingestion, lake):
    """The asset: orders and amount per customer, followed through the landed table's change feed."""
    from rocketlake.dagster.metadata import column_schema, table_identity
    from rocketlake.dagster.translator import table_asset_key
    from rocketlake.delta.storage import apply_lake, delta_rs_options

    source_path = lake.table_path(ingestion.table)
    name = f"{ingestion.table}_customers"
    path = lake.table_path(name)

    @asset(
        key=table_asset_key(name),
        deps=[table_asset_key(ingestion.table)],
        required_resource_keys={"spark"},
        kinds={"spark", "delta"},
        group_name="rocketlake",
        metadata=table_identity(name, path),
        description=f"Orders and amount per customer landed in `{ingestion.table}`, kept up to date by MERGE from "
        f"its change data feed, in Delta at `{path}`.",
    )
    def customers(context: AssetExecutionContext) -> MaterializeResult:
        spark = context.resources.spark.session()
        apply_lake(spark, lake)
        done = follow(spark, source_path, path, log=context.log.info, storage_options=delta_rs_options(lake))
        metadata = {
            "source_version": MetadataValue.int(-1 if done.to_version is None else done.to_version),
            "read": MetadataValue.text(done.how),
            "changed_rows": MetadataValue.int(done.changed_rows),
        }
        if done.to_version is not None:
            table = spark.read.format("delta").load(path)
            metadata["dagster/row_count"] = MetadataValue.int(table.count())
            metadata.update(
                column_schema([(f.name, f.dataType.simpleString(), f.nullable) for f in table.schema.fields])
            )
        return MaterializeResult(metadata=metadata)

    return customers
