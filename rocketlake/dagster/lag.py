"""How far behind each queue is, every minute, and whether the table is on time: a sensor and two checks.

One sensor per cluster, ``rocketlake_<cluster>_lag`` (running by default, every 60 s), reads each of the cluster's
ingestions' group progress the way
``rocketlake offsets show`` does (``engine.progress``: broker max offset, committed offset, lag in messages =
mqadmin consumerProgress's Diff, lag in seconds = age of the oldest message not passed) and records it as an
observation of its table with numeric metadata, per queue and in total, so the UI's Plots tab draws each figure
over time. The same tick evaluates the table's two checks and reports them with the observation:

- ``fresh`` fails when the newest landed window is older than the newest window past its deadline
  (close + ``window.grace_seconds`` + ``window.freshness_slack_seconds``);
- ``lag_not_growing`` warns when the total lag rose at each of the last observations (``engine.freshness``);
- ``caught_up`` fails while a queue's committed offset trails the newest window past its deadline, and the tick asks
  for the run that lands what it trails by (``dagster.catch_up``): ``fresh`` alone looks at the newest window only,
  and stays green while later windows land above a hole that holds the group's offset back;
- ``broker_clock`` fails while a broker's clock is off this host's by more than ``window.grace_seconds``
  (``engine.broker_clock``): its messages then land in later windows than their store times name.

A CLUSTERING group's dead-letter table (``<table>_dlq``) has a ``caught_up`` check and catch-up runs of its own,
judged the same way on ``%DLQ%<group>``: its windows land in the table's runs, and a window that landed without a
broker's dead-letter queue (down when it was planned), or was never asked for, holds that queue back just the same.

Each check can also be executed from the UI: the first two read the same figures from the instance, ``caught_up``
and ``broker_clock`` ask the brokers.
"""

# No "from __future__ import annotations" here: Dagster inspects the checks' context annotation at runtime.
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from dagster import (
    AssetCheckEvaluation,
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetKey,
    AssetObservation,
    AssetRecordsFilter,
    DefaultSensorStatus,
    MetadataValue,
    RunRequest,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    TableColumn,
    TableRecord,
    TableSchema,
    asset_check,
    sensor,
)

from rocketlake.dagster.catch_up import (
    CAUGHT_UP_CHECK,
    RETIRED_AFTER_S,
    behind,
    catch_up_request,
    caught_up_outcome,
    unread_outcome,
)
from rocketlake.dagster.cluster_tick import Members, read_each, tick_summary, tick_timeout_ms
from rocketlake.dagster.ingestion import rocketmq_resource_key
from rocketlake.dagster.partitions import (
    last_closed_windows,
    materialized_among,
    window_partitions,
    window_start,
    windows_from,
)
from rocketlake.dagster.tick_instance import tick_instance
from rocketlake.dagster.translator import IngestionAssets, cluster_sensor_name, table_asset_key
from rocketlake.engine.assignment import member_share
from rocketlake.engine.broker_access import LiveGroup, group_broker
from rocketlake.engine.broker_clock import BrokerClock, read_clocks
from rocketlake.engine.config import IngestionConfig, dead_letter_config
from rocketlake.engine.freshness import GROWTH_TICKS, Freshness, freshness, lag_keeps_growing
from rocketlake.engine.progress import QueueProgress, Unanswered, group_progress, left_the_route
from rocketlake.engine.windows import iso
from rocketlake.rocketmq.message_queue import MessageQueue

LAG_MESSAGES = "rocketlake/lag_messages"
LAG_SECONDS = "rocketlake/lag_seconds"
BROKER_MAX = "rocketlake/broker_max_offset"
COMMITTED = "rocketlake/committed_offset"
LAG_TABLE = "rocketlake/lag_per_queue"
FRESH_CHECK = "fresh"
GROWTH_CHECK = "lag_not_growing"
CLOCK_CHECK = "broker_clock"
LAG_CHECKS = (FRESH_CHECK, GROWTH_CHECK, CAUGHT_UP_CHECK, CLOCK_CHECK)

LAG_SCHEMA = TableSchema(
    columns=[
        TableColumn("topic", "string"),
        TableColumn("broker_name", "string"),
        TableColumn("queue_id", "int"),
        TableColumn("broker_max", "int"),
        TableColumn("committed", "int", description="-1: the group has none yet"),
        TableColumn("lag", "int", description="messages: broker max - committed (mqadmin's Diff)"),
        TableColumn("lag_seconds", "float", description="age of the oldest message not passed"),
    ]
)


def queue_figure(key: str, queue, topic: str | None) -> str:
    """The metadata key of one queue's figure: ``rocketlake/lag_messages/broker-a/3`` for a queue of the ingestion's
    ``topic``, ``rocketlake/lag_messages/%RETRY%group/broker-a/0`` for another (short keys read better in the UI)."""
    where = f"{queue.broker_name}/{queue.queue_id}"
    return f"{key}/{where}" if queue.topic == topic else f"{key}/{queue.topic}/{where}"


def lag_metadata(rows: list[QueueProgress], now_ms: int, topic: str | None) -> dict:
    """Totals first (what a person plots), then every queue's four figures, then the table a person reads."""
    metadata = {
        LAG_MESSAGES: MetadataValue.int(sum(r.lag for r in rows)),
        LAG_SECONDS: MetadataValue.float(max((r.lag_seconds(now_ms) for r in rows), default=0.0)),
        BROKER_MAX: MetadataValue.int(sum(r.max_offset for r in rows)),
        COMMITTED: MetadataValue.int(sum(r.committed or 0 for r in rows)),
    }
    for r in rows:
        metadata[queue_figure(LAG_MESSAGES, r.queue, topic)] = MetadataValue.int(r.lag)
        metadata[queue_figure(LAG_SECONDS, r.queue, topic)] = MetadataValue.float(r.lag_seconds(now_ms))
        metadata[queue_figure(BROKER_MAX, r.queue, topic)] = MetadataValue.int(r.max_offset)
        committed = -1 if r.committed is None else r.committed
        metadata[queue_figure(COMMITTED, r.queue, topic)] = MetadataValue.int(committed)
    metadata[LAG_TABLE] = MetadataValue.table(
        [
            TableRecord(
                {
                    "topic": r.queue.topic,
                    "broker_name": r.queue.broker_name,
                    "queue_id": r.queue.queue_id,
                    "broker_max": r.max_offset,
                    "committed": -1 if r.committed is None else r.committed,
                    "lag": r.lag,
                    "lag_seconds": round(r.lag_seconds(now_ms), 1),
                }
            )
            for r in rows
        ],
        schema=LAG_SCHEMA,
    )
    return metadata


def last_observed_queues(instance, asset_key: AssetKey, now_ms: int) -> tuple[list[MessageQueue], str]:
    """The queues the last lag observation of the asset read, and when (ISO), unless older than ``RETIRED_AFTER_S``."""
    records = instance.fetch_observations(AssetRecordsFilter(asset_key=asset_key), limit=4, ascending=False).records
    for record in records:
        table = record.asset_observation.metadata.get(LAG_TABLE) if record.asset_observation else None
        if table is None:
            continue
        at_ms = int(record.timestamp * 1000)
        if now_ms - at_ms > RETIRED_AFTER_S * 1000:
            break
        queues = [MessageQueue(r.data["topic"], r.data["broker_name"], r.data["queue_id"]) for r in table.records]
        return queues, iso(at_ms)
    return [], ""


def observed_lag_totals(instance, asset_key: AssetKey, count: int) -> list[int]:
    """The total lag of the last ``count`` lag observations of the asset, oldest first."""
    records = instance.fetch_observations(
        AssetRecordsFilter(asset_key=asset_key), limit=count * 4, ascending=False
    ).records
    totals = []
    for record in records:
        value = record.asset_observation.metadata.get(LAG_MESSAGES) if record.asset_observation else None
        if value is not None:
            totals.append(int(value.value))
        if len(totals) == count:
            break
    return list(reversed(totals))


def table_freshness(cfg: IngestionConfig, instance, now: datetime, asset_key: AssetKey | None = None) -> Freshness:
    partitions = window_partitions(cfg.window)
    due = last_closed_windows(partitions, now, cfg.window.grace_seconds + cfg.window.freshness_slack_seconds, 1)
    asset_key = asset_key or table_asset_key(cfg.table)
    # On time: the due window or a later one is landed, which a query of those few windows says. Only a table
    # behind reads every landed window, to name the newest.
    landed = materialized_among(instance, asset_key, windows_from(partitions, due[-1], now)) if due else set()
    if due and not landed:
        landed = instance.get_materialized_partitions(asset_key)
    return freshness(due[-1] if due else None, sorted(landed), lambda key: window_start(partitions, key))


def freshness_outcome(cfg: IngestionConfig, instance, now: datetime, asset_key: AssetKey) -> dict:
    f = table_freshness(cfg, instance, now, asset_key)
    metadata = {
        "newest_landed_window": MetadataValue.text(f.newest_landed or "none"),
        "newest_due_window": MetadataValue.text(f.newest_due or "none"),
        "slack_seconds": MetadataValue.int(cfg.window.freshness_slack_seconds),
    }
    return {"passed": f.passed, "severity": AssetCheckSeverity.ERROR, "metadata": metadata, "description": f.describe()}


def growth_outcome(totals_oldest_first: list[int]) -> dict:
    growing = lag_keeps_growing(totals_oldest_first)
    description = (
        f"the total lag rose at each of the last {GROWTH_TICKS} observations: "
        f"{' -> '.join(map(str, totals_oldest_first[-(GROWTH_TICKS + 1) :]))}"
        if growing
        else f"the total lag did not rise at each of the last {GROWTH_TICKS} observations"
    )
    return {
        "passed": not growing,
        "severity": AssetCheckSeverity.WARN,
        "description": description,
        "metadata": {"recent_lag_totals": MetadataValue.text(", ".join(map(str, totals_oldest_first)))},
    }


def clock_outcome(cfg: IngestionConfig, clocks: list[BrokerClock], unread: dict[str, str]) -> dict:
    """The ``broker_clock`` check's result: fails when a broker's clock is off by more than the window's grace."""
    grace = cfg.window.grace_seconds
    off = [c for c in clocks if c.off_by_more_than(max(grace, 1) * 1000)]
    metadata = {f"skew_seconds/{c.broker}": MetadataValue.float(round(c.skew_ms / 1000, 1)) for c in clocks}
    not_read = f"; not read: {'; '.join(f'{b}: {why}' for b, why in sorted(unread.items()))}" if unread else ""
    if not off:
        said = "; ".join(c.describe() for c in clocks) or "no broker answered"
        return {
            "passed": True,
            "severity": AssetCheckSeverity.ERROR,
            "metadata": metadata,
            "description": f"every broker's clock is within window.grace_seconds ({grace}s) of this host's: "
            f"{said}{not_read}",
        }
    return {
        "passed": False,
        "severity": AssetCheckSeverity.ERROR,
        "metadata": metadata,
        "description": f"{'; '.join(c.describe() for c in off)}: more than window.grace_seconds ({grace}s). "
        "Messages it stores after this host closed a window carry store times inside that "
        "window; they land in the next window (never lost or doubled), not in the one their "
        "store time names. Fix the broker host's time sync (chrony/NTP); a larger grace only "
        f"hides a clock behind{not_read}",
    }


def clock_reading(client, cfg: IngestionConfig) -> tuple[list[BrokerClock], dict[str, str]]:
    """The clocks of the brokers holding the ingestion's queues (their route only: no offset is read)."""
    return read_clocks(client, {q.broker_name for q in group_broker(client, cfg).subscribed_queues()})


def build_lag_checks(cfg: IngestionConfig, assets: IngestionAssets) -> list:
    """The four checks, executable from the UI too (the sensor reports them every minute)."""
    asset_key = assets.table_key
    rocketmq_key = rocketmq_resource_key(cfg.cluster)

    @asset_check(
        asset=asset_key,
        name=FRESH_CHECK,
        blocking=False,
        description=f"Fails when the newest landed window of {cfg.table} is older than the newest window "
        f"past close + {cfg.window.grace_seconds}s grace + "
        f"{cfg.window.freshness_slack_seconds}s slack.",
    )
    def fresh(context: AssetCheckExecutionContext) -> AssetCheckResult:
        return AssetCheckResult(**freshness_outcome(cfg, context.instance, datetime.now(timezone.utc), asset_key))

    @asset_check(
        asset=asset_key,
        name=GROWTH_CHECK,
        blocking=False,
        description=f"Warns when the total lag of group {cfg.consumer_group} rose at each of the last "
        f"{GROWTH_TICKS} lag observations.",
    )
    def lag_not_growing(context: AssetCheckExecutionContext) -> AssetCheckResult:
        return AssetCheckResult(**growth_outcome(observed_lag_totals(context.instance, asset_key, GROWTH_TICKS + 1)))

    caught_up = caught_up_check(cfg, asset_key, rocketmq_key, f"a queue of group {cfg.consumer_group}")

    @asset_check(
        asset=asset_key,
        name=CLOCK_CHECK,
        blocking=False,
        required_resource_keys={rocketmq_key},
        description=f"Fails while the clock of a broker holding {cfg.table}'s queues is off this host's "
        f"by more than {cfg.window.grace_seconds}s grace: its messages then land in later "
        "windows than their store times name.",
    )
    def broker_clock(context: AssetCheckExecutionContext) -> AssetCheckResult:
        with getattr(context.resources, rocketmq_key).open_client(cfg.mq_client_api_timeout) as client:
            clocks, unread = clock_reading(client, cfg)
        return AssetCheckResult(**clock_outcome(cfg, clocks, unread))

    checks = [fresh, lag_not_growing, caught_up, broker_clock]
    if assets.dead_letters is None:
        return checks
    dead_letters_caught_up = caught_up_check(
        dead_letter_config(cfg),
        assets.dead_letters.key,
        rocketmq_key,
        f"a dead-letter queue of group {cfg.consumer_group} (%DLQ%)",
    )
    return [*checks, dead_letters_caught_up]


@dataclass(frozen=True)
class Progress:
    """One group's progress read this tick: the queues read, this member's share of them, and the brokers that
    did not answer (``engine.progress.group_progress``)."""

    rows: list[QueueProgress]
    share: set
    unread: dict[str, Unanswered]


def caught_up_check(cfg: IngestionConfig, asset_key: AssetKey, rocketmq_key: str, queues: str):
    """The ``caught_up`` check of ``asset_key`` (a table, or its dead-letter table with ``dead_letter_config``),
    executable from the UI: it asks the brokers what the lag sensor reads each tick."""

    @asset_check(
        asset=asset_key,
        name=CAUGHT_UP_CHECK,
        blocking=False,
        required_resource_keys={rocketmq_key},
        description=f"Fails while {queues} has a message not passed that was stored before the end of the "
        f"newest window past close + {cfg.window.grace_seconds}s grace + "
        f"{cfg.window.freshness_slack_seconds}s slack (the lag sensor then asks for the run that "
        "lands it).",
    )
    def caught_up(context: AssetCheckExecutionContext) -> AssetCheckResult:
        now_ms = int(time.time() * 1000)
        last_seen = last_observed_queues(context.instance, asset_key, now_ms)
        with getattr(context.resources, rocketmq_key).open_client(cfg.mq_client_api_timeout) as client:
            progress = progress_and_share(client, cfg, last_seen)
        evaluation, _ = caught_up_judged(cfg, asset_key, None, progress, now_ms, context.instance, None)
        return AssetCheckResult(**evaluation)

    return caught_up


def caught_up_judged(
    cfg: IngestionConfig, asset_key: AssetKey, job_name: str | None, progress: Progress, now_ms: int, instance, log
) -> tuple[dict, RunRequest | None]:
    """The ``caught_up`` outcome of the member's share of queues and, given the schedule's ``job_name``, the
    catch-up run to ask for (``dagster.catch_up``), if any: of the queues read, a broker not answering fails the
    check without holding back the others' catch-up."""
    now = datetime.fromtimestamp(now_ms / 1000, tz=timezone.utc)
    partitions = window_partitions(cfg.window)
    found = behind(cfg, partitions, [r for r in progress.rows if r.queue in progress.share], now)
    request = (
        None if job_name is None else catch_up_request(cfg, asset_key, job_name, partitions, found, instance, now, log)
    )
    return caught_up_outcome(cfg, found, now_ms, progress.unread), request


def progress_and_share(
    client, cfg: IngestionConfig, last_seen: tuple[Sequence[MessageQueue], str] = ((), "")
) -> Progress:
    """Every queue's progress, and the queues this member takes now (``assignment.member_share``, as a run computes
    it): a member catches up its own queues only; another member's trailing queues are that member's to land. A
    broker that does not answer leaves its queues out of both, and is named in ``unread``; so is a broker of
    ``last_seen`` (the queues the last lag observation read, and when) that left the route, whose queues a run does
    not see to share either."""
    unread: dict[str, Unanswered] = {}
    rows = group_progress(group_broker(client, cfg), unread)
    queues = [r.queue for r in rows] + [q for u in unread.values() for q in u.queues]
    share = member_share(cfg, queues, LiveGroup(client, cfg).members())
    unread.update(left_the_route(rows, unread, *last_seen))
    return Progress(rows, set(share.taken), unread)


def lag_events(
    cfg: IngestionConfig,
    assets: IngestionAssets,
    progress: Progress,
    now_ms: int,
    instance,
    log,
    clocks: tuple[list[BrokerClock], dict[str, str]] = ([], {}),
) -> tuple[list, list, str]:
    """One ingestion's observation, check evaluations and catch-up run request (if any) for one tick; its summary.
    ``clocks``: the brokers' clocks read this tick, and the brokers that could not be read. With a broker not
    answering there is no observation: a lag figure without its queues would read as a drop."""
    asset_key = assets.table_key
    rows = progress.rows
    metadata = lag_metadata(rows, now_ms, cfg.topic)  # None with several topics: every queue key names its topic
    total = metadata[LAG_MESSAGES].value
    summary = (
        f"group {cfg.consumer_group}: lag {total} message(s) over {len(rows)} queue(s), oldest not "
        f"passed {metadata[LAG_SECONDS].value:.0f}s ago"
    )
    if progress.unread:
        summary += f"; not read: {', '.join(u.describe(b) for b, u in sorted(progress.unread.items()))}"
    totals = observed_lag_totals(instance, asset_key, GROWTH_TICKS) + ([] if progress.unread else [total])
    now = datetime.fromtimestamp(now_ms / 1000, tz=timezone.utc)
    caught_up, request = caught_up_judged(cfg, asset_key, assets.job_name, progress, now_ms, instance, log)
    observed = (
        [] if progress.unread else [AssetObservation(asset_key=asset_key, metadata=metadata, description=summary)]
    )
    events = [
        *observed,
        AssetCheckEvaluation(
            asset_key=asset_key, check_name=FRESH_CHECK, **freshness_outcome(cfg, instance, now, asset_key)
        ),
        AssetCheckEvaluation(asset_key=asset_key, check_name=GROWTH_CHECK, **growth_outcome(totals)),
        AssetCheckEvaluation(asset_key=asset_key, check_name=CAUGHT_UP_CHECK, **caught_up),
        AssetCheckEvaluation(asset_key=asset_key, check_name=CLOCK_CHECK, **clock_outcome(cfg, *clocks)),
    ]
    return events, [request] if request else [], summary


def dead_letter_events(
    cfg: IngestionConfig, assets: IngestionAssets, progress: Progress, now_ms: int, instance, log
) -> tuple[list, list]:
    """The dead-letter table's ``caught_up`` evaluation and catch-up run request (if any) for one tick."""
    asset_key = assets.dead_letters.key
    caught_up, request = caught_up_judged(
        dead_letter_config(cfg), asset_key, assets.job_name, progress, now_ms, instance, log
    )
    return (
        [AssetCheckEvaluation(asset_key=asset_key, check_name=CAUGHT_UP_CHECK, **caught_up)],
        [request] if request else [],
    )


def build_lag_sensor(cluster: str, members: Members) -> SensorDefinition:
    """One sensor for every ingestion of ``cluster``: one client a tick, whose routes and connections all the
    ingestions share, and one evaluation by the daemon where a sensor per ingestion cost one each."""
    rocketmq_key = rocketmq_resource_key(cluster)
    timeout_ms = tick_timeout_ms(members)
    groups = ", ".join(cfg.consumer_group for cfg, _ in members)

    tables = [a.table_key for _, a in members]
    dead_letters = [(cfg, a) for cfg, a in members if a.dead_letters is not None]

    # It targets the tables: a tick that finds a queue trailing asks for the run that catches it up.
    @sensor(
        name=cluster_sensor_name(cluster, tables, "lag"),
        minimum_interval_seconds=60,
        asset_selection=[*tables, *(a.dead_letters.key for _, a in dead_letters)],
        required_resource_keys={rocketmq_key},
        default_status=DefaultSensorStatus.RUNNING,
        description=f"Every minute, for each ingestion of cluster {cluster} (groups {groups}): broker max, "
        "committed offset and lag (messages, seconds) per queue and in total, as observations of "
        "its table; evaluates the table's freshness, lag-growth and caught-up checks, and asks for "
        "a run of the windows a trailing queue has not passed (of the dead-letter tables too).",
    )
    def lag(context: SensorEvaluationContext):
        resource = getattr(context.resources, rocketmq_key)
        instance = tick_instance(context)
        now_ms = int(time.time() * 1000)
        # What the last observations read: a broker there and in no route now is down, not gone (its queues trail).
        last_seen = {id(cfg): last_observed_queues(instance, a.table_key, now_ms) for cfg, a in members}
        with resource.open_client(timeout_ms) as client:
            read, failed = read_each(
                members,
                lambda cfg: progress_and_share(client, cfg, last_seen[id(cfg)]),
                "read the progress",
                context.log,
            )
            # The dead-letter topics after; not at all when no group could be read (the cluster did not answer).
            dead_read, dead_failed = (
                read_each(
                    dead_letters,
                    lambda cfg: progress_and_share(client, dead_letter_config(cfg)),
                    "read the dead-letter progress",
                    context.log,
                )
                if read
                else ([], [])
            )
            # Each broker's clock once a tick, however many ingestions its queues serve.
            # (A broker that did not answer the progress read is not asked again.)
            clocks, unread = read_clocks(client, {r.queue.broker_name for _, _, p in read for r in p.rows})
        events, requests, said = [], [], []
        for cfg, assets, progress in read:
            brokers = {r.queue.broker_name for r in progress.rows}
            not_read = {b: f"{u.what}: {u.error}" for b, u in progress.unread.items()}
            mine = (
                [c for c in clocks if c.broker in brokers],
                {**{b: why for b, why in unread.items() if b in brokers}, **not_read},
            )
            ingestion_events, ingestion_requests, summary = lag_events(
                cfg, assets, progress, now_ms, instance, context.log, mine
            )
            events += ingestion_events
            requests += ingestion_requests
            said.append(summary)
        for cfg, assets, progress in dead_read:
            dead_events, dead_requests = dead_letter_events(cfg, assets, progress, now_ms, instance, context.log)
            events += dead_events
            requests += dead_requests
        # A group not read at all (the cluster, or its route, did not answer): its checks are not left green.
        events += unread_evaluations(members, read, failed, lambda a: a.table_key)
        events += unread_evaluations(dead_letters, dead_read, dead_failed or failed, lambda a: a.dead_letters.key)
        return SensorResult(
            asset_events=events,
            run_requests=requests,
            skip_reason=None if requests else SkipReason(tick_summary(said, failed + dead_failed)),
        )

    return lag


def unread_evaluations(members: Members, read: list, failed: list[str], key) -> list[AssetCheckEvaluation]:
    """A failed ``caught_up`` for each of ``members`` whose progress was not read, saying why (the tick's failure
    naming its group, else the tick's last failure)."""
    done = {id(cfg) for cfg, _, _ in read}
    evaluations = []
    for cfg, assets in members:
        if id(cfg) in done:
            continue
        why = next(
            (f for f in failed if f"group {cfg.consumer_group}:" in f),
            failed[-1] if failed else f"the progress of group {cfg.consumer_group} was not read",
        )
        evaluations.append(
            AssetCheckEvaluation(asset_key=key(assets), check_name=CAUGHT_UP_CHECK, **unread_outcome(cfg, why))
        )
    return evaluations
