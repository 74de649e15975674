"""RemotingCommand frame codec: byte-exact encoding, both header types, bounded decoding.

Expected bytes are built by hand with ``struct.pack``, one commented field per line, from
the layout in the reference (section 1.2-1.4) -- never with the codec under test.
"""

from __future__ import annotations

import contextlib
import json
import random
import struct
import threading
from enum import IntEnum

import numpy as np
import pytest

from rocketlake.rocketmq.codes import RequestCode, ResponseCode, SerializeType
from rocketlake.rocketmq.errors import InvalidArgument, ProtocolError
from rocketlake.rocketmq.frame import FrameDecoder, RemotingCommand, decode, encode, ext_fields

try:  # optional; the seeded loop below always runs
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover
    given = None

# The reference's worked example (section 11.1): GET_ROUTEINFO_BY_TOPIC, topic T1, opaque 1.
ROUTE_JSON_HEADER = (
    b'{"code":105,"extFields":{"topic":"T1"},"flag":0,"language":"PYTHON","opaque":1,'
    b'"serializeTypeCurrentRPC":"JSON","version":479}'
)


def route_request(serialize_type: SerializeType = SerializeType.JSON) -> RemotingCommand:
    return RemotingCommand(
        code=RequestCode.GET_ROUTEINFO_BY_TOPIC, ext_fields={"topic": "T1"}, opaque=1, serialize_type=serialize_type
    )


def rocketmq_header(code: int, opaque: int, flag: int, remark: bytes, ext: bytes, language: int = 3) -> bytes:
    return (
        struct.pack(">h", code)  # code
        + struct.pack(">B", language)  # language (3 = PYTHON)
        + struct.pack(">h", 479)  # version
        + struct.pack(">i", opaque)  # opaque
        + struct.pack(">i", flag)  # flag
        + struct.pack(">i", len(remark))  # remark length
        + remark  # remark, UTF-8
        + struct.pack(">i", len(ext))  # extFields length
        + ext  # extFields entries
    )


def ext_entry(key: bytes, value: bytes) -> bytes:
    return (
        struct.pack(">h", len(key))  # key length (int16)
        + key  # key, UTF-8
        + struct.pack(">i", len(value))  # value length (int32)
        + value  # value, UTF-8
    )


def frame(header: bytes, body: bytes = b"", serialize_type: int = 0) -> bytes:
    return (
        struct.pack(">i", 4 + len(header) + len(body))  # total length, not counting itself
        + struct.pack(">I", serialize_type << 24 | len(header))  # serialize type | header length
        + header
        + body
    )


# --------------------------------------------------------------------------- encoding


def test_json_request_matches_the_reference_worked_example() -> None:
    expected = (
        struct.pack(">i", 130)  # total length = 4 + 126-byte header + no body
        + struct.pack(">I", 0 << 24 | 126)  # JSON(0) << 24 | header length 126
        + ROUTE_JSON_HEADER
    )
    assert len(ROUTE_JSON_HEADER) == 126
    assert encode(route_request()) == expected
    assert expected[:8].hex() == "000000820000007e"  # as printed in the reference


def test_rocketmq_request_matches_the_reference_worked_example() -> None:
    header = rocketmq_header(code=105, opaque=1, flag=0, remark=b"", ext=ext_entry(b"topic", b"T1"))
    expected = frame(header, serialize_type=1)
    assert len(header) == 34
    assert encode(route_request(SerializeType.ROCKETMQ)) == expected
    assert expected.hex() == ("000000260100002200690301df0000000100000000000000000000000d0005746f706963000000025431")


def test_json_header_omits_empty_ext_fields_and_null_remark_and_keeps_utf8() -> None:
    cmd = RemotingCommand(code=0, opaque=9, flag=1, remark="sü", body=b"\x00\x01")
    raw = encode(cmd)
    header_len = struct.unpack_from(">I", raw, 4)[0] & 0xFFFFFF
    header = json.loads(raw[8 : 8 + header_len])
    assert "extFields" not in header
    assert header["remark"] == "sü"
    assert "sü".encode() in raw  # raw UTF-8 like fastjson, not \\u escapes
    assert raw[8 + header_len :] == b"\x00\x01"
    no_remark = json.loads(encode(RemotingCommand(code=0))[8:])
    assert "remark" not in no_remark


def test_encode_refuses_non_string_ext_values() -> None:
    with pytest.raises(InvalidArgument, match="queueId"):
        encode(RemotingCommand(code=11, ext_fields={"queueId": 3}))  # type: ignore[dict-item]


def test_encode_refuses_frames_over_the_maximum() -> None:
    with pytest.raises(InvalidArgument, match="maximum frame size 64"):
        encode(RemotingCommand(code=10, body=b"x" * 100), max_frame_size=64)


def test_rocketmq_header_refuses_codes_that_do_not_fit_int16() -> None:
    with pytest.raises(InvalidArgument, match="int16"):
        encode(RemotingCommand(code=40000, serialize_type=SerializeType.ROCKETMQ))


def test_ext_fields_converts_like_java_to_string() -> None:
    class Level(IntEnum):
        HIGH = 3

    assert ext_fields({"a": True, "b": False, "c": 42, "d": -1, "e": "x", "f": None, "g": Level.HIGH}) == {
        "a": "true",
        "b": "false",
        "c": "42",
        "d": "-1",
        "e": "x",
        "g": "3",
    }
    with pytest.raises(InvalidArgument, match="float"):
        ext_fields({"x": 1.5})


def test_request_and_response_flags() -> None:
    request = RemotingCommand.request(RequestCode.PULL_MESSAGE, {"queueId": 0}, oneway=True)
    assert request.flag == 0b10 and request.is_oneway and not request.is_response
    request.opaque = 77
    response = request.make_response(ResponseCode.PULL_NOT_FOUND, "no new message")
    assert (response.opaque, response.flag, response.code) == (77, 0b01, 19)
    assert response.is_response and not response.is_oneway and not response.is_success


# --------------------------------------------------------------------------- decoding


@pytest.mark.parametrize("serialize_type", [SerializeType.JSON, SerializeType.ROCKETMQ])
def test_round_trip_both_header_types(serialize_type: SerializeType) -> None:
    cmd = RemotingCommand(
        code=ResponseCode.PULL_OFFSET_MOVED,
        ext_fields={"nextBeginOffset": "12", "minOffset": "0", "中": "文"},
        body=bytes(range(256)) * 3,
        opaque=-5,
        flag=1,
        remark="OFFSET_TOO_SMALL",
        language="JAVA",
        version=409,
        serialize_type=serialize_type,
    )
    assert decode(encode(cmd)) == cmd


def test_decode_rocketmq_header_from_hand_built_bytes() -> None:
    ext = ext_entry(b"nextBeginOffset", b"8") + ext_entry(b"empty", b"") + ext_entry(b"", b"orphan")
    raw = frame(rocketmq_header(code=19, opaque=7, flag=1, remark=b"", ext=ext, language=0), b"BODY", 1)
    cmd = decode(raw)
    assert cmd.code == 19 and cmd.opaque == 7 and cmd.is_response
    assert cmd.language == "JAVA" and cmd.version == 479
    assert cmd.remark is None  # remark_len 0 decodes as null
    assert cmd.ext_fields == {"nextBeginOffset": "8"}  # empty key/value are Java nulls
    assert cmd.body == b"BODY"
    assert cmd.serialize_type == SerializeType.ROCKETMQ


def test_decode_json_header_written_by_the_broker() -> None:
    header = (
        b'{"code":0,"extFields":{"suggestWhichBrokerId":"0","nextBeginOffset":"32"},"flag":1,'
        b'"language":"JAVA","opaque":12,"remark":"FOUND","serializeTypeCurrentRPC":"JSON","version":479,'
        b'"someFutureField":[1,2]}'
    )
    cmd = decode(frame(header, b"\xda\xa3\x20\xa7"))
    assert (cmd.code, cmd.opaque, cmd.flag, cmd.remark, cmd.language) == (0, 12, 1, "FOUND", "JAVA")
    assert cmd.ext_fields == {"suggestWhichBrokerId": "0", "nextBeginOffset": "32"}
    assert cmd.body == b"\xda\xa3\x20\xa7"


def test_json_ext_field_scalars_are_stringified_like_java() -> None:
    header = b'{"code":0,"opaque":1,"extFields":{"a":true,"b":7,"c":null}}'
    assert decode(frame(header)).ext_fields == {"a": "true", "b": "7"}


BAD_FRAMES = [
    # (description, raw frame, expected message fragment, expected byte offset)
    ("short prefix", b"\x00\x00", "truncated", 2),
    ("length below 4", struct.pack(">i", 3) + b"abc", "bad frame length 3", 0),
    ("negative length", struct.pack(">i", -8) + b"\x00" * 8, "bad frame length -8", 0),
    ("over the maximum", struct.pack(">i", 16_777_213), "exceeds the maximum frame size 16777216", 0),
    ("truncated body", frame(b'{"code":0,"opaque":1}', b"body")[:-1], "only 28 follow", 32),
    ("trailing bytes", frame(b'{"code":0,"opaque":1}') + b"\x00", "1 unexpected bytes", 29),
    (
        "header longer than frame",
        struct.pack(">i", 8) + struct.pack(">I", 5) + b"{}{}",  # header length 5, only 4 bytes follow
        "bad header length 5",
        4,
    ),
    ("unknown serialize type", frame(b"{}", serialize_type=2), "unknown serialize type 2", 4),
    ("invalid JSON", frame(b'{"code":0,'), "not valid JSON", 18),
    ("JSON array", frame(b"[1,2]"), "not an object", 8),
    ("JSON without code", frame(b'{"opaque":1}'), 'no "code"', 8),
    ("JSON code not int", frame(b'{"code":"0","opaque":1}'), "\"code\" is '0'", 8),
    ("JSON opaque over int32", frame(b'{"code":0,"opaque":2147483648}'), "not an int32", 8),
    ("JSON invalid UTF-8", frame(b'{"code":0,"opaque":1,"remark":"\xff"}'), "not valid UTF-8", 39),
    ("JSON deep nesting", frame(b"[" * 100_000), "cannot be parsed", 8),
    (
        "binary header shorter than fixed part",
        frame(b"\x00" * 20, serialize_type=1),
        "shorter than its 21-byte fixed part",
        8,
    ),
    (
        "binary remark longer than header",
        frame(rocketmq_header(0, 1, 1, b"", b"")[:13] + struct.pack(">i", 50) + b"\x00" * 4, serialize_type=1),
        "remark length 50",
        21,
    ),
    (
        "binary negative ext length",
        frame(rocketmq_header(0, 1, 1, b"", b"")[:17] + struct.pack(">i", -1), serialize_type=1),
        "extFields length -1",
        25,
    ),
    (
        "binary negative key length",
        frame(rocketmq_header(0, 1, 1, b"", struct.pack(">h", -2) + b"\x00" * 6), serialize_type=1),
        "key length -2",
        29,
    ),
    (
        "binary value longer than ext",
        frame(
            rocketmq_header(
                0,
                1,
                1,
                b"",
                struct.pack(">h", 1)
                + b"k"  # key length 1, key "k"
                + struct.pack(">i", 9)
                + b"v",  # value length 9, but only 1 byte is left
            ),
            serialize_type=1,
        ),
        "value length 9 for key 'k'",
        32,
    ),
    (
        "binary entry truncated",
        frame(rocketmq_header(0, 1, 1, b"", b"\x00\x01k"), serialize_type=1),
        "entry truncated",
        29,
    ),
]


@pytest.mark.parametrize("raw, fragment, offset", [c[1:] for c in BAD_FRAMES], ids=[c[0] for c in BAD_FRAMES])
def test_bad_frames_raise_protocol_error_with_offset(raw: bytes, fragment: str, offset: int) -> None:
    with pytest.raises(ProtocolError) as info:
        decode(raw)
    assert fragment in str(info.value)
    assert info.value.offset == offset
    assert f"at byte offset {offset}" in str(info.value)


def test_max_frame_size_is_configurable() -> None:
    raw = frame(b'{"code":0,"opaque":1}', b"x" * 100)
    assert decode(raw).body == b"x" * 100
    with pytest.raises(ProtocolError, match="maximum frame size 64"):
        decode(raw, max_frame_size=64)


# --------------------------------------------------------------------------- streaming


def test_frame_decoder_yields_frames_as_they_complete() -> None:
    first = encode(RemotingCommand(code=0, opaque=1, flag=1, body=b"a" * 1000))
    second = encode(RemotingCommand(code=19, opaque=2, flag=1))
    stream = first + second
    decoder = FrameDecoder()
    seen: list[RemotingCommand] = []
    for i in range(len(stream)):  # worst case: one byte per read
        seen += decoder.feed(stream[i : i + 1])
        if i + 1 < len(first):
            assert seen == []
    assert [(c.opaque, len(c.body)) for c in seen] == [(1, 1000), (2, 0)]
    assert decoder.buffered == 0
    assert [c.opaque for c in FrameDecoder().feed(stream + stream)] == [1, 2, 1, 2]


def _read_in_place(stream: bytes, keep_below: int) -> tuple[list[int], list[RemotingCommand]]:
    decoder = FrameDecoder(views=True, arena_size=1 << 20)
    kept, seen, pos = [], [], 0
    while pos < len(stream):
        space = decoder.space()
        count = min(len(space), 50_000, len(stream) - pos)  # reads as a socket gives them
        space[:count] = stream[pos : pos + count]
        pos += count
        for command in decoder.received(count):
            seen.append(command.opaque)
            assert command.body == b""
            view = command.body_view or b""
            assert bytes(view) == bytes([command.opaque % 251]) * len(view)
            if command.body_view is not None:  # where it lies in its arena, as the decoder recorded it
                at = np.frombuffer(view, np.uint8).ctypes.data - np.frombuffer(view.obj, np.uint8).ctypes.data
                assert command.body_at == at
            if command.opaque < keep_below:
                kept.append(command)  # read later: their arenas must not be written again meanwhile
    assert decoder.buffered == 0
    return seen, kept


def test_bodies_read_in_place_stay_intact_across_arenas_which_are_reused_only_once_unread(monkeypatch) -> None:
    """With views, a body is a view of the arena the socket wrote into: frames that cross an arena's end move to the
    next one whole, a frame larger than an arena gets one of its size, and an arena is written again only when no
    view of it is left (the records of a flush not landed yet must never change under the reader)."""
    from rocketlake.rocketmq import frame

    allocated = []

    class Counted(bytearray):
        def __init__(self, *args):
            super().__init__(*args)
            allocated.append(len(self))

    monkeypatch.setattr(frame, "bytearray", Counted, raising=False)
    frames = [
        encode(RemotingCommand(code=0, opaque=i, flag=1, body=bytes([i % 251]) * size))
        for i, size in enumerate([70_000, 300_000, 5, 0, 600_000, 90_000] * 6 + [1_500_000])
    ]
    stream = b"".join(frames)

    seen, kept = _read_in_place(stream, keep_below=len(frames))  # every body kept: no arena can be reused
    assert seen == list(range(len(frames)))
    for command in kept:
        view = command.body_view or b""
        assert bytes(view) == bytes([command.opaque % 251]) * len(view)
    every_arena = allocated.count(1 << 20)  # arenas of the full size (the first ones double up to it)
    del kept
    allocated.clear()
    seen, kept = _read_in_place(stream, keep_below=12)  # the first two rounds kept, the rest dropped once read
    assert seen == list(range(len(frames)))
    for command in kept:
        view = command.body_view or b""
        assert bytes(view) == bytes([command.opaque % 251]) * len(view)
    del kept
    allocated.clear()
    seen, _ = _read_in_place(stream, keep_below=0)  # each body dropped once read: the arenas come round again
    assert seen == list(range(len(frames)))
    assert allocated.count(1 << 20) <= 3 < every_arena, (allocated, every_arena)

    plain = FrameDecoder().feed(frames[0])[0]  # without views: bytes, as before
    assert plain.body_view is None and plain.body == bytes([0]) * 70_000


def test_frame_decoder_rejects_an_oversized_length_before_buffering_it() -> None:
    decoder = FrameDecoder(max_frame_size=1024)
    with pytest.raises(ProtocolError, match="exceeds the maximum frame size 1024"):
        decoder.feed(struct.pack(">i", 2_000_000_000))  # only the 4 length bytes have arrived
    with pytest.raises(ProtocolError, match="already failed"):
        decoder.feed(encode(RemotingCommand(code=0)))  # the stream cannot be resynchronised


# --------------------------------------------------------------------------- fuzzing


def valid_frames() -> list[bytes]:
    commands = [
        route_request(),
        route_request(SerializeType.ROCKETMQ),
        RemotingCommand(code=0, ext_fields={"k": "v", "x": "ÿ"}, body=b"\x00" * 40, opaque=3, flag=1, remark="r"),
        RemotingCommand(
            code=0, ext_fields={"k": "v"}, body=b"\xff" * 7, remark="é", serialize_type=SerializeType.ROCKETMQ
        ),
    ]
    return [encode(c) for c in commands]


def check_never_anything_but_protocol_error(raw: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        decode(raw)
    decoder = FrameDecoder(max_frame_size=4096)
    with contextlib.suppress(ProtocolError):
        for i in range(0, len(raw), 7):
            decoder.feed(raw[i : i + 7])


def test_seeded_fuzz_truncations_and_corruptions_finish_and_only_raise_protocol_error() -> None:
    rng = random.Random(20240917)
    failures: list[BaseException] = []
    truncations_rejected = 0

    def run() -> None:
        nonlocal truncations_rejected
        try:
            for raw in valid_frames():
                for cut in range(len(raw)):  # every truncation must be rejected
                    with pytest.raises(ProtocolError):
                        decode(raw[:cut])
                    truncations_rejected += 1
                for _ in range(1500):
                    corrupt = bytearray(raw)
                    for _ in range(rng.randint(1, 4)):
                        corrupt[rng.randrange(len(corrupt))] = rng.randrange(256)
                    check_never_anything_but_protocol_error(bytes(corrupt))
            for _ in range(1500):
                check_never_anything_but_protocol_error(rng.randbytes(rng.randint(0, 64)))
        except BaseException as exc:  # surfaced in the main thread below
            failures.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout=120)
    assert not worker.is_alive(), "the decoder did not finish: a loop does not advance"
    assert failures == []
    assert truncations_rejected == sum(len(raw) for raw in valid_frames())


if given is not None:
    # Non-empty (empty binary strings decode as Java null) and without lone surrogates (not UTF-8).
    UTF8_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12)

    @settings(max_examples=400, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
    @given(data=st.data())
    def test_hypothesis_truncated_frames_always_raise_protocol_error(data: st.DataObject) -> None:
        raw = data.draw(st.sampled_from(valid_frames()))
        cut = data.draw(st.integers(min_value=0, max_value=len(raw) - 1))
        with pytest.raises(ProtocolError):
            decode(raw[:cut])

    @settings(max_examples=400, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
    @given(data=st.data())
    def test_hypothesis_corrupted_frames_decode_or_raise_protocol_error(data: st.DataObject) -> None:
        raw = bytearray(data.draw(st.sampled_from(valid_frames())))
        for position, value in data.draw(
            st.lists(st.tuples(st.integers(0, len(raw) - 1), st.integers(0, 255)), min_size=1, max_size=6)
        ):
            raw[position] = value
        check_never_anything_but_protocol_error(bytes(raw))

    @settings(max_examples=300, deadline=2000)
    @given(raw=st.binary(max_size=200))
    def test_hypothesis_arbitrary_bytes_decode_or_raise_protocol_error(raw: bytes) -> None:
        check_never_anything_but_protocol_error(raw)

    @settings(max_examples=200, deadline=2000)
    @given(
        code=st.integers(-32768, 32767),
        opaque=st.integers(-(2**31), 2**31 - 1),
        fields=st.dictionaries(UTF8_TEXT, UTF8_TEXT, max_size=5),
        body=st.binary(max_size=64),
        remark=st.none() | UTF8_TEXT,
        serialize_type=st.sampled_from(list(SerializeType)),
    )
    def test_hypothesis_round_trip(
        code: int, opaque: int, fields: dict[str, str], body: bytes, remark: str | None, serialize_type: SerializeType
    ) -> None:
        cmd = RemotingCommand(
            code=code, ext_fields=fields, body=body, opaque=opaque, remark=remark, serialize_type=serialize_type
        )
        assert decode(encode(cmd)) == cmd
