"""One Dagster asset per ingestion: topic -> Delta table, one time-window partition per window.

The asset body stays thin: it turns the run's partitions into windows, calls ``engine.ingest``,
yields the materialization with its accounting check, and commits the consumer group's offsets
only once Dagster has recorded that materialization, whatever started the run (schedule,
backfill, UI or ``dagster asset materialize``), with no daemon involved.
"""

# No "from __future__ import annotations" here: Dagster inspects the context annotation at runtime.
import re
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetKey,
    AssetObservation,
    AssetRecordsFilter,
    AssetsDefinition,
    AssetSpec,
    BackfillPolicy,
    Backoff,
    BetaWarning,
    Failure,
    Jitter,
    MaterializeResult,
    MetadataValue,
    RetryPolicy,
    asset,
)

from rocketlake.dagster.instance_records import materialization_records
from rocketlake.dagster.metadata import (
    accounting_table,
    column_schema,
    progress_metadata,
    table_identity,
    windows_metadata,
)
from rocketlake.dagster.partitions import window_partitions, windows_between
from rocketlake.dagster.pool_limit import PoolNotLimited, check_pool_limited
from rocketlake.dagster.rocketmq_resource import MissingCredentials
from rocketlake.dagster.run_guard import record_process
from rocketlake.dagster.spark_resource import SparkResource
from rocketlake.dagster.translator import IngestionAssets
from rocketlake.delta.storage import ServerWithoutLake, apply_lake, delta_rs_options
from rocketlake.engine import ingest
from rocketlake.engine.broker_access import LiveGroup, TopicRefused, group_broker
from rocketlake.engine.config import IngestionConfig, LakeConfig, dead_letter_config
from rocketlake.engine.failures import failures_table
from rocketlake.engine.ledger import NewerLedger
from rocketlake.engine.listener import ListenerError, ListenerHung
from rocketlake.engine.offset_store import OffsetStoreCorrupt
from rocketlake.engine.orderly import LockLost, OutOfOrder, QueuesLocked
from rocketlake.engine.run import (
    BrokersSilent,
    Committed,
    GroupSharedWithPop,
    Landed,
    LandingRequest,
    Unbalanced,
    check_closed,
)
from rocketlake.engine.run import run as engine_run
from rocketlake.engine.traces import trace_landing
from rocketlake.engine.windows import MessagesDeleted, StoreTimeWindow, WindowNotClosed, to_ms
from rocketlake.rocketmq.errors import (
    BrokerError,
    ClosedBeforeAnswer,
    ConnectionFailed,
    ConnectionTurnedAway,
    RequestTimeout,
    RocketMQError,
    TopicNotExist,
    is_refusal,
)
from rocketlake.rocketmq.message_queue import MessageQueue
from rocketlake.rocketmq.retry import is_retriable
from rocketlake.spark.body import BodySchemaError
from rocketlake.spark.deadline import RunDeadlinePassed
from rocketlake.spark.materialize import LazySession, SparkLake

# A single-run backfill is the point of this asset (one Spark job per range of windows); Dagster
# marks the parameter beta, which is worth knowing once, not on every load of the code location.
warnings.filterwarnings("ignore", message=".*backfill_policy.*", category=BetaWarning)

CHECK_NAME = "offsets_accounted"
DEAD_LETTER_CHECK = "no_dead_letters"
SCHEDULE_TAG = "dagster/schedule_name"
# Set by the rebalance sensor on the runs it requests: the queue keys (comma-separated) to land, a subset of
# the member's share; such a run completes windows other runs left without these queues.
QUEUES_TAG = "rocketlake/queues"
# A run the orderly resume sensor asked for: like a scheduled run, it starts where the group stands.
RESUME_TAG = "rocketlake/resume"
# A run the lag sensor asked for to land what a trailing queue has not passed (``dagster.catch_up``; the table's
# name): like a scheduled run, it starts where the group stands, so windows landed already are not landed again.
CATCH_UP_TAG = "rocketlake/catch_up"
# Set by the schedule on a window it asks for ahead of its close (epoch ms of the close): the run waits for it.
CLOSES_AT_TAG = "rocketlake/closes_at_ms"
#: How far ahead of its close the schedule asks for a window: up to its next tick (a minute).
LEAD_SECONDS = 60


def rocketmq_resource_key(cluster: str) -> str:
    return f"rocketmq_{cluster}"


def _pool_part(group: str) -> str:
    # Dagster names allow [A-Za-z0-9_]; a group may also hold '-', '%' (a namespace's ``ns%group``) or '|'. Two
    # groups told apart only by those share a pool: they then run one at a time, which is always safe.
    return re.sub(r"[^A-Za-z0-9_]", "_", group)


def consumer_group_pool(group: str) -> str:
    return f"rocketmq_group_{_pool_part(group)}"


def dead_letter_pool(group: str) -> str:
    """The pool of the group's dead-letter steps, apart from its topic's.

    A run's dead-letter step comes after its table step, and each step claims its pool's slot on its own. Were
    they one pool, a run that finished its table step would wait for the slot again while it still holds its
    Spark application, and on a cluster another run's table step could hold the slot while waiting for that
    application's executors: a deadlock (seen on a two-core standalone cluster). The two steps share no queue,
    no table and no offset, so each kind keeps its own one-at-a-time order instead."""
    return f"rocketmq_group_{_pool_part(group)}_dlq"


@dataclass(frozen=True)
class IngestionStep:
    """What an asset body of one's own (``rocketlake.rocketlake_assets``) gets: the ingestion, and ``land()``, the
    step rocketlake's own asset runs. ``land()`` yields the materialization and its checks as rocketlake's body
    does; the offsets move after Dagster recorded them, whatever the body does before or after it."""

    ingestion: str
    config: IngestionConfig
    table_path: str
    land: Callable[[], Iterator[MaterializeResult | AssetCheckResult]]


#: An asset body of one's own: ``body(context, step)`` yields what ``step.land()`` yields, and more if it likes.
Body = Callable[[AssetExecutionContext, IngestionStep], Iterator]


def build_ingestion_asset(
    name: str, cfg: IngestionConfig, lake: LakeConfig, assets: IngestionAssets, body: Body | None = None
) -> AssetsDefinition:
    return _build_asset(
        name, cfg, lake, assets.table, upstream=[s.key for s in assets.topics], dead_letters=False, body=body
    )


def build_dead_letter_asset(
    name: str, cfg: IngestionConfig, lake: LakeConfig, assets: IngestionAssets
) -> AssetsDefinition:
    """``<table>_dlq``: the group's ``%DLQ%<group>`` landed the same way (windows, ledger, offsets after the
    materialization), downstream of the main table, with the original topic, msgId, reconsume count and last error."""
    return _build_asset(
        name,
        dead_letter_config(cfg),
        lake,
        assets.dead_letters,
        upstream=[assets.table_key],
        dead_letters=True,
        failures_path=lake.table_path(failures_table(cfg.table)),
    )


def _build_asset(
    name: str,
    cfg: IngestionConfig,
    lake: LakeConfig,
    spec: AssetSpec,
    *,
    upstream: list[AssetKey],
    dead_letters: bool,
    failures_path: str | None = None,
    body: Body | None = None,
) -> AssetsDefinition:
    rocketmq_key = rocketmq_resource_key(cfg.cluster)
    table_path = lake.table_path(cfg.table)
    checks = [
        AssetCheckSpec(
            CHECK_NAME,
            asset=spec.key,
            blocking=True,
            description="Every offset of every window's range is a row, filtered by tag, sent back, "
            "dead-lettered, kept as a failure or a duplicate copy: they add up to the "
            "sum of range sizes.",
        )
    ]
    if dead_letters:
        checks.append(
            AssetCheckSpec(
                DEAD_LETTER_CHECK,
                asset=spec.key,
                description="Warns when dead letters arrive: messages that failed max_reconsume_times times.",
            )
        )
    else:
        failures_path = lake.table_path(failures_table(cfg.table)) if cfg.can_fail else None

    pool = dead_letter_pool(cfg.consumer_group) if dead_letters else consumer_group_pool(cfg.consumer_group)

    @asset(
        key=spec.key,
        # topic -> table -> dead letters: the lineage graph a person reads (beside any deps the translator adds).
        deps=[*upstream, *(d.asset_key for d in spec.deps if d.asset_key not in upstream)],
        partitions_def=window_partitions(cfg.window),
        backfill_policy=BackfillPolicy.single_run(),
        pool=pool,
        required_resource_keys={"spark", rocketmq_key},
        check_specs=checks,
        retry_policy=retry_policy(cfg),
        kinds=spec.kinds,
        group_name=spec.group_name,
        owners=spec.owners,
        tags=spec.tags,
        code_version=spec.code_version,
        automation_condition=spec.automation_condition,
        description=spec.description,
        metadata={
            **spec.metadata,
            **table_identity(cfg.table, table_path),
            **({"rocketlake/failures_table": MetadataValue.path(failures_path)} if failures_path else {}),
        },
    )
    def ingestion_asset(context: AssetExecutionContext) -> Iterator[MaterializeResult]:
        if body is None:
            yield from land(context)
        else:
            yield from body(context, IngestionStep(name, cfg, table_path, partial(land, context)))

    def land(context: AssetExecutionContext) -> Iterator[MaterializeResult | AssetCheckResult]:
        spark: SparkResource = context.resources.spark
        rocketmq = getattr(context.resources, rocketmq_key)
        try:
            # First of all: one writer per group holds only if the instance runs one step of the pool at a time.
            check_pool_limited(context.instance, pool, cfg.consumer_group)
            yield from run_step(context, name, cfg, table_path, spark, rocketmq, failures_path, dead_letters, lake)
        except REFUSED as e:  # the cluster turns this run away for its TLS or its keys: only new settings help
            raise Failure(description=explain(e, cfg, rocketmq.namesrv), allow_retries=False) from e
        except TRANSIENT as e:
            raise Failure(description=explain(e, cfg, rocketmq.namesrv)) from e
        except PERMANENT as e:
            # A retry cannot fix these: fail at once, with the one line a person needs.
            raise Failure(description=explain(e, cfg, rocketmq.namesrv), allow_retries=False) from e
        except RocketMQError as e:
            # Every other answer of the cluster (a broker's error code, a protocol error, a range it cannot serve):
            # one sentence naming the broker, the request and the code; retried only when RocketMQ says a later
            # identical call may succeed (SYSTEM_BUSY, ...), never for a refusal (an ACL without the permission).
            raise Failure(description=explain(e, cfg, rocketmq.namesrv), allow_retries=is_retriable(e)) from e

    return ingestion_asset


# Errors a later attempt may not meet again (a broker back up, a lock released), and those it would meet again.
REFUSED = (ConnectionTurnedAway, MissingCredentials)
TRANSIENT = (
    ConnectionFailed,
    RequestTimeout,
    QueuesLocked,
    LockLost,
    BrokersSilent,
    RunDeadlinePassed,
    ListenerHung,
    ingest.SendBackFailed,
    ingest.SlaveBehind,
    ingest.MasterChanged,
)
PERMANENT = (
    GroupSharedWithPop,
    TopicRefused,
    PoolNotLimited,
    TopicNotExist,
    MessagesDeleted,
    ingest.LedgerAheadOfBroker,
    OutOfOrder,
    OffsetStoreCorrupt,
    ListenerError,
    BodySchemaError,
    NewerLedger,
)


def retry_policy(cfg: IngestionConfig) -> RetryPolicy | None:
    """Dagster retries a failed window run's step without a person: ``run_retry.delay_seconds`` doubled per attempt,
    with jitter, ``run_retry.max_retries`` times; the run then fails. Every attempt starts from the ledger, so a
    retry after a failure anywhere is an ordinary re-run."""
    if cfg.run_retry.max_retries == 0:
        return None
    return RetryPolicy(
        max_retries=cfg.run_retry.max_retries,
        delay=cfg.run_retry.delay_seconds,
        backoff=Backoff.EXPONENTIAL,
        jitter=Jitter.PLUS_MINUS,
    )


def seconds_to_close(tags, now_s: float) -> float:
    """How long a run asked for ahead of its window's close (``CLOSES_AT_TAG``) waits: until the close, never
    longer than the lead (a later close is refused by ``check_closed`` as for any open window)."""
    closes_at = tags.get(CLOSES_AT_TAG)
    if closes_at is None:
        return 0.0
    wait = int(closes_at) / 1000 - now_s
    return wait if 0 < wait <= LEAD_SECONDS else 0.0


def wait_for_close(context: AssetExecutionContext) -> None:
    wait = seconds_to_close(context.run.tags, time.time())
    if wait:
        context.log.info(
            f"the schedule asked for this run's last window ahead of its close (end + grace): waiting {wait:.1f}s "
            "for it before planning"
        )
        while wait > 0:  # a sleep ends on the monotonic clock; the close is on the wall clock
            time.sleep(wait)
            wait = int(context.run.tags[CLOSES_AT_TAG]) / 1000 - time.time()


def run_step(
    context: AssetExecutionContext,
    name: str,
    cfg: IngestionConfig,
    table_path: str,
    spark_resource: SparkResource,
    rocketmq,
    failures_path: str | None = None,
    dead_letters: bool = False,
    storage: LakeConfig | None = None,
) -> Iterator[MaterializeResult | AssetCheckResult]:
    """The asset's step: Dagster's context translated into the engine's run (``engine.run.run``), and its events
    into Dagster's."""
    # A run of another job than rocketlake's (the UI's Materialize button) is recorded here, for the dead-runs sensor.
    record_process(context.instance, context.run)
    wait_for_close(context)
    now_ms = int(time.time() * 1000)
    partitions = context.assets_def.partitions_def
    windows = []
    for key in context.partition_keys:
        tw = partitions.time_window_for_partition_key(key)
        windows.append((key, StoreTimeWindow.from_datetimes(tw.start, tw.end)))
    only = context.run.tags.get(QUEUES_TAG)
    request = LandingRequest(
        ingestion=name,
        run_id=context.run.run_id,
        windows=windows,
        now_ms=now_ms,
        first_window_start_ms=to_ms(cfg.window.start),
        start_at_group_position=any(tag in context.run.tags for tag in (SCHEDULE_TAG, RESUME_TAG, CATCH_UP_TAG)),
        only_queues=None if only is None else {MessageQueue.from_key(k) for k in only.split(",") if k},
        windows_between=partial(windows_between, partitions),
    )
    try:
        check_closed(request, cfg)  # before a Spark session starts: the open window is a partition (window_partitions)
    except WindowNotClosed as e:
        raise Failure(description=str(e), allow_retries=False) from None
    timeout = cfg.mq_client_api_timeout
    client = rocketmq.client(timeout)  # the ACL keys' variables are read here: unset, the run stops before Spark

    def open_session():
        """The run's Spark session, opened when the run first needs one (a quiet window's run never does)."""
        spark = spark_resource.session()
        if storage is not None:
            try:  # S3A's settings and keys in the session's Hadoop configuration, not Spark's; on Connect, the server's
                apply_lake(spark, storage)
            except ServerWithoutLake as e:
                raise Failure(description=str(e), allow_retries=False) from None
        return spark

    lake = SparkLake(
        LazySession(open_session),
        rocketmq.source_options(timeout),
        cfg,
        table_path,
        None if dead_letters else failures_path,
        last_errors_from=failures_path if dead_letters else None,
        storage_options=None if storage is None else delta_rs_options(storage),
    )
    recorded = DagsterRecordedRuns(context.instance, context.asset_key)
    engine = engine_run(
        group_broker(client, cfg), lake, recorded, LiveGroup(rocketmq.client(timeout), cfg), cfg, request, context.log
    )
    landed = None
    try:
        for event in engine:
            if isinstance(event, Landed):
                landed = event
                yield from landed_events(context, cfg, table_path, event, dead_letters)
            elif isinstance(event, Committed):
                context.log_event(
                    AssetObservation(asset_key=context.asset_key, metadata=progress_metadata(cfg, event.positions))
                )
                if rocketmq.trace and landed is not None:
                    traces_of(context, client, rocketmq, lake, cfg, landed, now_ms)
    except WindowNotClosed as e:
        raise Failure(description=str(e), allow_retries=False) from None
    except Unbalanced as e:
        raise Failure(description=str(e)) from None


def traces_of(context, client, rocketmq, lake: SparkLake, cfg: IngestionConfig, landed: Landed, started_ms: int):
    """Consume traces of what ``landed`` committed (``engine.traces``), after its offsets: a trace that cannot be
    sent is a warning, never a failed run (the window and its offsets are committed by then)."""
    entry = landed.slice.ledger
    try:
        traced, sent = trace_landing(
            client,
            lake,
            entry,
            cfg.consumer_group,
            rocketmq.trace_topic,
            rocketmq.trace_max_per_window,
            started_ms,
        )
    except RocketMQError as e:
        context.log.warning(f"consume traces of run {entry.run_id} not sent to {rocketmq.trace_topic}: {e}")
        return
    context.log.info(f"consume traces of {traced} message(s) sent to {rocketmq.trace_topic} in {sent} message(s)")


def landed_events(
    context: AssetExecutionContext, cfg: IngestionConfig, table_path: str, landed: Landed, dead_letters: bool
) -> Iterator[MaterializeResult | AssetCheckResult]:
    """A balanced landing: the materialization with its windows' metadata and its checks. An unbalanced one: the
    failed check alone, so Dagster records no materialization and nothing moves an offset over it."""
    m = landed.slice
    checks = [
        AssetCheckResult(
            check_name=CHECK_NAME,
            passed=landed.balanced,
            metadata={"windows": accounting_table(m)},
            description=None if landed.balanced else "some offsets are not accounted for: see the windows",
        )
    ]
    if dead_letters:
        arrived = sum(a.rows for a in m.accounting)
        checks.append(
            AssetCheckResult(
                check_name=DEAD_LETTER_CHECK,
                passed=arrived == 0,
                severity=AssetCheckSeverity.WARN,
                metadata={"dead_letters": MetadataValue.int(arrived)},
                description=f"{arrived} dead letter(s) arrived in these windows" if arrived else None,
            )
        )
    if not landed.balanced:
        yield checks[0]
        return
    table = {**table_identity(cfg.table, table_path), **column_schema(landed.columns)}
    replaced = tuple(tail.describe(cfg.consumer_group) for tail in landed.prepared.replaced)
    for key, metadata in windows_metadata(m, landed.share.describe(), set(context.partition_keys), replaced).items():
        context.add_asset_metadata({**metadata, **table}, partition_key=key)  # each window its own figures
    yield MaterializeResult(check_results=checks)


def explain(error: Exception, cfg: IngestionConfig, namesrv: str) -> str:
    """The one line a person needs for the errors people meet, with what to do."""
    consistent = "The table and the group's offsets stay consistent; run the window again once this is fixed."
    if isinstance(error, MissingCredentials):
        return f"{error}. {consistent}"
    if isinstance(error, ConnectionTurnedAway) or (isinstance(error, BrokerError) and is_refusal(error)):
        return f"cluster {cfg.cluster!r} ({namesrv}) turned this run away: {error}. {consistent}"
    if isinstance(error, ClosedBeforeAnswer):  # a server that just crashed (one enforcing TLS is turned away above)
        return f"cluster {cfg.cluster!r} ({namesrv}) closed the run's connection at once: {error}. {consistent}"
    if isinstance(error, BrokersSilent):
        return f"cluster {cfg.cluster!r} ({namesrv}): {error}. {consistent}"
    if isinstance(error, (ConnectionFailed, RequestTimeout)):
        return (
            f"cannot reach RocketMQ ({error}). Check that the name server {namesrv} of cluster {cfg.cluster!r} "
            f"and its brokers are up (`rocketlake local status` for the local one). {consistent}"
        )
    if isinstance(error, TopicNotExist):
        if cfg.topic_pattern is not None:
            return f"{error} ({namesrv}): create a matching topic or fix `topic_pattern`. {consistent}"
        return (
            f"a topic of {cfg.topic_label} does not exist on cluster {cfg.cluster!r} ({namesrv}): {error}. "
            f"Create it (mqadmin updateTopic) or fix the configuration. {consistent}"
        )
    if isinstance(error, RocketMQError):
        return f"cluster {cfg.cluster!r} ({namesrv}) answered this run with an error: {error}. {consistent}"
    return str(error)


class DagsterRecordedRuns:
    """``ingest.RecordedRuns`` from the Dagster instance: materializations of this asset, per partition."""

    def __init__(self, instance, asset_key: AssetKey):
        self.instance = instance
        self.asset_key = asset_key

    def among(self, partition_keys) -> set[str]:
        keys = sorted(set(partition_keys))
        if not keys:
            return set()
        return {
            r.run_id
            for r in materialization_records(
                self.instance, AssetRecordsFilter(asset_key=self.asset_key, asset_partitions=keys)
            )
        }
