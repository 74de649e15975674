"""The code location loads the way `dagster dev -w workspace.yaml` loads it."""

import subprocess
import sys
from pathlib import Path

from rocketlake.definitions import defs
from rocketlake.resources.spark import SparkResource

ROOT = Path(__file__).resolve().parents[2]


def test_definitions_carry_the_spark_resource():
    spark = defs.resources["spark"]
    assert isinstance(spark, SparkResource)
    assert spark.master == "local[*]"


def test_workspace_validates_with_dagster_cli():
    dagster = Path(sys.executable).parent / "dagster"
    result = subprocess.run([str(dagster), "definitions", "validate", "-w", "workspace.yaml"], cwd=ROOT,
                            capture_output=True, text=True, timeout=180)
    assert "Validation successful for code location rocketlake" in result.stdout + result.stderr, result.stderr[-2000:]
