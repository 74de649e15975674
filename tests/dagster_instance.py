"""The Dagster instance of every test that runs an ingestion step: pools as ``rocketlake/dagster/dagster.yaml`` sets them.

An ingestion step refuses to start when its consumer group's pool is not limited to 1 on the run's instance
(``dagster.pool_limit``), so a test runs rocketlake's assets in process on ``pooled_instance()``, and a process of its
own (the ``dagster`` or ``rocketlake`` CLI, a daemon) on ``recommended_home(path)``. Both take the settings from the
file the docs tell people to copy, so the tests run on what a person is told to use.
"""

from __future__ import annotations

import shutil
from contextlib import AbstractContextManager
from pathlib import Path

import yaml
from dagster import DagsterInstance, instance_for_test

from rocketlake.dagster.launch import RECOMMENDED_INSTANCE

#: ``concurrency`` of the recommended instance (pools limited to 1), as ``instance_for_test`` overrides.
POOLS_LIMITED = {"concurrency": yaml.safe_load(RECOMMENDED_INSTANCE.read_text())["concurrency"]}


def pooled_instance(overrides: dict | None = None) -> AbstractContextManager[DagsterInstance]:
    """A temporary instance with the recommended pools (and ``overrides`` on top)."""
    return instance_for_test(overrides={**POOLS_LIMITED, **(overrides or {})})


def recommended_home(path: Path) -> Path:
    """``path`` made a DAGSTER_HOME holding the recommended ``dagster.yaml``."""
    path.mkdir(parents=True, exist_ok=True)
    shutil.copy(RECOMMENDED_INSTANCE, path / "dagster.yaml")
    return path
