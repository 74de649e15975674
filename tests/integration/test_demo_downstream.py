"""The demo's change-feed downstream (``rocketlake.demo.customers``) in real Dagster runs on real Spark and Delta.

The landed table is written by rocketlake's own writer (``write_slice``): windows land, one is landed again (as a
re-run or a rebalance does), a day is compacted, a ledger verdict is committed. After each step the downstream's
figures must equal a plain aggregation of the landed table, having read only the change feed since its last run;
with the feed turned off, it computes from a snapshot and says why.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

import pytest
from dagster import materialize

from rocketlake.dagster.spark_resource import SparkResource
from rocketlake.delta.writer import commit_ledger, compact_days, last_commit_version, write_slice
from rocketlake.demo.customers import build_customers, position
from rocketlake.engine.ledger import LedgerEntry, WindowEntry
from rocketlake.rocketmq.message_queue import MessageQueue, OffsetRange

DAY = 20_000 * 86_400_000
MIN = 60_000


@dataclass
class Lake:
    root: str

    def table_path(self, name: str) -> str:
        return f"{self.root}/{name}"


@dataclass
class Ingestion:
    table: str
    window: object = None  # a WindowConfig: the windowed follower's partitions


def land(spark, path, run, window_ms, orders, *, cdf=True, region="eu"):
    """``orders`` [(offset, customer, amount)] as window ``window_ms`` of queue broker-a/0, all from ``region``."""
    from pyspark.sql import functions as F

    df = spark.createDataFrame(
        [("t", "broker-a", 0, o, window_ms, c, a, region) for o, c, a in orders],
        "topic STRING, broker_name STRING, queue_id INT, queue_offset BIGINT, w BIGINT, "
        "customer STRING, amount DOUBLE, region STRING",
    )
    df = df.withColumn("window_start", F.timestamp_millis("w")).drop("w")
    first, last = min(o for o, _, _ in orders), max(o for o, _, _ in orders) + 1
    entry = LedgerEntry(
        "orders",
        "g",
        run,
        (
            WindowEntry(
                f"k{run}", window_ms, window_ms + MIN, (OffsetRange(MessageQueue("t", "broker-a", 0), first, last),)
            ),
        ),
    )
    write_slice(df, path, entry, properties={"delta.enableChangeDataFeed": "true"} if cdf else {})
    return entry


def expected(spark, path):
    rows = spark.read.format("delta").load(path).groupBy("customer").agg({"*": "count", "amount": "sum"}).collect()
    return {
        r["customer"]: (r["count(1)"], Decimal(str(round(r["sum(amount)"], 2))).quantize(Decimal("0.01"))) for r in rows
    }


def figures(spark, path):
    return {r["customer"]: (r["orders"], r["amount"]) for r in spark.read.format("delta").load(path).collect()}


@pytest.mark.dagster
def test_the_change_feed_follower_stays_equal_to_the_landed_table_through_re_landings_and_compaction(spark, tmp_path):
    lake = Lake(str(tmp_path))
    source, target = lake.table_path("orders_raw"), lake.table_path("orders_raw_customers")
    asset = build_customers(Ingestion("orders_raw"), lake)
    resources = {"spark": SparkResource(master="local[2]", s3a=True)}

    def run():
        result = materialize([asset], resources=resources)
        assert result.success
        (event,) = result.get_asset_materialization_events()
        return {k: v.value for k, v in event.materialization.metadata.items()}

    land(spark, source, "r1", DAY, [(0, "c1", 10.25), (1, "c2", 5.5), (2, "c1", 1.0)])
    first = run()
    assert first["read"] == "snapshot (first materialization)"
    assert (
        figures(spark, target) == expected(spark, source) == {"c1": (2, Decimal("11.25")), "c2": (1, Decimal("5.50"))}
    )

    # A new window, the first one landed again with one order changed, a compaction, a ledger verdict.
    land(spark, source, "r2", DAY + MIN, [(3, "c3", 7.0), (4, "c2", 2.0)])
    entry = land(spark, source, "r3", DAY, [(0, "c1", 10.25), (1, "c2", 5.5), (2, "c4", 1.0)])
    compact_days(spark, source, ["2024-10-04"])
    commit_ledger(spark, source, entry)
    second = run()
    # The new window 2 rows, the re-landing 3 out and 3 in; the compaction and the verdict change no row.
    assert second["read"] == "change feed" and second["changed_rows"] == 2 + 3 + 3
    assert (
        figures(spark, target)
        == expected(spark, source)
        == {
            "c1": (1, Decimal("10.25")),
            "c2": (2, Decimal("7.50")),
            "c3": (1, Decimal("7.00")),
            "c4": (1, Decimal("1.00")),
        }
    )
    assert position(target) == last_commit_version(spark, source) == second["source_version"]

    third = run()  # nothing landed since
    assert (third["read"], third["changed_rows"]) == ("nothing new", 0)

    # The feed turned off, then a window landed: the follower cannot read changes, computes from a snapshot, says why.
    spark.sql(f"ALTER TABLE delta.`{source}` SET TBLPROPERTIES ('delta.enableChangeDataFeed' = 'false')")
    land(spark, source, "r4", DAY + 2 * MIN, [(5, "c1", 1.0)], cdf=False)
    fourth = run()
    assert fourth["read"] == "snapshot (delta.enableChangeDataFeed is not on for the landed table)"
    assert figures(spark, target) == expected(spark, source) and figures(spark, target)["c1"] == (2, Decimal("11.25"))


@pytest.mark.dagster
def test_both_followers_land_in_one_run_over_a_range_of_windows(spark, tmp_path):
    """The demo's two followers in one run, as their sensor asks for it (``follow_together``): the windowed one over
    the range of windows, the change-feed one after the same landings."""
    from datetime import datetime, timedelta, timezone

    from rocketlake.dagster.partitions import RANGE_END, RANGE_START, window_key, window_partitions
    from rocketlake.demo.definitions import build_by_region
    from rocketlake.engine.config import WindowConfig

    now = datetime.now(timezone.utc).replace(second=0, microsecond=0)
    window = WindowConfig(cron="* * * * *", start=(now - timedelta(hours=2)).replace(minute=0))
    ingestion, lake = Ingestion("orders_raw", window), Lake(str(tmp_path))
    source = lake.table_path("orders_raw")
    first, second = now - timedelta(minutes=10), now - timedelta(minutes=9)
    land(spark, source, "r1", int(first.timestamp() * 1000), [(0, "c1", 10.25), (1, "c2", 5.5)], region="eu")
    land(spark, source, "r2", int(second.timestamp() * 1000), [(2, "c1", 1.0)], region="us")
    partitions = window_partitions(window)
    keys = [window_key(partitions, first), window_key(partitions, second)]
    followers = [build_by_region(ingestion, lake), build_customers(ingestion, lake)]
    result = materialize(
        followers,
        resources={"spark": SparkResource(master="local[2]", s3a=True)},
        tags={RANGE_START: keys[0], RANGE_END: keys[1]},
    )
    assert result.success
    landed = sorted((e.asset_key.to_user_string(), e.partition) for e in result.get_asset_materialization_events())
    assert landed == [
        ("orders_raw_by_region", keys[0]),
        ("orders_raw_by_region", keys[1]),
        ("orders_raw_customers", None),
    ]
    by_region = {
        (r["region"], r["orders"])
        for r in spark.read.format("delta").load(lake.table_path("orders_raw_by_region")).collect()
    }
    assert by_region == {("eu", 2), ("us", 1)}
    assert (
        figures(spark, lake.table_path("orders_raw_customers"))
        == expected(spark, source)
        == {"c1": (2, Decimal("11.25")), "c2": (1, Decimal("5.50"))}
    )
