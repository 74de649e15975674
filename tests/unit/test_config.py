"""rocketlake.yaml: defaults, RocketMQ's checkConfig ranges, and errors that name what is wrong."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest

from rocketlake.engine.config import (
    NOT_SUPPORTED_YET,
    ConfigError,
    ConsumeFromWhere,
    LakeConfig,
    MessageModel,
    load_config,
    parse_config,
)
from rocketlake.engine.identity import client_id, offset_store_path
from tests.unit.support import MINIMAL, with_ingestion

ROOT = Path(__file__).resolve().parents[2]


def problems(raw: dict) -> list[str]:
    with pytest.raises(ConfigError) as e:
        parse_config(raw, "test.yaml")
    return e.value.problems


def test_the_shipped_file_loads():
    config = load_config(ROOT / "rocketlake.yaml")
    orders = config.ingestions["orders"]
    assert orders.table == "orders_raw" and orders.body.format == "json"


def test_defaults_are_rocketmqs():
    ing = parse_config(MINIMAL).ingestions["orders"]
    assert ing.message_model is MessageModel.CLUSTERING
    assert ing.consume_from_where is ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    assert (ing.pull_batch_size, ing.pull_threshold_for_queue, ing.pull_threshold_size_for_queue) == (32, 1000, 100)
    assert (ing.pull_threshold_for_topic, ing.pull_threshold_size_for_topic) == (-1, -1)
    assert (ing.consume_timeout, ing.effective_max_reconsume_times) == (15, 16)
    assert ing.window.cron == "0 * * * *" and ing.window.grace_seconds == 60 and ing.window.timezone == "UTC"


@pytest.mark.parametrize(
    ("key", "value", "allowed"),
    [
        ("pull_batch_size", 0, "[1, 1024]"),
        ("pull_batch_size", 1025, "[1, 1024]"),
        ("pull_threshold_for_queue", 65536, "[1, 65535]"),
        ("pull_threshold_size_for_queue", 1025, "[1, 1024]"),
        ("pull_threshold_for_topic", 0, "[1, 6553500] or -1"),
        ("pull_threshold_size_for_topic", 102401, "[1, 102400] or -1"),
        ("consume_thread_min", 1001, "[1, 1000]"),
        ("consume_concurrently_max_span", 0, "[1, 65535]"),
        ("pull_interval", 65536, "[0, 65535]"),
        ("consume_message_batch_max_size", 2000, "[1, 1024]"),
    ],
)
def test_out_of_range_names_ingestion_key_value_and_range(key, value, allowed):
    (line,) = problems(with_ingestion(**{key: value}))
    assert line.startswith(f"ingestions.orders.{key}: {value}")
    assert allowed in line


def test_range_edges_are_inclusive_and_sentinels_accepted():
    ing = parse_config(
        with_ingestion(pull_batch_size=1024, pull_threshold_for_topic=-1, pull_threshold_size_for_topic=102400)
    ).ingestions["orders"]
    assert ing.pull_batch_size == 1024 and ing.pull_threshold_size_for_topic == 102400


def test_unknown_key_is_an_error():
    (line,) = problems(with_ingestion(pull_batch_sze=10))
    assert line.startswith("ingestions.orders.pull_batch_sze: unknown key")


def test_enum_values_are_listed():
    (line,) = problems(with_ingestion(message_model="CLUSTER"))
    assert "ingestions.orders.message_model: 'CLUSTER' is not allowed" in line and "BROADCASTING" in line


def test_several_mistakes_are_reported_together():
    raw = with_ingestion(pull_batch_size=0, consumer_group="DEFAULT_CONSUMER", cluster="nope")
    lines = problems(raw)
    assert any(line.startswith("ingestions.orders.pull_batch_size") for line in lines)
    assert any(line.startswith("ingestions.orders.consumer_group") for line in lines)


def test_cross_references_and_thread_bounds():
    assert any(
        "cluster: 'nope' is not one of the clusters ['local']" in p for p in problems(with_ingestion(cluster="nope"))
    )
    assert any(
        "consume_thread_min (30) is larger than consume_thread_max (20)" in p
        for p in problems(with_ingestion(consume_thread_min=30))
    )


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"topic": "bad topic!"}, "ingestions.orders.topic"),
        ({"consumer_group": "x" * 300}, "ingestions.orders.consumer_group"),
        ({"table": "orders-raw"}, "name or database.name, each matching [A-Za-z_][A-Za-z0-9_]*"),
        ({"table": "a.b.c"}, "ingestions.orders.table"),
        ({"table": "sales."}, "ingestions.orders.table"),
        ({"window": {"start": "2026-11-01", "cron": "every hour"}}, "not a valid cron"),
        ({"window": {"start": "2026-11-01", "timezone": "Mars/Olympus"}}, "IANA time zone"),
        ({"body": {"format": "json"}}, "format json needs a schema"),
        ({"consume_timestamp": "2026-11-01"}, "ingestions.orders.consume_timestamp"),
        (
            {"consume_timestamp": "20261399000000"},
            "consume_timestamp: '20261399000000' is invalid, the valid format is yyyyMMddHHmmss",
        ),
    ],
)
def test_invalid_values(changes, needle):
    assert any(needle in line for line in problems(with_ingestion(**changes))), problems(with_ingestion(**changes))


def test_namesrv_list_and_acl_pairing():
    raw = copy.deepcopy(MINIMAL)
    raw["clusters"]["local"] = {"namesrv": "127.0.0.1:9876;127.0.0.1:9877", "access_key_env": "AK"}
    (line,) = problems(raw)
    assert "access_key_env and secret_key_env go together" in line
    raw["clusters"]["local"] = {"namesrv": "127.0.0.1"}
    assert "is not host:port" in problems(raw)[0]


def test_topic_limits_become_per_queue_limits():
    ing = parse_config(with_ingestion(pull_threshold_for_topic=100, pull_threshold_size_for_topic=64)).ingestions[
        "orders"
    ]
    assert ing.per_queue_limits(16) == (6, 4 * 1024 * 1024)
    assert ing.per_queue_limits(1000) == (1, 1 * 1024 * 1024)  # max(1, limit / queues)
    default = parse_config(MINIMAL).ingestions["orders"]
    assert default.per_queue_limits(16) == (1000, 100 * 1024 * 1024)


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="file not found"):
        load_config(tmp_path / "absent.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("clusters: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


def test_config_path_from_environment(tmp_path, monkeypatch):
    import yaml

    path = tmp_path / "other.yaml"
    path.write_text(yaml.safe_dump(MINIMAL))
    monkeypatch.setenv("ROCKETLAKE_CONFIG", str(path))
    assert load_config().ingestions["orders"].topic == "orders"


@pytest.mark.parametrize("key", sorted(NOT_SUPPORTED_YET))
def test_a_setting_not_honoured_yet_is_refused_when_present(key):
    value = getattr(parse_config(MINIMAL).ingestions["orders"], key)
    value = getattr(value, "value", value)  # the default itself is refused too: present means "I rely on it"
    (line,) = problems(with_ingestion(**{key: value}))
    assert line.startswith(f"ingestions.orders.{key}: {value!r} is not supported yet (")
    assert line.endswith("; remove the key")


def test_broadcasting_keeps_each_members_progress_in_a_local_store(tmp_path):
    cfg = parse_config(
        with_ingestion(
            message_model="BROADCASTING",
            client_ip="10.0.0.7",
            instance_name="eu1",
            local_offset_store_dir=str(tmp_path),
        )
    ).ingestions["orders"]
    assert cfg.message_model is MessageModel.BROADCASTING and client_id(cfg) == "10.0.0.7@eu1"
    assert offset_store_path(cfg) == tmp_path / "10.0.0.7@eu1" / cfg.consumer_group / "offsets.json"
    parse_config(with_ingestion(message_model="BROADCASTING"))  # accepted at load


@pytest.mark.parametrize(
    "keys, expected",
    [
        ({"allocate_message_queue_strategy": "CONFIG"}, "CONFIG needs allocate_message_queue_list"),
        ({"allocate_message_queue_strategy": "MACHINE_ROOM"}, "MACHINE_ROOM needs consumer_machine_rooms"),
        (
            {
                "allocate_message_queue_strategy": "MACHINE_ROOM_NEARBY",
                "machine_room_nearby_strategy": "MACHINE_ROOM_NEARBY",
            },
            "cannot wrap itself",
        ),
        (
            {"virtual_node_count": 5},
            "virtual_node_count applies only with allocate_message_queue_strategy CONSISTENT_HASH "
            "(this ingestion uses AVG)",
        ),
        (
            {"allocate_message_queue_strategy": "CONFIG", "allocate_message_queue_list": ["broker-a"]},
            "item 'broker-a' is not a queue",
        ),
        (
            {"allocate_message_queue_strategy": "MACHINE_ROOM_NEARBY", "machine_room_resolver": "not a path"},
            "must be an import path module:attribute",
        ),
        ({"message_model": "BROADCASTING", "allocate_message_queue_strategy": "AVG"}, "applies to CLUSTERING only"),
    ],
)
def test_allocation_keys_are_checked_together(keys, expected):
    assert any(expected in line for line in problems(with_ingestion(**keys))), problems(with_ingestion(**keys))


def test_allocation_keys_accepted_with_their_strategy():
    ok = [
        {"allocate_message_queue_strategy": "CONSISTENT_HASH", "virtual_node_count": 3},
        {
            "allocate_message_queue_strategy": "CONFIG",
            "allocate_message_queue_list": ["broker-a/0", "%RETRY%g/broker-a/0"],
        },
        {"allocate_message_queue_strategy": "MACHINE_ROOM", "consumer_machine_rooms": ["hz"]},
        {
            "allocate_message_queue_strategy": "MACHINE_ROOM_NEARBY",
            "machine_room_nearby_strategy": "CONSISTENT_HASH",
            "virtual_node_count": 4,
            "machine_room_resolver": "rocketlake.engine.allocation:PrefixMachineRoomResolver",
        },
    ]
    for keys in ok:
        parse_config(with_ingestion(**keys))


def test_every_refusal_is_listed_with_its_ingestion():
    raw = with_ingestion(consume_concurrently_max_span=100, pull_interval=5)
    raw["ingestions"]["audit"] = {
        **raw["ingestions"]["orders"],
        "table": "audit_raw",
        "consume_concurrently_max_span": 2000,
        "pull_interval": 5,
    }
    refused = problems(raw)
    assert sorted(line.split(":")[0] for line in refused) == [
        "ingestions.audit.consume_concurrently_max_span",
        "ingestions.audit.pull_interval",
        "ingestions.orders.consume_concurrently_max_span",
        "ingestions.orders.pull_interval",
    ]


def test_every_field_either_works_or_is_refused():
    """A new IngestionConfig field must be read by the pipeline or listed in NOT_SUPPORTED_YET."""
    from rocketlake.engine.config import IngestionConfig

    honoured = {
        "cluster",
        "topic",
        "subscription",
        "consumer_group",
        "message_model",
        "consume_from_where",
        "consume_timestamp",
        "table",
        "window",
        "body",
        "on_deleted_messages",
        "pull_threshold_for_queue",
        "pull_threshold_size_for_queue",
        "pull_threshold_for_topic",
        "pull_threshold_size_for_topic",
        "pull_batch_size",
        "max_messages_per_task",
        "mq_client_api_timeout",
        "consume_orderly",
        "instance_name",
        "client_ip",
        "unit_name",
        "local_offset_store_dir",
        "allocate_message_queue_strategy",
        "allocate_message_queue_list",
        "consumer_machine_rooms",
        "machine_room_resolver",
        "machine_room_nearby_strategy",
        "virtual_node_count",
        "listener",
        "consume_thread_min",
        "consume_thread_max",
        "consume_message_batch_max_size",
        "max_reconsume_times",
        "consume_timeout",
        "run_retry",
        "suspend_current_queue_time_millis",
        "metadata_columns",
        "table_properties",
        "vacuum_retention_hours",
        "layout",
        "topics",
        "topic_pattern",
        "run_timeout",
    }
    assert set(IngestionConfig.model_fields) == honoured | set(NOT_SUPPORTED_YET)
    assert not honoured & set(NOT_SUPPORTED_YET)


def test_a_refused_key_fails_dagster_definitions_validate(tmp_path):
    import os
    import subprocess
    import sys

    import yaml

    config = tmp_path / "rocketlake.yaml"
    config.write_text(yaml.safe_dump(with_ingestion(consume_concurrently_max_span=100)))
    result = subprocess.run(
        [str(Path(sys.executable).parent / "dagster"), "definitions", "validate", "-w", "workspace.yaml"],
        cwd=ROOT,
        env=dict(os.environ, ROCKETLAKE_CONFIG=str(config)),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode != 0
    assert "ingestions.orders.consume_concurrently_max_span: 100 is not supported yet" in result.stdout + result.stderr


LISTENER = "tests.unit.listeners:fail_poison"
VECTORISED = "tests.unit.listeners:vectorised_upper"
ORDERLY = "tests.unit.listeners:orderly_fail_by_tag"


@pytest.mark.parametrize(
    "keys, expected",
    [
        ({"consume_timeout": 1}, "consume_timeout applies only to a listener"),
        ({"consume_thread_max": 40}, "consume_thread_max applies only to a listener"),
        ({"consume_message_batch_max_size": 4}, "consume_message_batch_max_size applies only to a listener"),
        ({"listener": VECTORISED, "consume_message_batch_max_size": 4}, "gets whole Arrow batches"),
        ({"listener": "no.such.module:fn"}, "cannot be loaded (ModuleNotFoundError"),
        ({"listener": "not a path"}, "must be an import path"),
        ({"listener": VECTORISED, "consume_orderly": True}, "is not supported yet"),
        ({"listener": LISTENER, "suspend_current_queue_time_millis": 500}, "applies only to consume_orderly"),
        (
            {"listener": LISTENER, "consume_orderly": True, "suspend_current_queue_time_millis": 5},
            "suspend_current_queue_time_millis",
        ),
        ({"listener": LISTENER, "consume_timeout": 0.001}, "consume_timeout"),
        (
            {"max_reconsume_times": 3, "body": {"format": "raw"}},
            "max_reconsume_times applies only when a message can fail",
        ),
        ({"listener": LISTENER, "message_model": "BROADCASTING", "max_reconsume_times": 3}, "CLUSTERING only"),
    ],
)
def test_listener_keys_are_checked_together(keys, expected):
    assert any(expected in line for line in problems(with_ingestion(**keys))), problems(with_ingestion(**keys))


def test_listener_keys_accepted_with_a_listener():
    for keys in [
        {
            "listener": LISTENER,
            "consume_timeout": 0.05,
            "consume_thread_min": 2,
            "consume_thread_max": 4,
            "consume_message_batch_max_size": 8,
            "max_reconsume_times": 2,
        },
        {"listener": VECTORISED, "consume_timeout": 1},
        {
            "listener": ORDERLY,
            "consume_orderly": True,
            "suspend_current_queue_time_millis": 500,
            "max_reconsume_times": 2,
        },
        {"max_reconsume_times": 0, "body": {"format": "json", "schema": "a STRING"}},
    ]:
        cfg = parse_config(with_ingestion(**keys)).ingestions["orders"]
        assert cfg.can_fail
    assert parse_config(with_ingestion(listener=LISTENER, consume_timeout=0.05)).ingestions[
        "orders"
    ].consume_timeout_seconds == pytest.approx(3.0)


def test_a_default_instance_name_becomes_the_deployments_own_in_clustering(monkeypatch, tmp_path):
    from rocketlake.engine.identity import deployment_instance_name
    from tests.unit.support import ingestion_config

    cfg = ingestion_config(client_ip="10.0.0.1")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "d1"))
    d1 = client_id(cfg)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "d1" / ".." / "d1"))  # the same instance, spelled otherwise
    assert client_id(cfg) == d1 and d1.startswith("10.0.0.1@dagster-")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "d2"))
    assert client_id(cfg) != d1, "another deployment on the host is another member"
    monkeypatch.delenv("DAGSTER_HOME")
    assert client_id(cfg) == f"10.0.0.1@{os.getpid()}", "a process without a Dagster instance: its pid, as Java"
    assert deployment_instance_name({}) == str(os.getpid())
    assert client_id(ingestion_config(client_ip="10.0.0.1", instance_name="eu1")) == "10.0.0.1@eu1"
    assert client_id(ingestion_config(client_ip="10.0.0.1", message_model="BROADCASTING")) == "10.0.0.1@DEFAULT"


def test_metadata_columns_are_named_from_the_catalogue_and_the_rules_add_what_the_run_needs():
    from rocketlake.engine.columns import METADATA_COLUMNS, landed_metadata, read_metadata

    cfg = parse_config(with_ingestion(metadata_columns=["properties", "born_host"]), "test.yaml").ingestions["orders"]
    assert landed_metadata(cfg) == ("properties", "born_host")  # catalogue order
    assert read_metadata(cfg, landed_metadata(cfg)) == ("properties", "born_host")  # nothing can fail: read = landed
    # A table that already has a column keeps getting it; origin columns where copies can land; all for a listener.
    assert landed_metadata(cfg, ["topic", "store_host", "amount"]) == ("properties", "born_host", "store_host")
    failing = parse_config(with_ingestion(body={"format": "text"}), "test.yaml").ingestions["orders"]
    assert landed_metadata(failing) == ("origin_topic", "origin_msg_id", "origin_offset_msg_id")
    assert read_metadata(failing, landed_metadata(failing)) == (
        "offset_msg_id",
        "reconsume_times",
        "origin_topic",
        "origin_msg_id",
        "origin_offset_msg_id",
    )
    from rocketlake.engine.config import dead_letter_config

    assert landed_metadata(dead_letter_config(cfg)) == (
        "properties",
        "born_host",
        "reconsume_times",
        "origin_topic",
        "origin_msg_id",
        "origin_offset_msg_id",
    )
    listening = parse_config(with_ingestion(listener="tests.unit.listeners:fail_poison"), "t.yaml").ingestions["orders"]
    assert read_metadata(listening, landed_metadata(listening)) == METADATA_COLUMNS
    refused = "\n".join(problems(with_ingestion(metadata_columns=["properties", "msg_id"])))
    assert "ingestions.orders.metadata_columns.1: 'msg_id'" in refused and "'born_host'" in refused


def test_a_spark_connect_url_is_checked_at_load_and_taken_with_an_s3_lake():
    raw = {**copy.deepcopy(MINIMAL), "spark": {"remote": "sc://127.0.0.1:15002"}}
    assert parse_config(raw).spark.remote == "sc://127.0.0.1:15002"
    for bad in ("http://127.0.0.1:15002", "sc://:15002", "sc://host:99999"):
        (line,) = problems({**MINIMAL, "spark": {"remote": bad}})
        assert line.startswith(f"spark.remote: {bad!r}") or ("spark.remote" in line and bad in line), line
        assert "sc://host:port" in line
    # The server is started with the lake's bucket settings (rocketlake spark-server on the same configuration).
    on_s3 = parse_config({**raw, "lake": {"root": "s3a://bucket/lake", "s3": {"region": "eu-west-1"}}})
    assert on_s3.spark.remote == "sc://127.0.0.1:15002" and on_s3.lake.root == "s3a://bucket/lake"


def test_table_properties_are_delta_texts_and_refused_by_name_when_they_cannot_be_passed_on():
    cfg = parse_config(
        with_ingestion(
            table_properties={"delta.enableChangeDataFeed": True, "delta.checkpointInterval": 5, "team": "data"}
        )
    )
    assert cfg.ingestions["orders"].table_properties == {
        "delta.enableChangeDataFeed": "true",
        "delta.checkpointInterval": "5",
        "team": "data",
    }
    assert any(
        "table property name 'bad name'" in line
        for line in problems(with_ingestion(table_properties={"bad name": "x"}))
    )
    assert any(
        'table property team: the value "it\'s"' in line
        for line in problems(with_ingestion(table_properties={"team": "it's"}))
    )
    assert any(
        "table property owner is reserved by Spark" in line
        for line in problems(with_ingestion(table_properties={"owner": "me"}))
    )
    assert any(
        "vacuum_retention_hours: -1" in line and "greater than or equal to 0" in line
        for line in problems(with_ingestion(vacuum_retention_hours=-1))
    )


def test_vacuum_retention_must_outlast_the_longest_run():
    """A VACUUM that deletes files a run of another member still reads would fail that run: the retention is at
    least the run deadline (run_timeout, 120 min unless set)."""
    assert any(
        "vacuum_retention_hours: 1 is below run_timeout (120 min)" in line
        and "allowed: vacuum_retention_hours >= 2" in line
        for line in problems(with_ingestion(vacuum_retention_hours=1))
    )
    assert any(
        "vacuum_retention_hours: 0 is below run_timeout (30 min)" in line
        for line in problems(with_ingestion(vacuum_retention_hours=0, run_timeout=30))
    )
    assert parse_config(with_ingestion(vacuum_retention_hours=2)).ingestions["orders"].vacuum_retention_hours == 2
    assert parse_config(with_ingestion(vacuum_retention_hours=1, run_timeout=60)).ingestions["orders"].run_timeout == 60


def test_run_timeout_is_checked():
    assert any(
        "run_timeout: 0" in line and "greater than 0" in line for line in problems(with_ingestion(run_timeout=0))
    )
    assert any(
        "run_timeout: 5 is below consume_timeout (15 min)" in line
        for line in problems(with_ingestion(listener="tests.unit.listeners:fail_poison", run_timeout=5))
    )
    assert parse_config(with_ingestion(run_timeout=0.5)).ingestions["orders"].run_timeout_seconds == 30


@pytest.mark.parametrize(
    "layout, message",
    [
        (
            {"partition_by": ["window_date"]},
            r"partition_by: 'window_date' is not allowed \(it is always the table's first",
        ),
        ({"zorder_by": ["body"]}, r"zorder_by: 'body' is not allowed \(bytes cannot"),
        ({"cluster_by": ["ship.city"]}, "cluster_by: 'ship.city' is not a column name"),
        ({"partition_by": ["region", "region"]}, "names a column twice"),
        ({"cluster_by": ["region"], "partition_by": ["tags"]}, "cluster_by cannot be combined with partition_by"),
        ({"cluster_by": ["a", "b", "c", "d", "e"]}, "Delta clusters by at most 4"),
        (
            {"partition_by": ["region"], "zorder_by": ["region", "amount"]},
            r"zorder_by: \['region'\] are partition columns",
        ),
        ({"sort_by": ["x"]}, "sort_by"),
    ],
)
def test_a_layout_delta_cannot_make_is_refused_at_load_by_name(layout, message):
    with pytest.raises(ConfigError, match=message):
        parse_config(with_ingestion(layout=layout), "test.yaml")


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"topics": ["a", "b"]}, "exactly one of topic, topics .* given: topic, topics"),
        ({"topic": None}, "given: none"),
        ({"topic": None, "topics": ["a", "a"]}, "names a topic twice"),
        ({"topic": None, "topic_pattern": "orders_("}, "is not a regular expression"),
        (
            {
                "topic": None,
                "topics": ["a", "b"],
                "allocate_message_queue_strategy": "CONFIG",
                "allocate_message_queue_list": ["broker-a/0"],
            },
            "name each queue as topic/broker_name/queue_id",
        ),
    ],
)
def test_the_topics_landed_are_named_one_way(changes, message):
    with pytest.raises(ConfigError, match=message):
        parse_config(with_ingestion(**changes), "test.yaml")


def test_a_pattern_matches_whole_names_and_never_retry_dead_letter_or_system_topics():
    from rocketlake.engine.topics import matching_topics

    names = [
        "orders_eu",
        "orders_us",
        "orders_eu_archive",
        "xorders_eu",
        "%RETRY%orders_g",
        "%DLQ%orders_g",
        "rmq_sys_orders_x",
        "TBW102",
        "SCHEDULE_TOPIC_XXXX",
    ]
    assert matching_topics(r"orders_(eu|us)", names) == ["orders_eu", "orders_us"]
    assert matching_topics(r".*orders.*", names) == ["orders_eu", "orders_eu_archive", "orders_us", "xorders_eu"]
    # 5.x's own: transactions' half topics, the timer wheel's, traces, the schedule of delay levels.
    system = ["RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "rmq_sys_wheel_timer", "RMQ_SYS_TRACE_TOPIC"]
    assert matching_topics(r".*", [*system, "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_OTHER", "orders"]) == ["orders"]
    # The cluster's own (topics named after the cluster and its brokers, the reply topic), as the caller lists them.
    own = {"DefaultCluster", "DefaultCluster_REPLY_TOPIC", "broker-a"}
    assert matching_topics(r".*", [*own, "orders"], own) == ["orders"]
    cfg = parse_config(with_ingestion(topic=None, topics=["orders_us", "orders_eu"]), "t.yaml").ingestions["orders"]
    assert (cfg.topic_names, cfg.topic_label, cfg.membership_topic) == (
        ("orders_us", "orders_eu"),
        "orders_us, orders_eu",
        "orders_us",
    )
    pattern = parse_config(with_ingestion(topic=None, topic_pattern="orders_.*"), "t.yaml").ingestions["orders"]
    assert (pattern.topic_names, pattern.topic_label, pattern.membership_topic) == (
        (),
        "topics matching /orders_.*/",
        None,
    )


def test_variant_bodies_take_no_schema_and_no_listener_yet():
    from tests.unit.support import ingestion_config

    assert ingestion_config(body={"format": "variant"}).can_fail  # a body that is not JSON fails
    with pytest.raises(ConfigError, match="format variant lands the whole JSON body as one VARIANT column"):
        ingestion_config(body={"format": "variant", "schema": "a INT"})
    with pytest.raises(ConfigError, match="with body.format variant is not supported yet"):
        ingestion_config(body={"format": "variant"}, listener="tests.unit.listeners:fail_poison")


def test_uniform_is_refused_naming_the_property_and_what_to_do():
    with pytest.raises(ConfigError, match=r"delta.universalFormat.enabledFormats: Iceberg compatibility \(UniForm\)"):
        parse_config(with_ingestion(table_properties={"delta.universalFormat.enabledFormats": "iceberg"}))


def test_a_catalog_table_is_named_database_dot_name_and_lives_under_its_database():
    config = parse_config(with_ingestion(table="sales.orders"))
    ing = config.ingestions["orders"]
    assert (ing.catalog_table, ing.table_key_path) == ("sales.orders", ("sales", "orders"))
    assert config.lake.table_path(ing.table).endswith("/sales/orders")
    assert LakeConfig(root="s3a://bucket/lake").table_path("sales.orders") == "s3a://bucket/lake/sales/orders"
    plain = parse_config(with_ingestion(table="orders")).ingestions["orders"]
    assert (plain.catalog_table, plain.table_key_path) == (None, ("orders",))


@pytest.mark.parametrize(("other", "shared"), [("sales", "folder"), ("sales__orders", "job and sensor names")])
def test_a_catalog_table_may_not_share_a_folder_or_names_with_a_table_by_path(other, shared):
    raw = with_ingestion(table="sales.orders")
    raw["ingestions"]["other"] = {**raw["ingestions"]["orders"], "table": other, "consumer_group": "g2"}
    assert any(
        f"ingestions.orders.table: 'sales.orders' and the table {other!r} of ingestion 'other' would share their "
        f"{shared}" in line
        for line in problems(raw)
    ), problems(raw)
    assert parse_config(with_ingestion(table="sales.orders")).catalog_tables == ["sales.orders", "sales.orders_dlq"]


def test_a_clusters_namespace_wraps_its_ingestions_topics_and_group_but_not_their_names_in_dagster():
    from dagster import AssetKey

    from rocketlake.dagster.definitions import build_definitions
    from rocketlake.engine.config import dead_letter_config

    raw = with_ingestion(topic="orders", consumer_group="g1")
    raw["clusters"]["local"]["namespace"] = "shop"
    config = parse_config(raw)
    ing = config.ingestions["orders"]
    assert (ing.topic, ing.consumer_group, ing.namespace, ing.table) == ("shop%orders", "shop%g1", "shop", "orders_raw")
    assert (ing.plain(ing.topic), ing.plain("other")) == ("orders", "other")
    assert dead_letter_config(ing).topic == "%DLQ%shop%g1"  # as the broker names the group's dead-letter queue
    graph = build_definitions(config).resolve_asset_graph()
    assert graph.get(AssetKey("orders_raw")).parent_keys == {AssetKey(["rocketmq", "local", "orders"])}
    raw["clusters"]["local"]["namespace"] = "a%b"
    assert any("namespace: 'a%b' must be 1 to 64 letters" in line for line in problems(raw)), problems(raw)
    raw["clusters"]["local"]["namespace"] = "n" * 60
    raw["ingestions"]["orders"]["topic"] = "t" * 100
    assert any("with the cluster's namespace" in line for line in problems(raw)), problems(raw)
