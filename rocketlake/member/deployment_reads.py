"""What a deployment's table and Dagster instance say of one ingestion, for the CLI and the member process: the
table's landed ends, the runs of a group in flight, and the ingestion's recent rates. Each opens what it reads and
closes it again: the callers ask now and then (a status line, a reset, a running-info request)."""

from __future__ import annotations

import time
from datetime import datetime, timezone

from rocketlake.engine.config import IngestionConfig, RocketLakeConfig
from rocketlake.member.status import ConsumeStatus


def landed_ends(config: RocketLakeConfig, ingestion: IngestionConfig) -> dict:
    """What the ingestion's table says was landed, per queue (read with delta-rs; nothing without a table)."""
    from rocketlake.delta.ledger_log import recent_entries
    from rocketlake.delta.storage import delta_rs_options
    from rocketlake.engine.progress import landed_ends as ends_of

    entries = recent_entries(config.lake.table_path(ingestion.table), storage_options=delta_rs_options(config.lake))
    return ends_of(entries, ingestion.consumer_group)


def runs_in_flight(group: str) -> set[str]:
    """Runs holding or waiting for the consumer group's pool slot on the Dagster instance."""
    from dagster import DagsterInstance

    from rocketlake.dagster.ingestion import consumer_group_pool
    from rocketlake.dagster.launch import dagster_home

    dagster_home()
    with DagsterInstance.get() as instance:
        info = instance.event_log_storage.get_concurrency_info(consumer_group_pool(group))
    return {slot.run_id for slot in info.claimed_slots} | {step.run_id for step in info.pending_steps}


def recent_rates(config: RocketLakeConfig, name: str) -> ConsumeStatus:
    """The ingestion's rates of the last minute and hour (``member.status.consume_status``), from what the
    deployment's Dagster instance recorded of its table's windows and its job's runs."""
    from dagster import AssetRecordsFilter, DagsterInstance, DagsterRunStatus, RunsFilter

    from rocketlake.dagster.instance_records import materialization_records
    from rocketlake.dagster.translator import translate
    from rocketlake.member.metrics import landing_of
    from rocketlake.member.status import HOUR_S, MINUTE_S, EndedRun, LandedWindow, consume_status

    assets = translate(config)[name]
    now = time.time()
    with DagsterInstance.get() as instance:
        windows = []
        for record in materialization_records(
            instance, AssetRecordsFilter(asset_key=assets.table_key, after_timestamp=now - HOUR_S)
        ):
            materialization = record.asset_materialization
            figures = landing_of(materialization.metadata) if materialization else None
            if figures is not None:
                windows.append(LandedWindow(record.timestamp, figures.rows, figures.sent_back + figures.failed))
        runs = [
            EndedRun(r.end_time, r.end_time - r.start_time)
            for r in instance.get_run_records(
                RunsFilter(
                    job_name=assets.job_name,
                    statuses=[DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE],
                    updated_after=datetime.fromtimestamp(now - MINUTE_S, tz=timezone.utc),
                )
            )
            if r.end_time is not None and r.start_time is not None
        ]
    return consume_status(windows, runs, now)
