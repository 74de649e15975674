"""The member's Prometheus endpoint: ``rocketlake member INGESTION --metrics-port PORT``.

Operators watch Prometheus, not only the Dagster UI: the member process, long-lived beside the code location,
serves ``/metrics`` in Prometheus' text format. A custom collector computes every figure when Prometheus scrapes
(nothing is sampled in between), from three sources:

- the brokers, per subscribed queue, as ``rocketlake offsets show`` reads them: max offset, the group's committed
  offset, lag in messages (max - committed, mqadmin's Diff) and in seconds; and the dead letters waiting in
  ``%DLQ%<group>`` (CLUSTERING), as the retry-backlog sensor measures them;
- the table's ledger (delta-rs, no Spark): the end of what was landed on each queue;
- the Dagster instance of ``$DAGSTER_HOME``: the figures of the table asset's materializations (``dagster.metadata``:
  rows, body bytes, sent back, failed, dead-lettered) and the durations of the ingestion job's runs that finished.

The Dagster figures are counters from this process's start: each scrape adds what was recorded since the last one
(a storage-id cursor), and Prometheus' ``rate()`` and ``increase()`` take a restart as the reset it is. Reading the
whole event log instead would make each start's first scrape read every materialization the asset ever had (a
minute window records 1,440 a day), far past a scrape's timeout.

A source that fails (a broker down, the instance unreachable) leaves its metrics out of that scrape only: it adds 1
to ``rocketlake_scrape_errors_total{source}``, sets ``rocketlake_source_up{source}`` to 0 and says so once in the
member's log; a scrape never ends the process. Labels name the ingestion, its group, topic, broker and queue, the
job and a run's status: never the cluster's ACL keys, and no error text.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from rocketlake.engine.progress import QueueProgress
from rocketlake.rocketmq.message_queue import MessageQueue

BROKER, LEDGER, DAGSTER = "broker", "ledger", "dagster"
SOURCES = (BROKER, LEDGER, DAGSTER)
#: Upper bounds (seconds) of the run-duration buckets: a window's run takes seconds to a minute, a backfill minutes.
DURATION_BUCKETS = (5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
GROUP_LABELS = ("ingestion", "consumer_group")
QUEUE_LABELS = (*GROUP_LABELS, "topic", "broker", "queue")


@dataclass(frozen=True)
class LandedFigures:
    """One window's materialization: the figures ``dagster.metadata`` records on its partition."""

    rows: int = 0
    body_bytes: int = 0
    sent_back: int = 0  # failed, sent back to %RETRY%<group> (CLUSTERING)
    failed: int = 0  # failed, kept in the failures table (BROADCASTING)
    dead_lettered: int = 0  # failed for the last time, sent to %DLQ%<group>


@dataclass(frozen=True)
class FinishedRun:
    run_id: str
    status: str  # SUCCESS, FAILURE or CANCELED
    seconds: float  # from its start to its end
    end: float = 0.0  # epoch seconds


@dataclass(frozen=True)
class BrokerReading:
    queues: list[QueueProgress]
    dead_letters_waiting: int | None = None  # None: the group has no %DLQ% (BROADCASTING, a dead-letter ingestion)


class DagsterReads(Protocol):
    def read(self) -> tuple[list[LandedFigures], list[FinishedRun]]:
        """What was recorded since the last read (the first: since the member started); raises when it cannot."""

    def close(self) -> None: ...


class _Histogram:
    def __init__(self):
        self.counts = [0] * len(DURATION_BUCKETS)
        self.total, self.sum = 0, 0.0

    def observe(self, seconds: float) -> None:
        for i, bound in enumerate(DURATION_BUCKETS):
            if seconds <= bound:
                self.counts[i] += 1
        self.total += 1
        self.sum += seconds

    def buckets(self) -> list[tuple[str, int]]:
        return [(repr(bound), n) for bound, n in zip(DURATION_BUCKETS, self.counts)] + [("+Inf", self.total)]


class MemberCollector(Collector):
    """The member's metrics for one ingestion, computed at each scrape (one scrape at a time)."""

    def __init__(
        self,
        ingestion: str,
        consumer_group: str,
        job_name: str,
        broker: Callable[[], BrokerReading],
        landed: Callable[[], Mapping[MessageQueue, int]],
        dagster: DagsterReads,
        log: Callable[[str], None] = print,
    ):
        self.group_values = (ingestion, consumer_group)
        self.job_name = job_name
        self.broker, self.landed, self.dagster, self.log = broker, landed, dagster, log
        self._lock = threading.Lock()
        self._totals = LandedFigures()
        self._windows = 0
        self._durations: dict[str, _Histogram] = {}
        self._errors = dict.fromkeys(SOURCES, 0)
        self._up: dict[str, bool] = {}

    def describe(self) -> list[Metric]:
        return []  # registering must not scrape

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            families = list(self._scrape())
        yield from families

    def close(self) -> None:
        """After the last scrape (waits for one under way, as long as its sources' timeouts)."""
        locked = self._lock.acquire(timeout=30)
        try:
            self.dagster.close()
        finally:
            if locked:
                self._lock.release()

    def _read(self, source: str, read: Callable):
        try:
            value = read()
        except Exception as e:  # whatever a source raises, the other metrics are served
            self._errors[source] += 1
            if self._up.get(source, True):
                self.log(
                    f"metrics: cannot read the {source} ({type(e).__name__}: {e}); its metrics are left out of "
                    "the scrapes until it answers (rocketlake_source_up)"
                )
            self._up[source] = False
            return None
        if self._up.get(source) is False:
            self.log(f"metrics: the {source} answers again")
        self._up[source] = True
        return value

    def _scrape(self) -> Iterator[Metric]:
        broker = self._read(BROKER, self.broker)
        landed = self._read(LEDGER, self.landed)
        dagster = self._read(DAGSTER, self.dagster.read)
        if dagster is not None:
            self._add(*dagster)
        if broker is not None:
            yield from self._queue_families(broker)
        if landed is not None:
            yield self._gauge_per_queue(
                "rocketlake_queue_landed_offset",
                "The end (exclusive) of what the table's ledger says was landed on the queue.",
                sorted(landed.items()),
            )
        yield from self._total_families()
        errors = CounterMetricFamily(
            "rocketlake_scrape_errors", "Scrapes in which a source could not be read.", labels=[*GROUP_LABELS, "source"]
        )
        up = GaugeMetricFamily(
            "rocketlake_source_up",
            "1 when the source answered this scrape, 0 when it did not.",
            labels=[*GROUP_LABELS, "source"],
        )
        for source in SOURCES:
            errors.add_metric([*self.group_values, source], self._errors[source])
            up.add_metric([*self.group_values, source], 1 if self._up.get(source) else 0)
        yield errors
        yield up

    def _add(self, landings: list[LandedFigures], runs: list[FinishedRun]) -> None:
        t = self._totals
        for a in landings:
            t = LandedFigures(
                t.rows + a.rows,
                t.body_bytes + a.body_bytes,
                t.sent_back + a.sent_back,
                t.failed + a.failed,
                t.dead_lettered + a.dead_lettered,
            )
        self._totals, self._windows = t, self._windows + len(landings)
        for run in runs:
            self._durations.setdefault(run.status.lower(), _Histogram()).observe(run.seconds)

    def _queue_labels(self, mq: MessageQueue) -> list[str]:
        return [*self.group_values, mq.topic, mq.broker_name, str(mq.queue_id)]

    def _gauge_per_queue(self, name: str, doc: str, values) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, doc, labels=QUEUE_LABELS)
        for mq, value in values:
            family.add_metric(self._queue_labels(mq), value)
        return family

    def _queue_families(self, reading: BrokerReading) -> Iterator[Metric]:
        rows = reading.queues
        now_ms = int(time.time() * 1000)
        yield self._gauge_per_queue(
            "rocketlake_queue_max_offset",
            "The broker's max offset of the queue.",
            [(r.queue, r.max_offset) for r in rows],
        )
        yield self._gauge_per_queue(
            "rocketlake_queue_committed_offset",
            "The group's committed offset (BROADCASTING: the member's local store); absent while it has none.",
            [(r.queue, r.committed) for r in rows if r.committed is not None],
        )
        yield self._gauge_per_queue(
            "rocketlake_queue_lag_messages",
            "Messages not consumed yet: max offset - committed offset (mqadmin's Diff).",
            [(r.queue, r.lag) for r in rows],
        )
        yield self._gauge_per_queue(
            "rocketlake_queue_lag_seconds",
            "How long ago the oldest message the group has not passed was stored (0: none).",
            [(r.queue, r.lag_seconds(now_ms)) for r in rows],
        )
        if reading.dead_letters_waiting is not None:
            waiting = GaugeMetricFamily(
                "rocketlake_dead_letters_waiting",
                "Messages in %DLQ%<group> not landed in the dead-letter table yet.",
                labels=GROUP_LABELS,
            )
            waiting.add_metric(list(self.group_values), reading.dead_letters_waiting)
            yield waiting

    def _total_families(self) -> Iterator[Metric]:
        t, labels = self._totals, list(self.group_values)
        for name, doc, value in (
            ("rocketlake_landed_messages", "Rows landed in the table.", t.rows),
            ("rocketlake_landed_body_bytes", "Bytes of the message bodies landed (before decoding).", t.body_bytes),
            (
                "rocketlake_dead_lettered_messages",
                "Messages that failed for the last time, sent to %DLQ%<group>.",
                t.dead_lettered,
            ),
            ("rocketlake_landed_windows", "Window materializations recorded.", self._windows),
        ):
            family = CounterMetricFamily(name, f"{doc} Since the member started.", labels=GROUP_LABELS)
            family.add_metric(labels, value)
            yield family
        failed = CounterMetricFamily(
            "rocketlake_failed_messages",
            "Messages the listener or the decoding failed, by what became of them: sent_back "
            "(to %RETRY%<group>), failures_table (kept there). Since the member started.",
            labels=[*GROUP_LABELS, "outcome"],
        )
        failed.add_metric([*labels, "sent_back"], t.sent_back)
        failed.add_metric([*labels, "failures_table"], t.failed)
        yield failed
        durations = HistogramMetricFamily(
            "rocketlake_run_duration_seconds",
            "Durations of the ingestion job's runs that finished since the member "
            "started, from start to end, by status.",
            labels=[*GROUP_LABELS, "job", "status"],
        )
        for status, histogram in sorted(self._durations.items()):
            durations.add_metric([*labels, self.job_name, status], histogram.buckets(), histogram.sum)
        yield durations


def landing_of(metadata: Mapping) -> LandedFigures | None:
    """A materialization's figures, from its metadata (None: not one of rocketlake's windows)."""
    from rocketlake.dagster.metadata import BODY_BYTES, DEAD_LETTERED, FAILED, ROWS, SENT_BACK

    if ROWS not in metadata:
        return None

    def figure(key: str) -> int:
        value = metadata.get(key)
        return int(getattr(value, "value", value) or 0)

    return LandedFigures(figure(ROWS), figure(BODY_BYTES), figure(SENT_BACK), figure(FAILED), figure(DEAD_LETTERED))


class DagsterInstanceReads:
    """``DagsterReads`` from the instance of ``$DAGSTER_HOME`` (or the local one), opened at the first read and kept;
    after an error it is opened again at the next."""

    PAGE = 1000
    #: How far back of the newest finished run each read looks again for runs not seen (their records are written
    #: as they end, in no strict order between processes).
    RUN_MARGIN_S = 300.0

    def __init__(self, asset_key, job_name: str, since_s: float, home: Path | None = None):
        self.asset_key, self.job_name, self.since_s, self.home = asset_key, job_name, since_s, home
        self._instance = None
        self._after_id: int | None = None
        self._runs_seen: dict[str, float] = {}  # run id -> its end, within the margin
        self._newest_end = since_s

    def _open(self):
        from dagster import DagsterInstance

        from rocketlake.dagster.launch import LOCAL_DAGSTER_HOME

        home = self.home or (Path(os.environ["DAGSTER_HOME"]) if os.environ.get("DAGSTER_HOME") else None)
        if home is None:  # not dagster_home(): it would set DAGSTER_HOME, which names this member (its client id)
            if not (LOCAL_DAGSTER_HOME / "dagster.yaml").is_file():
                raise LookupError(
                    "no Dagster instance: DAGSTER_HOME is not set and there is no local instance "
                    f"{LOCAL_DAGSTER_HOME.absolute()}"
                )
            home = LOCAL_DAGSTER_HOME
        self._instance = DagsterInstance.from_config(str(home.absolute()))
        return self._instance

    def read(self) -> tuple[list[LandedFigures], list[FinishedRun]]:
        instance = self._instance or self._open()
        try:
            landings, after_id = self._landings(instance)
            runs = self._finished_runs(instance)
        except Exception:
            self.close()
            raise
        self._after_id = after_id
        for run in runs:
            self._runs_seen[run.run_id] = run.end
            self._newest_end = max(self._newest_end, run.end)
        self._runs_seen = {
            k: end for k, end in self._runs_seen.items() if end >= self._newest_end - 2 * self.RUN_MARGIN_S
        }
        return landings, runs

    def _landings(self, instance) -> tuple[list[LandedFigures], int | None]:
        from dagster import AssetRecordsFilter

        from rocketlake.dagster.instance_records import materialization_records

        after_id = self._after_id
        records_filter = (
            AssetRecordsFilter(asset_key=self.asset_key, after_timestamp=self.since_s)
            if after_id is None
            else AssetRecordsFilter(asset_key=self.asset_key, after_storage_id=after_id)
        )
        landings = []
        for record in materialization_records(instance, records_filter, page=self.PAGE, ascending=True):
            after_id = max(after_id or 0, record.storage_id)
            landing = landing_of(record.asset_materialization.metadata) if record.asset_materialization else None
            if landing is not None:
                landings.append(landing)
        return landings, after_id

    def _finished_runs(self, instance) -> list[FinishedRun]:
        from dagster import DagsterRunStatus, RunsFilter

        finished = [DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED]
        updated_after = datetime.fromtimestamp(self._newest_end - self.RUN_MARGIN_S, tz=timezone.utc)
        records = instance.get_run_records(
            RunsFilter(job_name=self.job_name, statuses=finished, updated_after=updated_after)
        )
        runs = []
        for r in records:
            run_id = r.dagster_run.run_id
            # A run that never started (its launch failed) has no duration: left out.
            if r.end_time is None or r.start_time is None or r.end_time < self.since_s or run_id in self._runs_seen:
                continue
            runs.append(
                FinishedRun(run_id, r.dagster_run.status.value, max(0.0, r.end_time - r.start_time), r.end_time)
            )
        return runs

    def close(self) -> None:
        instance, self._instance = self._instance, None
        if instance is not None:
            instance.dispose()


def member_collector(
    config, name: str, client, landed: Callable[[], Mapping[MessageQueue, int]], log: Callable[[str], None] = print
) -> MemberCollector:
    """The collector of ingestion ``name`` of ``config``: its brokers through ``client``, its ledger through
    ``landed``, its table asset and job under their default names (``dagster.translator``), from now on."""
    from rocketlake.dagster.translator import translate
    from rocketlake.engine.backlog import backlog_of
    from rocketlake.engine.broker_access import group_broker
    from rocketlake.engine.config import DLQ_GROUP_TOPIC_PREFIX, MessageModel
    from rocketlake.engine.progress import group_progress

    cfg = config.ingestions[name]
    assets = translate(config)[name]
    has_dead_letters = cfg.message_model is MessageModel.CLUSTERING and cfg.dead_letters_of is None

    def broker() -> BrokerReading:
        rows = group_progress(group_broker(client, cfg))
        waiting = (
            backlog_of(client, cfg.consumer_group, DLQ_GROUP_TOPIC_PREFIX + cfg.consumer_group).waiting
            if has_dead_letters
            else None
        )
        return BrokerReading(rows, waiting)

    return MemberCollector(
        name,
        cfg.consumer_group,
        assets.job_name,
        broker,
        landed,
        DagsterInstanceReads(assets.table_key, assets.job_name, time.time()),
        log,
    )


class MetricsEndpoint:
    """``/metrics`` served on a thread of its own until ``stop``."""

    def __init__(self, server, thread: threading.Thread, on_stop: tuple[Callable[[], None], ...] = ()):
        self._server, self._thread, self._on_stop = server, thread, on_stop

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return host, port

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
        for close in self._on_stop:
            close()


def serve(
    collector: Collector, port: int, address: str = "127.0.0.1", on_stop: tuple[Callable[[], None], ...] = ()
) -> MetricsEndpoint:
    """Serve ``collector`` and the process's own figures (``process_*``: CPU, memory, start time) on ``address``:
    ``port`` (0: a free port; ``MetricsEndpoint.address`` says which); OSError when it cannot listen there."""
    from prometheus_client import CollectorRegistry, start_http_server
    from prometheus_client.process_collector import ProcessCollector

    registry = CollectorRegistry()
    registry.register(collector)
    ProcessCollector(registry=registry)
    server, thread = start_http_server(port, addr=address, registry=registry)
    return MetricsEndpoint(server, thread, on_stop)
