"""The Python processes Spark starts for rocketlake import the installed, byte-compiled PySpark, not the copy Spark
puts first on their path (``$SPARK_HOME/python/lib/pyspark.zip``, compiled from source at every import):
``rocketlake/spark/worker_site``. Checked where the reader's code runs: the data source's planner and its workers, in
a run's own Spark and on the Spark Connect server."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyspark
import pytest

#: A data source whose rows say where its planner (``partitions``) and its worker (``read``) imported PySpark from.
WHERE_FROM = """
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

class WhereFrom(DataSource):
    @classmethod
    def name(cls):
        return "where_from"
    def schema(self):
        return "planner string, worker string"
    def reader(self, schema):
        return WhereFromReader()

class WhereFromReader(DataSourceReader):
    def partitions(self):
        import pyspark
        return [InputPartition(pyspark.__file__)]
    def read(self, partition):
        import pyspark
        yield (partition.value, pyspark.__file__)
"""

ON_THE_SERVER = (
    WHERE_FROM
    + """
import sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
spark.dataSource.register(WhereFrom)
row = spark.read.format("where_from").load().first()
print(row.planner)
print(row.worker)
"""
)

INSTALLED = str(Path(pyspark.__file__).resolve())


def where_from(spark) -> tuple[str, str]:
    scope: dict = {}
    exec(WHERE_FROM, scope)  # defined here, not in an importable module: Spark ships the classes by value
    spark.dataSource.register(scope["WhereFrom"])
    row = spark.read.format("where_from").load().first()
    return row.planner, row.worker


@pytest.mark.engine
def test_a_runs_own_spark_imports_the_installed_pyspark_in_its_planner_and_workers(spark):
    planner, worker = where_from(spark)
    assert str(Path(planner).resolve()) == INSTALLED and str(Path(worker).resolve()) == INSTALLED, (planner, worker)


@pytest.mark.stack
def test_the_spark_servers_planner_and_workers_import_the_installed_pyspark(spark_connect):
    ran = subprocess.run(
        [sys.executable, "-c", ON_THE_SERVER, spark_connect.url], capture_output=True, text=True, timeout=180
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    planner, worker = ran.stdout.split()[-2:]
    assert str(Path(planner).resolve()) == INSTALLED and str(Path(worker).resolve()) == INSTALLED, (planner, worker)
