"""A user's shape of rocketlake's assets (translator in Python, ``translation`` in a Component's YAML) reaches every
definition made from them, and only rocketlake's jobs carry rocketlake's executor."""

from __future__ import annotations

import sys
from pathlib import Path

import dagster as dg
import pytest
from dagster import AssetKey

from rocketlake.dagster.definitions import build_definitions
from rocketlake.dagster.translator import RocketlakeAssetData, RocketlakeTranslator
from rocketlake.engine.config import IngestionConfig, parse_config

ROOT = Path(__file__).resolve().parents[2]

CONFIG = {
    "clusters": {"main": {"namesrv": "127.0.0.1:9876"}},
    "ingestions": {
        "orders": {
            "cluster": "main",
            "topic": "orders",
            "consumer_group": "GID_orders",
            "table": "orders",
            "listener": "tests.unit.listeners:orderly_fail_by_tag",
            "consume_orderly": True,
            "window": {"cron": "*/5 * * * *", "start": "2026-11-01"},
        },
        "orders_audit": {
            "cluster": "main",
            "topic": "orders",
            "consumer_group": "GID_audit",
            "table": "orders_audit",
            "message_model": "BROADCASTING",
            "window": {"cron": "0 * * * *", "start": "2026-11-01"},
        },
    },
}


class PlatformTranslator(RocketlakeTranslator):
    def get_asset_spec(self, data: RocketlakeAssetData) -> dg.AssetSpec:
        spec = super().get_asset_spec(data)
        return spec.replace_attributes(
            key=spec.key.with_prefix(["lake", "raw"]),
            group_name="ingest",
            owners=["team:data-platform"],
            automation_condition=dg.AutomationCondition.on_missing() if data.role == "table" else None,
        ).merge_attributes(tags={"layer": "bronze", "role": data.role})


def graph_of(defs: dg.Definitions):
    return defs.resolve_asset_graph()


def assert_shaped_everywhere(defs: dg.Definitions, prefix: list[str], group: str):
    """Keys, group, checks, lineage, the job, the schedule and the sensors all follow the translated keys."""
    graph = graph_of(defs)
    topic, table, dlq = (AssetKey([*prefix, *p]) for p in (["rocketmq", "main", "orders"], ["orders"], ["orders_dlq"]))
    audit = AssetKey([*prefix, "orders_audit"])
    ours = {k for k in graph.get_all_asset_keys() if k != AssetKey("user_report")}  # a dg project's own asset aside
    assert ours == {topic, table, dlq, audit}  # nothing left under the bare names
    assert {graph.get(k).group_name for k in (topic, table, dlq, audit)} == {group}
    # Lineage: one topic node for both ingestions of the topic -> each table -> the dead letters.
    assert graph.get(table).parent_keys == {topic} and graph.get(audit).parent_keys == {topic}
    assert graph.get(dlq).parent_keys == {table}
    checks = {(c.asset_key, c.name) for c in graph.asset_check_keys}
    assert {
        (table, "offsets_accounted"),
        (table, "fresh"),
        (table, "lag_not_growing"),
        (dlq, "offsets_accounted"),
        (dlq, "no_dead_letters"),
    } <= checks
    assert all(key in (topic, table, dlq, audit) for key, _ in checks)
    ident = "__".join([*prefix, "orders"])
    job = defs.resolve_job_def(f"{ident}_job")
    assert job.executor_def.name == "rocketlake_in_process"  # rocketlake's job carries rocketlake's executor
    assert set(job.asset_layer.selected_asset_keys) == {table, dlq}
    schedule = defs.resolve_schedule_def(f"{ident}_windows")
    assert schedule.job_name == job.name
    sensors = {s.name: s for s in defs.sensors}
    assert sensors[f"{ident}_orderly_resume"].asset_selection.resolve(graph) == {table}
    # The lag, retry-backlog and rebalance sensors serve the cluster, named under the tables' common prefix.
    cluster = "__".join([*prefix, "rocketlake_main"])
    assert sorted(sensors) == sorted(
        [
            "rocketlake_dead_runs",
            f"{ident}_orderly_resume",
            f"{cluster}_lag",
            f"{cluster}_rebalance",
            f"{cluster}_retry_backlog",
        ]
    )
    assert sensors[f"{cluster}_rebalance"].asset_selection.resolve(graph) == {table, audit}
    # Only the CLUSTERING ingestion has a retry topic and a dead-letter queue.
    assert sensors[f"{cluster}_retry_backlog"].asset_selection.resolve(graph) == {table}


def test_a_python_translator_shapes_every_asset_and_what_is_made_from_them():
    defs = build_definitions(parse_config(CONFIG), translator=PlatformTranslator())
    assert_shaped_everywhere(defs, ["lake", "raw"], "ingest")
    graph = graph_of(defs)
    table = graph.get(AssetKey(["lake", "raw", "orders"]))
    assert table.owners == ["team:data-platform"] and table.tags["layer"] == "bronze"
    assert table.automation_condition is not None
    assert graph.get(AssetKey(["lake", "raw", "orders_dlq"])).automation_condition is None
    # rocketlake's own metadata stays beside the translator's changes
    assert "rocketlake/table_path" in table.metadata and {"rocketmq", "spark", "delta"} <= table.kinds


def test_without_a_translator_the_names_are_the_tables():
    defs = build_definitions(parse_config(CONFIG))
    assert_shaped_everywhere(defs, [], "rocketlake")
    assert defs.executor is None  # the code location's executor is the user's to choose


def test_each_topic_of_an_ingestion_is_upstream_of_its_table_and_a_pattern_is_one_node():
    config = {
        "clusters": CONFIG["clusters"],
        "ingestions": {
            "orders": {
                "cluster": "main",
                "topics": ["orders_eu", "orders_us"],
                "consumer_group": "g1",
                "table": "orders",
                "window": {"cron": "* * * * *", "start": "2026-11-01"},
            },
            "clicks": {
                "cluster": "main",
                "topic_pattern": "clicks_.*",
                "consumer_group": "g2",
                "table": "clicks",
                "window": {"cron": "* * * * *", "start": "2026-11-01"},
            },
            "eu_only": {
                "cluster": "main",
                "topic": "orders_eu",
                "consumer_group": "g3",
                "table": "eu_only",
                "window": {"cron": "* * * * *", "start": "2026-11-01"},
            },
        },
    }
    graph = graph_of(build_definitions(parse_config(config)))
    eu, us = AssetKey(["rocketmq", "main", "orders_eu"]), AssetKey(["rocketmq", "main", "orders_us"])
    assert graph.get(AssetKey("orders")).parent_keys == {eu, us}
    assert graph.get(AssetKey("eu_only")).parent_keys == {eu}  # one node per topic, shared
    (pattern,) = graph.get(AssetKey("clicks")).parent_keys
    assert pattern == AssetKey(["rocketmq", "main", "pattern_clicks___"])
    assert "joins" in graph.get(pattern).description


def test_a_translator_returning_something_else_is_refused_naming_the_asset():
    class Broken(RocketlakeTranslator):
        def get_asset_spec(self, data):
            return {"key": data.table}

    with pytest.raises(TypeError, match=r"returned dict for the topic asset of ingestion 'orders'"):
        build_definitions(parse_config(CONFIG), translator=Broken())


DEFS_YAML = """\
type: rocketlake.component.RocketlakeComponent
attributes:
  clusters:
    main: {namesrv: "{{ env.ROCKETLAKE_TEST_NAMESRV }}"}
  lake: {root: lake}
  ingestions:
    orders: {cluster: main, topic: orders, consumer_group: GID_orders, table: orders,
             listener: "tests.unit.listeners:orderly_fail_by_tag", consume_orderly: true,
             window: {cron: "*/5 * * * *", start: "2026-11-01"}}
    orders_audit: {cluster: main, topic: orders, consumer_group: GID_audit, table: orders_audit,
                   message_model: BROADCASTING, window: {cron: "0 * * * *", start: "2026-11-01"}}
  translation:
    key_prefix: [lake, raw]
    group_name: ingest
    owners: ["team:data-platform"]
    tags: {layer: bronze}
    description: "{{ data.role }} of ingestion {{ data.ingestion }}"
"""

USER_DEFS = """\
import dagster as dg


@dg.asset
def user_report():
    return 1


# The user's own job, on the executor the user chose for it.
user_job = dg.define_asset_job("user_job", selection=[user_report], executor_def=dg.multiprocess_executor)


@dg.definitions
def defs():
    return dg.Definitions(assets=[user_report], jobs=[user_job])
"""


def user_project(root: Path, defs_yaml: str) -> Path:
    files = {
        "pyproject.toml": '[project]\nname = "user-project"\nversion = "0"\n\n[tool.dg]\ndirectory_type = '
        '"project"\n\n[tool.dg.project]\nroot_module = "user_project"\n',
        "user_project/__init__.py": "",
        "user_project/defs/__init__.py": "",
        "user_project/defs/orders/defs.yaml": defs_yaml,
        "user_project/defs/mine/defs.py": USER_DEFS,
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root / "user_project" / "defs"


def load_project(tmp_path: Path, monkeypatch, defs_yaml: str) -> dg.Definitions:
    monkeypatch.setenv("ROCKETLAKE_TEST_NAMESRV", "127.0.0.1:9877")
    folder = user_project(tmp_path, defs_yaml)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m == "user_project" or m.startswith("user_project.")]:
        monkeypatch.delitem(sys.modules, name)
    return dg.load_from_defs_folder(path_within_project=folder)


def test_the_component_in_a_dg_project_shapes_assets_from_yaml_beside_the_users_own(tmp_path, monkeypatch):
    defs = load_project(tmp_path, monkeypatch, DEFS_YAML)
    assert_shaped_everywhere(defs, ["lake", "raw"], "ingest")
    graph = graph_of(defs)
    table = graph.get(AssetKey(["lake", "raw", "orders"]))
    assert table.description == "table of ingestion orders" and table.owners == ["team:data-platform"]
    assert defs.resources["rocketmq_main"].namesrv == "127.0.0.1:9877"  # the template, resolved
    # The user's job keeps its executor; no executor is imposed on the project.
    assert defs.resolve_job_def("user_job").executor_def.name == "multiprocess"
    assert defs.executor is None


def test_the_component_attributes_are_typed_and_checked_with_their_position(tmp_path, monkeypatch):
    schema = __import__("rocketlake.component", fromlist=["x"]).RocketlakeComponent.model().model_json_schema()
    assert "pull_batch_size" in str(schema) and "consume_from_where" in str(schema)  # dg can show every key
    # RocketMQ's ranges are in the schema too, so `dg check yaml` refuses what a load refuses, before the load.
    ingestion = IngestionConfig.model_json_schema()["properties"]
    assert (ingestion["pull_batch_size"]["minimum"], ingestion["pull_batch_size"]["maximum"]) == (1, 1024)
    assert {"const": -1} in ingestion["pull_threshold_for_topic"]["anyOf"]
    bad = DEFS_YAML.replace("consume_orderly: true", "consume_orderly: true, pull_batch_size: 5000")
    with pytest.raises(Exception) as failure:
        load_project(tmp_path, monkeypatch, bad)
    text = "".join(str(e) for e in (failure.value, failure.value.__cause__) if e)
    assert "pull_batch_size" in text and "5000" in text and "out of range [1, 1024]" in text, text
    assert "defs.yaml:" in text, text  # where in the file


@pytest.mark.parametrize(
    "change, says",
    [
        (
            ("consume_orderly: true", "consume_orderly: true, pull_interval: 10"),
            "ingestions.orders.pull_interval: 10 is not supported yet",
        ),
        (
            ("orders_audit: {cluster: main", "orders_audit: {cluster: other"),
            "ingestions.orders_audit.cluster: 'other' is not one of the clusters ['main']",
        ),
    ],
)
def test_the_component_refuses_at_load_what_rocketlake_yaml_refuses(tmp_path, monkeypatch, change, says):
    with pytest.raises(Exception) as failure:
        load_project(tmp_path, monkeypatch, DEFS_YAML.replace(*change))
    text = str(failure.value) + str(failure.value.__cause__)
    assert says in text and "defs.yaml is not valid" in text, text


def test_a_catalog_table_is_keyed_by_its_database_and_name_and_lives_in_a_folder_of_its_database():
    config = parse_config(
        {
            **CONFIG,
            "lake": {"root": "/lake"},
            "ingestions": {
                "orders": {**CONFIG["ingestions"]["orders"], "table": "sales.orders"},
                "orders_audit": {**CONFIG["ingestions"]["orders_audit"], "table": "audit.orders"},
            },
        }
    )
    defs = build_definitions(config)
    graph = graph_of(defs)
    table, dlq, audit = AssetKey(["sales", "orders"]), AssetKey(["sales", "orders_dlq"]), AssetKey(["audit", "orders"])
    assert {k for k in graph.get_all_asset_keys() if k.path[0] != "rocketmq"} == {table, dlq, audit}
    assert graph.get(dlq).parent_keys == {table}
    assert graph.get(table).metadata["rocketlake/table_path"].path == "/lake/sales/orders"
    assert graph.get(dlq).metadata["rocketlake/table_path"].path == "/lake/sales/orders_dlq"
    job = defs.resolve_job_def("sales__orders_job")
    assert set(job.asset_layer.selected_asset_keys) == {table, dlq}
    assert defs.resolve_schedule_def("audit__orders_windows").job_name == "audit__orders_job"
    assert {(c.asset_key, c.name) for c in graph.asset_check_keys} >= {(table, "fresh"), (dlq, "no_dead_letters")}
    assert "sales__orders_orderly_resume" in {s.name for s in defs.sensors}
