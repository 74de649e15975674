"""Tables in Spark's catalog (``table: database.name``, issue 48), on real brokers, Spark and Delta: created on first
landing at the lake's path and named in the session's catalog, then landed, compacted, vacuumed and read by path as
any table; a name the catalog gives to another table is refused before anything is written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
from dagster import AssetKey, AssetObservation, DagsterInstance, build_sensor_context

from rocketlake.dagster.lag import LAG_MESSAGES
from rocketlake.dagster.rocketmq_resource import RocketMQResource
from rocketlake.delta.catalog import CatalogConflict
from rocketlake.delta.ledger_log import read_ledger, recent_entries
from rocketlake.engine.config import load_config
from rocketlake.local.spark_server import server_for
from tests.conftest import free_ports
from tests.dagster_instance import recommended_home
from tests.integration.engine_support import Engine, now_ms, send_in_two_windows
from tests.integration.ingestion_support import definitions, unique, write_config
from tests.unit.support import ingestion_config

pytestmark = pytest.mark.engine

ROOT = Path(__file__).resolve().parents[2]
PER_WINDOW = 5
DAY_MS = 24 * 3600 * 1000


def catalog_config(topic: str, group: str, table: str):
    return ingestion_config(
        topic=topic,
        consumer_group=group,
        table=table,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        window={"cron": "* * * * *", "start": "1970-01-01", "grace_seconds": 0},
        body={"format": "json", "schema": "order_id STRING, amount FLOAT"},
        vacuum_retention_hours=168,
    )


def test_a_catalog_table_is_created_at_its_path_named_in_the_catalog_and_kept_as_a_table_by_path(
    local_cluster, create_topic, java_producer, spark, tmp_path
):
    database = unique("sales")
    name = f"{database}.orders"
    topic, group = create_topic(queues=2), unique("g_catalog")
    path = str(tmp_path / database / "orders")
    engine = Engine(local_cluster, spark, path, catalog_config(topic, group, name))
    (w1, w2) = send_in_two_windows(java_producer, topic, PER_WINDOW)
    assert not spark.catalog.tableExists(name)

    engine.run("r1", [w1])
    # Named in the catalog, at the lake's path, as an external Delta table users query by name.
    (described,) = [r for r in spark.sql(f"DESCRIBE TABLE EXTENDED {name}").collect() if r[0] == "Location"]
    assert described[1].removeprefix("file:").rstrip("/") == path
    assert spark.table(name).count() == PER_WINDOW
    assert not (ROOT / "spark-warehouse" / f"{database}.db").exists()  # its database is in the lake

    engine.run("r2", [w1], backfill=True)  # landed again: replaces its slice, the name still serves it
    engine.run("r3", [w2])
    assert sorted(r.keys for r in spark.table(name).select("keys").collect()) == sorted(
        f"o-{i}" for i in range(2 * PER_WINDOW)
    )
    assert [e.run_id for e in read_ledger(path, group)] == ["r3"] and recent_entries(path)[0].run_id == "r3"
    assert engine.offsets(topic) == {
        (q.broker_name, q.queue_id): engine.client.get_max_offset(q) for q in engine.client.queues(topic)
    }
    compacted = engine.lake.compact(read_ledger(path, group)[-1], now_ms() + 2 * DAY_MS)
    assert compacted and engine.lake.vacuum() == 168
    assert spark.table(name).count() == 2 * PER_WINDOW

    # The same name in a lake elsewhere: refused before anything is written there, its offsets untouched.
    elsewhere = tmp_path / "other-lake" / database / "orders"
    other_group = unique("g_catalog")
    other = Engine(local_cluster, spark, str(elsewhere), catalog_config(topic, other_group, name))
    with pytest.raises(CatalogConflict) as refused:
        other.run("r4", [w1])
    assert str(refused.value) == (
        f"table {name}: the catalog's {name} is at file:{path}, but this lake puts it at {elsewhere}; point "
        f"lake.root at the table's location, or drop the catalog's entry (DROP TABLE {name} on an external table "
        "keeps its files)"
    )
    assert not elsewhere.exists()
    assert set(other.offsets(topic).values()) <= {None, -1, 0}

    # A name the catalog gives to a table that is not Delta.
    spark.sql(f"CREATE TABLE {database}.plain (id INT) USING parquet")
    parquet = Engine(
        local_cluster, spark, str(tmp_path / database / "plain"), catalog_config(topic, group, f"{database}.plain")
    )
    with pytest.raises(CatalogConflict, match=f"the catalog's {database}.plain is a parquet table, not Delta"):
        parquet.run("r5", [w1])


#: A client of the server: the rows its catalog names, and the tables of the database.
CATALOG_CLIENT = """
import json, sys
from pyspark.sql import SparkSession
url, name = sys.argv[1:3]
spark = SparkSession.builder.remote(url).getOrCreate()
tables = sorted(r.tableName for r in spark.sql("SHOW TABLES IN " + name.split(".")[0]).collect())
print(json.dumps({"msg_ids": sorted(r.msg_id for r in spark.table(name).select("msg_id").collect()), "tables": tables}))
"""


@pytest.mark.stack  # the local runtime's Spark server, a `rocketlake backfill` run in its own process, the sensors
def test_the_local_runtimes_server_keeps_the_catalog_in_a_metastore_that_outlives_it(tmp_path, local_cluster, produced):
    database = unique("sales")
    name = f"{database}.orders"
    (port,) = free_ports(1)
    config = write_config(
        tmp_path / "rocketlake.yaml",
        local_cluster,
        tmp_path / "lake",
        {"orders": {"topic": produced.topic, "consumer_group": unique("g"), "table": name}},
        {"master": "local[2]", "remote": f"sc://127.0.0.1:{port}"},
    )
    loaded = load_config(config)
    state = tmp_path / "state"
    server = server_for(loaded.spark, state, loaded.lake, metastore=bool(loaded.catalog_tables))
    assert server is not None and server.metastore
    w1, w2 = produced.windows()
    expected = sorted(m["msgId"] for w in (w1, w2) for m in produced.in_window(w))
    first, last = (min(m["storeTimestamp"] for m in produced.in_window(w)) for w in (w1, w2))
    iso = [datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat() for ms in (first, last)]
    home = recommended_home(tmp_path / "dagster_home")
    env = dict(os.environ, DAGSTER_HOME=str(home))

    def on_the_server() -> dict:
        read = subprocess.run(
            [sys.executable, "-c", CATALOG_CLIENT, server.url, name], capture_output=True, text=True, timeout=300
        )
        assert read.returncode == 0, read.stderr[-3000:]
        return json.loads(read.stdout.strip().splitlines()[-1])

    server.up()
    try:
        landed = subprocess.run(
            [str(Path(sys.executable).parent / "rocketlake"), "backfill", "orders", *iso, "--config", str(config)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert landed.returncode == 0, landed.stdout[-3000:] + landed.stderr[-3000:]
        assert on_the_server() == {"msg_ids": expected, "tables": ["orders"]}
        assert server.down() == ["spark-connect"]
        server.up()  # a new JVM: the name comes from the metastore on disk
        assert on_the_server() == {"msg_ids": expected, "tables": ["orders"]}
    finally:
        server.down()
    assert (state / "spark-connect" / "metastore" / "metastore_db").is_dir()
    assert not (ROOT / "derby.log").exists() and not (ROOT / "metastore_db").exists()

    # The table's asset is keyed by database and name; the lag sensor reads it by that key and by path.
    defs = definitions(config)
    sensor = defs.get_sensor_def(f"{database}__rocketlake_test_lag")  # the cluster's, under its tables' database
    resources = {"rocketmq_test": RocketMQResource(namesrv=local_cluster.spec.namesrv_address)}
    with DagsterInstance.from_config(str(home)) as instance:
        assert instance.get_materialized_partitions(AssetKey([database, "orders"])) == {w1, w2}
        result = sensor.evaluate_tick(
            build_sensor_context(instance=instance, resources=resources, definitions=defs, sensor_name=sensor.name)
        )
    (observation,) = [e for e in result.asset_events if isinstance(e, AssetObservation)]
    assert observation.asset_key == AssetKey([database, "orders"])
    assert observation.metadata[LAG_MESSAGES].value == 0  # both windows landed: the group is at the queues' ends
