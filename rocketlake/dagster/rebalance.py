"""A rebalance sensor per cluster, ``rocketlake_<cluster>_rebalance``: for each of the cluster's ingestions, the
member's share of the group's queues, and windows left incomplete.

Evaluated by the Dagster daemon every 30 s (the push consumer rebalances every 20 s and on
NOTIFY_CONSUMER_IDS_CHANGED), it asks the brokers for the topic route and the group's members and
computes this member's share as ``engine.assignment`` does for a run. When the share changes (a
member joined or left, the topic was expanded, a broker came or went) it records the new share as an
observation of the asset, effective from the next window boundary: runs compute the share when they
start, and each window is run once it is closed, so the first window a new share lands is the one
that closes after the change. The ledger records which member landed which queue of each window.

It then reads the table's newest commits (delta-rs) and requests a run for every recent closed window
that the schedule already ran but where a queue of this member's share was landed by nobody, with the
tag ``rocketlake/queues`` naming exactly those queues, so the run replaces only the missing slices.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone

from dagster import (
    AssetObservation,
    DefaultSensorStatus,
    RunRequest,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from rocketlake.dagster.catch_up import windows_on_their_way
from rocketlake.dagster.cluster_tick import Members, read_each, tick_summary, tick_timeout_ms
from rocketlake.dagster.ingestion import QUEUES_TAG, rocketmq_resource_key
from rocketlake.dagster.metadata import ASSIGNMENT, MEMBER
from rocketlake.dagster.partitions import last_closed_windows, materialized_among, next_boundary, window_partitions
from rocketlake.dagster.tick_instance import tick_instance
from rocketlake.dagster.translator import IngestionAssets, cluster_sensor_name
from rocketlake.delta.ledger_log import recent_entries
from rocketlake.delta.storage import delta_rs_options
from rocketlake.engine.assignment import member_share
from rocketlake.engine.broker_access import LiveGroup, group_broker
from rocketlake.engine.completeness import landed_queues, missing_slices
from rocketlake.engine.config import IngestionConfig, LakeConfig
from rocketlake.engine.identity import client_id

#: How many of the most recent closed windows are checked for slices nobody landed.
WINDOWS_CHECKED = 10
EFFECTIVE_FROM = "rocketlake/effective_from_window"


def rebalance_one(
    context: SensorEvaluationContext,
    cfg: IngestionConfig,
    assets: IngestionAssets,
    partitions,
    share,
    cursor: dict,
    now: datetime,
    lake: LakeConfig,
) -> tuple[list, list, str]:
    """One ingestion's part of a tick: its share observed when it changed (``cursor`` keeps the last, by table),
    and a run request for each recent window where a queue of the share was landed by nobody."""
    asset_key = assets.table_key
    events, requests = [], []
    key = asset_key.to_user_string()
    if cursor.get(key) != share.key:
        effective = next_boundary(partitions, now)
        context.log.info(f"{cfg.table}: {share.describe()}; effective from window {effective}")
        events.append(
            AssetObservation(
                asset_key=asset_key,
                metadata={MEMBER: client_id(cfg), ASSIGNMENT: share.describe(), EFFECTIVE_FROM: effective},
            )
        )
        cursor[key] = share.key
    closed = last_closed_windows(partitions, now, cfg.window.grace_seconds, WINDOWS_CHECKED)
    instance = tick_instance(context)
    materialized = materialized_among(instance, asset_key, closed)
    ran = [window for window in closed if window in materialized]
    landed = landed_queues(
        recent_entries(lake.table_path(cfg.table), storage_options=delta_rs_options(lake)), cfg.consumer_group
    )
    on_their_way = windows_on_their_way(instance, asset_key, assets.job_name, partitions)
    for window, lacking in missing_slices(landed, ran, share.taken).items():
        queues = ",".join(q.key for q in lacking)
        if window in on_their_way:
            # A run of the window is queued or landing: it may be the one landing these slices (a run per tick,
            # each for the slices missing then, piled up behind the group's pool on the chaos soak).
            context.log.info(
                f"{cfg.table}, window {window}: nobody landed {queues} yet; a run of the window is on "
                "its way, so none is requested now"
            )
            continue
        context.log.info(
            f"{cfg.table}, window {window}: nobody landed {queues}; requesting a run of this member for them"
        )
        digest = hashlib.sha1(queues.encode()).hexdigest()[:12]
        # The table in the run key: two ingestions of one topic (two groups) lack the same queues.
        requests.append(
            RunRequest(
                run_key=f"{key}:{window}:{digest}",
                partition_key=window,
                asset_selection=[asset_key],
                tags={QUEUES_TAG: queues},
            )
        )
    return events, requests, f"{cfg.table}: {share.describe()}; the last {len(ran)} window(s) run checked"


def build_rebalance_sensor(cluster: str, members: Members, lake: LakeConfig) -> SensorDefinition:
    """One sensor for every ingestion of ``cluster``, one client a tick (``dagster.cluster_tick``)."""
    rocketmq_key = rocketmq_resource_key(cluster)
    timeout_ms = tick_timeout_ms(members)
    tables = [assets.table_key for _, assets in members]
    partitions = {assets.table_key: window_partitions(cfg.window) for cfg, assets in members}

    # It targets the assets, not the schedules' jobs: one job object reached from two definitions is a duplicate
    # to Definitions.merge (a dg project's defs folder). Each run request selects its one table.
    @sensor(
        name=cluster_sensor_name(cluster, tables, "rebalance"),
        asset_selection=tables,
        minimum_interval_seconds=30,
        required_resource_keys={rocketmq_key},
        default_status=DefaultSensorStatus.STOPPED,
        description=f"Rebalances each ingestion of cluster {cluster}: this member's share of the queues "
        "(effective from the next window) and runs for recent windows where a queue of the share "
        "was landed by nobody.",
    )
    def rebalance(context: SensorEvaluationContext):
        now = datetime.now(timezone.utc)
        resource = getattr(context.resources, rocketmq_key)
        # A client of its own, closed at the end of the tick (the resource's clients are cached for runs).
        with resource.open_client(timeout_ms) as client:
            read, failed = read_each(
                members,
                lambda cfg: member_share(
                    cfg, group_broker(client, cfg).subscribed_queues(), LiveGroup(client, cfg).members()
                ),
                "ask RocketMQ for the route and the members",
                context.log,
            )
        cursor = json.loads(context.cursor) if context.cursor else {}
        events, requests, said = [], [], []
        for cfg, assets, share in read:
            ingestion_events, ingestion_requests, summary = rebalance_one(
                context, cfg, assets, partitions[assets.table_key], share, cursor, now, lake
            )
            events += ingestion_events
            requests += ingestion_requests
            said.append(summary)
        cursor_out = json.dumps(cursor)
        if not events and not requests:
            return SensorResult(skip_reason=SkipReason(tick_summary(said, failed)), cursor=cursor_out)
        return SensorResult(run_requests=requests, asset_events=events, cursor=cursor_out)

    return rebalance
