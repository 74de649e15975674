"""The member's Prometheus endpoint: what a scrape says for given offsets, ledger ends and Dagster records, that a
source failing costs only its own metrics, and that the endpoint stops cleanly (``rocketlake.member.metrics``)."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from rocketlake.engine.progress import QueueProgress
from rocketlake.member.metrics import (
    BrokerReading,
    FinishedRun,
    LandedFigures,
    MemberCollector,
    landing_of,
    serve,
)
from rocketlake.rocketmq.message_queue import MessageQueue

pytestmark = pytest.mark.unit

A0, A1 = MessageQueue("orders", "broker-a", 0), MessageQueue("orders", "broker-a", 1)
R0 = MessageQueue("%RETRY%g", "broker-b", 0)
GROUP = {"ingestion": "orders", "consumer_group": "g"}


class Dagster:
    """``DagsterReads`` as plain data: each read hands over the next batch (or raises it)."""

    def __init__(self, *batches):
        self.batches = list(batches)
        self.closed = False

    def read(self):
        batch = self.batches.pop(0) if self.batches else ([], [])
        if isinstance(batch, Exception):
            raise batch
        return batch

    def close(self):
        self.closed = True


def collector(broker=None, landed=None, dagster=None, log=None) -> MemberCollector:
    rows = [QueueProgress(A0, 0, 10, 4, None), QueueProgress(A1, 0, 9, None, None), QueueProgress(R0, 0, 3, 3, None)]
    return MemberCollector(
        "orders",
        "g",
        "orders_job",
        broker or (lambda: BrokerReading(rows, 2)),
        landed or (lambda: {A0: 4, A1: 7}),
        dagster or Dagster(),
        log=log if log is not None else (lambda line: None),
    )


def scrape(c: MemberCollector) -> dict[tuple[str, frozenset], float]:
    """Sample name and labels -> value, as Prometheus would read the text."""
    registry = CollectorRegistry()
    registry.register(c)
    text = generate_latest(registry).decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def at(samples, name: str, **labels) -> float | None:
    return samples.get((name, frozenset({**GROUP, **labels}.items())))


def queue(mq: MessageQueue) -> dict[str, str]:
    return {"topic": mq.topic, "broker": mq.broker_name, "queue": str(mq.queue_id)}


def test_per_queue_offsets_lag_and_landed_ends():
    samples = scrape(collector())
    assert at(samples, "rocketlake_queue_max_offset", **queue(A0)) == 10
    assert at(samples, "rocketlake_queue_committed_offset", **queue(A0)) == 4
    assert at(samples, "rocketlake_queue_lag_messages", **queue(A0)) == 6
    assert at(samples, "rocketlake_queue_committed_offset", **queue(A1)) is None  # none yet: no sample
    assert at(samples, "rocketlake_queue_lag_messages", **queue(A1)) == 9  # as mqadmin's Diff
    assert at(samples, "rocketlake_queue_lag_messages", **queue(R0)) == 0
    assert at(samples, "rocketlake_queue_lag_seconds", **queue(A0)) == 0  # nothing read as pending
    assert at(samples, "rocketlake_queue_landed_offset", **queue(A1)) == 7
    assert at(samples, "rocketlake_queue_landed_offset", **queue(R0)) is None
    assert at(samples, "rocketlake_dead_letters_waiting") == 2
    for source in ("broker", "ledger", "dagster"):
        assert at(samples, "rocketlake_source_up", source=source) == 1
        assert at(samples, "rocketlake_scrape_errors_total", source=source) == 0


def test_totals_add_up_the_materializations_and_runs_read_since_the_last_scrape():
    dagster = Dagster(
        (
            [
                LandedFigures(rows=5, body_bytes=100, sent_back=1),
                LandedFigures(rows=3, body_bytes=60, failed=2, dead_lettered=1),
            ],
            [FinishedRun("r1", "SUCCESS", 4.0), FinishedRun("r2", "FAILURE", 70.0)],
        ),
        ([LandedFigures(rows=2, body_bytes=40)], [FinishedRun("r3", "SUCCESS", 12.5)]),
    )
    c = collector(dagster=dagster)
    first = scrape(c)
    assert at(first, "rocketlake_landed_messages_total") == 8
    assert at(first, "rocketlake_landed_body_bytes_total") == 160
    assert at(first, "rocketlake_failed_messages_total", outcome="sent_back") == 1
    assert at(first, "rocketlake_failed_messages_total", outcome="failures_table") == 2
    assert at(first, "rocketlake_dead_lettered_messages_total") == 1
    assert at(first, "rocketlake_landed_windows_total") == 2
    second = scrape(c)
    assert at(second, "rocketlake_landed_messages_total") == 10 and at(second, "rocketlake_landed_windows_total") == 3
    success = {"job": "orders_job", "status": "success"}
    assert at(second, "rocketlake_run_duration_seconds_count", **success) == 2
    assert at(second, "rocketlake_run_duration_seconds_sum", **success) == 16.5
    assert at(second, "rocketlake_run_duration_seconds_bucket", le="5.0", **success) == 1
    assert at(second, "rocketlake_run_duration_seconds_bucket", le="20.0", **success) == 2
    assert at(second, "rocketlake_run_duration_seconds_bucket", le="60.0", job="orders_job", status="failure") == 0
    assert at(second, "rocketlake_run_duration_seconds_bucket", le="+Inf", job="orders_job", status="failure") == 1
    assert scrape(c)[("rocketlake_landed_messages_total", frozenset(GROUP.items()))] == 10  # nothing new: unchanged


def test_a_source_that_fails_costs_its_own_metrics_only_and_is_said_once():
    said, broker_up = [], [False]
    rows = [QueueProgress(A0, 0, 10, 4, None)]

    def broker():
        if not broker_up[0]:
            raise ConnectionError("broker-a is down")
        return BrokerReading(rows)

    c = collector(
        broker=broker,
        dagster=Dagster(RuntimeError("database is locked"), ([LandedFigures(rows=7)], [])),
        log=said.append,
    )
    for _ in range(2):
        samples = scrape(c)
    assert at(samples, "rocketlake_queue_max_offset", **queue(A0)) is None
    assert at(samples, "rocketlake_queue_landed_offset", **queue(A0)) == 4  # the ledger still answers
    assert at(samples, "rocketlake_source_up", source="broker") == 0
    assert at(samples, "rocketlake_scrape_errors_total", source="broker") == 2
    assert at(samples, "rocketlake_scrape_errors_total", source="dagster") == 1  # failed once, then read
    assert at(samples, "rocketlake_landed_messages_total") == 7
    assert len([line for line in said if "broker-a is down" in line]) == 1  # a down source is said once
    broker_up[0] = True
    samples = scrape(c)
    assert at(samples, "rocketlake_queue_lag_messages", **queue(A0)) == 6
    assert at(samples, "rocketlake_source_up", source="broker") == 1
    assert at(samples, "rocketlake_dead_letters_waiting") is None  # a group without %DLQ%: no figure
    assert said[-1] == "metrics: the broker answers again"


def test_a_landing_is_read_from_the_metadata_rocketlake_records():
    from dagster import MetadataValue

    from rocketlake.dagster.metadata import BODY_BYTES, DEAD_LETTERED, FAILED, ROWS, SENT_BACK

    metadata = {
        ROWS: MetadataValue.int(5),
        BODY_BYTES: MetadataValue.int(120),
        SENT_BACK: MetadataValue.int(2),
        FAILED: MetadataValue.int(0),
        DEAD_LETTERED: MetadataValue.int(1),
        "dagster/row_count": 5,
    }
    assert landing_of(metadata) == LandedFigures(rows=5, body_bytes=120, sent_back=2, failed=0, dead_lettered=1)
    assert landing_of({"dagster/row_count": MetadataValue.int(5)}) is None  # not one of rocketlake's windows


def test_no_secret_reaches_a_label_or_the_text(tmp_path, monkeypatch):
    from rocketlake.engine.config import parse_config
    from rocketlake.member.metrics import member_collector

    monkeypatch.setenv("MQ_AK", "AK-very-secret")
    monkeypatch.setenv("MQ_SK", "SK-very-secret")
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.chdir(tmp_path)  # no local instance here: the Dagster source is down
    config = parse_config(
        {
            "clusters": {"local": {"namesrv": "127.0.0.1:9876", "access_key_env": "MQ_AK", "secret_key_env": "MQ_SK"}},
            "ingestions": {
                "orders": {
                    "cluster": "local",
                    "topic": "orders",
                    "consumer_group": "g",
                    "table": "orders",
                    "window": {"cron": "* * * * *", "start": "1970-01-01"},
                }
            },
        }
    )

    class Client:  # whatever it is asked, it fails
        def __getattr__(self, name):
            raise ConnectionError("no broker")

    said = []
    c = member_collector(config, "orders", Client(), lambda: {A0: 3}, log=said.append)
    text = generate_latest(registry_of(c)).decode()
    assert "very-secret" not in text and "very-secret" not in " ".join(said)
    samples = scrape(c)
    assert at(samples, "rocketlake_source_up", source="dagster") == 0 and "no Dagster instance" in " ".join(said)
    assert at(samples, "rocketlake_queue_landed_offset", **queue(A0)) == 3


def registry_of(c: MemberCollector) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(c)
    return registry


def test_the_endpoint_serves_the_text_format_and_stops_cleanly():
    closed = []
    c = collector()
    endpoint = serve(c, 0, on_stop=(lambda: closed.append(True),))
    host, port = endpoint.address
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as answer:
            assert answer.headers["Content-Type"].startswith("text/plain")
            text = answer.read().decode()
    finally:
        endpoint.stop()
    names = {f.name for f in text_string_to_metric_families(text)}
    assert {"rocketlake_queue_lag_messages", "rocketlake_landed_messages", "process_start_time_seconds"} <= names
    assert closed == [True]
    with pytest.raises(urllib.error.URLError):  # nothing listens any more
        urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5)


def test_the_member_refuses_a_port_it_cannot_listen_on_in_one_line(tmp_path, capsys):
    from rocketlake.cli.main import main

    config = tmp_path / "rocketlake.yaml"
    config.write_text(
        "clusters: {local: {namesrv: '127.0.0.1:1'}}\n"
        "ingestions: {orders: {cluster: local, topic: orders, consumer_group: g, table: orders,\n"
        "  window: {cron: '* * * * *', start: '1970-01-01'}}}\n"
    )
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["member", "orders", "--config", str(config), "--metrics-port", str(port)]) == 2
    said = capsys.readouterr().err
    assert f"cannot serve the metrics on 127.0.0.1:{port}" in said and said.count("\n") == 1
    assert main(["member", "orders", "--config", str(config), "--metrics-port", "70000"]) == 2
    assert "--metrics-port 70000" in capsys.readouterr().err


def test_the_instance_is_read_from_the_members_start_on_and_each_record_once(tmp_path):
    """On a real (temporary, SQLite) instance: materializations of the asset and finished runs of the job recorded
    since the start, each handed over once, a page at a time; others, and earlier ones, never."""
    import time

    from dagster import AssetKey, AssetMaterialization, DagsterInstance, MetadataValue, job, op

    from rocketlake.dagster.metadata import BODY_BYTES, ROWS
    from rocketlake.member.metrics import DagsterInstanceReads

    @op
    def land():
        pass

    @job(name="orders_job")
    def orders_job():
        land()

    def window(rows: int, asset: str = "orders") -> AssetMaterialization:
        return AssetMaterialization(asset, metadata={ROWS: MetadataValue.int(rows), BODY_BYTES: MetadataValue.int(10)})

    with DagsterInstance.from_config(str(tmp_path)) as instance:
        instance.report_runless_asset_event(window(100))  # before the member started
        assert orders_job.execute_in_process(instance=instance).success
        since = time.time()
        reads = DagsterInstanceReads(AssetKey("orders"), "orders_job", since, home=tmp_path)
        reads.PAGE = 2
        try:
            assert reads.read() == ([], [])
            for rows in (1, 2, 3):
                instance.report_runless_asset_event(window(rows))
            instance.report_runless_asset_event(window(50, asset="other"))
            instance.report_runless_asset_event(AssetMaterialization("orders"))  # not one of rocketlake's windows
            run = orders_job.execute_in_process(instance=instance)
            landings, runs = reads.read()
            assert [a.rows for a in landings] == [1, 2, 3] and {a.body_bytes for a in landings} == {10}
            assert [(r.run_id, r.status) for r in runs] == [(run.run_id, "SUCCESS")] and 0 <= runs[0].seconds < 60
            assert reads.read() == ([], [])  # nothing twice
        finally:
            reads.close()
