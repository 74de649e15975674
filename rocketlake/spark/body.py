"""Decoded body columns, per ``body.format``: raw (nothing added), text, or json with a Spark DDL schema.

JSON is parsed by Spark (``from_json``), in the JVM and vectorised, rather than per message in
Python; the schema's fields become top-level columns so downstream SQL reads ``amount``, not
``body_json.amount``. A body that does not parse gives nulls in those columns and keeps its bytes.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from rocketlake.engine.avro import HEADER_BYTES, SINGLE_OBJECT_MARKER, fingerprint, required_fields
from rocketlake.engine.columns import OWN_COLUMNS, VARIANT_COLUMN


class BodySchemaError(ValueError):
    """The configured JSON schema cannot be used; the message says why."""


def decode_body(df: DataFrame, body_format: str, schema_ddl: str | None = None) -> DataFrame:
    if body_format == "raw":
        return df
    text = F.col("body").cast("string")
    if body_format == "text":
        return df if "body_text" in df.columns else df.withColumn("body_text", text)
    if body_format == "variant":
        return df.withColumn(VARIANT_COLUMN, F.try_parse_json(text))  # null for a body that is not JSON
    if body_format != "json":
        raise BodySchemaError(f"body.format {body_format!r} is not one of raw, text, json, variant")
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
    bodies, ``delta.evolution``)."""
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


def decode_avro(df, body, error_name: str, schema_text: str | None = None):
    """``df`` with the record's fields as columns, and ``error_name``: why a matched message is not a record of the
    schema (null when it is)."""
    from pyspark.sql.avro.functions import from_avro

    schema_text = schema_text if schema_text is not None else body.avro_schema()
    raw = F.col("body")
    if body.encoding == "single_object":
        header = SINGLE_OBJECT_MARKER + fingerprint(schema_text)
        framed = F.substring(raw, 1, HEADER_BYTES) == F.lit(header)
        payload = F.when(framed, F.expr(f"substring(body, {HEADER_BYTES + 1})"))
        not_framed = F.lit(
            f"body is not Avro single-object encoding of schema_file {body.schema_file} (expected "
            f"marker and fingerprint {header.hex()}, found "
        )
        bad_frame = F.concat(not_framed, F.hex(F.substring(raw, 1, HEADER_BYTES)), F.lit(")"))
    else:
        framed, payload, bad_frame = F.lit(True), raw, F.lit(None)
    decoded = df.withColumn("_rl_avro", from_avro(payload, schema_text, {"mode": "PERMISSIVE"}))
    fields = decoded.schema["_rl_avro"].dataType.fields
    # PERMISSIVE gives a record of nulls for a body that does not decode (and Spark's types then call every field
    # nullable); a field the schema cannot leave null (no union with null) tells it from a record of nulls.
    required = [F.col("_rl_avro").getField(name).isNull() for name in required_fields(schema_text)]
    undecoded = F.lit(False)
    for missing in required:
        undecoded = undecoded | missing
    error = (
        F.when(~F.col("matched"), F.lit(None))
        .when(raw.isNull(), F.lit("body is empty"))
        .when(~framed, bad_frame)
        .when(
            F.col("_rl_avro").isNull() | undecoded,
            F.lit(f"body is not Avro binary of the record in schema_file {body.schema_file}"),
        )
    )
    return decoded.select(
        *df.columns,
        *[F.col("_rl_avro").getField(f.name).alias(f.name) for f in fields],
        error.cast("string").alias(error_name),
    )
