"""Schema evolution of JSON bodies (``body.evolve: add_columns``): the schema a run parses its bodies with.

The table's columns bind: a field the table has keeps the table's type, and a body whose value does not fit it
fails to decode (a failed message, never a null). A field the table lacks, found in this run's bodies by Spark's
own JSON inference (the types ``spark.read.json`` gives, conflicting values widened to STRING), becomes a column,
nested fields of a struct column included; Delta's schema merge adds it in the slice's own commit. A field whose
name Delta cannot store, that takes a name of rocketlake's own, or that differs from a column only by case is
left in ``body`` and reported.

Only ``infer_fields`` touches Spark; the merge is pure and takes Spark's type objects as plain data.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pyspark.sql.types import ArrayType, DataType, MapType, StructField, StructType

from rocketlake.engine.columns import OWN_COLUMNS

#: Characters Delta refuses in a column name without column mapping.
DELTA_INVALID_NAME_CHARS = frozenset(" ,;{}()\n\t=")
#: Where ``spark.read.json`` would put a body it cannot parse while inferring: dropped, never a column.
INFERENCE_CORRUPT = "_rl_inference_corrupt"


@dataclass
class Evolution:
    """The schema to parse with, and what this run's bodies changed or could not change."""

    schema: StructType
    added: list[str] = field(default_factory=list)  # dotted paths of new columns, with their types
    left_out: list[str] = field(default_factory=list)  # dotted paths kept in ``body`` only, with why
    #: top-level columns whose bodies' type is a widening of theirs (``widens``): the wider type the bodies gave
    wider: dict[str, DataType] = field(default_factory=dict)


def body_fields(table_fields: Iterable[StructField], reserved: Iterable[str] = ()) -> list[StructField]:
    """The table's columns that came from bodies: all but rocketlake's own and ``reserved`` (its partition
    column, bookkeeping columns)."""
    skip = set(OWN_COLUMNS) | set(reserved)
    return [f for f in table_fields if f.name not in skip and not f.name.startswith("_rl_")]


def _refusal(name: str, top_level: bool, reserved: set[str]) -> str | None:
    if not name:
        return "an empty name"
    if DELTA_INVALID_NAME_CHARS & set(name):
        return "a name Delta cannot store without column mapping"
    if top_level and (name in OWN_COLUMNS or name in reserved or name.startswith("_rl_")):
        return "a name of rocketlake's own columns"
    return None


def merge(
    existing: StructType, found: StructType, *, path: str = "", top_level: bool = True, reserved: Iterable[str] = ()
) -> Evolution:
    """``existing`` with the fields of ``found`` it lacks appended (recursively inside struct columns and arrays of
    structs); an existing field keeps its type whatever ``found`` says."""
    reserved = set(reserved)
    by_lower = {f.name.lower(): f for f in existing.fields}
    merged: list[StructField] = []
    result = Evolution(StructType([]))
    found_by_name = {f.name: f for f in found.fields}
    for f in existing.fields:
        other = found_by_name.get(f.name)
        if other is None:
            merged.append(f)
            continue
        kind, nested = _merge_type(f.dataType, other.dataType, f"{path}{f.name}")
        result.added += nested.added
        result.left_out += nested.left_out
        merged.append(StructField(f.name, kind, f.nullable, f.metadata))
    names = {f.name for f in existing.fields}
    for f in found.fields:
        dotted = f"{path}{f.name}"
        if f.name in names:
            continue
        why = _refusal(f.name, top_level, reserved)
        if why is None and f.name.lower() in by_lower:
            why = f"differs only by case from the column {path}{by_lower[f.name.lower()].name}"
        if why is not None:
            result.left_out.append(f"{dotted} ({why})")
            continue
        kind, nested = _allowed(f.dataType, dotted)
        result.left_out += nested.left_out
        if _empty(kind):
            result.left_out.append(f"{dotted} (no field of it Delta can store)")
            continue
        merged.append(StructField(f.name, kind, True))
        by_lower[f.name.lower()] = merged[-1]
        result.added.append(f"{dotted} {type_ddl(kind)}")
    result.schema = StructType(merged)
    return result


def _merge_type(existing: DataType, found: DataType, dotted: str) -> tuple[DataType, Evolution]:
    if isinstance(existing, StructType) and isinstance(found, StructType):
        nested = merge(existing, found, path=dotted + ".", top_level=False)
        return nested.schema, nested
    if isinstance(existing, ArrayType) and isinstance(found, ArrayType):
        element, nested = _merge_type(existing.elementType, found.elementType, dotted + "[]")
        return ArrayType(element, existing.containsNull), nested
    return existing, Evolution(StructType([]))


def _empty(kind: DataType) -> bool:
    """A struct without fields (Parquet cannot store one), or an array of them."""
    if isinstance(kind, ArrayType):
        return _empty(kind.elementType)
    return isinstance(kind, StructType) and not kind.fields


def _allowed(kind: DataType, dotted: str) -> tuple[DataType, Evolution]:
    """A new field's type with the nested fields Delta cannot store taken out (they stay in ``body``)."""
    if isinstance(kind, StructType):
        nested = merge(StructType([]), kind, path=dotted + ".", top_level=False)
        return nested.schema, nested
    if isinstance(kind, ArrayType):
        element, nested = _allowed(kind.elementType, dotted + "[]")
        return ArrayType(element, kind.containsNull), nested
    return kind, Evolution(StructType([]))


def infer_fields(bodies) -> StructType:
    """What Spark's JSON inference finds in a one-column DataFrame of body strings (JSON objects only; fields that
    are null in every body are left out until a value gives them a type)."""
    import json

    from pyspark.errors import PySparkTypeError
    from pyspark.sql import functions as F

    objects = bodies.where(F.ltrim(bodies.columns[0]).startswith("{"))
    spark = objects.sparkSession
    options = {"dropFieldIfAllNull": "true", "columnNameOfCorruptRecord": INFERENCE_CORRUPT}
    try:
        inferred = spark.read.options(**options).json(objects).schema
    except PySparkTypeError:
        # pyspark before 4.2 reads JSON from a DataFrame only in the JVM: DataFrameReader.json(Dataset[String]).
        if not hasattr(objects, "_jdf"):
            raise RuntimeError(
                "body.evolve on Spark Connect needs pyspark 4.2 or later (spark.read.json of a DataFrame)"
            ) from None
        reader = spark._jsparkSession.read()
        for key, value in options.items():
            reader = reader.option(key, value)
        strings = getattr(objects._jdf, "as")(spark._jvm.org.apache.spark.sql.Encoders.STRING())
        inferred = StructType.fromJson(json.loads(reader.json(strings).schema().json()))
    return StructType([f for f in inferred.fields if f.name != INFERENCE_CORRUPT])


def evolve(
    bodies, configured: StructType, table_fields: Iterable[StructField], reserved: Iterable[str] = ()
) -> Evolution:
    """The schema to parse this run's ``bodies`` with: the table's body columns, the configured fields the table
    does not have yet, then what the bodies add."""
    reserved = tuple(reserved)
    base = merge(StructType(body_fields(table_fields, reserved)), configured, reserved=reserved).schema
    inferred = infer_fields(bodies)
    found = merge(base, inferred, reserved=reserved)
    has = {f.name: f.dataType.simpleString() for f in base.fields}
    found.wider = {
        f.name: f.dataType for f in inferred.fields if f.name in has and widens(has[f.name], f.dataType.simpleString())
    }
    return found


def widened(schema: StructType, columns: Mapping[str, DataType]) -> StructType:
    """``schema`` with the top-level ``columns`` of another type (the bodies' wider one)."""
    return StructType(
        [StructField(f.name, columns.get(f.name, f.dataType), f.nullable, f.metadata) for f in schema.fields]
    )


#: The integer types, narrowest first.
INTEGERS = ("tinyint", "smallint", "int", "bigint")
_DECIMAL = re.compile(r"decimal\((\d+),(\d+)\)")


def widens(narrow: str, wide: str) -> bool:
    """Whether a value of type ``narrow`` fits a column of type ``wide`` without loss, as Delta's type widening
    changes a column (a wider integer, float to double, integers to double or to a decimal with room for them, a
    decimal to one as precise with as many integer digits, date to timestamp_ntz): the Spark type names."""
    if narrow == wide:
        return False
    if narrow in INTEGERS and wide in INTEGERS:
        return INTEGERS.index(narrow) < INTEGERS.index(wide)
    if wide == "double":
        return narrow in ("float", *INTEGERS[:3])
    decimal_to = _DECIMAL.fullmatch(wide)
    if decimal_to:
        precision, scale = int(decimal_to[1]), int(decimal_to[2])
        decimal_from = _DECIMAL.fullmatch(narrow)
        if decimal_from:
            return scale >= int(decimal_from[2]) and precision - scale >= int(decimal_from[1]) - int(decimal_from[2])
        digits = {"tinyint": 3, "smallint": 5, "int": 10, "bigint": 20}.get(narrow)
        return digits is not None and precision - scale >= digits
    return narrow == "date" and wide == "timestamp_ntz"


def quoted(name: str) -> str:
    """``name`` as a Spark SQL identifier, whatever it holds (a JSON body's field names may be anything)."""
    return "`" + name.replace("`", "``") + "`"


def type_ddl(kind: DataType, quote: bool = False) -> str:
    """Spark DDL of ``kind``, field names as they are (``simpleString`` upper-cased would change them); ``quote``:
    nested field names quoted, for DDL that Spark parses rather than a person reads."""
    if isinstance(kind, StructType):
        name = quoted if quote else str
        return "STRUCT<" + ", ".join(f"{name(f.name)}: {type_ddl(f.dataType, quote)}" for f in kind.fields) + ">"
    if isinstance(kind, ArrayType):
        return f"ARRAY<{type_ddl(kind.elementType, quote)}>"
    if isinstance(kind, MapType):
        return f"MAP<{type_ddl(kind.keyType, quote)}, {type_ddl(kind.valueType, quote)}>"
    return kind.simpleString().upper()


def ddl(schema: StructType) -> str:
    return ", ".join(f"{f.name} {type_ddl(f.dataType)}" for f in schema.fields)
