"""The public surface: everything a Dagster project needs from ``import rocketlake``, and a body of one's own."""

import re
import subprocess
import sys

import dagster as dg
import pytest

import rocketlake
from rocketlake.engine.config import parse_config
from tests.unit.support import MINIMAL


def test_import_rocketlake_loads_neither_dagster_nor_spark_and_every_public_name_resolves():
    probe = (
        "import sys, rocketlake; loaded = [m for m in ('dagster', 'pyspark', 'delta') if m in sys.modules]; "
        "print(loaded)"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "[]"
    for name in rocketlake.__all__:
        assert getattr(rocketlake, name) is not None, name
    assert set(rocketlake.PUBLIC) <= set(dir(rocketlake))
    with pytest.raises(AttributeError, match="no attribute 'run'"):
        rocketlake.run  # noqa: B018 - internal names stay internal


def test_a_body_of_ones_own_takes_the_place_of_rocketlakes_and_keeps_its_asset():
    config = parse_config(MINIMAL)
    calls = []

    @rocketlake.rocketlake_assets(config, "orders")
    def orders(context: dg.AssetExecutionContext, step: rocketlake.IngestionStep):
        calls.append((context.partition_key, step.ingestion, step.config.table, step.table_path))
        yield dg.MaterializeResult(check_results=[dg.AssetCheckResult(check_name="offsets_accounted", passed=True)])

    built = rocketlake.build_definitions(config)
    own = rocketlake.build_definitions(config, assets=[orders])
    table = dg.AssetKey("orders_raw")
    mine, theirs = own.resolve_assets_def(table), built.resolve_assets_def(table)
    # the same asset but for its body: key, partitions, pool, checks, retries, lineage, resources
    assert mine.partitions_def == theirs.partitions_def
    assert mine.check_keys == theirs.check_keys
    assert mine.required_resource_keys == theirs.required_resource_keys
    assert mine.specs_by_key[table].deps == theirs.specs_by_key[table].deps
    assert mine.op.pool == theirs.op.pool
    assert len([a for a in own.assets if getattr(a, "key", None) == table]) == 1

    with dg.DagsterInstance.ephemeral() as instance:
        result = dg.materialize([orders], partition_key="2026-11-01-00:05", instance=instance, resources=own.resources)
    assert result.success
    assert [call[:3] for call in calls] == [("2026-11-01-00:05", "orders", "orders_raw")]  # the user's body ran
    assert calls[0][3] == config.lake.table_path("orders_raw")


def test_an_asset_of_ones_own_must_be_an_ingestions_table():
    config = parse_config(MINIMAL)
    with pytest.raises(ValueError, match="no ingestion 'payments'.*it has orders"):
        rocketlake.rocketlake_assets(config, "payments")

    @dg.asset(key="payments_raw")
    def payments():
        return None

    with pytest.raises(ValueError, match=r"\['payments_raw'\] are not the table of any ingestion.*orders_raw"):
        rocketlake.build_definitions(config, assets=[payments])


@pytest.mark.parametrize("cron", ["61 * * * *", "0 0 30 2 *"])
def test_a_cron_of_the_right_shape_that_dagster_refuses_is_refused_naming_its_key(cron):
    from rocketlake.engine.config import ConfigError
    from tests.unit.support import with_ingestion

    config = parse_config(with_ingestion(window={"start": "2026-11-01T00:00:00Z", "cron": cron}))  # its shape is fine
    with pytest.raises(ConfigError, match=re.escape(f"ingestions.orders.window.cron: '{cron}' is not a valid cron")):
        rocketlake.build_definitions(config)
