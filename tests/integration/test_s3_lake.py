"""The lake on S3: ``lake.root: s3a://lake/...`` on a real S3-compatible server (versitygw, ``local_s3``), written by
Spark through Hadoop's S3A connector and read by delta-rs with the same configuration.

The runs are on the warm path, as on the local runtime: they open their sessions on a long-lived Spark Connect
server started with the bucket's settings and keys (``s3_spark_connect``), from a process of their own
(``connect_process``: this worker's own Spark is a classic session). Below Dagster a window is any store-time
interval, so these runs use windows of a few hundred milliseconds around what the Java producer just sent (as
tests/integration/test_engine_runs.py does).
"""

from __future__ import annotations

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
from deltalake import DeltaTable
from pyarrow import fs

from rocketlake.dagster.rocketmq_resource import RocketMQResource
from rocketlake.delta.ledger_log import read_ledger
from rocketlake.delta.storage import apply_lake, delta_rs_options
from rocketlake.engine.broker_access import group_broker
from rocketlake.engine.config import LakeConfig, dead_letter_config, parse_config
from rocketlake.engine.failures import DEAD_LETTERED, failures_table
from rocketlake.engine.ledger import BALANCED
from rocketlake.engine.run import Alone, Committed, Landed, LandingRequest, run
from rocketlake.engine.windows import StoreTimeWindow
from rocketlake.rocketmq.client import RocketMQClient
from rocketlake.spark.materialize import SparkLake
from tests.dagster_instance import recommended_home
from tests.integration.connect_process import connect_process, session
from tests.integration.ingestion_support import order, unique, wait_until, write_config
from tests.unit.support import Lines, Recorded

pytestmark = [pytest.mark.engine, pytest.mark.spark_connect]  # the runs' Spark is the server's: none in this process
ROOT = Path(__file__).resolve().parents[2]
DAGSTER = str(Path(sys.executable).parent / "dagster")


@pytest.fixture(scope="module")
def on_server(s3_spark_connect):
    """``on_server(function, *args)``: the call in a process with a session on the module's S3 Spark Connect server."""
    with connect_process(s3_spark_connect.url) as call:
        yield call


def now_ms() -> int:
    return int(time.time() * 1000)


def send_in_windows(java_producer, topic: str, sizes: list[int]) -> tuple[list[tuple[str, int, int]], list]:
    """Batches of ``sizes`` messages, each alone in a window of store time; (windows, the producer's answers)."""
    windows, sent, first = [], [], 0
    start = now_ms()
    for i, size in enumerate(sizes):
        sent += java_producer([order(n, topic) for n in range(first, first + size)])
        first += size
        end = now_ms() + 1
        wait_until(end / 1000)  # closed (grace 0) once this instant has passed
        windows.append((f"w{i + 1}", start, end))
        start = end
    return windows, sent


def spec_for(cluster, s3, topic: str, windows, run_id: str, **ingestion) -> dict:
    return {
        "namesrv": cluster.spec.namesrv_address,
        "table": unique("t"),
        "lake": s3.lake_settings(unique("lake")),
        "ingestion": {
            "topic": topic,
            "consumer_group": unique("g"),
            "consume_from_where": "CONSUME_FROM_FIRST_OFFSET",
            **ingestion,
        },
        "windows": windows,
        "run_id": run_id,
    }


def lake_of(spec: dict) -> LakeConfig:
    return LakeConfig(**spec["lake"])


def config_of(spec: dict, **extra):
    """(the ingestion, the lake) the spec describes, ``extra`` keys added to the ingestion."""
    config = parse_config(
        {
            "clusters": {"local": {"namesrv": spec["namesrv"]}},
            "lake": spec["lake"],
            "ingestions": {
                "orders": {
                    "cluster": "local",
                    "table": spec["table"],
                    "window": {"cron": "* * * * *", "start": "1970-01-01", "grace_seconds": 0},
                    **spec["ingestion"],
                    **extra,
                }
            },
        }
    )
    return config.ingestions["orders"], config.lake


def engine_run(spec: dict, recorded: Recorded, dead_letters: bool = False) -> tuple[int, Recorded]:
    """(On the server.) The spec's windows run to the end (offsets committed), as the asset drives the engine; with
    ``dead_letters``, the run of the ingestion's ``<table>_dlq`` (its ``%DLQ%<group>``), as the dead-letter asset
    drives it. The rows it landed, and ``recorded`` with its landing recorded."""
    spark = session()
    cfg, lake_cfg = config_of(spec)
    failures_path = lake_cfg.table_path(failures_table(cfg.table)) if cfg.can_fail else None
    if dead_letters:
        cfg = dead_letter_config(cfg)
    apply_lake(spark, lake_cfg)
    with RocketMQClient(spec["namesrv"]) as client:
        lake = SparkLake(
            spark,
            RocketMQResource(namesrv=spec["namesrv"]).source_options(),
            cfg,
            lake_cfg.table_path(cfg.table),
            None if dead_letters else failures_path,
            last_errors_from=failures_path if dead_letters else None,
            storage_options=delta_rs_options(lake_cfg),
        )
        windows = [(key, StoreTimeWindow(start, end)) for key, start, end in spec["windows"]]
        request = LandingRequest("orders", spec["run_id"], windows, now_ms(), 0, start_at_group_position=True)
        events = run(group_broker(client, cfg), lake, recorded, Alone(), cfg, request, Lines())
        landed = next(events)
        assert isinstance(landed, Landed) and landed.balanced, landed
        recorded.record(landed.slice.ledger)  # Dagster's materialization, before the offsets move
        assert [e for e in events if isinstance(e, Committed)]
    return sum(a.rows for a in landed.slice.accounting), recorded


def compact(path: str, days: list[str]) -> None:
    """(On the server.)"""
    from rocketlake.delta.writer import compact_days

    compact_days(session(), path, days)


def settings_and_plan(path: str) -> tuple[str, str]:
    """(On the server.) Every Spark setting a session on the server sees, and the plan of a read of ``path``."""
    spark = session()
    return repr(spark.conf.getAll), spark.read.format("delta").load(path)._explain_string(extended=True)


def table_of(spec: dict, table: str | None = None) -> DeltaTable:
    lake = lake_of(spec)
    return DeltaTable(lake.table_path(table or spec["table"]), storage_options=delta_rs_options(lake))


def committed(cluster, spec: dict, topic: str) -> dict:
    progress = cluster.mqadmin().consumer_progress(spec["ingestion"]["consumer_group"], topic)
    return {(p.broker_name, p.queue_id): p.consumer_offset for p in progress if p.topic == topic and p.consumer_offset}


def ends(sent) -> dict:
    last = Counter()
    for s in sent:
        last[(s.broker_name, s.queue_id)] = max(last[(s.broker_name, s.queue_id)], s.queue_offset + 1)
    return dict(last)


def test_windows_land_in_an_s3_lake_once_and_delta_rs_reads_them_with_the_same_settings(
    local_cluster, local_s3, create_topic, java_producer, s3_spark_connect, on_server, tmp_path
):
    topic = create_topic(queues=2)
    windows, sent = send_in_windows(java_producer, topic, [12, 20, 7])
    spec = spec_for(local_cluster, local_s3, topic, windows, "r1", max_messages_per_task=5)
    path = lake_of(spec).table_path(spec["table"])
    assert path.startswith("s3a://lake/")
    recorded = Recorded()
    for i, window in enumerate(windows):
        rows, recorded = on_server(engine_run, {**spec, "windows": [window], "run_id": f"r{i + 1}"}, recorded)
        assert rows == [12, 20, 7][i]

    # delta-rs, with the storage options the configuration gives it, reads what Spark wrote through S3A.
    rows = table_of(spec).to_pyarrow_table(columns=["msg_id", "window_start"]).to_pylist()
    assert Counter(r["msg_id"] for r in rows) == Counter(s.msg_id for s in sent), "every message exactly once"
    assert [e.verdict for e in read_ledger(path, None, delta_rs_options(lake_of(spec)))] == [BALANCED] * 3
    assert committed(local_cluster, spec, topic) == ends(sent)
    # The objects are in the server's bucket (its own listing), under the table's prefix.
    listed = local_s3.filesystem().get_file_info(fs.FileSelector(path[len("s3a://") :], recursive=True))
    assert any(info.path.endswith(".parquet") for info in listed)
    assert any("/_delta_log/" in info.path and info.path.endswith(".json") for info in listed)

    # `rocketlake offsets show` reads the ledger from S3 with the same settings: each queue's last landed window.
    config = tmp_path / "rocketlake.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "clusters": {"local": {"namesrv": spec["namesrv"]}},
                "lake": spec["lake"],
                "ingestions": {
                    "orders": {
                        "cluster": "local",
                        "table": spec["table"],
                        "window": {"cron": "* * * * *", "start": "1970-01-01", "grace_seconds": 0},
                        **spec["ingestion"],
                    }
                },
            }
        )
    )
    shown = subprocess.run(
        [sys.executable, "-m", "rocketlake.cli.main", "offsets", "show", "orders", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    queue_lines = [line for line in shown.stdout.splitlines() if line.lstrip().startswith(topic)]
    assert len(queue_lines) == 4 and all(re.search(r" w[123] ", line) for line in queue_lines), shown.stdout
    assert any(" w3 " in line for line in queue_lines), shown.stdout

    # Compaction rewrites the day's small files (max_messages_per_task=5: several per window) on S3 too.
    before = len(table_of(spec).file_uris())
    day = rows[0]["window_start"].date().isoformat()
    on_server(compact, path, [day])
    after = table_of(spec)
    assert len(after.file_uris()) < before
    assert Counter(r["msg_id"] for r in after.to_pyarrow_table(columns=["msg_id"]).to_pylist()) == Counter(
        s.msg_id for s in sent
    )

    # The keys are in no Spark setting, no plan a person or the event log sees, nothing the server writes or shows
    # (its log, its processes' command lines) and no object of the table (the ledger is in the commits' metadata).
    secret = os.environ[lake_of(spec).s3.secret_key_env]
    settings, plan = on_server(settings_and_plan, path)
    assert "fs.s3a.bucket.lake.endpoint" in settings and secret not in settings
    assert "s3a://lake/" in plan and secret not in plan
    server = s3_spark_connect.readable()
    assert any("s3a://lake/" in text for where, text in server.items() if "event log" in where)  # the writes' plans
    for where, text in server.items():
        assert secret not in text, f"the S3 secret is in {where}"
    assert_secret_in_no_object(local_s3, path, secret)


def assert_secret_in_no_object(s3, path: str, secret: str) -> None:
    filesystem = s3.filesystem()
    listed = filesystem.get_file_info(fs.FileSelector(path[len("s3a://") :], recursive=True))
    logs = [info.path for info in listed if "/_delta_log/" in info.path and info.type == fs.FileType.File]
    assert logs
    for name in logs:
        with filesystem.open_input_stream(name) as stream:
            assert secret.encode() not in stream.read(), name


def test_failures_and_dead_letters_land_in_their_tables_on_s3(
    local_cluster, local_s3, create_topic, java_producer, on_server
):
    """The failures table (``<table>_failures``) and the dead-letter table (``<table>_dlq``, with each dead letter's
    last error read from the failures table) are on S3 beside the table, as every table rocketlake writes."""
    topic = create_topic(queues=2)
    start = now_ms()
    sent = java_producer([order(n, topic, tags="poison" if n % 4 == 0 else "TagA") for n in range(12)])
    end = now_ms() + 1
    wait_until(end / 1000)
    spec = spec_for(
        local_cluster,
        local_s3,
        topic,
        [("w1", start, end)],
        "r1",
        listener="tests.unit.listeners:fail_poison",
        consume_message_batch_max_size=1,
        max_reconsume_times=0,
    )  # a failed message goes straight to %DLQ%<group>
    on_server(engine_run, spec, Recorded())
    poison = {s.msg_id for s, n in zip(sent, range(12)) if n % 4 == 0}
    assert {r["msg_id"] for r in table_of(spec).to_pyarrow_table(columns=["msg_id"]).to_pylist()} == {
        s.msg_id for s in sent
    } - poison
    failures = table_of(spec, failures_table(spec["table"])).to_pyarrow_table().to_pylist()
    assert sorted((r["msg_id"], r["outcome"]) for r in failures) == sorted((m, DEAD_LETTERED) for m in poison)
    # Each queue's offset as the broker stores it (mqadmin's consumerProgress would ask only the brokers that host
    # %RETRY%<group>, here broker-a alone: the send-backs created it there).
    with RocketMQClient(spec["namesrv"]) as client:
        assert {
            (q.broker_name, q.queue_id): client.query_consumer_offset(spec["ingestion"]["consumer_group"], q)
            for q in client.queues(topic)
        } == ends(sent)

    # The dead letters were stored by the send-backs above: a window from the table's window end to now holds them.
    dlq_end = now_ms() + 1
    wait_until(dlq_end / 1000)
    rows, _ = on_server(engine_run, {**spec, "windows": [("d1", end, dlq_end)], "run_id": "d1"}, Recorded(), True)
    assert rows == len(poison)
    dlq = (
        table_of(spec, f"{spec['table']}_dlq")
        .to_pyarrow_table(columns=["origin_msg_id", "origin_topic", "last_error"])
        .to_pylist()
    )
    assert sorted((r["origin_msg_id"], r["origin_topic"], r["last_error"]) for r in dlq) == sorted(
        (m, topic, "listener answered RECONSUME_LATER") for m in poison
    )
    assert_secret_in_no_object(
        local_s3, lake_of(spec).table_path(f"{spec['table']}_dlq"), os.environ[lake_of(spec).s3.secret_key_env]
    )


def two_deployments_run(spec: dict) -> str:
    """(On the server.) A run of the spec's ingestion while two members heartbeat in its group: its refusal."""
    from rocketlake.engine.broker_access import LiveGroup
    from rocketlake.engine.identity import client_id
    from rocketlake.engine.run import SeveralWriters
    from rocketlake.rocketmq.heartbeat import ConsumeFromWhere, ConsumerData, ConsumeType, MessageModel

    cfg, lake_cfg = config_of(spec, instance_name="here")
    consumer = ConsumerData.of(
        cfg.consumer_group,
        {spec["ingestion"]["topic"]: "*"},
        message_model=MessageModel.CLUSTERING,
        consume_type=ConsumeType.CONSUME_PASSIVELY,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    )
    namesrv = spec["namesrv"]
    with (
        RocketMQClient(namesrv, private_connections=True) as here,
        RocketMQClient(namesrv, private_connections=True) as elsewhere,
        RocketMQClient(namesrv) as client,
    ):
        here.heart_beat(client_id(cfg), [consumer])
        elsewhere.heart_beat("10.9.9.9@other_deployment", [consumer])
        lake = SparkLake(
            session(),
            RocketMQResource(namesrv=namesrv).source_options(),
            cfg,
            lake_cfg.table_path(cfg.table),
            storage_options=delta_rs_options(lake_cfg),
        )
        request = LandingRequest(
            "orders",
            "r1",
            [(k, StoreTimeWindow(s, e)) for k, s, e in spec["windows"]],
            now_ms(),
            0,
            start_at_group_position=True,
        )
        with pytest.raises(SeveralWriters) as refused:
            next(run(group_broker(client, cfg), lake, Recorded(), LiveGroup(client, cfg), cfg, request, Lines()))
        assert client_id(cfg) in str(refused.value)
        return str(refused.value)


def test_a_group_with_two_deployments_is_refused_an_s3_table_before_it_reads(
    local_cluster, local_s3, create_topic, java_producer, on_server
):
    """Two members heartbeat in the group (two deployments, each with its own pool): Delta's default S3 log store
    cannot keep their commits apart, so the run refuses, naming both, and leaves no table and no offset behind."""
    topic = create_topic(queues=2)
    windows, _ = send_in_windows(java_producer, topic, [6])
    spec = spec_for(local_cluster, local_s3, topic, windows, "r1")
    refusal = on_server(two_deployments_run, spec)
    assert "10.9.9.9@other_deployment" in refusal and "S3DynamoDBLogStore" in refusal
    cfg, lake_cfg = config_of(spec)
    table = lake_cfg.table_path(cfg.table)[len("s3a://") :]
    assert local_s3.filesystem().get_file_info(table).type == fs.FileType.NotFound
    assert committed(local_cluster, spec, topic) == {}


@pytest.mark.stack  # the public `dagster` CLI in its own process
def test_a_run_on_a_server_started_without_the_lakes_bucket_fails_in_one_sentence(
    local_cluster, local_s3, s3_spark_connect, create_topic, tmp_path
):
    """The server has the settings of the bucket ``lake``; a lake in the bucket ``other`` (which exists, with the same
    keys) is not one it was started for: the run fails before it reads, in the sentence that says to start the
    server with this configuration, not in a Hadoop error, and lands nothing."""
    local_s3.create_bucket("other")
    table = unique("t")
    config = write_config(
        tmp_path / "rocketlake.yaml",
        local_cluster,
        tmp_path / "unused",
        {"orders": {"topic": create_topic(queues=1), "consumer_group": unique("g"), "table": table}},
        s3_spark_connect.settings(),
    )
    body = yaml.safe_load(config.read_text())
    body["lake"] = {**local_s3.lake_settings(), "root": f"s3a://other/{unique('lake')}"}
    config.write_text(yaml.safe_dump(body))
    closed = datetime.fromtimestamp(int(time.time()) // 60 * 60 - 60, timezone.utc).strftime("%Y-%m-%d-%H:%M")
    env = dict(os.environ, ROCKETLAKE_CONFIG=str(config), DAGSTER_HOME=str(recommended_home(tmp_path / "home")))
    refused = subprocess.run(
        [DAGSTER, "asset", "materialize", "-m", "rocketlake.definitions", "--select", table, "--partition", closed],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = refused.stdout + refused.stderr
    assert refused.returncode != 0, output[-3000:]
    assert (
        f"the Spark Connect server (spark.remote) was not started with the S3 settings of the lake "
        f"{body['lake']['root']} (spark.hadoop.fs.s3a.bucket.other.endpoint.region is not set there"
    ) in output, output[-3000:]
    assert "start it with this configuration (rocketlake spark-server" in output
    java_frames = re.findall(r"^\s+at [\w.$]+\(", output, re.MULTILINE)
    assert "org.apache.hadoop" not in output and not java_frames and "GrpcException" not in output, output[-3000:]
    assert local_s3.filesystem().get_file_info(fs.FileSelector("other", recursive=True)) == []
