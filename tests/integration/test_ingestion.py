"""Windows end to end: Java peer -> broker -> Spark -> Delta -> offsets, through real Dagster runs."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml
from dagster import AssetKey, AssetRecordsFilter, DagsterInstance
from deltalake import DeltaTable

import rocketlake
from rocketlake.dagster.metadata import ROWS
from rocketlake.local.process import ManagedProcess, accepts_connections, stop_all, wait_for
from rocketlake.rocketmq.client import RocketMQClient
from tests.conftest import free_ports
from tests.dagster_instance import pooled_instance, recommended_home
from tests.integration.ingestion_support import (
    definitions,
    materialize_command,
    minute_floor_ms,
    minute_key,
    run_partitions,
    unique,
    wait_until,
    write_config,
)

pytestmark = pytest.mark.dagster


def table_rows(path: str) -> list[dict]:
    return DeltaTable(path).to_pyarrow_table().to_pylist()


def setup(tmp_path: Path, local_cluster, produced, spark: dict | None = None, cluster: dict | None = None, **extra):
    tmp_path.mkdir(parents=True, exist_ok=True)
    table, group = unique("t"), unique("g")
    config = write_config(
        tmp_path / "rocketlake.yaml",
        local_cluster,
        tmp_path / "lake",
        {"orders": {"topic": produced.topic, "consumer_group": group, "table": table, **extra}},
        spark,
        cluster,
    )
    return definitions(config), table, group, str(tmp_path / "lake" / table)


#: What every table has: identity, store time, tags, keys, body, the window; here also the JSON body's fields, and the
#: origin columns (a JSON body can fail to decode, so redelivered copies can land).
DEFAULT_COLUMNS = [
    "topic",
    "broker_name",
    "queue_id",
    "queue_offset",
    "msg_id",
    "tags",
    "keys",
    "store_timestamp",
    "body",
    "window_start",
    "origin_topic",
    "origin_msg_id",
    "origin_offset_msg_id",
    "order_id",
    "amount",
    "window_date",
]


def test_each_message_lands_once_in_the_window_of_its_store_time(tmp_path, local_cluster, produced, create_topic):
    """... and with the cluster's ``trace: true`` to a trace topic of its own, each run leaves the consume traces of
    what it landed there, as the Java client's tracing writes them."""
    opted_in = ["offset_msg_id", "properties", "born_timestamp"]
    traces = create_topic(queues=1, brokers=("broker-a",))
    defs, table, group, path = setup(
        tmp_path, local_cluster, produced, cluster={"trace": True, "trace_topic": traces}, metadata_columns=opted_in
    )
    w1, w2 = produced.windows()
    with pooled_instance() as instance:
        for key in (w1, w2):
            assert run_partitions(defs, table, instance, key).success

    rows = table_rows(path)
    assert sorted(rows[0]) == sorted(DEFAULT_COLUMNS + opted_in)
    assert Counter(r["msg_id"] for r in rows) == Counter(produced.by_msg_id.keys())  # each exactly once
    for row in rows:
        java = produced.by_msg_id[row["msg_id"]]
        assert int(row["window_start"].timestamp() * 1000) == minute_floor_ms(java["storeTimestamp"])
        assert (row["broker_name"], row["queue_id"], row["queue_offset"]) == (
            java["brokerName"],
            java["queueId"],
            java["queueOffset"],
        )
        assert int(row["store_timestamp"].timestamp() * 1000) == java["storeTimestamp"]
        assert int(row["born_timestamp"].timestamp() * 1000) == java["bornTimestamp"]
        assert row["body"] == base64.b64decode(java["bodyBase64"])
        assert (row["tags"], row["keys"], row["offset_msg_id"]) == (java["tags"], java["keys"], java["offsetMsgId"])
        # Java's PullAPIWrapper stamps MIN_OFFSET/MAX_OFFSET on pulled messages client-side; they are not stored.
        client_side = {"MIN_OFFSET", "MAX_OFFSET"}
        assert dict(row["properties"]) == {k: v for k, v in java["properties"].items() if k not in client_side}
        assert (
            row["order_id"] == f"o-{java['properties']['seq']}"
            and row["amount"] == int(java["properties"]["seq"]) + 0.5
        )

    # The runs' traces: a SubBefore and a SubAfter context of the group for every message landed, nothing else.
    with RocketMQClient(local_cluster.spec.namesrv_address) as client:
        (queue,) = client.queues(traces)
        bodies = [m.body.decode() for m in client.pull(queue, 0, 32, consumer_group=unique("g_read")).messages]
    contexts = [c.split("\x01") for body in bodies for c in body.split("\x02") if c]
    before = [c for c in contexts if c[0] == "SubBefore"]
    assert {c[3] for c in before} == {group}
    assert Counter(c[5] for c in before) == Counter(produced.by_msg_id.keys())
    assert Counter(c[2] for c in contexts if c[0] == "SubAfter") == Counter(produced.by_msg_id.keys())


def test_offsets_committed_after_materialization_match_mqadmin(tmp_path, local_cluster, produced):
    """Through an asset body of one's own (``rocketlake.rocketlake_assets``) that yields what ``step.land()``
    yields: the offsets still move only once Dagster has recorded the materialization."""
    _, table, group, path = setup(tmp_path, local_cluster, produced)
    config = rocketlake.load_config(tmp_path / "rocketlake.yaml")
    events = []

    @rocketlake.rocketlake_assets(config, "orders")
    def orders(context, step: rocketlake.IngestionStep):
        for event in step.land():
            events.append((context.partition_key, type(event).__name__))
            yield event

    defs = rocketlake.build_definitions(config, assets=[orders])
    w1, w2 = produced.windows()
    admin = local_cluster.mqadmin()
    with pooled_instance() as instance:
        assert run_partitions(defs, table, instance, w2).success
        # Window 2 alone leaves a gap (window 1) on every queue: nothing may be committed yet.
        assert {q.consumer_offset for q in admin.consumer_progress(group, produced.topic)} <= {0}
        assert run_partitions(defs, table, instance, w1).success
    ends = Counter()
    for s in produced.sent:
        ends[(s.broker_name, s.queue_id)] = max(ends[(s.broker_name, s.queue_id)], s.queue_offset + 1)
    progress = {
        (q.broker_name, q.queue_id): q.consumer_offset
        for q in admin.consumer_progress(group, produced.topic)
        if q.topic == produced.topic
    }
    assert progress == dict(ends)
    assert [e for e in events if e[1] == "MaterializeResult"] == [(w2, "MaterializeResult"), (w1, "MaterializeResult")]


def test_rematerializing_a_window_changes_nothing(tmp_path, local_cluster, produced):
    defs, table, group, path = setup(tmp_path, local_cluster, produced)
    w1, _ = produced.windows()
    with pooled_instance() as instance:
        assert run_partitions(defs, table, instance, w1).success
        before = sorted(table_rows(path), key=lambda r: r["msg_id"])
        version = DeltaTable(path).version()
        assert run_partitions(defs, table, instance, w1).success
    assert sorted(table_rows(path), key=lambda r: r["msg_id"]) == before
    assert sorted(before[0]) == sorted(DEFAULT_COLUMNS)  # no metadata column unless asked for
    assert DeltaTable(path).version() == version + 2  # a new commit (and its verdict), the same rows
    assert len(before) == len(produced.in_window(w1))


def test_backfill_over_a_range_equals_the_windows_one_by_one(tmp_path, local_cluster, produced):
    w1, w2 = produced.windows()
    one_by_one, table_a, _, path_a = setup(tmp_path / "a", local_cluster, produced)
    backfill, table_b, group_b, path_b = setup(tmp_path / "b", local_cluster, produced)
    with pooled_instance() as instance:
        for key in (w1, w2):
            assert run_partitions(one_by_one, table_a, instance, key).success
        result = run_partitions(backfill, table_b, instance, w1, w2)
        assert result.success
        materialized = instance.get_materialized_partitions(AssetKey(table_b))
        # One run, two windows of different sizes: each partition carries its own window's figures.
        recorded = {
            key: instance.fetch_materializations(
                AssetRecordsFilter(asset_key=AssetKey(table_b), asset_partitions=[key]), limit=1
            )
            .records[0]
            .asset_materialization.metadata
            for key in (w1, w2)
        }
    assert materialized == {w1, w2}
    rows_per_window = Counter(minute_key(int(r["window_start"].timestamp() * 1000)) for r in table_rows(path_b))
    assert rows_per_window[w1] != rows_per_window[w2]
    for key in (w1, w2):
        metadata = recorded[key]
        assert metadata["dagster/row_count"].value == rows_per_window[key] == len(produced.in_window(key))
        assert metadata["rocketlake/rows"].value == rows_per_window[key]
        assert sum(r.data["size"] for r in metadata["rocketlake/ranges"].value.records) == rows_per_window[key]
        assert metadata["rocketlake/offsets_accounted"].value is True
        assert metadata["rocketlake/body_bytes"].value == sum(
            len(base64.b64decode(m["bodyBase64"])) for m in produced.in_window(key)
        )
    assert recorded[w1]["rocketlake/delta_version"] == recorded[w2]["rocketlake/delta_version"]  # one commit

    def comparable(rows):
        return sorted((r["msg_id"], r["window_start"], r["queue_offset"], r["body"]) for r in rows)

    assert comparable(table_rows(path_a)) == comparable(table_rows(path_b))


def test_a_window_that_is_not_closed_is_refused(tmp_path, local_cluster, produced):
    import time

    tmp_path.mkdir(parents=True, exist_ok=True)
    table = unique("t")
    # Ended less than a minute ago, but a 5-minute grace keeps it open: messages may still land in it.
    config = write_config(
        tmp_path / "rocketlake.yaml",
        local_cluster,
        tmp_path / "lake",
        {
            "orders": {
                "topic": produced.topic,
                "consumer_group": unique("g"),
                "table": table,
                "window": {"cron": "* * * * *", "grace_seconds": 300, "start": "2026-01-01T00:00:00Z"},
            }
        },
    )
    defs, path = definitions(config), str(tmp_path / "lake" / table)
    now_ms = int(time.time() * 1000)
    # The window in its grace, and the window still open (a partition too, so Dagster hands it to rocketlake).
    for key in (minute_key(now_ms - 60_000), minute_key(now_ms)):
        with pooled_instance() as instance:
            result = run_partitions(defs, table, instance, key)
        assert not result.success
        failure = next(e for e in result.all_events if e.is_step_failure)
        assert f"partition {key}: window" in str(failure.event_specific_data.error)
        assert "is not closed yet" in str(failure.event_specific_data.error)
    assert not Path(path).exists()  # nothing written


def test_a_run_on_an_instance_whose_pool_has_no_limit_lands_nothing_until_the_pool_is_limited_to_1(
    tmp_path, local_cluster, produced
):
    """Dagster's default instance leaves pools unlimited, so two runs of the group could land at once: the run fails
    in one sentence naming the pool and the setting, before it reads anything (no table, the group's offsets where
    they were). The same instance with the pool limited to 1 (`dagster instance concurrency set`) lands the window."""
    from dagster import instance_for_test

    defs, table, group, path = setup(tmp_path, local_cluster, produced)
    w1, _ = produced.windows()
    pool = f"rocketmq_group_{group}"
    admin = local_cluster.mqadmin()
    with instance_for_test() as instance:  # no `concurrency` settings at all
        result = run_partitions(defs, table, instance, w1)
        assert not result.success
        [failure] = [e for e in result.all_events if e.is_step_failure]  # not retried
        said = failure.step_failure_data.user_failure_data.description
        assert said.startswith(f"pool {pool} has no limit on this Dagster instance") and said.endswith(
            "nothing was read or written."
        ), said
        assert "`concurrency: pools: default_limit: 1` in $DAGSTER_HOME/dagster.yaml" in said
        assert f"`dagster instance concurrency set {pool} 1`" in said
        assert not (tmp_path / "lake").exists()  # no table, no failures table, no ledger
        assert {q.consumer_offset for q in admin.consumer_progress(group, produced.topic)} <= {0}  # nothing committed

        for limited in (pool, f"{pool}_dlq"):  # the job's dead-letter step has a pool of its own
            instance.event_log_storage.set_concurrency_slots(limited, 1)
        result = run_partitions(defs, table, instance, w1)
        assert result.success, [e.message for e in result.all_events if e.is_failure]
    assert sorted(r["msg_id"] for r in table_rows(path)) == sorted(m["msgId"] for m in produced.in_window(w1))


@pytest.mark.stack  # the public `dagster` CLI in its own process
def test_dagster_cli_materializes_a_partition(tmp_path, local_cluster, produced, spark_connect):
    # The CLI's runs open their sessions on the long-lived Spark server, as on the local runtime.
    _, table, group, path = setup(tmp_path, local_cluster, produced, spark_connect.settings())
    w1, _ = produced.windows()
    home = recommended_home(tmp_path / "dagster_home")
    env = dict(os.environ, ROCKETLAKE_CONFIG=str(tmp_path / "rocketlake.yaml"), DAGSTER_HOME=str(home))
    root = Path(__file__).resolve().parents[2]

    def materialize_asset(asset: str, partition: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            materialize_command(asset, partition),
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )

    # A person asking for the window that is still open gets rocketlake's sentence, not Dagster's traceback. The
    # window must still be open when the CLI's run looks, tens of seconds later on a busy machine: asked late in a
    # minute, a minute's window was found closed and landed (a CI run). So the open window asked for is a day's, of
    # a second ingestion of the same file: no wait for a minute to begin, except in a day's last 5 minutes.
    config = tmp_path / "rocketlake.yaml"
    body = yaml.safe_load(config.read_text())
    daily = unique("t")
    body["ingestions"]["daily"] = {
        **body["ingestions"]["orders"],
        "table": daily,
        "consumer_group": unique("g"),
        "window": {"cron": "0 0 * * *", "start": "2026-01-01"},
    }
    config.write_text(yaml.safe_dump(body))
    if time.time() % 86_400 > 86_400 - 300:
        wait_until((time.time() // 86_400 + 1) * 86_400 + 1)
    partitions = definitions(config).resolve_job_def(f"{daily}_job").partitions_def
    current = partitions.get_partition_key_for_timestamp(time.time())
    refused = materialize_asset(daily, current)
    said = refused.stdout + refused.stderr
    assert refused.returncode != 0 and "DagsterUnknownPartitionError" not in said, said[-3000:]
    assert re.search(rf"partition {current}: window .* is not closed yet: it closes at .*, in \d+s", said), said[-3000:]
    assert not Path(path).exists() and not (tmp_path / "lake" / daily).exists()
    result = materialize_asset(table, w1)
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(r["msg_id"] for r in table_rows(path)) == sorted(m["msgId"] for m in produced.in_window(w1))


@pytest.mark.stack  # the `rocketlake backfill` CLI in its own process, on a `rocketlake spark-server` process
def test_rocketlake_backfill_lands_a_range_given_by_store_times(tmp_path, local_cluster, produced):
    """`rocketlake backfill` with ISO times: the windows holding them, one run, exactly the Java peer's messages. The
    run opens its session on a Spark Connect server (spark.remote) that `rocketlake spark-server` started. A
    `rocketlake member --metrics-port` process of the deployment, up before the run, then tells Prometheus what
    the run landed and the lag mqadmin reports."""
    _, table, group, path = setup(tmp_path, local_cluster, produced)
    port, metrics_port = free_ports(2)
    config = tmp_path / "rocketlake.yaml"
    body = yaml.safe_load(config.read_text())
    body["spark"] = {
        "master": "local[2]",
        "remote": f"sc://127.0.0.1:{port}",
        "conf": {"spark.sql.session.timeZone": "UTC"},
    }
    config.write_text(yaml.safe_dump(body))
    w1, w2 = produced.windows()
    first, last = (min(m["storeTimestamp"] for m in produced.in_window(w)) for w in (w1, w2))
    iso = [datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat() for ms in (first, last)]
    home = recommended_home(tmp_path / "dagster_home")
    # A run that tried to start Spark of its own would fail: its SPARK_HOME leads nowhere.
    env = dict(os.environ, DAGSTER_HOME=str(home), SPARK_HOME=str(tmp_path / "no-spark-here"))
    root = Path(__file__).resolve().parents[2]
    server = ManagedProcess("spark-connect", tmp_path)
    server.start(
        [str(Path(sys.executable).parent / "rocketlake"), "spark-server", "--config", str(config)],
        dict(os.environ),
        cwd=root,
    )
    member = ManagedProcess("member", tmp_path)
    member.start(
        [
            str(Path(sys.executable).parent / "rocketlake"),
            "member",
            "orders",
            "--config",
            str(config),
            "--metrics-port",
            str(metrics_port),
        ],
        env,
        cwd=root,
    )
    try:
        wait_for(lambda: accepts_connections(port), time.monotonic() + 180, [server], "the Spark Connect server")
        # Its counters count from its start: it must be up before the run.
        wait_for(lambda: scraped(metrics_port) is not None, time.monotonic() + 60, [member], "the member's metrics")
        result = subprocess.run(
            [str(Path(sys.executable).parent / "rocketlake"), "backfill", "orders", *iso, "--config", str(config)],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        rates, asked = consumer_rates(local_cluster, group, produced.topic)
        # A static setting the running server lacks cannot apply to a session on it: refused, naming it.
        refused = subprocess.run(
            [
                sys.executable,
                "-c",
                "from rocketlake.dagster.spark_resource import SparkResource; "
                f"SparkResource(remote='sc://127.0.0.1:{port}', "
                "conf={'spark.executor.memory': '7g'}).session()",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert refused.returncode != 0
        assert (
            f"the Spark Connect server at sc://127.0.0.1:{port} cannot take spark.executor.memory='7g'"
            in refused.stderr
        ), refused.stderr[-3000:]
        metrics = scraped(metrics_port)
    finally:
        stop_all([server, member], timeout=5)
    assert f"left group {group} (unregistered from every broker)" in member.log_file.read_text()  # stopped cleanly
    assert f"landing 2 window(s) of orders ({w1} .. {w2})" in result.stdout
    landed = Counter(minute_key(int(r["window_start"].timestamp() * 1000)) for r in table_rows(path))
    assert landed == {w: len(produced.in_window(w)) for w in (w1, w2)}
    assert sorted(r["msg_id"] for r in table_rows(path)) == sorted(
        m["msgId"] for m in produced.in_window(w1) + produced.in_window(w2)
    )
    # The JSON bodies decoded by Spark's functions, on the server.
    assert sorted(r["order_id"] for r in table_rows(path)) == sorted(
        json.loads(base64.b64decode(m["bodyBase64"]))["order_id"] for w in (w1, w2) for m in produced.in_window(w)
    )

    # `rocketlake offsets show` says what mqadmin consumerProgress says, queue by queue.
    shown = subprocess.run(
        [
            str(Path(sys.executable).parent / "rocketlake"),
            "offsets",
            "show",
            "orders",
            "--config",
            str(tmp_path / "rocketlake.yaml"),
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stdout + shown.stderr
    rows = {
        (p[1], int(p[2])): (int(p[4]), int(p[5].replace("-", "0")), int(p[6]))  # (max, committed, lag)
        for p in map(str.split, shown.stdout.splitlines())
        if p and p[0] == produced.topic
    }
    progress = {
        (q.broker_name, q.queue_id): (q.broker_offset, q.consumer_offset, q.broker_offset - q.consumer_offset)
        for q in local_cluster.mqadmin().consumer_progress(group, produced.topic)
        if q.topic == produced.topic
    }
    assert rows == progress and rows
    # `mqadmin consumerStatus` asked the member: its #Consumer RT&TPS# row of the topic holds the run's figures
    # with Java's spans (per second over the last minute, when the windows landed less than a minute before).
    with DagsterInstance.from_config(str(home)) as instance:
        landings = [
            (r.timestamp, r.asset_materialization.metadata[ROWS].value)
            for r in instance.fetch_materializations(AssetRecordsFilter(asset_key=AssetKey(table)), limit=10).records
        ]
    assert sorted(rows for _, rows in landings) == sorted(len(produced.in_window(w)) for w in (w1, w2))
    # The member answered at some instant between the call's start and end: what the last minute held then, for
    # each instant where a landing may have left that minute meanwhile (usually one figure). Compared every time.
    started, ended = asked
    instants = [started, ended, *(t + 60 + d for t, _ in landings for d in (-0.001, 0.001) if started < t + 60 < ended)]
    expected = {round(sum(rows for t, rows in landings if now - t <= 60) / 60, 2) for now in instants}
    assert rates["ConsumeOK TPS"] == rates["Pull TPS"] and rates["ConsumeOK TPS"] in expected, (rates, landings, asked)
    assert rates["ConsumeFailed TPS"] == 0 and rates["ConsumeFailedMsgsInHour"] == 0, rates
    total = next(p for p in map(str.split, shown.stdout.splitlines()) if p and p[0] == "total")
    assert int(total[2]) == sum(lag for _, _, lag in rows.values())

    # The member's scrape: per queue what mqadmin says, the ledger's ends, and the totals of the run it saw.
    def per_queue(name: str) -> dict:
        return {
            (s.labels["broker"], int(s.labels["queue"])): s.value
            for s in metrics[name]
            if s.labels["topic"] == produced.topic and s.labels["consumer_group"] == group
        }

    assert per_queue("rocketlake_queue_lag_messages") == {q: lag for q, (_, _, lag) in progress.items()}
    assert per_queue("rocketlake_queue_max_offset") == {q: top for q, (top, _, _) in progress.items()}
    assert per_queue("rocketlake_queue_landed_offset") == {q: top for q, (top, _, _) in progress.items() if top}
    messages = produced.in_window(w1) + produced.in_window(w2)
    [landed] = metrics["rocketlake_landed_messages_total"]
    [body_bytes] = metrics["rocketlake_landed_body_bytes_total"]
    assert landed.value == len(messages) and landed.labels == {"ingestion": "orders", "consumer_group": group}
    assert body_bytes.value == sum(len(base64.b64decode(m["bodyBase64"])) for m in messages)
    assert [s.value for s in metrics["rocketlake_landed_windows_total"]] == [2]
    assert [
        (s.labels["job"], s.labels["status"], s.value) for s in metrics["rocketlake_run_duration_seconds_count"]
    ] == [(f"{table}_job", "success", 1)]
    assert {s.labels["source"]: s.value for s in metrics["rocketlake_scrape_errors_total"]} == {
        "broker": 0,
        "ledger": 0,
        "dagster": 0,
    }


def consumer_rates(cluster, group: str, topic: str) -> tuple[dict[str, float], tuple[float, float]]:
    """The group's one member's ``#Consumer RT&TPS#`` row of ``topic`` in ``mqadmin consumerStatus -i`` (column
    name -> figure), and when it was asked (from, to)."""
    from tests.integration.ingestion_support import sections

    client = RocketMQClient(cluster.spec.namesrv_address)
    try:
        [member] = client.get_consumer_list_by_group(group, topic)
    finally:
        client.close()
    started = time.time()
    found = sections(cluster.mqadmin().run("consumerStatus", "-g", group, "-i", member))["Consumer RT&TPS"]
    asked = (started, time.time())
    header = [name.strip() for name in found[0].split("#") if name.strip()]
    [row] = [line.split() for line in found[1:] if line.split()[0] == topic]
    return {name: float(value) for name, value in zip(header[1:], row[1:])}, asked


def scraped(port: int) -> dict[str, list] | None:
    """``http://127.0.0.1:<port>/metrics`` read as Prometheus reads it (sample name -> samples); None until it answers."""
    import urllib.error
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as answer:
            text = answer.read().decode()
    except (urllib.error.URLError, ConnectionError):
        return None
    samples: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample)
    return samples


def test_a_dead_name_server_fails_the_run_in_one_clear_line_after_its_retries(tmp_path):
    [port] = free_ports(1)  # nothing listens there
    config = tmp_path / "rocketlake.yaml"
    config.write_text(f"""
clusters: {{dead: {{namesrv: "127.0.0.1:{port}"}}}}
lake: {{root: "{tmp_path / "lake"}"}}
spark: {{master: "local[2]"}}
ingestions:
  orders:
    {{cluster: dead, topic: orders, consumer_group: g_dead, table: t_dead,
     window: {{cron: "0 * * * *", start: "2026-11-01T00:00:00Z"}}, run_retry: {{max_retries: 2, delay_seconds: 0.2}}}}
""")
    with pooled_instance() as instance:
        result = run_partitions(definitions(config), "t_dead", instance, "2026-11-01-00:00")
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure)
    # After its retries Dagster says "Exceeded max_retries of 2"; the UI shows the last attempt's failure below it.
    assert failure.event_specific_data.error.message.startswith("Exceeded max_retries of 2")
    message = failure.event_specific_data.user_failure_data.description
    assert "cannot reach RocketMQ" in message and f"127.0.0.1:{port}" in message
    assert "rocketlake local status" in message
    assert not (tmp_path / "lake" / "t_dead").exists()  # nothing written
    # Retried without a person, as often as run_retry allows, then reported failed.
    assert len([e for e in result.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"]) == 2
