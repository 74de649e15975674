"""Message records of a PULL_MESSAGE body: layout, hosts, ids, properties, batches, retry topics.

Records are built field by field with struct.pack (``build_record`` below), independent of the code
under test. Layout: apache/rocketmq ``common/.../message/MessageDecoder.java#decode``.
"""

from __future__ import annotations

import dataclasses
import pickle
import struct
import zlib

import lz4.frame
import pytest
import zstandard

from rocketlake.rocketmq.compression import CompressionType, compress
from rocketlake.rocketmq.errors import InvalidArgument, ProtocolError
from rocketlake.rocketmq.message import (
    SYSTEM_PROPERTY_KEYS,
    BatchEntry,
    Message,
    MessageDecodeError,
    body_crc,
    create_offset_msg_id,
    decode_batch,
    decode_messages,
    decode_offset_msg_id,
    decode_properties,
    encode_batch,
    encode_batch_entry,
    encode_properties,
)
from tests.unit.record_encoder import encode_message_record

MAGIC_V1 = -626843481  # 0xDAA320A7, MessageDecoder.MESSAGE_MAGIC_CODE: 1-byte topic length
MAGIC_V2 = -626843477  # 0xDAA320AB, MessageDecoder.MESSAGE_MAGIC_CODE_V2: 2-byte topic length
BLANK_MAGIC = -875286124  # 0xCBD43194, commit-log end-of-file padding

LOCALHOST = bytes([127, 0, 0, 1])
IPV6_DOC = bytes.fromhex("20010db8000000000000000000000001")  # 2001:db8::1
IPV4_MAPPED = bytes(10) + b"\xff\xff" + bytes([192, 168, 1, 7])  # ::ffff:192.168.1.7

# sysflag bits (MessageSysFlag.java)
COMPRESSED = 0x1
BORN_V6 = 0x10
STORE_V6 = 0x20
NEED_UNWRAP = 0x40
INNER_BATCH = 0x80
LZ4_TYPE, ZSTD_TYPE, ZLIB_TYPE = 0x100, 0x200, 0x300


def props(*pairs: tuple[str, str]) -> bytes:
    """Properties string bytes written by hand: name \\x01 value \\x02 per pair, UTF-8."""
    return "".join(f"{k}\x01{v}\x02" for k, v in pairs).encode("utf-8")


def build_record(
    *,
    topic: bytes = b"TopicTest",
    body: bytes = b"hello",
    properties: bytes = b"",
    magic: int = MAGIC_V1,
    body_crc: int = 0,
    queue_id: int = 0,
    flag: int = 0,
    queue_offset: int = 0,
    physical_offset: int = 0,
    sys_flag: int = 0,
    born_timestamp: int = 0,
    born_ip: bytes = LOCALHOST,
    born_port: int = 0,
    store_timestamp: int = 0,
    store_ip: bytes = LOCALHOST,
    store_port: int = 10911,
    reconsume_times: int = 0,
    prepared_offset: int = 0,
    total_size: int | None = None,
) -> bytes:
    """One commit-log record; ``total_size`` overrides the computed TOTALSIZE (corrupt cases).

    The caller sets the IPv6 sysflag bits to match 16-byte addresses.
    """
    if magic == MAGIC_V2:
        topic_length = struct.pack(">h", len(topic))  # V2: int16 topic length
    else:
        topic_length = struct.pack(">b", len(topic))  # V1: int8 topic length (read signed)
    fields = b"".join(
        [
            struct.pack(">i", magic),  # 2 MAGICCODE
            struct.pack(">i", body_crc),  # 3 BODYCRC
            struct.pack(">i", queue_id),  # 4 QUEUEID
            struct.pack(">i", flag),  # 5 FLAG
            struct.pack(">q", queue_offset),  # 6 QUEUEOFFSET
            struct.pack(">q", physical_offset),  # 7 PHYSICALOFFSET
            struct.pack(">i", sys_flag),  # 8 SYSFLAG
            struct.pack(">q", born_timestamp),  # 9 BORNTIMESTAMP
            born_ip + struct.pack(">i", born_port),  # 10 BORNHOST: 4 or 16 address bytes + int32 port
            struct.pack(">q", store_timestamp),  # 11 STORETIMESTAMP
            store_ip + struct.pack(">i", store_port),  # 12 STOREHOST
            struct.pack(">i", reconsume_times),  # 13 RECONSUMETIMES
            struct.pack(">q", prepared_offset),  # 14 PreparedTransactionOffset
            struct.pack(">i", len(body)) + body,  # 15 BODYLEN + BODY
            topic_length + topic,  # 16 TOPICLEN + TOPIC
            struct.pack(">h", len(properties)) + properties,  # 17 PROPERTIESLEN + PROPERTIES
        ]
    )
    size = 4 + len(fields) if total_size is None else total_size
    return struct.pack(">i", size) + fields  # 1 TOTALSIZE (whole record, this field included)


def build_batch_record(*, body: bytes, properties: bytes = b"", flag: int = 0) -> bytes:
    """One SEND_BATCH_MESSAGE / inner-batch record (``MessageDecoder#encodeMessage``)."""
    fields = b"".join(
        [
            struct.pack(">i", 0),  # 2 MAGICCODE: 0 in batch records
            struct.pack(">i", 0),  # 3 BODYCRC: 0 in batch records
            struct.pack(">i", flag),  # 4 FLAG
            struct.pack(">i", len(body)) + body,  # 5 BODYLEN + BODY
            struct.pack(">h", len(properties)) + properties,  # 6 PROPERTIESLEN + PROPERTIES
        ]
    )
    return struct.pack(">i", 4 + len(fields)) + fields  # 1 TOTALSIZE


def decode_one(record: bytes, **kwargs: object) -> Message:
    messages = decode_messages(record, **kwargs)  # type: ignore[arg-type]
    assert len(messages) == 1
    return messages[0]


def decode_error(data: bytes, **kwargs: object) -> MessageDecodeError:
    with pytest.raises(MessageDecodeError) as info:
        decode_messages(data, **kwargs)  # type: ignore[arg-type]
    return info.value


# --- layout ---------------------------------------------------------------------------------------


def test_ipv4_record_decodes_every_field():
    record = build_record(
        topic=b"TopicTest",
        body=b"hello",
        properties=props(("TAGS", "TagA"), ("UNIQ_KEY", "AB12")),
        body_crc=123456,
        queue_id=3,
        flag=7,
        queue_offset=42,
        physical_offset=0x1234,
        born_timestamp=1_700_000_000_000,
        born_ip=bytes([10, 0, 0, 1]),
        born_port=54321,
        store_timestamp=1_700_000_000_005,
        store_ip=bytes([10, 0, 0, 2]),
        store_port=10911,
        reconsume_times=2,
        prepared_offset=99,
    )
    # 91 fixed bytes (IPv4 hosts, V1) + body + topic + properties (protocol reference 3.1)
    assert len(record) == 91 + 5 + 9 + len(props(("TAGS", "TagA"), ("UNIQ_KEY", "AB12")))
    m = decode_one(record)
    assert m == Message(
        topic="TopicTest",
        flag=7,
        queue_id=3,
        queue_offset=42,
        commit_log_offset=0x1234,
        sys_flag=0,
        born_timestamp=1_700_000_000_000,
        born_host="10.0.0.1:54321",
        store_timestamp=1_700_000_000_005,
        store_host="10.0.0.2:10911",
        reconsume_times=2,
        prepared_transaction_offset=99,
        body=b"hello",
        properties={"TAGS": "TagA", "UNIQ_KEY": "AB12"},
        body_crc=123456,
        store_size=len(record),
    )
    assert m.body == b"hello"  # body is excluded from repr only, not from equality


def test_decoded_message_is_a_frozen_message():
    m = decode_one(build_record())
    assert type(m) is Message
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.topic = "other"  # type: ignore[misc]
    assert dataclasses.replace(m, topic="other").topic == "other"
    twin = Message(
        topic="TopicTest", store_host="127.0.0.1:10911", born_host="127.0.0.1:0", body=b"hello", store_size=m.store_size
    )
    assert m == twin
    assert hash(m) == hash(twin)  # properties (a dict) is left out of the hash
    assert m != dataclasses.replace(twin, body=b"other")


def test_ipv6_born_and_store_hosts():
    record = build_record(
        sys_flag=BORN_V6 | STORE_V6,
        born_ip=IPV6_DOC,
        born_port=40000,
        store_ip=bytes(15) + b"\x01",
        store_port=10911,
        physical_offset=5,
    )
    assert len(record) == 91 + 24 + 5 + 9  # two 12-byte-longer host fields
    m = decode_one(record)
    assert m.born_host == "[2001:db8::1]:40000"
    assert m.store_host == "[::1]:10911"
    assert m.sys_flag == BORN_V6 | STORE_V6
    # 16 ip + 4 port + 8 offset = 28 bytes = 56 hex chars
    assert m.offset_msg_id == "0000000000000000000000000000000100002A9F0000000000000005"


@pytest.mark.parametrize(
    ("sys_flag", "born_ip", "store_ip"),
    [
        (BORN_V6, IPV6_DOC, LOCALHOST),
        (STORE_V6, LOCALHOST, IPV6_DOC),
    ],
)
def test_mixed_host_families(sys_flag, born_ip, store_ip):
    m = decode_one(build_record(sys_flag=sys_flag, born_ip=born_ip, store_ip=store_ip, born_port=1))
    assert m.born_host == ("[2001:db8::1]:1" if born_ip == IPV6_DOC else "127.0.0.1:1")
    assert m.store_host == ("[2001:db8::1]:10911" if store_ip == IPV6_DOC else "127.0.0.1:10911")
    assert m.body == b"hello" and m.topic == "TopicTest"


def test_ipv4_mapped_ipv6_host_is_ipv4_but_keeps_the_56_char_id_layout():
    # Java: InetAddress.getByAddress(16 mapped bytes) is an Inet4Address; createMessageId sizes the
    # buffer from the flag (28 bytes) and fills 16 of them: ip(4) port(4) offset(8) + 12 zero bytes.
    m = decode_one(build_record(sys_flag=STORE_V6, store_ip=IPV4_MAPPED, physical_offset=0x10))
    assert m.store_host == "192.168.1.7:10911"
    assert m.offset_msg_id == "C0A8010700002A9F0000000000000010" + "0" * 24


def test_magic_v2_has_a_two_byte_topic_length():
    topic = ("T" * 200).encode()  # > 127: only representable with V2 (5.1.0+)
    record = build_record(magic=MAGIC_V2, topic=topic, properties=props(("a", "b")))
    assert len(record) == 92 + 5 + 200 + 4  # one byte more than V1 for the topic length
    m = decode_one(record)
    assert m.topic == "T" * 200
    assert m.properties == {"a": "b"}


def test_magic_v1_topic_of_127_bytes():
    m = decode_one(build_record(topic=b"t" * 127))
    assert m.topic == "t" * 127


def test_unicode_topic_and_properties():
    properties = props(("名前", "値 ✓ 😀"), ("TAGS", "标签"), ("k", "a\x01b"))
    m = decode_one(build_record(topic="主题".encode(), properties=properties))
    assert m.topic == "主题"
    assert m.properties == {"名前": "値 ✓ 😀", "TAGS": "标签", "k": "a\x01b"}
    assert m.tags == "标签"


def test_empty_body_and_no_properties():
    m = decode_one(build_record(body=b"", properties=b""))
    assert m.body == b""
    assert m.properties == {}
    assert m.tags is None


def test_binary_body_is_returned_verbatim():
    body = bytes(range(256)) * 4 + b"\x00\xff\x01\x02"
    assert decode_one(build_record(body=body)).body == body


def test_records_back_to_back_and_buffer_types():
    records = [build_record(queue_offset=i, body=bytes([i]) * i, topic=f"T{i}".encode()) for i in range(5)]
    data = b"".join(records)
    for buffer in (data, bytearray(data), memoryview(data), memoryview(bytearray(data))):
        messages = decode_messages(buffer)
        assert [m.queue_offset for m in messages] == [0, 1, 2, 3, 4]
        assert [m.body for m in messages] == [bytes([i]) * i for i in range(5)]
        assert all(type(m.body) is bytes for m in messages)
        assert [m.topic for m in messages] == [f"T{i}" for i in range(5)]
        assert [m.store_size for m in messages] == [len(r) for r in records]


def test_memoryview_with_a_signed_or_char_format():
    data = build_record(topic=b"t" * 100, queue_offset=3)
    for fmt in ("b", "c"):  # indexing a "c" view yields bytes, a "b" view signed ints
        (m,) = decode_messages(memoryview(data).cast(fmt))
        assert (m.topic, m.queue_offset) == ("t" * 100, 3)


def test_memoryview_of_a_larger_buffer_and_empty_input():
    data = b"junk" + build_record(queue_offset=9) + b"junk"
    messages = decode_messages(memoryview(data)[4:-4])
    assert [m.queue_offset for m in messages] == [9]
    assert decode_messages(b"") == []


def test_body_crc_helper_matches_utilall_crc32():
    assert body_crc(b"hello") == zlib.crc32(b"hello") & 0x7FFFFFFF
    assert body_crc(b"\xff" * 9) == zlib.crc32(b"\xff" * 9) & 0x7FFFFFFF


# --- compression ----------------------------------------------------------------------------------

BIG_TEXT = b"RocketMQ body that compresses well. " * 300  # > 4096 bytes, as Java compresses


@pytest.mark.parametrize(
    ("sys_flag", "stored"),
    [
        (COMPRESSED, zlib.compress(BIG_TEXT, 5)),  # 4.x: no type bits = ZLIB
        (COMPRESSED | ZLIB_TYPE, zlib.compress(BIG_TEXT, 9)),
        (COMPRESSED | LZ4_TYPE, lz4.frame.compress(BIG_TEXT, block_linked=False)),
        (COMPRESSED | ZSTD_TYPE, zstandard.ZstdCompressor(level=5).compress(BIG_TEXT)),
    ],
)
def test_compressed_bodies_are_inflated_and_the_flag_cleared(sys_flag, stored):
    record = build_record(body=stored, sys_flag=sys_flag, body_crc=body_crc(stored))
    m = decode_one(record)
    assert m.body == BIG_TEXT
    assert m.sys_flag == sys_flag & ~COMPRESSED  # type bits stay, COMPRESSED_FLAG is cleared
    assert m.body_crc == body_crc(stored)  # BODYCRC is of the stored (compressed) body
    raw = decode_one(record, decompress=False)
    assert raw.body == stored
    assert raw.sys_flag == sys_flag


def test_lz4_frame_as_lz4_java_writes_it():
    # lz4-java LZ4FrameOutputStream(out): magic, FLG 0x60 (version 1, BLOCK_INDEPENDENCE), BD 0x70
    # (4 MiB blocks), header checksum 0x73; an incompressible block is stored raw with the high bit
    # set in its little-endian length; a zero length ends the frame (no content checksum).
    payload = bytes(range(200))
    frame = (
        bytes.fromhex("04224d18")
        + bytes([0x60, 0x70, 0x73])
        + struct.pack("<I", 0x8000_0000 | len(payload))
        + payload
        + struct.pack("<I", 0)
    )
    m = decode_one(build_record(body=frame, sys_flag=COMPRESSED | LZ4_TYPE))
    assert m.body == payload


def test_concatenated_lz4_frames_are_one_body():
    # LZ4FrameInputStream keeps reading frames until the input ends
    stored = compress(b"first ", CompressionType.LZ4) + compress(b"second", CompressionType.LZ4)
    assert decode_one(build_record(body=stored, sys_flag=COMPRESSED | LZ4_TYPE)).body == b"first second"


def test_a_failed_body_does_not_poison_the_next_one():
    # decoders are reused per thread; a body that fails half-way must not leave state behind
    for kind, bits in ((CompressionType.LZ4, LZ4_TYPE), (CompressionType.ZSTD, ZSTD_TYPE)):
        stored = compress(BIG_TEXT, kind)
        bad = build_record(body=stored[: len(stored) // 2], sys_flag=COMPRESSED | bits)
        good = build_record(body=stored, sys_flag=COMPRESSED | bits)
        decode_error(bad)
        assert decode_one(good).body == BIG_TEXT


def test_zstd_frame_without_content_size_larger_than_first_guess():
    # ZstdOutputStream streams, so its frame has no content-size field; 5 MiB from ~200 bytes
    # forces the decoder to grow its output buffer several times.
    body = b"\x00" * (5 * 1024 * 1024)
    streamer = zstandard.ZstdCompressor(level=5).compressobj()
    stored = streamer.compress(body) + streamer.flush()
    assert zstandard.frame_content_size(stored) == -1
    assert decode_one(build_record(body=stored, sys_flag=COMPRESSED | ZSTD_TYPE)).body == body


@pytest.mark.parametrize("kind", list(CompressionType))
def test_our_compress_round_trips_through_the_decoder(kind):
    stored = compress(BIG_TEXT, kind)
    assert len(stored) < len(BIG_TEXT)
    m = decode_one(build_record(body=stored, sys_flag=COMPRESSED | kind.sys_flag_bits))
    assert m.body == BIG_TEXT


def test_our_lz4_frame_header_is_lz4_javas():
    assert compress(b"abc", CompressionType.LZ4)[:7] == bytes.fromhex("04224d18607073")


@pytest.mark.parametrize(
    ("kind", "bits"),
    [
        (CompressionType.ZLIB, ZLIB_TYPE),
        (CompressionType.LZ4, LZ4_TYPE),
        (CompressionType.ZSTD, ZSTD_TYPE),
    ],
)
def test_decompression_bomb_is_refused(kind, bits):
    stored = compress(b"\x00" * (2 * 1024 * 1024), kind)
    record = build_record(body=stored, sys_flag=COMPRESSED | bits)
    err = decode_error(record, max_body_size=1024 * 1024)
    assert err.field == "BODY"
    assert "exceeds the limit" in str(err) or "larger than" in str(err)
    assert decode_one(record, max_body_size=2 * 1024 * 1024).body == b"\x00" * (2 * 1024 * 1024)


def test_zstd_declared_content_size_over_the_limit_is_refused_before_allocating():
    stored = zstandard.ZstdCompressor().compress(b"\x00" * 4096)  # declares 4096 bytes
    err = decode_error(build_record(body=stored, sys_flag=COMPRESSED | ZSTD_TYPE), max_body_size=4095)
    assert err.field == "BODY"


@pytest.mark.parametrize("bits", [LZ4_TYPE, ZSTD_TYPE, ZLIB_TYPE, 0])
def test_truncated_or_garbage_compressed_body_is_a_protocol_error(bits):
    kind = CompressionType.from_sys_flag(bits)
    stored = compress(BIG_TEXT, kind)
    for body in (stored[: len(stored) // 2], stored[:-1], b"not compressed at all"):
        err = decode_error(build_record(body=body, sys_flag=COMPRESSED | bits))
        assert isinstance(err, ProtocolError)
        assert (err.record_index, err.field) == (0, "BODY")


def test_unknown_compression_type_is_a_protocol_error():
    err = decode_error(build_record(body=b"x", sys_flag=COMPRESSED | 0x400))
    assert err.field == "BODY"
    assert "unknown compression type value 4" in str(err)


def test_empty_body_with_compressed_flag_is_left_alone():
    # MessageDecoder#decode only inflates when bodyLen > 0, so the flag is not cleared either.
    m = decode_one(build_record(body=b"", sys_flag=COMPRESSED | ZSTD_TYPE))
    assert (m.body, m.sys_flag) == (b"", COMPRESSED | ZSTD_TYPE)


# --- corrupt input ----------------------------------------------------------------------------------


def test_truncated_record_names_index_offset_and_field():
    first, second = build_record(queue_offset=0), build_record(queue_offset=1)
    err = decode_error(first + second[:-1])
    assert (err.record_index, err.record_offset, err.field) == (1, len(first), "TOTALSIZE")
    assert err.offset == len(first)
    assert "record #1" in str(err) and "TOTALSIZE" in str(err) and f"byte offset {len(first)}" in str(err)


def test_fewer_bytes_than_a_record_header():
    err = decode_error(build_record() + b"\x00\x00\x00")
    assert (err.record_index, err.field) == (1, "TOTALSIZE")


@pytest.mark.parametrize("magic", [0, BLANK_MAGIC, MAGIC_V1 + 1])
def test_bad_magic(magic):
    err = decode_error(build_record(magic=magic))
    assert (err.field, err.offset) == ("MAGICCODE", 4)


def test_total_size_too_small_for_the_ipv6_layout():
    # TOTALSIZE claims only the IPv4 layout's size, but the sysflag asks for IPv6 hosts.
    err = decode_error(build_record(sys_flag=BORN_V6 | STORE_V6, body=b"", topic=b"", total_size=91)[:91])
    assert err.field == "TOTALSIZE"


def test_total_size_larger_than_the_fields_leaves_bytes_unaccounted_for():
    record = build_record()
    padded = struct.pack(">i", len(record) + 3) + record[4:] + b"\x00\x00\x00"
    err = decode_error(padded)
    assert err.field == "PROPERTIES"
    assert "unaccounted" in str(err)


def test_negative_and_oversized_body_length():
    record = bytearray(build_record(body=b"hello"))
    struct.pack_into(">i", record, 84, -1)  # BODYLEN at byte 84 for IPv4 hosts
    assert decode_error(bytes(record)).field == "BODY"
    struct.pack_into(">i", record, 84, 0x7FFFFFFF)
    err = decode_error(bytes(record))
    assert (err.field, err.offset) == ("BODY", 84)


def test_v1_topic_length_is_signed():
    record = bytearray(build_record(body=b"", topic=b"T"))
    record[88] = 0xFF  # TOPICLEN right after an empty body: -1 when read as a signed byte
    assert decode_error(bytes(record)).field == "TOPIC"


def test_negative_properties_length():
    record = bytearray(build_record(body=b"", topic=b"T", properties=b""))
    struct.pack_into(">h", record, 90, -2)
    assert decode_error(bytes(record)).field == "PROPERTIES"


@pytest.mark.parametrize(("port", "field"), [(-1, "BORNHOST"), (65536, "STOREHOST")])
def test_port_out_of_range(port, field):
    kwargs = {"born_port": port} if field == "BORNHOST" else {"store_port": port}
    err = decode_error(build_record(**kwargs))
    assert err.field == field
    assert err.offset == (48 if field == "BORNHOST" else 64)


def test_decode_error_survives_pickling():
    err = decode_error(build_record(magic=0))
    clone = pickle.loads(pickle.dumps(err))
    assert type(clone) is MessageDecodeError
    assert (clone.record_index, clone.field, clone.offset, str(clone)) == (0, "MAGICCODE", 4, str(err))


# --- properties string --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", {}),
        ("a\x01b", {"a": "b"}),  # no trailing separator
        ("a\x01b\x02", {"a": "b"}),
        ("\x01b\x02", {}),  # empty key dropped
        ("a\x01\x02", {}),  # empty value dropped
        ("ab\x02", {}),  # no name/value separator
        ("abc\x02d\x01e", {"d": "e"}),  # Java's indexOf finds the \x01 of the next piece: rejected
        ("a\x01b\x01c\x02", {"a": "b\x01c"}),  # value keeps further \x01
        ("a\x011\x02a\x012\x02", {"a": "2"}),  # later duplicate wins
        ("\x02\x02a\x01b\x02\x02", {"a": "b"}),
        ("k\x01 \x02", {"k": " "}),  # whitespace is a value
    ],
)
def test_decode_properties_follows_string2messageProperties(text, expected):
    assert decode_properties(text) == expected


def test_encode_properties_follows_messageProperties2String():
    text = encode_properties({"TAGS": "TagA", "KEYS": "k1 k2", "skip": None, "名": "値"})
    assert text == "TAGS\x01TagA\x02KEYS\x01k1 k2\x02名\x01値\x02"
    assert decode_properties(text) == {"TAGS": "TagA", "KEYS": "k1 k2", "名": "値"}
    assert encode_properties({}) == "" and encode_properties(None) == ""


# --- derived fields, ids, retry topics --------------------------------------------------------------


def test_keys_tags_and_user_properties():
    m = Message(
        topic="T",
        properties={
            "KEYS": "k1  k2 ",
            "TAGS": "TagA",
            "WAIT": "true",
            "UNIQ_KEY": "X",
            "order": "42",
            "__CRC32#": "0000000001",
        },
    )
    assert m.keys == ("k1", "k2")
    assert m.tags == "TagA"
    assert m.user_properties == {"order": "42"}
    assert Message(topic="T").keys == ()
    assert {"TAGS", "KEYS", "UNIQ_KEY", "WAIT", "RETRY_TOPIC", "MIN_OFFSET"} <= SYSTEM_PROPERTY_KEYS


def test_msg_id_prefers_uniq_key():
    m = decode_one(
        build_record(
            properties=props(("UNIQ_KEY", "7F0000010B5A18B4AAC27A8B3F2E0000")),
            store_ip=bytes([10, 0, 0, 2]),
            physical_offset=0x1234,
        )
    )
    assert m.msg_id == "7F0000010B5A18B4AAC27A8B3F2E0000"
    assert m.offset_msg_id == "0A00000200002A9F0000000000001234"
    assert dataclasses.replace(m, properties={}).msg_id == m.offset_msg_id


def test_transaction_id_only_for_transactional_messages():
    assert Message(topic="T", properties={"TRAN_MSG": "TRUE", "UNIQ_KEY": "U"}).transaction_id == "U"
    assert Message(topic="T", properties={"TRAN_MSG": "yes", "UNIQ_KEY": "U"}).transaction_id is None
    assert Message(topic="T", properties={"UNIQ_KEY": "U"}).transaction_id is None


@pytest.mark.parametrize(
    ("store_host", "offset", "layout", "expected"),
    [
        ("10.0.0.2:10911", 0x1234, None, "0A00000200002A9F0000000000001234"),
        ("192.168.1.7:10911", -1, None, "C0A8010700002A9FFFFFFFFFFFFFFFFF"),
        ("[2001:db8::1]:8080", 1, None, "20010DB800000000000000000000000100001F900000000000000001"),
        ("192.168.1.7:10911", 16, True, "C0A8010700002A9F0000000000000010" + "0" * 24),
    ],
)
def test_create_offset_msg_id(store_host, offset, layout, expected):
    assert create_offset_msg_id(store_host, offset, ipv6_layout=layout) == expected


@pytest.mark.parametrize(
    ("msg_id", "expected"),
    [
        ("0A00000200002A9F0000000000001234", ("10.0.0.2:10911", 0x1234)),
        ("0a00000200002a9f0000000000001234", ("10.0.0.2:10911", 0x1234)),  # Java upper-cases first
        ("C0A8010700002A9FFFFFFFFFFFFFFFFF", ("192.168.1.7:10911", -1)),
        ("20010DB800000000000000000000000100001F900000000000000001", ("[2001:db8::1]:8080", 1)),
    ],
)
def test_decode_offset_msg_id(msg_id, expected):
    assert decode_offset_msg_id(msg_id) == expected


@pytest.mark.parametrize(
    "msg_id",
    [
        "",
        "0A000002",
        "ZZ00000200002A9F0000000000001234",
        "0" * 33,
        "0A000002FFFFFFFF0000000000001234",  # port -1
        "0A000002000100000000000000001234",  # port 65536
    ],
)
def test_decode_offset_msg_id_rejects_malformed_ids(msg_id):
    with pytest.raises(InvalidArgument):
        decode_offset_msg_id(msg_id)


def test_offset_msg_id_round_trip_from_a_decoded_ipv6_record():
    m = decode_one(build_record(sys_flag=STORE_V6, store_ip=IPV6_DOC, store_port=10911, physical_offset=987654321))
    assert decode_offset_msg_id(m.offset_msg_id) == ("[2001:db8::1]:10911", 987654321)


def test_retry_topic_is_restored():
    retried = decode_one(
        build_record(topic=b"%RETRY%group-a", properties=props(("RETRY_TOPIC", "orders"), ("TAGS", "TagA")))
    )
    assert retried.original_topic == "orders"
    assert retried.restore_retry_topic().topic == "orders"
    assert retried.restore_retry_topic("group-a").topic == "orders"
    # resetRetryAndNamespace: only the consumer group's own retry topic is reset
    assert retried.restore_retry_topic("group-b") is retried
    assert retried.restore_retry_topic().properties == retried.properties


def test_retry_topic_left_alone_without_prefix_or_property():
    plain = Message(topic="orders", properties={"RETRY_TOPIC": "other"})
    assert plain.original_topic == "orders" and plain.restore_retry_topic() is plain
    no_property = Message(topic="%RETRY%g")
    assert no_property.original_topic == "%RETRY%g" and no_property.restore_retry_topic("g") is no_property


# --- batches ------------------------------------------------------------------------------------------


def test_batch_encoding_is_encodeMessage_byte_for_byte():
    entries = [
        BatchEntry(body=b"first", properties={"TAGS": "TagA", "UNIQ_KEY": "U1"}, flag=0),
        BatchEntry(body=b"", properties={}, flag=5),
        BatchEntry(body=bytes(range(256)), properties={"名": "値"}, flag=-1),
    ]
    expected = b"".join(
        [
            build_batch_record(body=b"first", properties=props(("TAGS", "TagA"), ("UNIQ_KEY", "U1"))),
            build_batch_record(body=b"", flag=5),
            build_batch_record(body=bytes(range(256)), properties=props(("名", "値")), flag=-1),
        ]
    )
    assert encode_batch(entries) == expected
    assert encode_batch_entry(entries[1]) == struct.pack(">iiiiih", 22, 0, 0, 5, 0, 0)
    assert decode_batch(expected) == entries


def test_batch_accepts_messages_and_rejects_oversized_properties():
    m = Message(topic="ignored", body=b"b", properties={"k": "v"}, flag=3)
    assert decode_batch(encode_batch([m])) == [BatchEntry(b"b", {"k": "v"}, 3)]
    with pytest.raises(InvalidArgument):
        encode_batch_entry(BatchEntry(b"", {"k": "v" * 32767}))


@pytest.mark.parametrize("cut", [1, 10, 21])
def test_truncated_batch_is_a_protocol_error(cut):
    data = build_batch_record(body=b"x" * 10, properties=props(("a", "b")))
    with pytest.raises(ProtocolError):
        decode_batch(data[:-cut])


def test_inner_batch_is_unwrapped_like_pullapiwrapper():
    inner = b"".join(
        [
            build_batch_record(body=b"one", properties=props(("UNIQ_KEY", "U1"), ("TAGS", "A")), flag=1),
            build_batch_record(body=b"two", properties=props(("UNIQ_KEY", "U2")), flag=2),
        ]
    )
    record = build_record(
        topic=b"auto-batch",
        body=inner,
        sys_flag=INNER_BATCH | NEED_UNWRAP,
        queue_id=2,
        queue_offset=100,
        physical_offset=4096,
        reconsume_times=1,
        born_ip=bytes([10, 0, 0, 9]),
        born_port=1234,
    )
    messages = decode_messages(record)
    assert [(m.body, m.flag, m.queue_offset, m.msg_id, m.tags) for m in messages] == [
        (b"one", 1, 100, "U1", "A"),
        (b"two", 2, 101, "U2", None),
    ]
    for m in messages:
        assert type(m) is Message
        assert (m.topic, m.queue_id, m.commit_log_offset, m.born_host) == ("auto-batch", 2, 4096, "10.0.0.9:1234")
        assert (m.reconsume_times, m.store_size, m.body_crc) == (0, 0, 0)  # not set by Java either
    assert len(decode_messages(record, unwrap_batches=False)) == 1
    # only with both flags
    assert len(decode_messages(build_record(body=inner, sys_flag=INNER_BATCH))) == 1


def test_compressed_inner_batch_is_inflated_then_unwrapped():
    inner = build_batch_record(body=b"one") + build_batch_record(body=b"two")
    record = build_record(body=zlib.compress(inner), sys_flag=INNER_BATCH | NEED_UNWRAP | COMPRESSED | ZLIB_TYPE)
    assert [m.body for m in decode_messages(record)] == [b"one", b"two"]
    assert len(decode_messages(record, decompress=False)) == 1  # still compressed: not unwrapped


def test_malformed_inner_batch_names_the_outer_record():
    inner = build_batch_record(body=b"one")[:-1]
    record = build_record(body=inner, sys_flag=INNER_BATCH | NEED_UNWRAP)
    err = decode_error(build_record() + record)
    assert err.record_index == 1
    assert err.field is not None and err.field.startswith("BODY (inner batch entry #0")


# --- encode_message_record (for fakes) ------------------------------------------------------------


def test_encode_message_record_matches_the_hand_built_layout():
    m = Message(
        topic="TopicTest",
        flag=7,
        queue_id=3,
        queue_offset=42,
        commit_log_offset=0x1234,
        born_timestamp=11,
        born_host="10.0.0.1:54321",
        store_timestamp=12,
        store_host="[2001:db8::1]:10911",
        reconsume_times=2,
        prepared_transaction_offset=99,
        body=b"hello",
        properties={"TAGS": "TagA"},
        body_crc=body_crc(b"hello"),
    )
    expected = build_record(
        topic=b"TopicTest",
        body=b"hello",
        properties=props(("TAGS", "TagA")),
        body_crc=body_crc(b"hello"),
        queue_id=3,
        flag=7,
        queue_offset=42,
        physical_offset=0x1234,
        sys_flag=STORE_V6,
        born_timestamp=11,
        born_ip=bytes([10, 0, 0, 1]),
        born_port=54321,
        store_timestamp=12,
        store_ip=IPV6_DOC,
        store_port=10911,
        reconsume_times=2,
        prepared_offset=99,
    )
    assert encode_message_record(m) == expected
    assert decode_one(expected) == dataclasses.replace(m, sys_flag=STORE_V6, store_size=len(expected))


def test_encode_message_record_picks_v2_for_long_topics_and_keeps_mapped_hosts():
    long_topic = Message(topic="t" * 128, body=b"x")
    assert encode_message_record(long_topic)[4:8] == struct.pack(">i", MAGIC_V2)
    assert decode_one(encode_message_record(long_topic)).topic == "t" * 128
    mapped = decode_one(build_record(sys_flag=STORE_V6, store_ip=IPV4_MAPPED))
    assert encode_message_record(mapped) == build_record(sys_flag=STORE_V6, store_ip=IPV4_MAPPED)
    with pytest.raises(InvalidArgument):
        encode_message_record(long_topic, magic_v2=False)
