"""SparkResource on a process whose SparkSession is already running (a notebook's, a test's): its settings apply
where Spark can change them and are refused, naming them, where it cannot; never silently dropped."""

from __future__ import annotations

import pytest

from rocketlake.dagster.spark_resource import SparkResource
from rocketlake.spark.session import SparkSessionConflict

pytestmark = pytest.mark.engine


def test_runtime_settings_apply_to_the_running_session_and_fixed_ones_are_refused_by_name(spark):
    master = spark.sparkContext.master
    before = spark.conf.get("spark.sql.session.timeZone")
    try:
        session = SparkResource(master=master, conf={"spark.sql.session.timeZone": "Asia/Shanghai"}).session()
        assert session is spark and spark.conf.get("spark.sql.session.timeZone") == "Asia/Shanghai"
    finally:
        spark.conf.set("spark.sql.session.timeZone", before)

    with pytest.raises(SparkSessionConflict, match=r"master='spark://elsewhere:7077' \(the running session has "):
        SparkResource(master="spark://elsewhere:7077").session()
    with pytest.raises(SparkSessionConflict, match=r"spark.executor.memory='7g' \(the running session has None\)"):
        SparkResource(master=master, conf={"spark.executor.memory": "7g"}).session()
    with pytest.raises(SparkSessionConflict, match=r"app_name='other'"):
        SparkResource(master=master, app_name="other").session()


def test_a_spark_connect_session_is_refused_where_a_classic_session_runs(spark):
    """PySpark picks Connect or classic per process; asking for both would hand the run classic functions on a
    Connect DataFrame. The refusal says what to do, and the running session is untouched."""
    with pytest.raises(
        SparkSessionConflict,
        match=r"remote='sc://127.0.0.1:15002' asks for a Spark Connect session, "
        r"but this process already runs a classic SparkSession",
    ):
        SparkResource(remote="sc://127.0.0.1:15002").session()
    assert spark.range(3).count() == 3
