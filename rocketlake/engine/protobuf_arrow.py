"""The fast path of Protobuf bodies: a batch of bodies parsed straight into Arrow by ptars (Rust, over the
serialized bytes), then brought to spark-protobuf's columns and nulls with Arrow's compute functions, column by
column rather than message by message.

ptars' columns differ from ``from_protobuf``'s in known ways, each mended here (``engine.protobuf`` gives the rules,
and its message-by-message decoder is the reference a test compares this path with):

* a proto3 scalar without presence holds its default where the wire had nothing: null here;
* a proto2 field with a declared default is null when absent: its default here;
* an enum number the enum does not name is its digits: Java's ``UNKNOWN_ENUM_VALUE_<Enum>_<n>`` here;
* unsigned integers are Arrow's unsigned types: their bits as signed, as Java reads them;
* wrappers (``Int32Value``, ...) are unwrapped: a STRUCT of ``value`` again, as any message;
* a Duration is Arrow's duration: its microseconds; a message with no field is an empty STRUCT: dropped.

A batch ptars refuses (a body that is not a message of the type) goes through the reference decoder, which says
which bodies failed and why.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from rocketlake.engine.protobuf import _FD, _is_map, _is_time, _repeated, kept_fields

_WRAPPERS = frozenset(
    f"google.protobuf.{name}Value"
    for name in ("Double", "Float", "Int64", "UInt64", "Int32", "UInt32", "Bool", "String", "Bytes")
)
_UNSIGNED = {_FD.TYPE_UINT32: pa.int32(), _FD.TYPE_FIXED32: pa.int32(), _FD.TYPE_UINT64: pa.int64()}
_UNSIGNED[_FD.TYPE_FIXED64] = pa.int64()


def ptars_handler(message: Descriptor):
    """ptars' converter of ``message``, or None where ptars is not installed (the reference decoder then serves)."""
    try:
        import ptars
    except ImportError:
        return None
    config = ptars.PtarsConfig(enum_repr="string", timestamp_unit="us", duration_unit="us")
    return ptars.HandlerPool([message.file], config=config).get_for_message(message)


def conform(batch: pa.RecordBatch, message: Descriptor, target: pa.DataType) -> pa.StructArray:
    """ptars' ``batch`` of ``message`` as the STRUCT ``target`` (``struct_of(message).arrow``)."""
    return _message(pa.StructArray.from_arrays(batch.columns, names=batch.schema.names), message).cast(target)


def _message(array: pa.StructArray, message: Descriptor) -> pa.StructArray:
    names, children = [], []
    for field, _ in kept_fields(message):
        names.append(field.name)
        children.append(_field(array.field(field.name), field))
    mask = array.is_null() if array.null_count else None
    return pa.StructArray.from_arrays(children, names=names, mask=mask)


def _field(array: pa.Array, field: FieldDescriptor) -> pa.Array:
    if _is_map(field):
        entry = field.message_type
        keys = _value(array.keys, entry.fields_by_name["key"])
        items = _value(array.items, entry.fields_by_name["value"])
        return pa.MapArray.from_arrays(array.offsets, keys, items)
    if _repeated(field):
        return pa.ListArray.from_arrays(array.offsets, _value(array.values, field))
    value = _value(array, field)
    if not field.has_presence:
        return _absent_at_default(value, field)
    if field.has_default_value and field.type != _FD.TYPE_MESSAGE:  # proto2's declared default, as Java's getField
        return pc.fill_null(value, pa.scalar(_java_value(field, field.default_value), value.type))
    return value


def _java_value(field: FieldDescriptor, value):
    """A Python value of ``field`` as its column holds it (an enum's number by name, unsigned bits as signed)."""
    if field.type == _FD.TYPE_ENUM:
        named = field.enum_type.values_by_number.get(value)
        return named.name if named else f"UNKNOWN_ENUM_VALUE_{field.enum_type.name}_{value}"
    if field.type in (_FD.TYPE_UINT32, _FD.TYPE_FIXED32) and value >= 1 << 31:
        return value - (1 << 32)
    if field.type in (_FD.TYPE_UINT64, _FD.TYPE_FIXED64) and value >= 1 << 63:
        return value - (1 << 64)
    return value


def _value(array: pa.Array, field: FieldDescriptor) -> pa.Array:
    """One value of ``field`` (an element, a map's key or value, or the field's own) as its column holds it."""
    kind = field.type
    if kind == _FD.TYPE_ENUM:
        enum = field.enum_type
        names = pa.array([v.name for v in enum.values])
        unknown = pc.binary_join_element_wise(f"UNKNOWN_ENUM_VALUE_{enum.name}_", array, "")
        return pc.if_else(pc.is_in(array, value_set=names), array, unknown)
    if kind in _UNSIGNED:
        return array.cast(_UNSIGNED[kind], safe=False)
    if kind != _FD.TYPE_MESSAGE:
        return array
    message = field.message_type
    if _is_time(message, "Timestamp") or _is_time(message, "Duration"):
        if pa.types.is_struct(array.type):  # a message of that shape ptars does not know as the well-known type
            micros = pc.add(
                pc.multiply(array.field("seconds").cast(pa.int64()), 1_000_000),
                pc.divide(array.field("nanos").cast(pa.int64()), 1000),
            )
            array = pc.if_else(array.is_null(), pa.scalar(None, pa.int64()), micros)
        if _is_time(message, "Timestamp"):
            return array.cast(pa.timestamp("us", tz="UTC"))
        return array.cast(pa.int64())  # a Duration's microseconds
    if message.full_name in _WRAPPERS:
        inner_field = message.fields_by_name["value"]
        inner = _absent_at_default(_value(array, inner_field), inner_field)
        mask = array.is_null() if array.null_count else None
        return pa.StructArray.from_arrays([inner], names=["value"], mask=mask)
    return _message(array, message)


def _absent_at_default(array: pa.Array, field: FieldDescriptor) -> pa.Array:
    """Null where a proto3 scalar without presence holds its default: the wire carried nothing there."""
    kind = field.type
    if kind == _FD.TYPE_ENUM:
        at_default = pc.equal(array, field.enum_type.values_by_number[0].name)
    elif kind in (_FD.TYPE_STRING, _FD.TYPE_BYTES):
        at_default = pc.equal(pc.binary_length(array), 0)
    elif kind == _FD.TYPE_BOOL:
        at_default = pc.invert(array)
    elif kind in (_FD.TYPE_FLOAT, _FD.TYPE_DOUBLE):
        bits = pa.int32() if kind == _FD.TYPE_FLOAT else pa.int64()
        at_default = pc.equal(array.view(bits), 0)  # -0.0 is set: its sign bit is on the wire, as Java sees it
    else:
        at_default = pc.equal(array, 0)
    return pc.if_else(pc.fill_null(at_default, False), pa.scalar(None, array.type), array)
