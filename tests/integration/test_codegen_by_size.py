"""A landing of few offsets runs Spark interpreted, a backlog with Spark's code generation (``materialize.py``
``interpreted_when_small``), on the worker's real session; what the session had before comes back after."""

from __future__ import annotations

import pytest

from rocketlake.spark.materialize import INTERPRETED_BELOW, interpreted_when_small

pytestmark = pytest.mark.engine

WHOLE_STAGE, FACTORY = "spark.sql.codegen.wholeStage", "spark.sql.codegen.factoryMode"


def compiled_stages(spark) -> bool:
    """Whether Spark plans a query with whole-stage code generation (its operators marked ``*(n)``)."""
    plan = spark.range(10).selectExpr("id + 1 AS n").where("n > 3")._jdf.queryExecution().executedPlan().toString()
    return "*(" in plan


def test_a_small_landing_runs_interpreted_and_the_session_gets_its_settings_back(spark):
    assert compiled_stages(spark)
    with interpreted_when_small(spark, INTERPRETED_BELOW - 1) as interpreted:
        assert interpreted
        assert (spark.conf.get(WHOLE_STAGE), spark.conf.get(FACTORY)) == ("false", "NO_CODEGEN")
        assert not compiled_stages(spark)
        assert spark.range(5).selectExpr("sum(id * 2)").first()[0] == 20  # and computes the same
    assert (spark.conf.get(WHOLE_STAGE), spark.conf.get(FACTORY)) == ("true", "FALLBACK")
    assert compiled_stages(spark)


def test_a_backlog_keeps_code_generation(spark):
    with interpreted_when_small(spark, INTERPRETED_BELOW) as interpreted:
        assert not interpreted
        assert compiled_stages(spark)


def test_a_setting_of_the_users_is_left_as_it_is(spark):
    spark.conf.set(WHOLE_STAGE, "false")
    try:
        with interpreted_when_small(spark, 1):
            assert spark.conf.get(FACTORY) == "NO_CODEGEN"
        assert (spark.conf.get(WHOLE_STAGE), spark.conf.get(FACTORY)) == ("false", "FALLBACK")
    finally:
        spark.conf.unset(WHOLE_STAGE)
