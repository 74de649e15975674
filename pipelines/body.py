"""Decoded body columns, per ``body.format``: raw (nothing added), text, or json with a Spark DDL schema.

JSON is parsed by Spark (``from_json``), in the JVM and vectorised, rather than per message in
Python; the schema's fields become top-level columns so downstream SQL reads ``amount``, not
``body_json.amount``. A body that does not parse gives nulls in those columns and keeps its bytes.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from rocketlake.pipelines.columns import OWN_COLUMNS


class BodySchemaError(ValueError):
    """The configured JSON schema cannot be used; the message says why."""


def decode_body(df: DataFrame, body_format: str, schema_ddl: str | None = None) -> DataFrame:
    if body_format == "raw":
        return df
    text = F.col("body").cast("string")
    if body_format == "text":
        return df if "body_text" in df.columns else df.withColumn("body_text", text)
    if body_format != "json":
        raise BodySchemaError(f"body.format {body_format!r} is not one of raw, text, json")
    schema = configured_schema(schema_ddl)
    parsed = df.withColumn("_body_json", F.from_json(text, schema))
    return parsed.select(*df.columns, *[F.col("_body_json").getField(f.name).alias(f.name) for f in schema.fields])


def top_level_names(schema_ddl: str | None) -> list[str]:
    """The top-level field names of a Spark DDL string, in order, without a Spark session (pyspark 4 parses DDL in
    the JVM): for what runs outside Spark (a member's direct consume, the demo's definitions at load)."""
    names, depth, field = [], 0, ""
    for ch in (schema_ddl or "") + ",":
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        if ch == "," and depth == 0:
            if field.strip():
                names.append(field.split()[0].strip("`"))
            field = ""
        else:
            field += ch
    return names


def configured_schema(schema_ddl: str | None) -> StructType:
    """``body.schema`` as Spark's type; empty when there is none (an evolving table takes its columns from the
    bodies, ``pipelines.evolution``)."""
    if not (schema_ddl or "").strip():
        return StructType([])
    try:
        schema = StructType.fromDDL(schema_ddl)
    except Exception as e:  # Spark raises its own parse exception types
        raise BodySchemaError(f"body.schema {schema_ddl!r} is not valid Spark DDL: {e}") from None
    clashes = sorted({f.name for f in schema.fields} & OWN_COLUMNS)
    if clashes:
        raise BodySchemaError(f"body.schema fields {clashes} clash with rocketlake's own columns; rename them")
    return schema
