"""Avro's Parsing Canonical Form and fingerprint (``engine.avro``), and the Avro body's configuration."""

from __future__ import annotations

import json
import re

import pytest

from rocketlake.engine.avro import canonical_form, crc64_avro, fingerprint, required_fields
from rocketlake.engine.config import BodyConfig

pytestmark = pytest.mark.unit

#: A schema with every kind of named type, a logical type, a reference by name, docs, defaults and a namespace.
RICH = {
    "type": "record",
    "name": "Order",
    "namespace": "com.example.orders",
    "doc": "an order",
    "fields": [
        {"name": "order_id", "type": "string"},
        {"name": "amount", "type": "double", "default": 0},
        {"name": "region", "type": ["null", "string"], "default": None},
        {"name": "ship", "type": {"type": "record", "name": "Ship", "fields": [{"name": "city", "type": "string"}]}},
        {"name": "items", "type": {"type": "array", "items": "string"}},
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
        {"name": "ship2", "type": ["null", "Ship"]},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "digest", "type": {"type": "fixed", "name": "MD5", "size": 16}},
    ],
}


def test_the_canonical_form_is_the_one_avro_java_computes():
    # org.apache.avro.SchemaNormalization.toParsingForm / parsingFingerprint64 of RICH (Avro 1.12.1, Spark's jars).
    assert canonical_form(RICH) == (
        '{"name":"com.example.orders.Order","type":"record","fields":[{"name":"order_id","type":"string"},'
        '{"name":"amount","type":"double"},{"name":"region","type":["null","string"]},'
        '{"name":"ship","type":{"name":"com.example.orders.Ship","type":"record","fields":[{"name":"city",'
        '"type":"string"}]}},{"name":"items","type":{"type":"array","items":"string"}},'
        '{"name":"status","type":{"name":"com.example.orders.Status","type":"enum","symbols":["NEW","PAID"]}},'
        '{"name":"ship2","type":["null","com.example.orders.Ship"]},{"name":"day","type":"int"},'
        '{"name":"digest","type":{"name":"com.example.orders.MD5","type":"fixed","size":16}}]}'
    )
    assert int.from_bytes(fingerprint(json.dumps(RICH)), "little") == 2379167524993085195


def test_crc64_avro_of_nothing_is_the_empty_fingerprint():
    assert crc64_avro(b"") == 0xC15D213AA4D7A795


def test_required_fields_are_those_no_union_with_null_covers():
    assert required_fields(json.dumps(RICH)) == ["order_id", "amount", "ship", "items", "status", "day", "digest"]


def test_avro_bodies_need_a_readable_record_schema(tmp_path):
    good = tmp_path / "order.avsc"
    good.write_text(json.dumps(RICH))
    assert BodyConfig(format="avro", schema_file=str(good), encoding="single_object").avro_schema() == good.read_text()
    cases = [
        ({"format": "avro"}, "format avro needs schema_file"),
        ({"format": "avro", "schema_file": str(tmp_path / "nope.avsc")}, "cannot be read"),
        ({"format": "avro", "schema_file": str(good), "schema": "a STRING"}, "remove schema and evolve"),
        ({"format": "json", "schema": "a STRING", "schema_file": str(good)}, "schema_file applies to format avro"),
        ({"format": "raw", "encoding": "single_object"}, "encoding applies to format avro"),
    ]
    not_json, not_record, clash = tmp_path / "a.avsc", tmp_path / "b.avsc", tmp_path / "c.avsc"
    not_json.write_text("{")
    not_record.write_text('"string"')
    clash.write_text(json.dumps({"type": "record", "name": "R", "fields": [{"name": "topic", "type": "string"}]}))
    cases += [
        ({"format": "avro", "schema_file": str(not_json)}, "is not JSON"),
        ({"format": "avro", "schema_file": str(not_record)}, "is not an Avro record schema"),
        ({"format": "avro", "schema_file": str(clash)}, r"fields \['topic'\] clash"),
    ]
    for body, message in cases:
        with pytest.raises(ValueError, match=message):
            BodyConfig(**body)


@pytest.mark.parametrize(
    ("field", "said"),
    [
        (
            {"name": "a", "type": "strng"},
            r"fields\[0\] \(a\).type: 'strng' is neither a primitive type nor a named type",
        ),
        ({"name": "a", "type": "Later"}, r"'Later' is neither a primitive type nor a named type defined before it"),
        ({"name": "a"}, r"fields\[0\] \(a\): a field needs a type"),
        ({"name": "a-b", "type": "int"}, r"fields\[0\]: a field needs a name of letters, digits and _"),
        ({"name": "a", "type": ["null", ["int"]]}, r"\.type\[1\]: a union may not hold a union directly"),
        ({"name": "a", "type": {"type": "array"}}, r"an array needs items"),
        ({"name": "a", "type": {"type": "enum", "name": "E", "symbols": ["OK", "NOT OK"]}}, r"enum 'E' needs a list"),
        ({"name": "a", "type": {"type": "fixed", "name": "F"}}, r"fixed 'F' needs a size"),
        (
            {
                "name": "a",
                "type": {
                    "type": "map",
                    "values": {"type": "record", "name": "R", "fields": [{"name": "x", "type": "nope"}]},
                },
            },
            r"\.values\.fields\[0\] \(x\)\.type: 'nope'",
        ),
    ],
)
def test_a_malformed_avro_schema_is_refused_at_load_naming_the_field(tmp_path, field, said):
    """What Avro's own parser would refuse in the JVM half way through a run, refused when the configuration loads,
    in one sentence that says where."""
    schema = tmp_path / "bad.avsc"
    schema.write_text(json.dumps({"type": "record", "name": "Order", "fields": [field]}))
    with pytest.raises(ValueError, match="bad.avsc' is not a valid Avro schema: the schema.fields") as refused:
        BodyConfig(format="avro", schema_file=str(schema))
    assert re.search(said, str(refused.value)), str(refused.value)


def test_a_rich_schema_and_the_tests_own_are_valid():
    from pathlib import Path

    from rocketlake.engine.avro import schema_problem

    assert schema_problem(RICH) is None
    order = Path(__file__).parents[1] / "integration" / "schemas" / "order.avsc"
    assert schema_problem(json.loads(order.read_text())) is None
