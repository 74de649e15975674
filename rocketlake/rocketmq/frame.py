"""RemotingCommand and its frame codec (sans I/O: bytes in, commands out; no socket here).

Frame layout (remoting/.../protocol/RemotingCommand.java#encode/#decode; all integers big-endian)::

    +--------------+----------------------------------+-----------------+------------------+
    | total_length | serialize_type<<24 | header_len  | header          | body             |
    | int32        | int32                            | header_len      | total_length - 4 |
    |              |                                  | bytes           |   - header_len   |
    +--------------+----------------------------------+-----------------+------------------+
    total_length counts everything after itself (4 + header_len + body_len).

Header, serialize_type 0 = JSON (RemotingSerializable, fastjson: sorted keys, nulls omitted)::

    {"code":105,"extFields":{"topic":"T1"},"flag":0,"language":"PYTHON","opaque":1,
     "serializeTypeCurrentRPC":"JSON","version":479}

Header, serialize_type 1 = ROCKETMQ binary (RocketMQSerializable.java; 21-byte fixed part)::

    int16 code | uint8 language | int16 version | int32 opaque | int32 flag
    | int32 remark_len | remark (UTF-8) | int32 ext_len | ext
    ext = repeated { int16 key_len | key (UTF-8) | int32 val_len | val (UTF-8) }

``flag`` bit 0 = response, bit 1 = oneway. extFields values are always strings on the wire
(Java ``value.toString()``: booleans "true"/"false"). We send JSON; we decode both, because the
broker answers in its own configured type, not in the request's (reference section 1.2).

Decoding is bounded: the length prefix is checked against ``max_frame_size`` (Netty's
``LengthFieldBasedFrameDecoder`` limit, 16 MiB by default) before anything is buffered or
allocated for it, every inner length is checked against the bytes that enclose it, and every
loop advances by at least one field. Any violation raises :class:`ProtocolError` naming the
field and its byte offset from the start of the frame.
"""

from __future__ import annotations

import json
import operator
import struct
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .codes import CURRENT_VERSION, MAX_FRAME_SIZE, LanguageCode, ResponseCode, SerializeType
from .errors import InvalidArgument, ProtocolError

__all__ = [
    "FLAG_ONEWAY",
    "FLAG_RESPONSE",
    "FrameDecoder",
    "RemotingCommand",
    "RequestTemplate",
    "decode",
    "encode",
    "ext_fields",
]

#: ``1 << RemotingCommand.RPC_TYPE``: set on responses.
FLAG_RESPONSE = 0x1
#: ``1 << RemotingCommand.RPC_ONEWAY``: the sender expects no response.
FLAG_ONEWAY = 0x2

_INT = struct.Struct(">i")
_UINT = struct.Struct(">I")
_SHORT = struct.Struct(">h")
_PREFIX = struct.Struct(">iI")  # total_length, serialize_type<<24 | header_len
# code, language, version, opaque, flag, remark_len -- the fixed part minus ext_len (17 of 21 bytes)
_BIN_FIXED = struct.Struct(">hBhiii")
_BIN_FIXED_LEN = _BIN_FIXED.size + _INT.size  # 21

_HEADER_LEN_MASK = 0xFFFFFF
#: The largest arena of a decoder (see FrameDecoder): room for several pull answers of a broker whose caps are raised
#: (1 MiB), so that most flushes of a queue's answers find them side by side in one arena.
ARENA_SIZE = 16 << 20
#: Full arenas a decoder keeps for reuse (see FrameDecoder._free_arena).
_RETIRED_KEPT = 2
#: The least room a read is given (a new arena starts below it).
MIN_READ = 64 << 10
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_LANGUAGE_BY_BYTE = {member.value: member.name for member in LanguageCode}


@dataclass(slots=True)
class RemotingCommand:
    """One request or response of the remoting protocol.

    ``ext_fields`` is the "custom header" (request/response header fields by their Java
    names, values as strings); ``body`` the raw payload (e.g. the messages of a pull).
    ``serialize_type`` is the header encoding the command was decoded from, and the one
    :func:`encode` uses -- JSON unless changed.
    """

    code: int
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    language: str = LanguageCode.PYTHON.name
    version: int = CURRENT_VERSION
    serialize_type: SerializeType = SerializeType.JSON
    #: The body as a view of the bytes the socket wrote (``FrameDecoder(views=True)``), where ``body`` is left empty:
    #: a pull answer's records are read where they landed, never copied (see :class:`FrameDecoder`).
    body_view: memoryview | None = field(default=None, repr=False, compare=False)
    #: Where ``body_view`` starts in the decoder's arena (``body_view.obj``), known when the frame was cut out of it.
    body_at: int | None = field(default=None, repr=False, compare=False)

    def take_body_view(self) -> None:
        """Turn a ``body_view`` into ``body`` (a copy): for an answer read as bytes, not in place."""
        if self.body_view is not None:
            self.body, self.body_view = bytes(self.body_view), None

    @classmethod
    def request(
        cls,
        code: int,
        fields: Mapping[str, Any] | None = None,
        body: bytes = b"",
        *,
        oneway: bool = False,
    ) -> RemotingCommand:
        """A request; ``fields`` values are converted with :func:`ext_fields`."""
        return cls(
            code=int(code),
            ext_fields=ext_fields(fields) if fields else {},
            body=body,
            flag=FLAG_ONEWAY if oneway else 0,
        )

    def make_response(self, code: int, remark: str | None = None) -> RemotingCommand:
        """The response to this request: same opaque, response bit set (``writeResponse``)."""
        return RemotingCommand(code=int(code), opaque=self.opaque, flag=FLAG_RESPONSE, remark=remark)

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    @property
    def is_success(self) -> bool:
        return self.code == ResponseCode.SUCCESS


def ext_fields(values: Mapping[str, Any]) -> dict[str, str]:
    """Convert header values the way ``RemotingCommand#makeCustomHeaderToNet`` does.

    ``None`` is omitted, booleans become ``"true"``/``"false"``, integers decimal, strings
    pass through. Anything else is refused rather than guessed (floats, bytes, ...).
    """
    out: dict[str, str] = {}
    for key, value in values.items():
        if value is None:
            continue
        if isinstance(value, bool):
            out[key] = "true" if value else "false"
        elif isinstance(value, int):
            out[key] = str(int(value))  # int() so IntEnum members give digits, not names
        elif isinstance(value, str):
            out[key] = value
        else:
            raise InvalidArgument(
                f"extFields[{key!r}] has unsupported type {type(value).__name__}: use str, int, bool or None"
            )
    return out


# --------------------------------------------------------------------------- encode


def encode(cmd: RemotingCommand, *, max_frame_size: int = MAX_FRAME_SIZE) -> bytes:
    """Serialize ``cmd`` into one frame, header in ``cmd.serialize_type``."""
    for key, value in cmd.ext_fields.items():
        if type(value) is not str or type(key) is not str:
            raise InvalidArgument(
                f"extFields[{key!r}] = {value!r}: keys and values must be str on the wire "
                "(build them with frame.ext_fields())"
            )
    if cmd.serialize_type == SerializeType.JSON:
        header = _encode_json_header(cmd)
    elif cmd.serialize_type == SerializeType.ROCKETMQ:
        header = _encode_rocketmq_header(cmd)
    else:
        raise InvalidArgument(f"unknown serialize type {cmd.serialize_type!r}")
    header_len = len(header)
    if header_len > _HEADER_LEN_MASK:
        raise InvalidArgument(f"header of {header_len} bytes does not fit the 24-bit header length")
    total = 4 + header_len + len(cmd.body)
    if total + 4 > max_frame_size:
        raise InvalidArgument(
            f"frame of {total + 4} bytes exceeds the maximum frame size {max_frame_size} "
            "(com.rocketmq.remoting.frameMaxLength); the broker would close the connection"
        )
    prefix = _PREFIX.pack(total, (int(cmd.serialize_type) << 24) | header_len)
    return b"".join((prefix, header, cmd.body))


def _encode_json_header(cmd: RemotingCommand) -> bytes:
    header: dict[str, Any] = {
        "code": cmd.code,
        "flag": cmd.flag,
        "language": cmd.language,
        "opaque": cmd.opaque,
        "serializeTypeCurrentRPC": "JSON",
        "version": cmd.version,
    }
    if cmd.ext_fields:
        header["extFields"] = cmd.ext_fields
    if cmd.remark is not None:
        header["remark"] = cmd.remark
    # fastjson writes keys sorted, compact, UTF-8 as is (reference 1.3).
    return json.dumps(header, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _encode_rocketmq_header(cmd: RemotingCommand) -> bytes:
    # Java casts code and version to short silently; we refuse instead of corrupting them.
    for name, number in (("code", cmd.code), ("version", cmd.version)):
        if not -32768 <= number <= 32767:
            raise InvalidArgument(f"{name} {number} does not fit the ROCKETMQ header's int16")
    try:
        language = LanguageCode[cmd.language]
    except KeyError:
        language = LanguageCode.OTHER
    remark = cmd.remark.encode() if cmd.remark else b""
    parts: list[bytes] = []
    for key, value in cmd.ext_fields.items():
        key_bytes, value_bytes = key.encode(), value.encode()
        if len(key_bytes) > 32767:
            raise InvalidArgument(f"extFields key of {len(key_bytes)} bytes does not fit an int16 length")
        parts += (_SHORT.pack(len(key_bytes)), key_bytes, _INT.pack(len(value_bytes)), value_bytes)
    ext = b"".join(parts)
    fixed = _BIN_FIXED.pack(cmd.code, language, cmd.version, cmd.opaque, cmd.flag, len(remark))
    return b"".join((fixed, remark, _INT.pack(len(ext)), ext))


class RequestTemplate:
    """A JSON request encoded once with some extFields left open, each send filling them in with its opaque.

    A stream of pulls of one queue differs only in offsets and sizes; encoding each from scratch (a header dict,
    a copy for the opaque, a JSON encoder) cost a stock broker's 31,250 pulls per million messages about a third
    of a second. :meth:`encode` gives the bytes :func:`encode` gives for the same request, byte for byte. Open
    values are decimal numbers (nothing to escape in JSON)."""

    __slots__ = ("_format", "_pick", "code")

    _OPAQUE_MARK = 1987654321  # written where the opaque goes, then found and cut out

    def __init__(self, command: RemotingCommand, open_fields: tuple[str, ...]) -> None:
        if command.serialize_type != SerializeType.JSON or command.body or command.flag or command.remark is not None:
            raise InvalidArgument("a request template is a JSON request without body, flag or remark")
        marks = {name: f"@@rocketlake-open-{i}@@" for i, name in enumerate(open_fields)}
        if set(marks) - set(command.ext_fields):
            raise InvalidArgument(f"open fields {sorted(set(marks) - set(command.ext_fields))} are not in the request")
        marked = RemotingCommand(
            code=command.code,
            ext_fields={**command.ext_fields, **marks},
            opaque=self._OPAQUE_MARK,
            language=command.language,
            version=command.version,
        )
        text = _encode_json_header(marked).decode()
        where: list[tuple[int, int, int]] = []  # (position, length, slot): slot -1 is the opaque
        opaque = f'"opaque":{self._OPAQUE_MARK}'
        for slot, token, skip in [(-1, opaque, len('"opaque":')), *((i, m, 0) for i, m in enumerate(marks.values()))]:
            if text.count(token) != 1:
                raise InvalidArgument(f"request template: {token!r} is not found exactly once in the header")
            where.append((text.index(token) + skip, len(token) - skip, slot))
        where.sort()
        parts, pos = [], 0
        for start, length, _ in where:
            parts.append(text[pos:start].replace("%", "%%"))  # a retry topic's name holds '%'
            pos = start + length
        parts.append(text[pos:].replace("%", "%%"))
        self.code = command.code
        # One %-format of the whole header, its holes in text order; ``_pick`` puts (opaque, *values) in that order.
        self._format = "%s".join(parts)
        self._pick = operator.itemgetter(*(slot + 1 for _, _, slot in where))

    def encode(self, opaque: int, values: tuple[str, ...]) -> bytes:
        """The frame of the request with ``opaque`` and the open fields' ``values`` (in ``open_fields`` order)."""
        header = (self._format % self._pick((str(opaque), *values))).encode()
        return _PREFIX.pack(4 + len(header), len(header)) + header  # serialize type JSON: 0 in the top byte


# --------------------------------------------------------------------------- decode


def decode(frame: bytes | bytearray | memoryview, *, max_frame_size: int = MAX_FRAME_SIZE) -> RemotingCommand:
    """Decode exactly one complete frame (length prefix included)."""
    with memoryview(frame) as view:
        mv = view.cast("B") if view.format != "B" or view.ndim != 1 else view
        size = len(mv)
        if size < 4:
            raise ProtocolError(f"frame truncated: {size} bytes, the length prefix alone needs 4", offset=size)
        (total,) = _INT.unpack_from(mv, 0)
        _check_total_length(total, max_frame_size)
        if size < 4 + total:
            raise ProtocolError(
                f"frame truncated: the length prefix announces {total} bytes but only {size - 4} follow",
                offset=size,
            )
        if size > 4 + total:
            raise ProtocolError(
                f"{size - 4 - total} unexpected bytes after a frame of {total + 4} bytes", offset=4 + total
            )
        return _decode_frame(mv)


def _check_total_length(total: int, max_frame_size: int) -> None:
    if total < 4:
        raise ProtocolError(f"bad frame length {total}: must be at least 4 (the header-length word)", offset=0)
    if total + 4 > max_frame_size:
        raise ProtocolError(
            f"frame of {total + 4} bytes exceeds the maximum frame size {max_frame_size} "
            "(com.rocketmq.remoting.frameMaxLength)",
            offset=0,
        )


def _decode_frame(mv: memoryview, view_body: bool = False, at: int = 0) -> RemotingCommand:
    """Decode a frame whose total length was already validated (``len(mv) == 4 + total``); with ``view_body``, the
    body is left where it is, as ``body_view`` (``at``: where the frame lies in its arena)."""
    end = len(mv)
    (header_field,) = _UINT.unpack_from(mv, 4)
    serialize_type = header_field >> 24
    header_len = header_field & _HEADER_LEN_MASK
    header_start = 8
    header_end = header_start + header_len
    if header_end > end:
        # RemotingCommand#decode: "decode error, bad header length: N"
        raise ProtocolError(
            f"bad header length {header_len}: only {end - header_start} bytes follow the header-length word",
            offset=4,
        )
    if serialize_type == SerializeType.JSON:
        cmd = _decode_json_header(mv, header_start, header_end)
    elif serialize_type == SerializeType.ROCKETMQ:
        cmd = _decode_rocketmq_header(mv, header_start, header_end)
    else:
        raise ProtocolError(f"unknown serialize type {serialize_type} (0 = JSON, 1 = ROCKETMQ)", offset=4)
    if header_end < end:
        if view_body:
            cmd.body_view = mv[header_end:end]
            cmd.body_at = at + header_end
        else:
            cmd.body = bytes(mv[header_end:end])
    return cmd


def _utf8(mv: memoryview, start: int, end: int, what: str) -> str:
    try:
        return str(mv[start:end], "utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"{what} is not valid UTF-8: {exc.reason}", offset=start + exc.start) from None


def _int32(header: dict[str, Any], key: str, default: int | None, start: int) -> int:
    value = header.get(key, default)
    if value is None:
        raise ProtocolError(f'JSON header has no "{key}"', offset=start)
    if type(value) is not int or not _INT32_MIN <= value <= _INT32_MAX:
        raise ProtocolError(f'JSON header "{key}" is {value!r}, not an int32', offset=start)
    return value


def _decode_json_header(mv: memoryview, start: int, end: int) -> RemotingCommand:
    text = _utf8(mv, start, end, "JSON header")
    try:
        header = json.loads(text)
    except json.JSONDecodeError as exc:
        offset = start + len(text[: exc.pos].encode())
        raise ProtocolError(f"JSON header is not valid JSON: {exc.msg}", offset=offset) from None
    except (ValueError, RecursionError) as exc:  # e.g. an absurdly long integer or deep nesting
        raise ProtocolError(f"JSON header cannot be parsed: {exc}", offset=start) from None
    if not isinstance(header, dict):
        raise ProtocolError(f"JSON header is a {type(header).__name__}, not an object", offset=start)
    remark = header.get("remark")
    if remark is not None and not isinstance(remark, str):
        raise ProtocolError(f'JSON header "remark" is {type(remark).__name__}, not a string', offset=start)
    language = header.get("language", LanguageCode.JAVA.name)
    if not isinstance(language, str):
        raise ProtocolError(f'JSON header "language" is {language!r}, not a string', offset=start)
    return RemotingCommand(
        code=_int32(header, "code", None, start),
        ext_fields=_json_ext_fields(header.get("extFields"), start),
        opaque=_int32(header, "opaque", None, start),
        flag=_int32(header, "flag", 0, start),
        remark=remark,
        language=language,
        version=_int32(header, "version", 0, start),
        serialize_type=SerializeType.JSON,
    )


def _json_ext_fields(raw: Any, start: int) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ProtocolError(f'JSON header "extFields" is a {type(raw).__name__}, not an object', offset=start)
    if all(type(value) is str for value in raw.values()):  # what Java writes: HashMap<String, String>
        return raw
    # Tolerate scalar values the way toString() would print them.
    out: dict[str, str] = {}
    for key, value in raw.items():
        if isinstance(value, str):
            out[key] = value
        elif value is None:
            continue
        elif isinstance(value, bool):
            out[key] = "true" if value else "false"
        elif isinstance(value, int):
            out[key] = str(value)
        else:
            raise ProtocolError(
                f'JSON header extFields["{key}"] is a {type(value).__name__}, not a string', offset=start
            )
    return out


def _decode_rocketmq_header(mv: memoryview, start: int, end: int) -> RemotingCommand:
    if end - start < _BIN_FIXED_LEN:
        raise ProtocolError(
            f"ROCKETMQ header of {end - start} bytes is shorter than its {_BIN_FIXED_LEN}-byte fixed part",
            offset=start,
        )
    code, language, version, opaque, flag, remark_len = _BIN_FIXED.unpack_from(mv, start)
    pos = start + _BIN_FIXED.size
    # The remark must leave room for the 4-byte ext_len that follows it.
    if remark_len < 0 or remark_len > end - pos - 4:
        raise ProtocolError(
            f"ROCKETMQ header remark length {remark_len} does not fit the {end - pos - 4} bytes available",
            offset=pos - 4,
        )
    remark = _utf8(mv, pos, pos + remark_len, "ROCKETMQ header remark") if remark_len else None
    pos += remark_len
    (ext_len,) = _INT.unpack_from(mv, pos)
    pos += 4
    if ext_len < 0 or ext_len > end - pos:
        raise ProtocolError(
            f"ROCKETMQ header extFields length {ext_len} does not fit the {end - pos} bytes available",
            offset=pos - 4,
        )
    # Bytes after ext_end are ignored, as RocketMQSerializable#rocketMQProtocolDecode does.
    return RemotingCommand(
        code=code,
        ext_fields=_decode_ext_map(mv, pos, pos + ext_len),
        opaque=opaque,
        flag=flag,
        remark=remark,
        language=_LANGUAGE_BY_BYTE.get(language, LanguageCode.OTHER.name),
        version=version,
        serialize_type=SerializeType.ROCKETMQ,
    )


def _decode_ext_map(mv: memoryview, pos: int, end: int) -> dict[str, str]:
    out: dict[str, str] = {}
    while pos < end:  # every iteration consumes at least 6 bytes, or raises
        if end - pos < 6:
            raise ProtocolError(f"extFields entry truncated: {end - pos} bytes left, at least 6 needed", offset=pos)
        (key_len,) = _SHORT.unpack_from(mv, pos)
        pos += 2
        if key_len < 0 or key_len > end - pos - 4:
            raise ProtocolError(
                f"extFields key length {key_len} does not fit the {end - pos - 4} bytes available", offset=pos - 2
            )
        key = _utf8(mv, pos, pos + key_len, "extFields key")
        pos += key_len
        (value_len,) = _INT.unpack_from(mv, pos)
        pos += 4
        if value_len < 0 or value_len > end - pos:
            raise ProtocolError(
                f"extFields value length {value_len} for key {key!r} does not fit the {end - pos} bytes available",
                offset=pos - 4,
            )
        value = _utf8(mv, pos, pos + value_len, f"extFields value of {key!r}")
        pos += value_len
        # A zero-length key or value decodes as Java null (reference 1.4): the entry is absent.
        if key and value:
            out[key] = value
    return out


# --------------------------------------------------------------------------- streaming


class FrameDecoder:
    """Incremental frame splitter for a byte stream (the connection's reader feeds it).

    Bytes land in an arena: :meth:`space` is where the socket writes next and :meth:`received` takes what it wrote
    (:meth:`feed` copies bytes in, for a stream that comes some other way, as TLS's). Complete frames are decoded
    where they lie. With ``views``, a body stays there too (``RemotingCommand.body_view``): one copy, the kernel's,
    from the socket to where the records are read, instead of three (into a buffer, out to a body, into one buffer
    per flush). An arena is never written twice: when a frame does not fit what is left, the next arena starts
    with the part of it already received, and the views of the old one keep it alive as long as they are used.
    Consecutive answers thus lie side by side, so a flush of one queue's answers joins them without a copy
    (``columnar.RawRecords.concat``).

    A length prefix is validated the moment its 4 bytes arrive, so a hostile or corrupt length can never make an
    arena larger than ``max_frame_size``. After a :class:`ProtocolError` the stream cannot be resynchronised: the
    decoder stays broken and re-raises, and the connection must be dropped.
    """

    __slots__ = (
        "_arena",
        "_arena_size",
        "_end",
        "_error",
        "_max_frame_size",
        "_next_size",
        "_retired",
        "_start",
        "_view",
        "_views",
    )

    def __init__(
        self, max_frame_size: int = MAX_FRAME_SIZE, *, views: bool = False, arena_size: int = ARENA_SIZE
    ) -> None:
        self._max_frame_size = max_frame_size
        self._views = views
        self._arena_size = arena_size
        self._next_size = 2 * MIN_READ  # the first arena: 4 x MIN_READ
        self._error: ProtocolError | None = None
        self._arena = bytearray(0)
        self._view = memoryview(self._arena)
        self._retired: list[bytearray] = []  # arenas written full, reused once no view of them is left
        self._start = self._end = 0  # the bytes received and not yet returned as frames

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames."""
        return self._end - self._start

    def space(self) -> memoryview:
        """Where the next bytes go (at least ``MIN_READ`` of room): write into it, then call :meth:`received`."""
        if len(self._arena) - self._end < MIN_READ:
            self._move_to_new_arena(0)
        return self._view[self._end :]

    def received(self, count: int) -> list[RemotingCommand]:
        """Take ``count`` bytes written at the start of :meth:`space`; return every frame they complete."""
        if self._error is not None:
            raise ProtocolError(f"the stream already failed to decode: {self._error}") from self._error
        self._end += count
        frames: list[RemotingCommand] = []
        mv, pos, end = self._view, self._start, self._end
        try:
            while end - pos >= 4:
                (total,) = _INT.unpack_from(mv, pos)
                _check_total_length(total, self._max_frame_size)
                if pos + 4 + total > end:
                    self._start = pos
                    if pos + 4 + total > len(self._arena):  # the rest of this frame goes to a new arena
                        self._move_to_new_arena(4 + total)
                    return frames
                frames.append(_decode_frame(mv[pos : pos + 4 + total], self._views, pos))
                pos += 4 + total
        except ProtocolError as exc:
            self._error = exc
            raise
        self._start = pos
        return frames

    def feed(self, data: bytes | bytearray | memoryview) -> list[RemotingCommand]:
        """Copy ``data`` in and return every frame it completes (possibly none)."""
        if self._error is not None:
            raise ProtocolError(f"the stream already failed to decode: {self._error}") from self._error
        frames: list[RemotingCommand] = []
        with memoryview(data) as view:
            data = view.cast("B") if view.format != "B" or view.ndim != 1 else view
            while len(data):
                space = self.space()
                count = min(len(space), len(data))
                space[:count] = data[:count]
                frames += self.received(count)
                data = data[count:]
        return frames

    def _move_to_new_arena(self, frame_size: int) -> None:
        """Start a new arena, with the bytes of the frame under way (if any) at its start."""
        pending = self._view[self._start : self._end]
        # Arenas double up to arena_size: a connection that carries little (a name server's) stays small.
        self._next_size = min(self._arena_size, 2 * self._next_size)
        arena = self._free_arena(max(self._next_size, frame_size, len(pending) + MIN_READ))
        arena[: len(pending)] = pending
        if len(self._arena):
            self._retired = [*self._retired[-(_RETIRED_KEPT - 1) :], self._arena]
        self._arena, self._view = arena, memoryview(arena)
        self._start, self._end = 0, len(pending)

    def _free_arena(self, size: int) -> bytearray:
        """A retired arena nothing reads any more (no view of it is left), or a new one. Reusing them spares the
        kernel a page fault per 4 KiB received: fresh memory, at gigabytes a minute, cost more than the copies."""
        for index in range(len(self._retired)):  # not enumerate(): its pair would hold one more reference
            arena = self._retired[index]
            # Referenced only by the list, the name ``arena`` and the call's argument: no view of it is alive.
            if len(arena) >= size and sys.getrefcount(arena) <= 3:
                return self._retired.pop(index)
        return bytearray(size)
