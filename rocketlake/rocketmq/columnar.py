"""PULL_MESSAGE bodies decoded straight into Arrow columns, with no Python object per message.

:func:`decode_messages` builds one :class:`Message` per record, and a Spark task then copied every
field of it into Python lists before Arrow saw them: about 25 us per message, which held the whole
landing path to a fraction of what Spark and Delta can write. Here a pull answer is only indexed
(:func:`scan_records`: one size read per record, to find where each starts), the answers of a
queue are kept as they came, and :func:`record_batch` checks the shape of all records at once,
reads every fixed field with numpy (one gather of the records' heads per batch), cuts bodies and
properties out of the answers' buffers in one Arrow cast each (:func:`_views`), and finds the
properties landed with numpy (the whole map, when landed, with Arrow's string kernels). The checks
run once per batch, not once per pull answer: with a stock broker's 32 messages a pull, checking
each answer cost a Python worker about 3 us per message, half of it numpy's per-call overhead.

It covers the records a broker stores for ordinary and batch-sent messages: V1 magic, IPv4 hosts,
bodies not compressed, no 5.x inner batch, the properties landed valid UTF-8. Anything else
(and a record that does not even parse) makes these functions return None, and the caller takes
the exact decoder, which handles every case and names what is wrong: the fast path never guesses.
The columns equal what :class:`Message` gives field for field (``tests/unit/test_columnar.py``).
"""

from __future__ import annotations

from struct import Struct

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .codes import RequestCode
from .errors import ProtocolError
from .filter import Subscription
from .message import (
    BORNHOST_V6_FLAG,
    COMPRESSED_FLAG,
    DLQ_GROUP_TOPIC_PREFIX,
    INNER_BATCH_FLAG,
    MESSAGE_MAGIC_CODE_V1,
    NAME_VALUE_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_SEPARATOR,
    PROPERTY_SHARDING_KEY,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    RETRY_GROUP_TOPIC_PREFIX,
    STOREHOSTADDRESS_V6_FLAG,
    Message,
    _format_host,
    decode_messages,
)

__all__ = ["RawRecords", "origin_msg_id", "origin_offset_msg_id", "origin_topic", "record_batch", "scan_records"]

_SIZE = Struct(">i")
_QUEUE_OFFSET = Struct(">q")
# Head (40 bytes) and the IPv4 tail up to and including BODYLEN (48): the body starts here.
_BODY_AT = 88
# A record also holds the topic's 1-byte length and the properties' 2-byte length.
_MIN_RECORD = _BODY_AT + 3
_OUTSIDE_FAST_SHAPE = COMPRESSED_FLAG | INNER_BATCH_FLAG | BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG
_HEX = np.array([f"{i:02X}".encode() for i in range(256)], dtype="S2")
_TS = pa.timestamp("us", tz="UTC")
#: The fixed part of a V1 IPv4 record, up to and including BODYLEN (``MessageDecoder#decode``'s order): gathered
#: once per batch (one copy of 88 bytes a record), every fixed field is then a strided view of it.
_HEAD = np.dtype(
    [
        ("total", ">i4"),
        ("magic", ">i4"),
        ("body_crc", ">i4"),
        ("queue_id", ">i4"),
        ("flag", ">i4"),
        ("queue_offset", ">i8"),
        ("physical_offset", ">i8"),
        ("sys_flag", ">i4"),
        ("born_timestamp", ">i8"),
        ("born_ip", ">u4"),
        ("born_port", ">i4"),
        ("store_timestamp", ">i8"),
        ("store_ip", ">u4"),
        ("store_port", ">i4"),
        ("reconsume_times", ">i4"),
        ("prepared_offset", ">i8"),
        ("body_len", ">i4"),
    ]
)
assert _HEAD.itemsize == _BODY_AT


class RawRecords:
    """Message records of one queue, in offset order, indexed but not decoded.

    ``buffer`` holds whole pull answers; ``starts`` are the records' positions in it. Slicing keeps
    the buffer and narrows the index, as cutting a list of messages would.
    """

    __slots__ = ("_count", "_nbytes", "_offsets", "_origin", "arena", "buffer", "first_offset", "starts")

    def __init__(
        self,
        buffer: np.ndarray,
        starts: np.ndarray,
        queue_offsets: np.ndarray | None,
        nbytes: int | None = None,
        arena: bytearray | None = None,
        origin: int | None = 0,
        first_offset: int | None = None,
    ) -> None:
        self.buffer = buffer
        self.starts = starts
        self._count = len(starts)  # asked of every answer several times (``len``, truth): kept, not recounted
        # ``first_offset``: the records are known to hold every offset from it on (``scan_records`` made it so), and
        # ``queue_offsets`` is made from it when asked for; None: ``queue_offsets`` as given.
        self.first_offset = first_offset
        self._offsets = queue_offsets
        self._nbytes = nbytes  # known without reading the sizes again when the records fill ``buffer``
        # Where ``buffer`` lies, when it is part of a larger one (a connection's arena: frame.FrameDecoder):
        # ``buffer`` is ``arena[origin:origin + len(buffer)]`` (None: found when first asked for).
        self.arena = arena
        self._origin = origin

    def __len__(self) -> int:
        return self._count

    @property
    def queue_offsets(self) -> np.ndarray:
        if self._offsets is None:
            self._offsets = np.arange(self.first_offset, self.first_offset + self._count, dtype=np.int64)
        return self._offsets

    @property
    def origin(self) -> int:
        if self._origin is None:
            self._origin = self.buffer.ctypes.data - np.frombuffer(self.arena, np.uint8).ctypes.data
        return self._origin

    def __getitem__(self, index: slice) -> RawRecords:
        if not isinstance(index, slice):
            raise TypeError("RawRecords are cut with slices only")
        starts = self.starts[index]
        consecutive = self.first_offset is not None and index.step in (None, 1)
        return RawRecords(
            self.buffer,
            starts,
            None if consecutive else self.queue_offsets[index],
            arena=self.arena,
            origin=self._origin,
            first_offset=self.first_offset + (index.indices(self._count)[0]) if consecutive else None,
        )

    @property
    def nbytes(self) -> int:
        """Bytes of the records themselves (what the push consumer's size threshold counts)."""
        if self._nbytes is None:
            self._nbytes = int(_be(self.buffer, self.starts, 4, ">i4").sum()) if len(self) else 0
        return self._nbytes

    def record_bytes(self) -> bytes:
        """The records back to back, as a pull answer carries them."""
        view = memoryview(self.buffer)
        sizes = _be(self.buffer, self.starts, 4, ">i4").tolist()
        return b"".join(view[s : s + n] for s, n in zip(self.starts.tolist(), sizes))

    def messages(self) -> list[Message]:
        """The same records through the exact decoder."""
        return decode_messages(self.record_bytes())

    @staticmethod
    def concat(parts: list[RawRecords]) -> RawRecords:
        if len(parts) == 1:
            return parts[0]
        # Consecutive answers of a queue each hold every offset from their first on, and each starts where the one
        # before ended: the first offset places them all, and no array of offsets is made (a stock broker's answers
        # are 32 records: a flush joins some 30 of them).
        first_offset = parts[0].first_offset
        expected = first_offset
        for p in parts:
            if expected is None or p.first_offset != expected:
                first_offset = None
                break
            expected += p._count
        offsets = None if first_offset is not None else np.concatenate([p.queue_offsets for p in parts])
        nbytes = sum(p.nbytes for p in parts)
        arena = parts[0].arena
        if arena is not None and all(p.arena is arena for p in parts):
            # Answers of one arena lie side by side (with their frames' headers between): one view covers them all.
            origins = [p.origin for p in parts]
            low = min(origins)
            high = max(o + len(p.buffer) for o, p in zip(origins, parts))
            return RawRecords(
                np.frombuffer(arena, np.uint8)[low:high],
                np.concatenate([p.starts + (o - low) for o, p in zip(origins, parts)]),
                offsets,
                nbytes,
                arena=arena,
                origin=low,
                first_offset=first_offset,
            )
        bases = np.cumsum([0] + [len(p.buffer) for p in parts[:-1]])
        return RawRecords(
            np.concatenate([p.buffer for p in parts]),
            np.concatenate([p.starts + base for p, base in zip(parts, bases)]),
            offsets,
            nbytes,
            first_offset=first_offset,
        )


def _be(buffer: np.ndarray, at: np.ndarray, width: int, dtype: str) -> np.ndarray:
    """Big-endian integers of ``width`` bytes at positions ``at`` of ``buffer``, as native int64."""
    if not len(at):
        return np.zeros(0, np.int64)
    return buffer[at[:, None] + np.arange(width)].view(dtype)[:, 0].astype(np.int64)


def scan_records(body: bytes | memoryview, origin: int | None = None) -> RawRecords | None:
    """Index the records of a PULL_MESSAGE body, or None if their sizes do not add up to it (the exact
    decoder then says how). Whether each record is of the fast shape is :func:`record_batch`'s check.
    A body that is a view of a larger buffer (a connection's arena) remembers where in it it lies: at ``origin``
    when the caller knows it (``RemotingCommand.body_at``), else found when first asked for."""
    size = len(body)
    starts: list[int] = []
    pos = 0
    unpack = _SIZE.unpack_from
    while pos < size:
        if size - pos < _MIN_RECORD:
            return None
        total = unpack(body, pos)[0]
        if total < _MIN_RECORD or total > size - pos:
            return None
        starts.append(pos)
        pos += total
    buffer = np.frombuffer(body, np.uint8)
    at = np.array(starts, np.int64)
    # A broker answers a queue's records in increasing offset order, so when the last is as far from the first as
    # their count says, the offsets between are every one of them: two reads instead of a numpy gather per answer
    # (a stock broker's answers hold 32 records). record_batch checks them all once per batch before any lands.
    offsets, first_offset = None, None
    if starts:
        first = _QUEUE_OFFSET.unpack_from(body, starts[0] + 20)[0]
        last = _QUEUE_OFFSET.unpack_from(body, starts[-1] + 20)[0]
        if last - first == len(starts) - 1:
            first_offset = first
    if first_offset is None:
        offsets = _be(buffer, at + 20, 8, ">i8")
    arena = None
    if isinstance(body, memoryview) and isinstance(body.obj, bytearray):
        arena = body.obj
    else:
        origin = 0
    return RawRecords(buffer, at, offsets, size, arena=arena, origin=origin, first_offset=first_offset)


def _heads(buffer: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The fixed part of every record: as bytes (``n x 88``) and as ``_HEAD`` fields (views of those bytes)."""
    if not len(at):
        raw = np.zeros((0, _BODY_AT), np.uint8)
    else:
        raw = _windows(buffer, _BODY_AT)[at]
    return raw, raw.view(_HEAD)[:, 0]


def _well_formed(buffer: np.ndarray, at: np.ndarray, head: np.ndarray) -> bool:
    """Every record is V1, IPv4, uncompressed, not a batch, and its lengths add up to its size."""
    if (head["magic"] != MESSAGE_MAGIC_CODE_V1).any():
        return False
    if (head["sys_flag"] & _OUTSIDE_FAST_SHAPE).any():
        return False
    for port in (head["born_port"], head["store_port"]):  # Java refuses a record whose port is out of range
        if ((port < 0) | (port > 0xFFFF)).any():
            return False
    totals = head["total"].astype(np.int64)
    body_len = head["body_len"].astype(np.int64)
    if ((body_len < 0) | (body_len > totals - _MIN_RECORD)).any():
        return False
    topic_at = at + _BODY_AT + body_len
    topic_len = buffer[topic_at].view(np.int8).astype(np.int64)  # signed, as Java reads it
    if ((topic_len < 0) | (topic_at + 3 + topic_len > at + totals)).any():
        return False
    props_len = _be(buffer, topic_at + 1 + topic_len, 2, ">i2")
    return bool(((props_len >= 0) & (topic_at + 3 + topic_len + props_len == at + totals)).all())


def _windows(buffer: np.ndarray, width: int) -> np.ndarray:
    """Every ``width`` bytes of ``buffer`` from each position on, as rows of a strided view (no copy); what
    ``sliding_window_view`` gives, without its checks' cost on every call."""
    return np.ndarray((len(buffer) - width + 1, width), np.uint8, buffer, 0, (1, 1))


def _views(
    kind: pa.DataType, buffer: np.ndarray, starts: np.ndarray, lengths: np.ndarray, valid: np.ndarray | None = None
) -> pa.Array:
    """The byte strings ``buffer[start:start + length]`` as one array of ``kind`` (binary or string).

    They are described as views into ``buffer`` (Arrow's binary-view layout: 16 bytes per string, holding
    its length and either the string itself, up to 12 bytes, or its first 4 bytes and its position), and
    Arrow's cast copies them out back to back in C++: no Python step per string. Casting to string checks
    UTF-8 (``pa.ArrowInvalid`` otherwise). Rows where ``valid`` is false are null (give them length 0)."""
    n = len(starts)
    if n == 0:
        return pa.array([], kind)
    validity = None
    if valid is not None and not valid.all():
        validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
    longest = int(lengths.max())
    if longest <= _GATHERED_UP_TO:
        return _gathered(kind, buffer, starts, lengths, longest, validity)
    width = np.arange(12)
    inline = lengths <= 12
    if len(buffer) < 12:
        buffer = np.concatenate([buffer, np.zeros(12, np.uint8)])
    last = len(buffer) - 12  # the last place 12 bytes can be read from
    head = _windows(buffer, 12)[np.minimum(starts, last)]
    for row in np.flatnonzero(starts > last):  # strings (short ones) within 12 bytes of the end: rare
        head[row, : lengths[row]] = buffer[starts[row] : starts[row] + lengths[row]]
    head *= width < np.where(inline, lengths, 4)[:, None]  # zero padded, as the layout wants
    views = np.empty((n, 4), np.int32)
    views[:, 0] = lengths
    views[:, 1:4] = head.view("<i4")
    views[~inline, 2] = 0  # buffer 0: ``buffer`` itself
    views[~inline, 3] = starts[~inline]
    array = pa.Array.from_buffers(pa.binary_view(), n, [validity, pa.py_buffer(views), pa.py_buffer(buffer)])
    return array.cast(kind)


#: Strings up to this long are gathered into Arrow's plain layout at once (:func:`_gathered`); longer ones (bodies)
#: go through views, whose cast copies each string once, whatever its length.
_GATHERED_UP_TO = 64


def _gathered(
    kind: pa.DataType, buffer: np.ndarray, starts: np.ndarray, lengths: np.ndarray, longest: int, validity
) -> pa.Array:
    """:func:`_views` for short strings (``longest`` bytes at most): each row's ``longest`` bytes in one gather, the
    bytes past its length masked out, and what is left, row after row, is the data of Arrow's plain layout. The
    views' cast cost more than the copy itself for strings this short (message ids, keys, tags, properties)."""
    n = len(starts)
    if len(buffer) < longest:
        buffer = np.concatenate([buffer, np.zeros(longest, np.uint8)])
    last = len(buffer) - longest  # the last place ``longest`` bytes can be read from
    rows = _windows(buffer, longest)[np.minimum(starts, last)] if longest else np.zeros((n, 0), np.uint8)
    for row in np.flatnonzero(starts > last):  # strings within ``longest`` bytes of the end: rare
        rows[row, : lengths[row]] = buffer[starts[row] : starts[row] + lengths[row]]
    data = rows[np.arange(longest) < lengths[:, None]]  # row-major: the kept bytes of each row, back to back
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    array = pa.Array.from_buffers(kind, n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)])
    if pa.types.is_string(kind):
        array.validate(full=True)  # UTF-8, as the views' cast to string checks it (``pa.ArrowInvalid``)
    return array


def record_batch(
    records: RawRecords,
    schema: pa.Schema,
    *,
    broker_name: str,
    subscription: Subscription,
    include_filtered: bool,
    window_start_us: int | None,
) -> pa.RecordBatch | None:
    """The records as one batch of ``schema`` (the ``rocketmq`` source's columns), or None when a
    record needs the exact decoder (see the module's text). Messages the subscription's tags do
    not match are dropped, or kept with ``matched`` false when ``include_filtered``. Only the
    columns of ``schema`` are built: the properties map only when it is one of them."""
    buffer, at, n = records.buffer, records.starts, len(records)
    raw, head = _heads(buffer, at)
    if not _well_formed(buffer, at, head):
        return None
    if (head["queue_offset"] != records.queue_offsets).any():  # see scan_records
        raise ProtocolError(
            f"broker {broker_name} answered PULL_MESSAGE with a queue's records out of offset order "
            f"(offsets {records.queue_offsets[0]} to {records.queue_offsets[-1]} for {n} records)",
            request_code=RequestCode.PULL_MESSAGE,
        )
    if len(buffer) >= 1 << 31:
        return None  # beyond 32-bit Arrow offsets: the exact path builds it in pieces
    rows = _Rows(buffer, at, raw, head, records)
    if rows.topic is None:
        return None
    columns = rows.columns
    columns["broker_name"] = _repeat(broker_name, n)
    if window_start_us is not None:
        columns["window_start"] = pa.array(np.full(n, window_start_us, np.int64), _TS)
    try:
        matched = _matched(rows.column("tags"), subscription)
        if "matched" in schema.names:
            columns["matched"] = matched if matched is not None else pa.array(np.ones(n, bool))
        batch = pa.RecordBatch.from_arrays([rows.column(f.name) for f in schema], schema=schema)
    except pa.ArrowInvalid:  # a property landed is not UTF-8: the exact decoder replaces bad bytes instead
        return None
    if matched is not None and not include_filtered:
        batch = batch.filter(matched)
    return batch


class _Rows:
    """The records of one batch while their columns are built: each column once, on first use."""

    def __init__(
        self, buffer: np.ndarray, at: np.ndarray, raw: np.ndarray, head: np.ndarray, records: RawRecords
    ) -> None:
        self.buffer, self.at, self.raw, self.head, self.records = buffer, at, raw, head, records
        self.body_len = head["body_len"].astype(np.int64)
        topic_at = at + _BODY_AT + self.body_len
        topic_len = buffer[topic_at].astype(np.int64)
        self.topic = _one_topic(buffer, topic_at, topic_len)
        props_at = topic_at + 3 + topic_len
        props_len = _be(buffer, topic_at + 1 + topic_len, 2, ">i2")
        # As bytes: only the values landed are checked as UTF-8 (a lookup's cast, or the map's).
        self.props = _Properties(_views(pa.binary(), buffer, props_at, props_len))
        self.columns: dict[str, pa.Array] = {}

    def column(self, name: str) -> pa.Array:
        if name not in self.columns:
            self.columns[name] = _COLUMN[name](self)
        return self.columns[name]


def _msg_ids(rows: _Rows) -> pa.Array:
    # MessageClientExt#getMsgId: the producer's UNIQ_KEY, else the broker's offset id (made only when one lacks it).
    uniq = rows.props.lookup(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
    return uniq if not uniq.null_count else pc.coalesce(uniq, rows.column("offset_msg_id"))


def _origin_msg_ids(rows: _Rows) -> pa.Array:
    props = rows.props
    known = pc.coalesce(props.lookup(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX), props.lookup(PROPERTY_ORIGIN_MESSAGE_ID))
    return known if not known.null_count else pc.coalesce(known, rows.column("offset_msg_id"))


def _origin_offset_msg_ids(rows: _Rows) -> pa.Array:
    # A main-topic message is its own origin; a copy names it in ORIGIN_MESSAGE_ID (the broker's offset id of the
    # original, set on send-back and kept by every later copy).
    own = rows.column("offset_msg_id")
    if not _redelivered(rows.topic):
        return own
    named = rows.props.lookup(PROPERTY_ORIGIN_MESSAGE_ID)
    return named if not named.null_count else pc.coalesce(named, own)


def _origin_topics(rows: _Rows) -> pa.Array:
    if not _redelivered(rows.topic):
        return rows.column("topic")
    return pc.coalesce(rows.props.lookup(PROPERTY_RETRY_TOPIC), rows.column("topic"))


def origin_topic(topic: str, retry_topic_property: str | None) -> str:
    """The topic a message was produced to: ``RETRY_TOPIC`` for a copy in a retry or dead-letter topic."""
    return retry_topic_property if _redelivered(topic) and retry_topic_property else topic


def origin_msg_id(uniq_key: str | None, origin_message_id: str | None, offset_msg_id: str) -> str:
    """A message's original id, kept by every redelivered copy: the producer's UNIQ_KEY, else the broker's
    ORIGIN_MESSAGE_ID, else the offset id (what :func:`_origin_msg_ids` gives column-wise)."""
    return uniq_key or origin_message_id or offset_msg_id


def origin_offset_msg_id(topic: str, origin_message_id: str | None, offset_msg_id: str) -> str:
    """The offset id of the stored message a message is or came from (what :func:`_origin_offset_msg_ids` gives
    column-wise): its own on a main topic, ``ORIGIN_MESSAGE_ID`` on a copy in a retry or dead-letter topic."""
    return (origin_message_id or offset_msg_id) if _redelivered(topic) else offset_msg_id


def _redelivered(topic: str) -> bool:
    return topic.startswith(RETRY_GROUP_TOPIC_PREFIX) or topic.startswith(DLQ_GROUP_TOPIC_PREFIX)


def _int32(field: np.ndarray) -> pa.Array:
    return pa.array(field.astype(np.int32))


def _timestamps(millis: np.ndarray) -> pa.Array:
    return pa.array(millis.astype(np.int64) * 1000, _TS)


#: How each column is built from the batch's :class:`_Rows` (``rows.column(name)`` gives another, built once).
_COLUMN = {
    "topic": lambda rows: _repeat(rows.topic, len(rows.at)),
    "queue_id": lambda rows: _int32(rows.head["queue_id"]),
    "queue_offset": lambda rows: pa.array(rows.records.queue_offsets),
    "msg_id": _msg_ids,
    "offset_msg_id": lambda rows: _offset_msg_ids(rows.raw),
    "tags": lambda rows: rows.props.lookup(PROPERTY_TAGS),
    "keys": lambda rows: _keys(rows.props.lookup(PROPERTY_KEYS)),
    "properties": lambda rows: rows.props.map(),
    "born_timestamp": lambda rows: _timestamps(rows.head["born_timestamp"]),
    "store_timestamp": lambda rows: _timestamps(rows.head["store_timestamp"]),
    "born_host": lambda rows: _hosts(rows.head["born_ip"], rows.head["born_port"]),
    "store_host": lambda rows: _hosts(rows.head["store_ip"], rows.head["store_port"]),
    "reconsume_times": lambda rows: _int32(rows.head["reconsume_times"]),
    "body": lambda rows: _views(pa.binary(), rows.buffer, rows.at + _BODY_AT, rows.body_len),
    "body_text": lambda rows: _text(rows.column("body")),
    "origin_topic": _origin_topics,
    "origin_msg_id": _origin_msg_ids,
    "origin_offset_msg_id": _origin_offset_msg_ids,
    "message_group": lambda rows: rows.props.lookup(PROPERTY_SHARDING_KEY),
}


def _repeat(text: str, n: int) -> pa.Array:
    """``text`` ``n`` times, as a string column (built from its buffers: no kernel call)."""
    data = text.encode()
    offsets = np.arange(0, len(data) * n + 1, len(data), dtype=np.int32) if data else np.zeros(n + 1, np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data * n)])


def _one_topic(buffer: np.ndarray, topic_at: np.ndarray, topic_len: np.ndarray) -> str | None:
    """The topic all records share (one queue's answers always do), or None."""
    if not len(topic_at):
        return ""
    length = int(topic_len[0])
    if (topic_len != length).any():
        return None
    names = buffer[topic_at[:, None] + 1 + np.arange(length)]
    if (names != names[0]).any():
        return None
    try:
        return names[0].tobytes().decode("utf-8")
    except UnicodeDecodeError:
        return None


class _Properties:
    """``MessageDecoder#string2messageProperties`` on every row at once, as a map column and per-name lookups.

    A row's text is split on \\x02, then each piece on its first \\x01; pieces without one, or with an empty
    name or value, are skipped; a name given twice keeps its first place and its last value (a Java HashMap's
    put; brokers store batch messages with UNIQ_KEY and WAIT twice).

    A lookup does not split anything: it finds the separators of every row once (two byte compares over the
    text), then for a name the \\x01 that end it at the start of a piece. The whole split is made only for the
    map, when the properties column is landed: it cost more than the rest of the decode together.

    The text is taken as bytes: what is landed is checked as UTF-8 then (a lookup's values, the map), and
    raises ``pa.ArrowInvalid`` when it is not. The separators are ASCII, so bytes that are not UTF-8 cannot
    move them (Java's decoder replaces such bytes one by one and keeps every ASCII byte)."""

    def __init__(self, properties: pa.BinaryArray) -> None:
        self.properties = properties
        self.rows = len(properties)
        offsets = _offsets(properties).astype(np.int64)
        data = properties.buffers()[2]
        low = int(offsets[0])
        self.text = np.frombuffer(data, np.uint8)[low : int(offsets[-1])] if data is not None else np.zeros(0, np.uint8)
        self.bounds = offsets - low  # row r is text[bounds[r]:bounds[r + 1]]
        self.ones = np.flatnonzero(self.text == 1)  # where names end (and \\x01 inside values)
        self.twos = np.flatnonzero(self.text == 2)  # where pieces end
        self.piece_ends = np.append(self.twos, len(self.text))

    def lookup(self, name: str) -> pa.Array:
        """Each row's value of ``name``, null where it has none: its last piece naming it with a value, as the
        map keeps."""
        encoded = name.encode()
        key = np.frombuffer(encoded, np.uint8)
        text, bounds, width = self.text, self.bounds, len(key)
        ends = self.ones[self.ones >= width]  # the \\x01 after the name
        if width:  # the name's bytes just before it: its last byte first (most \\x01 end another name), then the rest
            ends = ends[text[ends - 1] == key[-1]]
            if width > 1 and len(ends):
                # Each candidate's ``width`` bytes as one fixed-width string, compared at once. (A fixed-width string
                # drops trailing NUL bytes when compared; the last byte, just checked, is the name's and not NUL.)
                names = np.ndarray((len(text) - width + 1,), f"S{width}", text, 0, (1,))
                ends = ends[names[ends - width] == encoded]
        if not len(ends):  # no row has it (TAGS, KEYS or a message group often): all null at once
            return pa.nulls(self.rows, pa.string())
        begins = ends - width
        row = np.searchsorted(bounds, begins, side="right") - 1
        row_end = bounds[row + 1]
        value_end = np.minimum(self.piece_ends[np.searchsorted(self.twos, ends)], row_end)
        keep = (
            ((begins == bounds[row]) | (text[np.maximum(begins - 1, 0)] == 2))  # at a piece's start
            & (ends < row_end)
            & (value_end > ends + 1)
        )  # in the row, with a value
        ends, row, value_end = ends[keep], row[keep], value_end[keep]
        last = np.ones(len(row), bool)  # a row's last such piece wins
        np.not_equal(row[1:], row[:-1], out=last[:-1])
        row, ends, value_end = row[last], ends[last], value_end[last]
        found = np.zeros(self.rows, bool)
        starts = np.zeros(self.rows, np.int64)
        lengths = np.zeros(self.rows, np.int64)
        found[row] = True
        starts[row] = ends + 1
        lengths[row] = value_end - ends - 1
        return _views(pa.string(), text, starts, lengths, found)

    def map(self) -> pa.MapArray:
        properties = self.properties.cast(pa.string())
        pieces_of_rows = pc.split_pattern(properties, PROPERTY_SEPARATOR)
        rows = pc.list_parent_indices(pieces_of_rows)
        pieces = pc.list_flatten(pieces_of_rows)
        halves = pc.split_pattern(pieces, NAME_VALUE_SEPARATOR, max_splits=1)
        has_separator = pc.equal(pc.list_value_length(halves), 2)
        pairs = pc.list_flatten(halves.filter(has_separator))
        rows = rows.filter(has_separator)
        names = pairs.take(np.arange(0, len(pairs), 2))
        values = pairs.take(np.arange(1, len(pairs), 2))
        # Empty names and values, read off the arrays' offsets (no pass over the text).
        keep = (np.diff(_offsets(names)) > 0) & (np.diff(_offsets(values)) > 0)
        if not keep.all():
            names, values, rows = names.filter(keep), values.filter(keep), rows.filter(keep)
        row_of = rows.to_numpy(zero_copy_only=False).astype(np.int64)
        if len(names):
            codes = pc.dictionary_encode(names).indices.to_numpy(zero_copy_only=False).astype(np.int64)
            pair_of = row_of * (int(codes.max()) + 1) + codes  # one number per (row, name)
            order = np.argsort(pair_of, kind="stable")  # a pair's pieces stay in their order
            sorted_pairs = pair_of[order]
            first_of_pair = np.flatnonzero(np.r_[True, sorted_pairs[1:] != sorted_pairs[:-1]])
            if len(first_of_pair) != len(names):
                last_of_pair = np.r_[first_of_pair[1:], len(order)] - 1
                first, last = order[first_of_pair], order[last_of_pair]
                place = np.argsort(first)
                first, last = first[place], last[place]
                names, values, row_of = names.take(first), values.take(last), row_of[first]
        offsets = np.zeros(self.rows + 1, np.int32)
        np.cumsum(np.bincount(row_of, minlength=self.rows), out=offsets[1:], dtype=np.int32)
        return pa.MapArray.from_arrays(pa.array(offsets), names, values)


def _offsets(array: pa.Array) -> np.ndarray:
    """The value offsets of a string array (``len + 1`` of them), without a copy."""
    return np.frombuffer(array.buffers()[1], np.int32)[array.offset : array.offset + len(array) + 1]


def _keys(raw: pa.Array) -> pa.Array:
    """KEYS as the source shows it: split on spaces, empty pieces dropped, joined by one space."""
    data = raw.buffers()[2]
    if data is None or not (np.frombuffer(data, np.uint8) == 32).any():
        return raw  # no space at all (one key each): nothing to squeeze
    if not (
        pc.any(pc.match_substring(raw, "  ")).as_py()
        or pc.any(pc.starts_with(raw, " ")).as_py()
        or pc.any(pc.ends_with(raw, " ")).as_py()
    ):
        return raw  # the usual case: nothing to squeeze (an empty value never gets here: it is not a property)
    joined = pc.utf8_trim(pc.replace_substring_regex(raw, " +", " "), " ")
    return pc.if_else(pc.equal(joined, ""), pa.scalar(None, pa.string()), joined)


def _offset_msg_ids(raw: np.ndarray) -> pa.Array:
    """``MessageDecoder#createMessageId`` for IPv4: hex of store ip, port and commit-log offset (of the heads'
    bytes, ``raw``)."""
    ids = np.concatenate([raw[:, 64:72], raw[:, 28:36]], axis=1)
    offsets = np.arange(0, 32 * len(raw) + 1, 32, dtype=np.int32)
    return pa.Array.from_buffers(
        pa.string(), len(raw), [None, pa.py_buffer(offsets), pa.py_buffer(_HEX[ids].tobytes())]
    )


def _hosts(ips: np.ndarray, ports: np.ndarray) -> pa.Array:
    """``ip:port`` of each record, formatted once per distinct address."""
    distinct, which = np.unique((ips.astype(np.uint64) << 32) | ports.astype(np.uint64), return_inverse=True)
    texts = [_format_host(int(value).to_bytes(8, "big")) for value in distinct]
    return pa.array(texts, pa.string()).take(which.astype(np.int32))


def _text(body: pa.Array) -> pa.Array:
    try:
        return body.cast(pa.string())
    except pa.ArrowInvalid:  # not UTF-8: replaced character by character, as bytes.decode(errors="replace")
        return pa.array(
            [None if b is None else b.decode("utf-8", errors="replace") for b in body.to_pylist()], pa.string()
        )


def _matched(tags: pa.Array, subscription: Subscription) -> pa.Array | None:
    """The client-side tag re-check (``Subscription.matches``) per row; None when nothing is filtered."""
    if not subscription.tags_set:
        return None
    return pc.fill_null(pc.is_in(tags, value_set=pa.array(sorted(subscription.tags_set), pa.string())), False)
