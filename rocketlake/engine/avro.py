"""Avro bodies (``body.format: avro``): decoded by spark-avro's ``from_avro`` in the JVM, against the writer schema
(``body.decode_avro``); here, what needs no Spark: the schema's checks, its fingerprint, its required fields.

``binary``: the body is the record's Avro binary encoding. ``single_object``: Avro's single-object encoding, a
two-byte marker (C3 01), the writer schema's 64-bit fingerprint (CRC-64-AVRO of its Parsing Canonical Form, little
endian) and the binary encoding; a body whose marker or fingerprint is not the configured schema's is a failure,
never decoded with the wrong schema. The fingerprint is computed here, as the Avro specification defines it, so the
check costs the JVM two byte comparisons per message.
"""

from __future__ import annotations

import json
import re

SINGLE_OBJECT_MARKER = b"\xc3\x01"
HEADER_BYTES = len(SINGLE_OBJECT_MARKER) + 8
_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
_ORDER = ("name", "type", "fields", "symbols", "items", "values", "size")
_EMPTY = 0xC15D213AA4D7A795


def _crc_table() -> list[int]:
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (_EMPTY & -(fp & 1))
        table.append(fp)
    return table


_TABLE = _crc_table()


def crc64_avro(data: bytes) -> int:
    fp = _EMPTY
    for byte in data:
        fp = (fp >> 8) ^ _TABLE[(fp ^ byte) & 0xFF]
    return fp


def canonical_form(schema) -> str:
    """The Parsing Canonical Form of a schema (parsed JSON): primitives as names, full names, only the attributes
    that matter for reading, in the specification's order, no whitespace."""
    defined: set[str] = set()

    def fullname(name: str, namespace: str | None) -> str:
        return name if "." in name or not namespace else f"{namespace}.{name}"

    def form(s, namespace: str | None):
        if isinstance(s, str):
            if s in _PRIMITIVES:
                return s
            return fullname(s, namespace)
        if isinstance(s, list):
            return [form(branch, namespace) for branch in s]
        kind = s["type"]
        if isinstance(kind, (dict, list)) or (kind not in ("record", "error", "enum", "fixed", "array", "map")):
            return form(kind, namespace)  # {"type": "int", "logicalType": ...} is "int"; {"type": {...}} the inner
        out: dict = {}
        if kind in ("record", "error", "enum", "fixed"):
            name = fullname(s["name"], s.get("namespace", namespace))
            if name in defined:
                return name
            defined.add(name)
            out["name"] = name
            namespace = name.rsplit(".", 1)[0] if "." in name else None
        out["type"] = "record" if kind == "error" else kind
        if kind in ("record", "error"):
            out["fields"] = [{"name": f["name"], "type": form(f["type"], namespace)} for f in s["fields"]]
        if kind == "enum":
            out["symbols"] = list(s["symbols"])
        if kind == "array":
            out["items"] = form(s["items"], namespace)
        if kind == "map":
            out["values"] = form(s["values"], namespace)
        if kind == "fixed":
            out["size"] = int(s["size"])
        return {key: out[key] for key in _ORDER if key in out}

    return json.dumps(form(schema, None), separators=(",", ":"), ensure_ascii=False)


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def schema_problem(schema) -> str | None:
    """What makes a parsed schema invalid for Avro's own parser (the first mistake, with where it is), or None.

    Checked when the configuration loads, so that a mistake is one sentence naming the field, not a
    SchemaParseException from the JVM in the middle of a run."""
    defined: set[str] = set()

    def fullname(name: str, namespace: str | None) -> str:
        return name if "." in name or not namespace else f"{namespace}.{name}"

    def check(s, at: str, namespace: str | None) -> str | None:
        if isinstance(s, str):
            if s in _PRIMITIVES or fullname(s, namespace) in defined or s in defined:
                return None
            return f"{at}: {s!r} is neither a primitive type nor a named type defined before it"
        if isinstance(s, list):
            if not s:
                return f"{at}: a union needs at least one branch"
            for i, branch in enumerate(s):
                if isinstance(branch, list):
                    return f"{at}[{i}]: a union may not hold a union directly"
                problem = check(branch, f"{at}[{i}]", namespace)
                if problem:
                    return problem
            return None
        if not isinstance(s, dict) or "type" not in s:
            return f'{at}: expected a type name, a union (list) or an object with "type", found {json.dumps(s)}'
        kind = s["type"]
        if isinstance(kind, (dict, list)):
            return check(kind, f"{at}.type", namespace)
        if kind in _PRIMITIVES or (isinstance(kind, str) and (kind in defined or fullname(kind, namespace) in defined)):
            return None  # {"type": "Inner"}: a reference to a named type defined before, as Avro's parser takes it
        if kind in ("record", "error", "enum", "fixed"):
            name = s.get("name")
            if not isinstance(name, str) or not all(_NAME.fullmatch(part) for part in name.split(".")):
                return f"{at}: a {kind} needs a name of letters, digits and _ (found {name!r})"
            namespace = s.get("namespace", namespace)
            defined.add(fullname(name, namespace))
            namespace = fullname(name, namespace).rsplit(".", 1)[0] if "." in fullname(name, namespace) else namespace
        if kind in ("record", "error"):
            fields = s.get("fields")
            if not isinstance(fields, list):
                return f"{at}: record {s['name']!r} needs a list of fields"
            for i, f in enumerate(fields):
                where = f"{at}.fields[{i}]"
                if not isinstance(f, dict) or not isinstance(f.get("name"), str) or not _NAME.fullmatch(f["name"]):
                    return f"{where}: a field needs a name of letters, digits and _"
                if "type" not in f:
                    return f"{where} ({f['name']}): a field needs a type"
                problem = check(f["type"], f"{where} ({f['name']}).type", namespace)
                if problem:
                    return problem
            return None
        if kind == "enum":
            symbols = s.get("symbols")
            if not isinstance(symbols, list) or not all(isinstance(x, str) and _NAME.fullmatch(x) for x in symbols):
                return f"{at}: enum {s['name']!r} needs a list of symbols, each of letters, digits and _"
            return None
        if kind == "array":
            return check(s["items"], f"{at}.items", namespace) if "items" in s else f"{at}: an array needs items"
        if kind == "map":
            return check(s["values"], f"{at}.values", namespace) if "values" in s else f"{at}: a map needs values"
        if kind == "fixed":
            size = s.get("size")
            return None if isinstance(size, int) and size >= 0 else f"{at}: fixed {s['name']!r} needs a size (bytes)"
        return f"{at}: {kind!r} is neither a primitive type nor a named type defined before it"

    return check(schema, "the schema", None)


def fingerprint(schema_text: str) -> bytes:
    """The single-object header's fingerprint of a schema: CRC-64-AVRO of its canonical form, little endian."""
    return crc64_avro(canonical_form(json.loads(schema_text)).encode("utf-8")).to_bytes(8, "little")


def required_fields(schema_text: str) -> list[str]:
    """The record's top-level fields that are never null: their type is not ``null`` nor a union with it."""

    def nullable(kind) -> bool:
        if isinstance(kind, list):
            return any(nullable(branch) for branch in kind)
        return kind == "null" or (isinstance(kind, dict) and kind.get("type") == "null")

    return [f["name"] for f in json.loads(schema_text)["fields"] if not nullable(f["type"])]
