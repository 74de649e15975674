"""The demo's code location: rocketlake's definitions plus one downstream asset a user would write.

``<table>_by_region`` reads the demo table's windows with Spark and lands, per window, the orders and the amount
per region in its own Delta table, partitioned like the table, so the lineage graph reads
topic -> raw table -> aggregate (and -> dead letters). It is an example of a user's asset: it only needs the
table's asset key, its path and its partitions, and replaces exactly the windows of its run, so a re-run after
the raw table changed is a plain re-materialization.

``<table>_customers`` (``rocketlake.demo.customers``) follows the table's change data feed instead: orders and
amount per customer, MERGEd from what changed since its last run.

``make ui`` and ``rocketlake demo`` load this module when the demo's configuration is in use.
"""

# No "from __future__ import annotations" here: Dagster inspects the context annotation at runtime.
from dagster import (
    AssetExecutionContext,
    AssetKey,
    BackfillPolicy,
    Definitions,
    MaterializeResult,
    MetadataValue,
    TableColumn,
    TableRecord,
    TableSchema,
    asset,
    define_asset_job,
)

from rocketlake.dagster.definitions import build_definitions
from rocketlake.dagster.metadata import column_schema, table_identity
from rocketlake.dagster.partitions import window_partitions
from rocketlake.dagster.run_guard import rocketlake_executor
from rocketlake.dagster.translator import table_asset_key
from rocketlake.delta.storage import apply_lake, delta_rs_options
from rocketlake.demo.customers import build_customers
from rocketlake.demo.follow import follow, follow_changes, follow_together
from rocketlake.engine.config import load_config
from rocketlake.spark.body import top_level_names

BY_REGION_SCHEMA = TableSchema(
    columns=[
        TableColumn("window_start", "timestamp"),
        TableColumn("region", "string"),
        TableColumn("orders", "int"),
        TableColumn("amount", "float"),
    ]
)


def by_window_then_region(row) -> tuple:
    """Spark's ``orderBy("window_start", "region")`` for a few collected rows: a body without a region (or one that
    does not parse) gives a null region, which comes first, as in Spark."""
    return row["window_start"], row["region"] is not None, row["region"] or ""


def build_by_region(ingestion, lake):
    """Orders and amount per region per window, from the ingestion's table (its body has ``region`` and
    ``amount``)."""
    source_path = lake.table_path(ingestion.table)
    name = f"{ingestion.table}_by_region"
    path = lake.table_path(name)

    @asset(
        key=table_asset_key(name),
        deps=[table_asset_key(ingestion.table)],
        partitions_def=window_partitions(ingestion.window),
        backfill_policy=BackfillPolicy.single_run(),
        required_resource_keys={"spark"},
        kinds={"spark", "delta"},
        group_name="rocketlake",  # rocketlake's group: its lineage page shows the whole flow
        metadata=table_identity(name, path),
        description=f"Orders and amount per region in each window of `{ingestion.table}`, computed with Spark "
        f"and landed in Delta at `{path}`.",
    )
    def by_region(context: AssetExecutionContext) -> MaterializeResult:
        from pyspark.sql import functions as F

        from rocketlake.delta.ledger_log import table_version
        from rocketlake.delta.writer import timestamp_sql

        spark = context.resources.spark.session()
        apply_lake(spark, lake)  # an S3 lake's settings and keys, as the ingestion's run gives them
        window = context.partition_time_window
        start_ms, end_ms = int(window.start.timestamp() * 1000), int(window.end.timestamp() * 1000)
        # Literals, which Delta's replace prunes the table's files by (``timestamp_sql``).
        in_windows = f"window_start >= {timestamp_sql(start_ms)} AND window_start < {timestamp_sql(end_ms)}"
        totals = (
            spark.read.format("delta")
            .load(source_path)
            .where(in_windows)
            .groupBy("window_start", "region")
            .agg(F.count("*").cast("int").alias("orders"), F.round(F.sum("amount"), 2).alias("amount"))
            .localCheckpoint(eager=True)  # computed once: written, then read again for the metadata
        )
        writer = totals.write.format("delta")
        if table_version(path, delta_rs_options(lake)) is not None:  # read with delta-rs: no round trip to Spark
            writer.mode("overwrite").option("replaceWhere", in_windows).save(path)
        else:
            writer.mode("append").save(path)
        # A few rows: sorted here, not by a range-partitioned sort in Spark (a sampling job and a shuffle more).
        rows = sorted(totals.collect(), key=by_window_then_region)
        context.log.info(
            f"{len(rows)} (window, region) row(s) for {context.partition_key_range.start} .. "
            f"{context.partition_key_range.end} in {path}"
        )
        return MaterializeResult(
            metadata={
                "dagster/row_count": MetadataValue.int(len(rows)),
                "orders": MetadataValue.int(sum(r["orders"] for r in rows)),
                "per_region": MetadataValue.table(
                    [
                        TableRecord(
                            {
                                "window_start": str(r["window_start"]),
                                "region": r["region"],
                                "orders": r["orders"],
                                "amount": float(r["amount"]),
                            }
                        )
                        for r in rows
                    ],
                    schema=BY_REGION_SCHEMA,
                ),
                **column_schema([(f.name, f.dataType.simpleString(), f.nullable) for f in totals.schema.fields]),
            }
        )

    return by_region


def demo_assets(config) -> list:
    """An aggregate for every ingestion whose JSON bodies have the demo's ``region`` and ``amount``."""
    return [
        build_by_region(ing, config.lake)
        for ing in config.ingestions.values()
        if ing.body.format == "json" and {"region", "amount"} <= _names(ing.body.schema_)
    ]


def change_followers(config) -> list:
    """Per customer, from the change feed, for every ingestion whose JSON bodies have ``customer`` and ``amount``."""
    return [
        build_customers(ing, config.lake)
        for ing in config.ingestions.values()
        if ing.body.format == "json" and {"customer", "amount"} <= _names(ing.body.schema_)
    ]


def _names(schema_ddl: str | None) -> set[str]:
    return {name.lower() for name in top_level_names(schema_ddl)}


_config = load_config()
_assets = demo_assets(_config)
# The UI of the demo (`make ui`) lands each new window as it closes: its schedules run from the start.
_jobs = [define_asset_job(f"{a.key.to_python_identifier()}_job", selection=[a.key]) for a in _assets]

# Downstream assets follow the table in batches, one run at a time, and again after a window is landed again
# (rocketlake.demo.follow): not one run per window per asset. Their own jobs (`<asset>_job`) are what `rocketlake
# demo` runs; the sensors run both followers of a table in one job.
_followers = change_followers(_config)
_follower_jobs = [define_asset_job(f"{a.key.to_python_identifier()}_job", selection=[a.key]) for a in _followers]


def _upstream(a) -> AssetKey:
    return next(iter(a.dependency_keys))


def follower_sensors(windowed: list, changes: list, own_jobs: dict) -> tuple[list, list]:
    """(jobs, sensors) that follow each table: for a table with both kinds of follower, one job of both and one
    sensor (``follow_together``: one run per batch for the two); else each follower's own job (``own_jobs``)."""
    by_table = {_upstream(a): a for a in changes}
    jobs, sensors = [], []
    for a in windowed:
        other = by_table.pop(_upstream(a), None)
        if other is None:
            sensors.append(follow(own_jobs[a.key], _upstream(a), a.key, a.partitions_def))
        else:
            job = define_asset_job(f"{_upstream(a).to_python_identifier()}_followers_job", selection=[a.key, other.key])
            sensors.append(follow_together(job, _upstream(a), a.key, a.partitions_def, other.key))
            jobs.append(job)
    sensors += [follow_changes(own_jobs[a.key], _upstream(a), a.key) for a in by_table.values()]
    return jobs, sensors


_sensor_jobs, _sensors = follower_sensors(
    _assets, _followers, {a.key: job for job, a in zip([*_jobs, *_follower_jobs], [*_assets, *_followers])}
)

# rocketlake's own location (see rocketlake.definitions): rocketlake's executor for every job.
defs = Definitions.merge(
    build_definitions(_config, schedules_running=True),
    Definitions(
        assets=[*_assets, *_followers],
        jobs=[*_jobs, *_follower_jobs, *_sensor_jobs],
        executor=rocketlake_executor,
        sensors=_sensors,
    ),
)

__all__ = ["defs"]
