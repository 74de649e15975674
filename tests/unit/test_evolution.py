"""How an evolving JSON table's parse schema is merged (``delta.evolution``): Spark's types as plain data."""

from __future__ import annotations

import pytest
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DateType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from rocketlake.delta.evolution import body_fields, ddl, merge
from rocketlake.engine.columns import CORE_COLUMNS
from rocketlake.engine.config import BodyConfig

pytestmark = pytest.mark.unit


TYPES = {
    "STRING": StringType(),
    "DOUBLE": DoubleType(),
    "BIGINT": LongType(),
    "BOOLEAN": BooleanType(),
    "DATE": DateType(),
    "TIMESTAMP": TimestampType(),
}


def struct(*fields: tuple[str, DataType]) -> StructType:
    return StructType([StructField(name, kind if isinstance(kind, DataType) else TYPES[kind]) for name, kind in fields])


def schema(text: str) -> StructType:
    """Flat DDL (``a STRING, b BIGINT``) without a JVM, which ``StructType.fromDDL`` needs."""
    return struct(*[tuple(part.strip().rsplit(" ", 1)) for part in text.split(",")])


def test_new_fields_are_appended_and_existing_columns_keep_their_type():
    merged = merge(schema("order_id STRING, amount DOUBLE"), schema("amount STRING, qty BIGINT, region STRING"))
    assert ddl(merged.schema) == "order_id STRING, amount DOUBLE, qty BIGINT, region STRING"
    assert merged.added == ["qty BIGINT", "region STRING"] and merged.left_out == []


def test_nested_fields_join_struct_columns_and_arrays_of_structs():
    existing = struct(("n", schema("p DOUBLE")), ("items", ArrayType(schema("sku STRING"))))
    found = struct(("n", schema("p STRING, q BIGINT")), ("items", ArrayType(schema("qty BIGINT, sku STRING"))))
    merged = merge(existing, found)
    assert ddl(merged.schema) == "n STRUCT<p: DOUBLE, q: BIGINT>, items ARRAY<STRUCT<sku: STRING, qty: BIGINT>>"
    assert merged.added == ["n.q BIGINT", "items[].qty BIGINT"]


def test_names_delta_or_rocketlake_cannot_take_stay_in_the_body():
    found = struct(
        ("ok", "BIGINT"),
        ("two words", "STRING"),
        ("topic", "STRING"),
        ("window_date", "STRING"),
        ("_rl_error", "STRING"),
        ("Amount", "DOUBLE"),
        ("s", struct(("a b", "BIGINT"))),
    )
    merged = merge(schema("amount DOUBLE"), found, reserved=("window_date",))
    assert ddl(merged.schema) == "amount DOUBLE, ok BIGINT"
    assert merged.left_out == [
        "two words (a name Delta cannot store without column mapping)",
        "topic (a name of rocketlake's own columns)",
        "window_date (a name of rocketlake's own columns)",
        "_rl_error (a name of rocketlake's own columns)",
        "Amount (differs only by case from the column amount)",
        "s.a b (a name Delta cannot store without column mapping)",
        "s (no field of it Delta can store)",
    ]


def test_a_nested_field_may_take_a_name_rocketlake_uses_at_the_top():
    merged = merge(struct(("n", schema("p DOUBLE"))), struct(("n", schema("p DOUBLE, topic STRING"))))
    assert merged.added == ["n.topic STRING"]


def test_two_new_fields_differing_by_case_make_one_column():
    merged = merge(StructType([]), schema("Region STRING, region STRING"))
    assert ddl(merged.schema) == "Region STRING"
    assert merged.left_out == ["region (differs only by case from the column Region)"]


def test_body_columns_are_the_table_columns_rocketlake_did_not_make():
    table = schema(
        ", ".join(f"{c} STRING" for c in CORE_COLUMNS) + ", window_start TIMESTAMP, window_date DATE, "
        "amount DOUBLE, _rl_x STRING, region STRING"
    )
    assert [f.name for f in body_fields(table.fields, ("window_date",))] == ["amount", "region"]


def test_evolve_is_for_json_bodies_and_lets_the_schema_be_left_out():
    assert BodyConfig(format="json", evolve="add_columns").schema_ is None
    with pytest.raises(ValueError, match="evolve 'add_columns' applies to format json only"):
        BodyConfig(format="text", evolve="add_columns")
    with pytest.raises(ValueError, match="format json needs a schema"):
        BodyConfig(format="json")
