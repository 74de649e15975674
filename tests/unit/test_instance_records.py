"""Materializations read across the instance's pages, on a real (temporary) Dagster instance."""

from __future__ import annotations

import pytest
from dagster import AssetKey, AssetMaterialization, AssetRecordsFilter, instance_for_test

from rocketlake.dagster.instance_records import materialization_records
from rocketlake.dagster.partitions import materialized_among

pytestmark = pytest.mark.unit
TABLE = AssetKey("orders_raw")


def test_every_record_comes_across_pages_in_either_order_and_an_early_stop_reads_no_further():
    with instance_for_test() as instance:
        keys = [f"2026-11-01-00:0{i}" for i in range(5)]
        for key in keys:
            instance.report_runless_asset_event(AssetMaterialization(asset_key=TABLE, partition=key))
        every = AssetRecordsFilter(asset_key=TABLE)
        assert [r.partition_key for r in materialization_records(instance, every, page=2)] == keys[::-1]
        assert [r.partition_key for r in materialization_records(instance, every, page=2, ascending=True)] == keys

        pages = []
        fetch = instance.fetch_materializations
        instance.fetch_materializations = lambda *a, **k: pages.append(k["cursor"]) or fetch(*a, **k)
        newest = materialization_records(instance, every, page=2)
        assert [next(newest).partition_key, next(newest).partition_key] == [keys[4], keys[3]]
        assert pages == [None]  # the caller stopped within the first page: the second was never asked for
        assert next(newest).partition_key == keys[2] and len(pages) == 2

        assert materialized_among(instance, TABLE, keys[3:]) == set(keys[3:])
        assert materialized_among(instance, TABLE, [keys[0], "2026-11-01-00:09"]) == {keys[0]}
