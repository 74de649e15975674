"""The code location loads the way `dagster dev -w workspace.yaml` loads it."""

import subprocess
import sys
from pathlib import Path

from dagster import AssetKey

from rocketlake.dagster.spark_resource import SparkResource
from rocketlake.definitions import defs

ROOT = Path(__file__).resolve().parents[2]


def test_definitions_carry_the_spark_resource():
    spark = defs.resources["spark"]
    assert isinstance(spark, SparkResource)
    assert spark.master == "local[*]"


def test_workspace_validates_with_dagster_cli():
    dagster = Path(sys.executable).parent / "dagster"
    result = subprocess.run(
        [str(dagster), "definitions", "validate", "-w", "workspace.yaml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert "Validation successful for code location rocketlake" in result.stdout + result.stderr, result.stderr[-2000:]


def test_the_demo_location_validates_and_reads_topic_to_table_to_aggregate_and_dead_letters():
    dagster = Path(sys.executable).parent / "dagster"
    result = subprocess.run(
        [str(dagster), "definitions", "validate", "-m", "rocketlake.demo.definitions"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert "Validation successful" in result.stdout + result.stderr, result.stderr[-2000:]
    from rocketlake.demo.definitions import defs as demo

    graph = demo.resolve_asset_graph()
    topic = AssetKey(["rocketmq", "local", "rocketlake_demo_orders"])
    assert graph.get(topic).is_external and "rocketmq" in graph.get(topic).kinds
    assert graph.get(AssetKey("orders_raw")).parent_keys == {topic}
    assert graph.get(AssetKey("orders_raw")).child_keys == {
        AssetKey("orders_raw_dlq"),
        AssetKey("orders_raw_by_region"),
        AssetKey("orders_raw_customers"),
    }


def test_resources_of_ones_own_take_the_place_of_the_configurations():
    import pytest

    from rocketlake import build_definitions, default_resources, load_config

    config = load_config(ROOT / "rocketlake.yaml")
    own = SparkResource(master="local[1]")
    built = build_definitions(config, resources={"spark": own})
    assert built.resources["spark"] is own
    assert set(built.resources) == set(default_resources(config)) == {"spark", "rocketmq_local"}
    with pytest.raises(ValueError, match=r"resources=\['spark_two'\] are not resources these definitions use"):
        build_definitions(config, resources={"spark_two": own})


def test_the_repositorys_code_location_is_built_from_the_top_level_folders():
    # workspace.yaml's module, imported from this folder as `dagster dev` imports it: it imports the library.
    import pipelines.definitions
    import rocketlake

    assert sorted(pipelines.definitions.defs.resources) == ["rocketmq_local", "spark"]
    assert pipelines.definitions.defs.executor is rocketlake.rocketlake_executor  # dead runs reclaimed in process
