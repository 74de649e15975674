"""The demo's downstream assets follow the table in batches, one run at a time, and again after a re-landing."""

from datetime import datetime, timezone

from dagster import (
    AssetKey,
    AssetMaterialization,
    DagsterInstance,
    RunRequest,
    SkipReason,
    TimeWindowPartitionsDefinition,
    asset,
    build_sensor_context,
    define_asset_job,
    instance_for_test,
)
from dagster._core.test_utils import create_run_for_test

from rocketlake.dagster.metadata import ROWS_CHANGED
from rocketlake.demo.follow import (
    QUIET_BATCH,
    RANGE_END,
    RANGE_START,
    contiguous_ranges,
    follow,
    follow_changes,
    follow_together,
    stale_windows,
)

MINUTES = TimeWindowPartitionsDefinition(
    cron_schedule="* * * * *", start=datetime(2026, 11, 1, tzinfo=timezone.utc), fmt="%Y-%m-%d-%H:%M"
)
TABLE, BY_REGION, CUSTOMERS = AssetKey("orders_raw"), AssetKey("orders_raw_by_region"), AssetKey("orders_customers")


def test_a_window_is_stale_when_landed_again_after_the_downstream_computed_it_and_never_when_not_landed():
    upstream = {"w1": 10, "w2": 30, "w3": 40}  # w2 landed again (storage id 30) after the downstream's 20
    downstream = {"w1": 11, "w2": 20, "w4": 50}  # w4: the downstream has it, the table does not: not the follower's
    assert stale_windows(upstream, downstream) == ["w2", "w3"]
    assert stale_windows({}, downstream) == []


def test_windows_that_follow_each_other_make_one_range():
    keys = ["2026-11-01-00:01", "2026-11-01-00:02", "2026-11-01-00:03", "2026-11-01-00:07", "2026-11-01-00:09"]
    assert contiguous_ranges(keys, MINUTES.get_next_partition_key) == [
        ("2026-11-01-00:01", "2026-11-01-00:03"),
        ("2026-11-01-00:07", "2026-11-01-00:07"),
        ("2026-11-01-00:09", "2026-11-01-00:09"),
    ]
    assert contiguous_ranges([], MINUTES.get_next_partition_key) == []


def _landed(instance: DagsterInstance, key: AssetKey, *partitions: str) -> None:
    for partition in partitions:
        instance.report_runless_asset_event(AssetMaterialization(asset_key=key, partition=partition))


def test_the_follower_asks_one_run_over_the_newest_stale_range_and_nothing_while_one_is_in_flight():
    @asset(key=BY_REGION, deps=[TABLE], partitions_def=MINUTES)
    def by_region():
        return None

    job = define_asset_job("orders_raw_by_region_job", selection=[BY_REGION])
    follows = follow(job, TABLE, BY_REGION, MINUTES)
    with instance_for_test() as instance:

        def tick():
            return follows(build_sensor_context(instance=instance))

        assert isinstance(tick(), SkipReason)  # nothing landed yet
        _landed(instance, TABLE, "2026-11-01-00:01", "2026-11-01-00:02", "2026-11-01-00:03")
        _landed(instance, BY_REGION, "2026-11-01-00:01")
        request = tick()
        assert isinstance(request, RunRequest) and request.run_key is None
        assert (request.tags[RANGE_START], request.tags[RANGE_END]) == ("2026-11-01-00:02", "2026-11-01-00:03")

        run = create_run_for_test(instance, job_name=job.name)  # NOT_STARTED: queued, say
        assert "queued or running" in tick().skip_message
        instance.report_run_failed(run)

        _landed(instance, BY_REGION, "2026-11-01-00:02", "2026-11-01-00:03")
        assert "up to date" in tick().skip_message
        _landed(instance, TABLE, "2026-11-01-00:01")  # landed again: the downstream computes it again
        request = tick()
        assert (request.tags[RANGE_START], request.tags[RANGE_END]) == ("2026-11-01-00:01", "2026-11-01-00:01")


def test_the_change_feed_follower_runs_after_new_landings_and_again_after_a_failed_run():
    @asset(key=CUSTOMERS, deps=[TABLE])
    def customers():
        return None

    job = define_asset_job("orders_customers_job", selection=[CUSTOMERS])
    follows = follow_changes(job, TABLE, CUSTOMERS)
    with instance_for_test() as instance:

        def tick():
            return follows(build_sensor_context(instance=instance))

        assert "no materialization" in tick().skip_message
        _landed(instance, TABLE, "2026-11-01-00:01", "2026-11-01-00:02")
        assert isinstance(tick(), RunRequest)
        assert isinstance(tick(), RunRequest)  # no run key: a run that failed is asked for again
        instance.report_runless_asset_event(AssetMaterialization(asset_key=CUSTOMERS))
        assert "followed every landing" in tick().skip_message
        _landed(instance, TABLE, "2026-11-01-00:03")
        assert isinstance(tick(), RunRequest)


def test_both_followers_of_a_table_share_one_run_per_batch():
    @asset(key=BY_REGION, deps=[TABLE], partitions_def=MINUTES)
    def by_region():
        return None

    @asset(key=CUSTOMERS, deps=[TABLE])
    def customers():
        return None

    job = define_asset_job("orders_raw_followers_job", selection=[BY_REGION, CUSTOMERS])
    follows = follow_together(job, TABLE, BY_REGION, MINUTES, CUSTOMERS)
    with instance_for_test() as instance:

        def tick():
            return follows(build_sensor_context(instance=instance))

        assert "up to date" in tick().skip_message  # nothing landed yet
        _landed(instance, TABLE, "2026-11-01-00:01", "2026-11-01-00:02")
        request = tick()  # one run for both: the windowed follower over the range, the change feed after it
        assert isinstance(request, RunRequest) and request.asset_selection is None and request.run_key is None
        assert (request.tags[RANGE_START], request.tags[RANGE_END]) == ("2026-11-01-00:01", "2026-11-01-00:02")

        run = create_run_for_test(instance, job_name=job.name)
        assert "queued or running" in tick().skip_message  # one run of the two at a time
        instance.report_run_failed(run)

        _landed(instance, BY_REGION, "2026-11-01-00:01", "2026-11-01-00:02")  # the run landed the windows, then
        request = tick()  # failed before the change feed
        assert request.asset_selection == [CUSTOMERS] and RANGE_START not in request.tags
        instance.report_runless_asset_event(AssetMaterialization(asset_key=CUSTOMERS))
        assert "up to date" in tick().skip_message
        _landed(instance, TABLE, "2026-11-01-00:03")
        request = tick()
        assert request.asset_selection is None
        assert (request.tags[RANGE_START], request.tags[RANGE_END]) == ("2026-11-01-00:03", "2026-11-01-00:03")


def _landed_quiet(instance: DagsterInstance, key: AssetKey, *partitions: str) -> None:
    """Landings that changed no row (a quiet window's ledger commit alone), as the table's metadata says."""
    for partition in partitions:
        instance.report_runless_asset_event(
            AssetMaterialization(asset_key=key, partition=partition, metadata={ROWS_CHANGED: False})
        )


def _minutes(first: int, last: int) -> list[str]:
    return [f"2026-11-01-{m // 60:02d}:{m % 60:02d}" for m in range(first, last + 1)]


def test_windows_landed_quiet_ask_for_no_run_until_rows_change_or_an_hour_of_them_waits():
    @asset(key=BY_REGION, deps=[TABLE], partitions_def=MINUTES)
    def by_region():
        return None

    job = define_asset_job("orders_raw_by_region_job", selection=[BY_REGION])
    follows = follow(job, TABLE, BY_REGION, MINUTES)
    with instance_for_test() as instance:

        def tick():
            return follows(build_sensor_context(instance=instance))

        _landed_quiet(instance, TABLE, *_minutes(1, 3))
        assert "up to date" in tick().skip_message  # nothing to follow: no row changed
        _landed(instance, TABLE, *_minutes(4, 4))  # rows: one run reaches back over the quiet windows before it
        request = tick()
        assert (request.tags[RANGE_START], request.tags[RANGE_END]) == ("2026-11-01-00:01", "2026-11-01-00:04")
        _landed(instance, BY_REGION, *_minutes(1, 4))

        _landed(instance, TABLE, *_minutes(2, 2))  # landed again with rows (a repair): followed again
        assert (tick().tags[RANGE_START], tick().tags[RANGE_END]) == ("2026-11-01-00:02", "2026-11-01-00:02")
        _landed(instance, BY_REGION, *_minutes(2, 2))

        _landed_quiet(instance, TABLE, *_minutes(10, 10 + QUIET_BATCH - 2))
        assert "up to date" in tick().skip_message
        _landed_quiet(instance, TABLE, *_minutes(10 + QUIET_BATCH - 1, 10 + QUIET_BATCH - 1))
        request = tick()  # an hour of quiet windows waits: one run takes them, and they are stale no more
        assert (request.tags[RANGE_START], request.tags[RANGE_END]) == tuple(_minutes(10, 10 + QUIET_BATCH - 1)[::59])


def test_the_change_feed_follower_skips_landings_that_changed_no_row():
    @asset(key=CUSTOMERS, deps=[TABLE])
    def customers():
        return None

    job = define_asset_job("orders_customers_job", selection=[CUSTOMERS])
    follows = follow_changes(job, TABLE, CUSTOMERS)
    with instance_for_test() as instance:

        def tick():
            return follows(build_sensor_context(instance=instance))

        _landed(instance, TABLE, *_minutes(1, 1))
        assert isinstance(tick(), RunRequest)
        instance.report_runless_asset_event(AssetMaterialization(asset_key=CUSTOMERS))
        _landed_quiet(instance, TABLE, *_minutes(2, 3))
        assert "followed every landing" in tick().skip_message
        _landed(instance, TABLE, *_minutes(4, 4))
        assert isinstance(tick(), RunRequest)


def test_region_totals_sort_as_spark_orders_them_with_null_regions_first():
    """A body without a region gives a null one beside regions that are strings: sorted as Spark's orderBy does,
    not a TypeError after the window's slice is written."""
    from datetime import datetime

    from rocketlake.demo.definitions import by_window_then_region

    early, late = datetime(2026, 12, 3, 7, 0), datetime(2026, 12, 3, 7, 1)
    rows = [
        {"window_start": late, "region": "eu"},
        {"window_start": early, "region": "us"},
        {"window_start": early, "region": None},
        {"window_start": early, "region": "apac"},
    ]
    assert [(r["window_start"], r["region"]) for r in sorted(rows, key=by_window_then_region)] == [
        (early, None),
        (early, "apac"),
        (early, "us"),
        (late, "eu"),
    ]
