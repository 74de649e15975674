"""A table per topic (``table: raw_{topic}``, ``consumer_group: lake_{topic}``) through Dagster on real brokers,
Spark and Delta: each topic a pattern matches is an asset, a job and a consumer group of its own; the runs'
processes rebuild the tables the code location loaded with; a topic created later is named by the sensor until the
definitions load again, and then has its table."""

from __future__ import annotations

import json
import uuid

import pytest
from dagster import AssetKey, SkipReason, build_sensor_context
from dagster._utils.test.definitions import scoped_reconstruction_metadata
from deltalake import DeltaTable

from rocketlake.dagster.topic_tables import METADATA_KEY
from tests.dagster_instance import pooled_instance
from tests.integration.deployment_support import ROOT
from tests.integration.ingestion_support import (
    definitions,
    in_shared_minutes,
    run_partitions,
    unique,
    write_config,
)

pytestmark = pytest.mark.dagster


#: Two topics a pattern matches (each worker's cluster has its own), with messages in the suite's first shared minute.
TWO_TOPICS = in_shared_minutes(
    "topic_tables",
    {"tpt_eu": (2, None), "tpt_us": (2, None)},
    lambda t: (
        [{"topic": t["tpt_eu"], "keys": [f"eu-{i}"], "body": f"eu-{i}"} for i in range(3)]
        + [{"topic": t["tpt_us"], "keys": [f"us-{i}"], "body": f"us-{i}"} for i in range(2)]
    ),
)


def test_each_topic_of_a_pattern_lands_in_a_table_and_group_of_its_own(tmp_path, local_cluster, shared_minutes):
    sent = shared_minutes[TWO_TOPICS]
    eu, us = sent.topics["tpt_eu"], sent.topics["tpt_us"]
    (key,) = sent.windows
    group = unique("g_tpt")
    config = write_config(
        tmp_path / "rocketlake.yaml",
        local_cluster,
        tmp_path / "lake",
        {
            "raw": {
                "topic_pattern": "tpt_(eu|us)_[0-9a-f]{8}",
                "table": "raw_{topic}",
                "consumer_group": group + "_{topic}",
                "body": {"format": "raw"},
            }
        },
    )
    defs = definitions(config)
    tables = {f"raw_{eu}": (eu, 3), f"raw_{us}": (us, 2)}
    assert {k for k in map(AssetKey.to_user_string, defs.resolve_all_asset_keys()) if k.startswith("raw_")} == {
        *tables,
        *(f"{t}_dlq" for t in tables),
    }
    assert json.loads(defs.metadata[METADATA_KEY].value) == {"raw": [eu, us]}  # for the runs' processes

    with pooled_instance() as instance:
        for table in tables:
            assert run_partitions(defs, table, instance, key).success
    for table, (topic, count) in tables.items():
        rows = DeltaTable(str(tmp_path / "lake" / table)).to_pyarrow_table(columns=["topic", "keys"]).to_pylist()
        assert sorted(r["keys"] for r in rows) == sorted(f"{topic[4:6]}-{i}" for i in range(count)), table
        assert {r["topic"] for r in rows} == {topic}
        progress = local_cluster.mqadmin().consumer_progress(f"{group}_{topic}", topic)
        assert progress and all(p.consumer_offset == p.broker_offset for p in progress), (table, progress)

    # A topic created since: the sensor names it; a run's process still rebuilds the two tables it was launched
    # with; a new load of the definitions (the UI's Reload) gives it its table.
    later = unique("tpt_us")  # matches the pattern too
    local_cluster.create_topic(later, 1)
    with pooled_instance() as instance:
        said = defs.resolve_sensor_def("raw_new_topics")(build_sensor_context(instance=instance))
    assert isinstance(said, SkipReason) and f"topics {later} match ingestion raw" in said.skip_message
    with scoped_reconstruction_metadata({METADATA_KEY: defs.metadata[METADATA_KEY].value}):
        rebuilt = definitions(config)
    jobs = {job.name for job in rebuilt.resolve_all_job_defs()}
    assert f"raw_{eu}_job" in jobs and f"raw_{later}_job" not in jobs
    assert f"raw_{later}_job" in {job.name for job in definitions(config).resolve_all_job_defs()}


@pytest.mark.stack
def test_under_rocketlakes_code_server_a_new_topic_gets_its_table_at_the_sensors_tick(tmp_path, local_cluster):
    """``rocketlake local up --stack``'s code server: the sensor's tick, asked of the server as the daemon asks it,
    has the server load the definitions again, and the new topic's job is there."""
    from dagster._core.test_utils import instance_for_test
    from dagster._core.workspace.context import WorkspaceProcessContext
    from dagster._core.workspace.load_target import WorkspaceFileTarget

    from rocketlake.local.code_server import MODULE, LocalCodeServer
    from tests.conftest import free_ports
    from tests.integration.deployment_support import Deployment
    from tests.integration.ingestion_support import until

    prefix = f"tps{uuid.uuid4().hex[:6]}"
    local_cluster.create_topic(f"{prefix}-eu", 1)
    spec = {"topic_pattern": f"{prefix}-.*", "table": "raw_{topic}", "consumer_group": unique("g") + "_{topic}"}
    deployment = Deployment(tmp_path, local_cluster, "tables", {"raw": spec})
    server = LocalCodeServer(tmp_path / "code-server", free_ports(1)[0])
    server.start(deployment.env, cwd=ROOT)
    try:
        with instance_for_test() as instance:

            def served():
                """The code location as the server serves it now (a daemon's workspace, made anew)."""
                return WorkspaceProcessContext(instance, WorkspaceFileTarget([str(server.workspace)]))

            def jobs() -> set[str]:
                with served() as workspace:
                    repos = workspace.create_request_context().get_code_location(MODULE).get_repositories()
                    return {job.name for repo in repos.values() for job in repo.get_all_jobs()}

            assert f"raw_{prefix}_eu_job" in jobs()
            local_cluster.create_topic(f"{prefix}-us", 1)
            with served() as workspace:  # the sensor's tick, as the daemon asks it of the server
                location = workspace.create_request_context().get_code_location(MODULE)
                (repo,) = location.get_repositories().values()
                tick = location.get_sensor_execution_data(
                    instance, repo.handle, "raw_new_topics", None, None, None, None, None
                )
            assert f"topics {prefix}-us match ingestion raw" in tick.skip_message
            assert "is loading the definitions again" in tick.skip_message
            until(
                lambda: f"raw_{prefix}_us_job" in jobs(),
                180,
                "the new topic's job in the reloaded definitions",
                interval=2,
            )
    finally:
        server.stop()
