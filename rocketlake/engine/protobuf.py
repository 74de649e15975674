"""Protobuf bodies (``body.format: protobuf``): the message type from a descriptor set, its columns as spark-protobuf's
``from_protobuf`` gives them, and the decoding of bodies into those columns in the reader's Python workers.

A descriptor set is what ``protoc --include_imports --descriptor_set_out=FILE`` writes, the file ``from_protobuf``
takes. The columns follow spark-protobuf's ``SchemaConverters`` and ``ProtobufDeserializer`` (Spark 4.x, default
options) point by point, so a table is the same whichever engine decodes its bodies:

* ``int32``, ``sint32``, ``sfixed32``, ``uint32``, ``fixed32`` → INT; the 64-bit ones → BIGINT (an unsigned value
  above the signed range keeps its bits, as Java reads it); ``float`` → FLOAT, ``double`` → DOUBLE, ``bool`` →
  BOOLEAN, ``string`` → STRING, ``bytes`` → BINARY;
* an enum → STRING, the value's name (a number the enum does not name: ``UNKNOWN_ENUM_VALUE_<Enum>_<n>``, Java's);
* a message → STRUCT of its fields; ``google.protobuf.Timestamp`` → TIMESTAMP; ``Duration`` → BIGINT, its
  microseconds (``from_protobuf`` gives INTERVAL DAY TO SECOND, which Delta cannot store); other well-known types (wrappers, ``Any``) are messages like any other; a message with no field
  (``google.protobuf.Empty``) has no column, nor has an array or a map of it;
* ``repeated`` → ARRAY (an absent field is an empty array), a map → MAP;
* ``oneof``: each member is a column of its own, null unless it is the one set;
* a field that is absent is null: a message not set, a field with presence (``optional``, proto2, a ``oneof``
  member) not set, and a proto3 scalar without presence that holds its default (0, "", false, the enum's first
  value), which the wire does not carry; a proto2 field with a declared default takes it;
* recursion (a message that contains itself) is refused, as ``from_protobuf`` refuses it by default;
* unknown fields (a newer writer's) are skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError

if TYPE_CHECKING:
    from rocketlake.engine.registry import SchemaLookup

_TS = pa.timestamp("us", tz="UTC")
_FD = FieldDescriptor

#: The protobuf scalar types, as Spark's column and Arrow's type.
_SCALARS: dict[int, tuple[str, pa.DataType]] = {
    _FD.TYPE_INT32: ("INT", pa.int32()),
    _FD.TYPE_SINT32: ("INT", pa.int32()),
    _FD.TYPE_SFIXED32: ("INT", pa.int32()),
    _FD.TYPE_UINT32: ("INT", pa.int32()),
    _FD.TYPE_FIXED32: ("INT", pa.int32()),
    _FD.TYPE_INT64: ("BIGINT", pa.int64()),
    _FD.TYPE_SINT64: ("BIGINT", pa.int64()),
    _FD.TYPE_SFIXED64: ("BIGINT", pa.int64()),
    _FD.TYPE_UINT64: ("BIGINT", pa.int64()),
    _FD.TYPE_FIXED64: ("BIGINT", pa.int64()),
    _FD.TYPE_FLOAT: ("FLOAT", pa.float32()),
    _FD.TYPE_DOUBLE: ("DOUBLE", pa.float64()),
    _FD.TYPE_BOOL: ("BOOLEAN", pa.bool_()),
    _FD.TYPE_STRING: ("STRING", pa.string()),
    _FD.TYPE_BYTES: ("BINARY", pa.binary()),
    _FD.TYPE_ENUM: ("STRING", pa.string()),
}
_UNSIGNED_32 = (_FD.TYPE_UINT32, _FD.TYPE_FIXED32)
_UNSIGNED_64 = (_FD.TYPE_UINT64, _FD.TYPE_FIXED64)


class ProtobufSchemaError(ValueError):
    """The descriptor set, the message name or the message's shape cannot give a table's columns."""


def _is_time(message: Descriptor, name: str) -> bool:
    # spark-protobuf's test: the message's short name and its two fields, whatever its package.
    return message.name == name and [f.name for f in message.fields] == ["seconds", "nanos"]


def _repeated(field: FieldDescriptor) -> bool:
    # ``is_repeated`` since protobuf 6.32, where ``label`` became deprecated; ``label`` before.
    flag = getattr(field, "is_repeated", None)
    return flag if flag is not None else field.label == _FD.LABEL_REPEATED


def _is_map(field: FieldDescriptor) -> bool:
    return field.type == _FD.TYPE_MESSAGE and field.message_type.GetOptions().map_entry


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


@dataclass(frozen=True)
class Column:
    """One field's column: Spark's DDL type and the Arrow type the decoder builds."""

    ddl: str
    arrow: pa.DataType


def column_of(field: FieldDescriptor, seen: tuple[str, ...] = ()) -> Column | None:
    """The column of ``field`` (inside the messages ``seen`` on the way to it, for the recursion check), or None
    where Spark drops the field: a message with no field left (``google.protobuf.Empty``), or a map or array of one."""
    if _is_map(field):
        key, value = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
        k, v = _element(key, seen), _element(value, seen)
        if k is None or v is None:
            return None
        return Column(f"MAP<{k.ddl}, {v.ddl}>", pa.map_(k.arrow, v.arrow))
    element = _element(field, seen)
    if element is None or not _repeated(field):
        return element
    return Column(f"ARRAY<{element.ddl}>", pa.list_(element.arrow))


def _element(field: FieldDescriptor, seen: tuple[str, ...]) -> Column | None:
    if field.type != _FD.TYPE_MESSAGE and field.type != _FD.TYPE_GROUP:
        ddl, arrow = _SCALARS[field.type]
        return Column(ddl, arrow)
    message = field.message_type
    if _is_time(message, "Timestamp"):
        return Column("TIMESTAMP", _TS)
    if _is_time(message, "Duration"):
        # from_protobuf gives INTERVAL DAY TO SECOND, which neither Delta nor Parquet can store: its microseconds.
        return Column("BIGINT", pa.int64())
    if message.full_name in seen:
        raise ProtobufSchemaError(
            f"field {field.full_name} makes {message.full_name} recursive (it contains itself), which Spark's "
            "from_protobuf refuses by default and rocketlake does not support yet; land such bodies with "
            "format raw"
        )
    return _struct(message, (*seen, message.full_name))


def kept_fields(message: Descriptor, seen: tuple[str, ...] = ()) -> list[tuple[FieldDescriptor, Column]]:
    """``message``'s fields that have a column, with it, in the message's order."""
    seen = seen or (message.full_name,)
    return [(f, c) for f in message.fields if (c := column_of(f, seen)) is not None]


def _struct(message: Descriptor, seen: tuple[str, ...]) -> Column | None:
    columns = kept_fields(message, seen)
    if not columns:
        return None
    ddl = ", ".join(f"{_quoted(f.name)}: {c.ddl}" for f, c in columns)
    return Column(f"STRUCT<{ddl}>", pa.struct([pa.field(f.name, c.arrow) for f, c in columns]))


def struct_of(message: Descriptor) -> Column:
    """The STRUCT of ``message``'s columns: what ``from_protobuf`` returns for it."""
    column = _struct(message, (message.full_name,))
    if column is None:
        raise ProtobufSchemaError(f"message {message.full_name} has no field: it would land no column")
    return column


def load_descriptor_set(path: str | Path) -> bytes:
    """The bytes of a descriptor set file, checked to parse; ``ProtobufSchemaError`` saying why not."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise ProtobufSchemaError(f"{path} cannot be read ({e.strerror})") from None
    try:
        descriptor_pb2.FileDescriptorSet.FromString(data)
    except DecodeError:
        raise ProtobufSchemaError(
            f"{path} is not a descriptor set (protoc --include_imports --descriptor_set_out={Path(path).name} ...)"
        ) from None
    return data


def _runtime_well_known_types() -> None:
    """Import the protobuf runtime's well-known types, which puts them in its default pool."""
    from google.protobuf import (  # noqa: F401
        any_pb2,
        duration_pb2,
        empty_pb2,
        field_mask_pb2,
        struct_pb2,
        timestamp_pb2,
        wrappers_pb2,
    )


def message_descriptor(descriptor_set: bytes, message_name: str) -> Descriptor:
    """The descriptor of ``message_name`` (its full name, ``package.Message``) in ``descriptor_set``, in a pool of its
    own; well-known types the set does not include are taken from the protobuf runtime."""
    files = descriptor_pb2.FileDescriptorSet.FromString(descriptor_set).file
    pool = descriptor_pool.DescriptorPool()
    by_name = {f.name: f for f in files}
    added: set[str] = set()

    def add(name: str, wanted_by: str) -> None:
        if name in added:
            return
        proto = by_name.get(name)
        if proto is None:
            _runtime_well_known_types()
            if not name.startswith("google/protobuf/"):
                raise ProtobufSchemaError(
                    f"{wanted_by} imports {name}, which the descriptor set does not hold: write it with protoc "
                    "--include_imports"
                )
            proto = descriptor_pb2.FileDescriptorProto()
            descriptor_pool.Default().FindFileByName(name).CopyToProto(proto)
        for dependency in proto.dependency:
            add(dependency, name)
        pool.Add(proto)
        added.add(name)

    for f in files:
        add(f.name, f.name)
    try:
        return pool.FindMessageTypeByName(message_name)
    except KeyError:
        names = sorted(m for f in files if not f.name.startswith("google/protobuf/") for m in _message_names(f))
        raise ProtobufSchemaError(
            f"message {message_name!r} is not in the descriptor set; it holds {', '.join(names) or 'no message'}"
        ) from None


def _message_names(file: descriptor_pb2.FileDescriptorProto) -> list[str]:
    prefix = f"{file.package}." if file.package else ""

    def walk(messages, outer: str) -> list[str]:
        names = []
        for m in messages:
            if m.options.map_entry:
                continue
            names.append(outer + m.name)
            names += walk(m.nested_type, f"{outer}{m.name}.")
        return names

    return walk(file.message_type, prefix)


class BodyDecoder:
    """Bodies of one message type decoded into one Arrow STRUCT column, and why each that does not decode failed."""

    def __init__(
        self, descriptor_set: bytes, message_name: str, columnar: bool = True, registry: SchemaLookup | None = None
    ):
        from rocketlake.engine.protobuf_arrow import ptars_handler

        self.descriptor = message_descriptor(descriptor_set, message_name)
        self.column = struct_of(self.descriptor)
        self._class = message_factory.GetMessageClass(self.descriptor)
        self._convert = _message_converter(self.descriptor)
        self._columnar = ptars_handler(self.descriptor) if columnar else None
        self.registry = registry  # bodies framed by a schema registry (Confluent's wire format), or None
        self._path = message_path(self.descriptor)

    def decode(self, bodies: list[bytes | None]) -> tuple[pa.StructArray, list[str | None]]:
        """(the decoded STRUCT, one per body, null where it failed or was None; the error, None where it decoded).

        The whole batch at once through ptars (``protobuf_arrow``) when every body parses; body by body otherwise,
        which names the bodies that fail. Framed bodies lose their frame first; one whose frame is wrong fails."""
        if self.registry is None:
            return self._decode_payloads(bodies)
        payloads, framing_errors = self._unframed(bodies)
        decoded, errors = self._decode_payloads(payloads)
        if not any(framing_errors):
            return decoded, errors
        return decoded, [f or e for f, e in zip(framing_errors, errors)]

    def _unframed(self, bodies: list[bytes | None]) -> tuple[list[bytes | None], list[str | None]]:
        from rocketlake.engine.registry import unframed

        def same_message(frame, _schema: str) -> str | None:
            if frame.message_indexes == self._path:
                return None
            return (
                f"body is framed as message {list(frame.message_indexes)} of schema {frame.schema_id}, not "
                f"{self.descriptor.full_name} ({list(self._path)} in {self.descriptor.file.name})"
            )

        return unframed(bodies, self.registry, same_message, protobuf=True)

    def _decode_payloads(self, bodies: list[bytes | None]) -> tuple[pa.StructArray, list[str | None]]:
        if self._columnar is not None and bodies:
            from rocketlake.engine.protobuf_arrow import conform

            try:
                batch = self._columnar.list_to_record_batch([b or b"" for b in bodies])
            except ValueError:  # a body that does not parse: the reference decoder says which, and why
                pass
            else:
                decoded = conform(batch, self.descriptor, self.column.arrow)
                if any(b is None for b in bodies):
                    decoded = _masked(decoded, [b is None for b in bodies])
                return decoded, [None] * len(bodies)
        return self.decode_each(bodies)

    def decode_each(self, bodies: list[bytes | None]) -> tuple[pa.StructArray, list[str | None]]:
        """``decode``, body by body: the reference (``engine.protobuf``'s rules, one message at a time)."""
        parse = self._class.FromString
        convert = self._convert
        rows: list[dict | None] = []
        errors: list[str | None] = []
        for body in bodies:
            if body is None:
                rows.append(None)
                errors.append(None)
                continue
            try:
                rows.append(convert(parse(body)))
                errors.append(None)
            except DecodeError as e:
                rows.append(None)
                errors.append(f"body is not a {self.descriptor.full_name} message (Protobuf binary): {e}")
        return pa.array(rows, type=self.column.arrow), errors


def message_path(message: Descriptor) -> tuple[int, ...]:
    """Where ``message`` is in its file: the index of its top-level message, then of each nested one (Confluent's
    message-index list)."""
    file = descriptor_pb2.FileDescriptorProto.FromString(message.file.serialized_pb)
    names = message.full_name.removeprefix(f"{file.package}." if file.package else "").split(".")
    path, messages = [], file.message_type
    for name in names:
        index = next(i for i, m in enumerate(messages) if m.name == name)
        path.append(index)
        messages = messages[index].nested_type
    return tuple(path)


def _masked(array: pa.StructArray, nulls: list[bool]) -> pa.StructArray:
    children = [array.field(i) for i in range(array.type.num_fields)]
    names = [array.type.field(i).name for i in range(array.type.num_fields)]
    return pa.StructArray.from_arrays(children, names=names, mask=pa.array(nulls))


def _message_converter(message: Descriptor):
    """``convert(msg) -> dict`` of ``message``'s columns, with spark-protobuf's nulls (see the module's text)."""
    fields = [(f.name, _field_reader(f)) for f, _ in kept_fields(message)]

    def convert(msg) -> dict:
        return {name: read(msg) for name, read in fields}

    return convert


def _value_converter(field: FieldDescriptor):
    """How one value of ``field`` (an element, a map's value, or the field's own) becomes its column's value."""
    if field.type == _FD.TYPE_ENUM:
        enum = field.enum_type
        names = {v.number: v.name for v in enum.values}
        unknown = f"UNKNOWN_ENUM_VALUE_{enum.name}_"
        return lambda v: names.get(v) or f"{unknown}{v}"
    if field.type in _UNSIGNED_32:
        return lambda v: v - (1 << 32) if v >= 1 << 31 else v
    if field.type in _UNSIGNED_64:
        return lambda v: v - (1 << 64) if v >= 1 << 63 else v
    if field.type == _FD.TYPE_MESSAGE:
        message = field.message_type
        if _is_time(message, "Timestamp") or _is_time(message, "Duration"):
            return lambda v: v.seconds * 1_000_000 + v.nanos // 1000
        return _message_converter(message)
    return None


def _field_reader(field: FieldDescriptor):
    name = field.name
    if _is_map(field):
        key = _value_converter(field.message_type.fields_by_name["key"])
        value = _value_converter(field.message_type.fields_by_name["value"]) or (lambda v: v)
        key = key or (lambda k: k)
        return lambda msg: [(key(k), value(v)) for k, v in getattr(msg, name).items()]
    convert = _value_converter(field)
    if _repeated(field):
        if convert is None:
            return lambda msg: list(getattr(msg, name))
        return lambda msg: [convert(v) for v in getattr(msg, name)]
    convert = convert or (lambda v: v)
    if field.has_presence:
        if field.has_default_value and field.type != _FD.TYPE_MESSAGE:
            return lambda msg: convert(getattr(msg, name))  # proto2's declared default, as Java's getField
        return lambda msg: convert(getattr(msg, name)) if msg.HasField(name) else None
    # A proto3 scalar without presence: its default is not on the wire, and reads as absent (Java's hasField).
    default = field.default_value
    if field.type in (_FD.TYPE_FLOAT, _FD.TYPE_DOUBLE):
        return lambda msg: None if (v := getattr(msg, name)) == 0 and str(v)[0] != "-" else convert(v)
    return lambda msg: None if (v := getattr(msg, name)) == default else convert(v)
