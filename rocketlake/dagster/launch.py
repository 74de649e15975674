"""Launching windows through Dagster from the command line: one single-run backfill, as
``dagster asset materialize --partition-range`` runs it, after rocketlake has checked the windows.

The run goes through the code location's own executor (which reclaims the pool slot of a run that
was killed) on ``$DAGSTER_HOME``, or on the project's local instance ``.rocketlake/dagster`` with the
recommended ``dagster.yaml`` (pools limited to 1 per consumer group) when it is unset.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

LOCAL_DAGSTER_HOME = Path(".rocketlake/dagster")
RECOMMENDED_INSTANCE = Path(__file__).with_name("dagster.yaml")  # the docs' recommended instance (docs/files.md)


def dagster_home() -> Path:
    """``$DAGSTER_HOME``, else the local instance (created with the recommended dagster.yaml)."""
    if os.environ.get("DAGSTER_HOME"):
        return Path(os.environ["DAGSTER_HOME"])
    LOCAL_DAGSTER_HOME.mkdir(parents=True, exist_ok=True)
    settings = LOCAL_DAGSTER_HOME / "dagster.yaml"
    if not settings.exists():
        shutil.copy(RECOMMENDED_INSTANCE, settings)
    else:
        # A local instance rocketlake wrote before the warm launcher moved to rocketlake.dagster names its old module.
        text = settings.read_text()
        if "module: rocketlake.warm_runs" in text:
            settings.write_text(text.replace("module: rocketlake.warm_runs", "module: rocketlake.dagster.warm_runs"))
    os.environ["DAGSTER_HOME"] = str(LOCAL_DAGSTER_HOME.absolute())
    return LOCAL_DAGSTER_HOME


def run_windows(table: str, keys: list[str], module: str = "rocketlake.definitions", job_name: str | None = None):
    """One run of ``table``'s job (or ``job_name`` of ``module``) over the partition range ``keys[0]`` ..
    ``keys[-1]`` (no keys: a job of unpartitioned assets); the ExecuteJobResult."""
    from dagster import DagsterInstance, execute_job

    from rocketlake.dagster.dagster_private import ReconstructableRepository

    dagster_home()
    from rocketlake.dagster.translator import table_job_name

    job = ReconstructableRepository.for_module(module, "defs", os.getcwd()).get_reconstructable_job(
        job_name or table_job_name(table)
    )
    with DagsterInstance.get() as instance:
        return execute_job(
            job,
            instance=instance,
            raise_on_error=False,
            run_config={"loggers": {"console": {"config": {"log_level": "INFO"}}}},
            tags={"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]}
            if keys
            else {},
        )
