"""Message records of the classic remoting protocol: the PULL_MESSAGE body and its helpers.

A PULL_MESSAGE response body is the broker's commit-log records of the found messages, back to
back. This module turns it into :class:`Message` objects, and provides what surrounds that: the
properties string, message ids, inner batches, and the encoders a producer (or a fake broker in
tests) needs.

Every rule cites its upstream source (apache/rocketmq, 5.x ``develop``; paths relative to
``common/src/main/java/org/apache/rocketmq/common/``):

* ``message/MessageDecoder.java``: record layout (``#decode``), properties string
  (``#messageProperties2String``, ``#string2messageProperties``), batch records
  (``#encodeMessage``, ``#decodeMessage``), message ids (``#createMessageId``, ``#decodeMessageId``)
* ``message/MessageVersion.java``: the two magic codes and their topic-length widths
* ``sysflag/MessageSysFlag.java``: sysflag bits
* ``message/MessageConst.java``: property names and the system-property set
* ``message/MessageExt.java#socketAddress2ByteBuffer``, ``UtilAll.java#bytes2string``: id bytes
* client ``impl/consumer/PullAPIWrapper.java#processPullResult``: inner-batch unwrapping
* client ``impl/consumer/DefaultMQPushConsumerImpl.java#resetRetryAndNamespace``: retry topics

Where we deliberately differ from the Java decoder: Java stops silently at the first record it
cannot decode (``decodesBatch``) and so drops the rest of the pull; we raise
:class:`MessageDecodeError` (a ``ProtocolError``) naming the record, byte offset and field, because
a silently shortened batch would let the consumer commit offsets past messages it never landed.
We also check every length against ``TOTALSIZE`` before slicing, so corrupt input can neither
read past a record nor make us allocate more than the input (or ``max_body_size`` when inflating).
"""

from __future__ import annotations

import ipaddress
import socket
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, make_dataclass, replace
from struct import Struct
from typing import Final, Protocol, cast

from .compression import (
    COMPRESSED_FLAG,
    CompressionType,
    DecompressionError,
)
from .compression import (
    decompress as _decompress,
)
from .errors import InvalidArgument, ProtocolError

__all__ = [
    "BLANK_MAGIC_CODE",
    "BORNHOST_V6_FLAG",
    "COMPRESSED_FLAG",
    "DEFAULT_MAX_BODY_SIZE",
    "INNER_BATCH_FLAG",
    "MESSAGE_MAGIC_CODE_V1",
    "MESSAGE_MAGIC_CODE_V2",
    "MULTI_TAGS_FLAG",
    "NAME_VALUE_SEPARATOR",
    "NEED_UNWRAP_FLAG",
    "PROPERTY_SEPARATOR",
    "RETRY_GROUP_TOPIC_PREFIX",
    "is_retry_topic",
    "retry_topic",
    "STOREHOSTADDRESS_V6_FLAG",
    "SYSTEM_PROPERTY_KEYS",
    "TRANSACTION_COMMIT_TYPE",
    "TRANSACTION_NOT_TYPE",
    "TRANSACTION_PREPARED_TYPE",
    "TRANSACTION_ROLLBACK_TYPE",
    "BatchEntry",
    "BatchItem",
    "Message",
    "MessageDecodeError",
    "body_crc",
    "create_offset_msg_id",
    "decode_batch",
    "decode_messages",
    "decode_offset_msg_id",
    "decode_properties",
    "encode_batch",
    "encode_batch_entry",
    "encode_properties",
]

# --- wire constants ---------------------------------------------------------------------------

#: ``MessageDecoder.MESSAGE_MAGIC_CODE`` (0xDAA320A7): 1-byte topic length
MESSAGE_MAGIC_CODE_V1: Final = -626843481
#: ``MessageDecoder.MESSAGE_MAGIC_CODE_V2`` (0xDAA320AB, 5.1.0+): 2-byte topic length
MESSAGE_MAGIC_CODE_V2: Final = -626843477
#: ``MessageDecoder.BLANK_MAGIC_CODE``: commit-log end-of-file padding, never a message
BLANK_MAGIC_CODE: Final = -875286124

#: ``MessageDecoder.NAME_VALUE_SEPARATOR`` / ``PROPERTY_SEPARATOR``
NAME_VALUE_SEPARATOR: Final = "\x01"
PROPERTY_SEPARATOR: Final = "\x02"

# MessageSysFlag.java
MULTI_TAGS_FLAG: Final = 0x1 << 1
TRANSACTION_NOT_TYPE: Final = 0
TRANSACTION_PREPARED_TYPE: Final = 0x1 << 2
TRANSACTION_COMMIT_TYPE: Final = 0x2 << 2
TRANSACTION_ROLLBACK_TYPE: Final = 0x3 << 2
BORNHOST_V6_FLAG: Final = 0x1 << 4
STOREHOSTADDRESS_V6_FLAG: Final = 0x1 << 5
NEED_UNWRAP_FLAG: Final = 0x1 << 6
INNER_BATCH_FLAG: Final = 0x1 << 7

#: ``MixAll.RETRY_GROUP_TOPIC_PREFIX``
RETRY_GROUP_TOPIC_PREFIX: Final = "%RETRY%"


#: ``MixAll.DLQ_GROUP_TOPIC_PREFIX``
DLQ_GROUP_TOPIC_PREFIX: Final = "%DLQ%"


def retry_topic(consumer_group: str) -> str:
    """``MixAll.getRetryTopic``: the group's retry topic, ``%RETRY%<group>``."""
    return RETRY_GROUP_TOPIC_PREFIX + consumer_group


def is_retry_topic(topic: str) -> bool:
    return topic.startswith(RETRY_GROUP_TOPIC_PREFIX)


#: Upper bound for an inflated body. Java has none; its producers refuse bodies over
#: ``maxMessageSize`` (4 MiB by default) *before* compressing, so 32 MiB leaves room for raised
#: limits while a decompression bomb cannot exhaust memory.
DEFAULT_MAX_BODY_SIZE: Final = 32 * 1024 * 1024

# MessageConst.java property names used here
PROPERTY_KEYS: Final = "KEYS"
PROPERTY_TAGS: Final = "TAGS"
PROPERTY_RETRY_TOPIC: Final = "RETRY_TOPIC"
PROPERTY_TRANSACTION_PREPARED: Final = "TRAN_MSG"
PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: Final = "UNIQ_KEY"
PROPERTY_ORIGIN_MESSAGE_ID: Final = "ORIGIN_MESSAGE_ID"
#: ``MessageConst.PROPERTY_SHARDING_KEY``: a 5.x FIFO message's group (the proxy turns ``messageGroup`` into it)
PROPERTY_SHARDING_KEY: Final = "__SHARDINGKEY"
#: ``MessageConst.PROPERTY_REAL_TOPIC``: the topic a message waiting in a system topic (delay, timer) goes to
PROPERTY_REAL_TOPIC: Final = "REAL_TOPIC"
#: ``MessageConst.KEY_SEPARATOR``
KEY_SEPARATOR: Final = " "

#: ``MessageConst.STRING_HASH_SET``: names reserved by RocketMQ (``Message#putUserProperty``
#: refuses them); everything else in ``properties`` was put there by the application.
SYSTEM_PROPERTY_KEYS: Final[frozenset[str]] = frozenset(
    {
        "TRACE_ON",
        "MSG_REGION",
        "KEYS",
        "TAGS",
        "WAIT",
        "DELAY",
        "RETRY_TOPIC",
        "REAL_TOPIC",
        "REAL_QID",
        "TRAN_MSG",
        "PGROUP",
        "MIN_OFFSET",
        "MAX_OFFSET",
        "BUYER_ID",
        "ORIGIN_MESSAGE_ID",
        "TRANSFER_FLAG",
        "CORRECTION_FLAG",
        "MQ2_FLAG",
        "RECONSUME_TIME",
        "UNIQ_KEY",
        "MAX_RECONSUME_TIMES",
        "CONSUME_START_TIME",
        "POP_CK",
        "POP_CK_OFFSET",
        "1ST_POP_TIME",
        "TRAN_PREPARED_QUEUE_OFFSET",
        "DUP_INFO",
        "EXTEND_UNIQ_INFO",
        "INSTANCE_ID",
        "CORRELATION_ID",
        "REPLY_TO_CLIENT",
        "TTL",
        "ARRIVE_TIME",
        "PUSH_REPLY_TIME",
        "CLUSTER",
        "MSG_TYPE",
        "INNER_MULTI_QUEUE_OFFSET",
        "TIMER_DELAY_MS",
        "TIMER_DELAY_SEC",
        "TIMER_DELIVER_MS",
        "TIMER_ENQUEUE_MS",
        "TIMER_DEQUEUE_MS",
        "TIMER_ROLL_TIMES",
        "TIMER_OUT_MS",
        "TIMER_DEL_UNIQKEY",
        "TIMER_DELAY_LEVEL",
        "__BORNHOST",
        "BORN_TIMESTAMP",
        "DLQ_ORIGIN_TOPIC",
        "DLQ_ORIGIN_MESSAGE_ID",
        "__CRC32#",
    }
)

# --- record layout (MessageDecoder#decode) ----------------------------------------------------

# TOTALSIZE, MAGICCODE, BODYCRC, QUEUEID, FLAG, QUEUEOFFSET, PHYSICALOFFSET, SYSFLAG: 40 bytes
_HEAD: Final = Struct(">iiiiiqqi")


def _tail(born_ip_len: int, store_ip_len: int) -> Struct:
    # BORNTIMESTAMP, BORNHOST (ip + int32 port, read as one key), STORETIMESTAMP, STOREHOST,
    # RECONSUMETIMES, PreparedTransactionOffset, BODYLEN
    return Struct(f">q{born_ip_len + 4}sq{store_ip_len + 4}siqi")


# Indexed by (sysflag >> 4) & 3: bit 0 = BORNHOST_V6_FLAG, bit 1 = STOREHOSTADDRESS_V6_FLAG.
_TAILS: Final = (_tail(4, 4), _tail(16, 4), _tail(4, 16), _tail(16, 16))
_I16: Final = Struct(">h")
# Smallest record: 40 head + 48 tail (IPv4 hosts) + 1 topic length (V1) + 2 properties length.
_MIN_RECORD_SIZE: Final = _HEAD.size + _TAILS[0].size + 1 + 2

# Batch record (MessageDecoder#encodeMessage): TOTALSIZE, MAGICCODE (0), BODYCRC (0), FLAG, BODYLEN
_BATCH_HEAD: Final = Struct(">iiiii")
_MIN_BATCH_RECORD_SIZE: Final = _BATCH_HEAD.size + 2

_INT32_MAX: Final = 0x7FFF_FFFF
_INT16_MAX: Final = 0x7FFF
_V4_MAPPED_PREFIX: Final = bytes(10) + b"\xff\xff"
_INNER_BATCH_FLAGS: Final = INNER_BATCH_FLAG | NEED_UNWRAP_FLAG


class MessageDecodeError(ProtocolError):
    """A message record is truncated or corrupt.

    Besides ``offset`` (byte offset of the offending field in the decoded buffer) it carries
    ``record_index`` (0-based position of the record in the buffer), ``record_offset`` (where the
    record starts) and ``field`` (upstream field name, e.g. ``"BODY"``).
    """

    record_index: int | None = None
    record_offset: int | None = None
    field: str | None = None


def _decode_error(
    index: int, record_offset: int, field_name: str, field_offset: int, detail: str
) -> MessageDecodeError:
    # Attributes are set after construction so that ProtocolError's pickling
    # (type(self)(message) + __dict__) keeps working across processes.
    err = MessageDecodeError(
        f"message record #{index} (starting at byte {record_offset}), field {field_name}: {detail}",
        offset=field_offset,
    )
    err.record_index = index
    err.record_offset = record_offset
    err.field = field_name
    return err


# --- properties string --------------------------------------------------------------------------


def decode_properties(text: str) -> dict[str, str]:
    """Parse a properties string exactly like ``MessageDecoder#string2messageProperties``.

    Split on ``\\x02``; in each piece the first ``\\x01`` separates key and value; pieces without
    one, with an empty key or with an empty value are skipped; the value keeps any further
    ``\\x01``; later duplicates win. (Java's "piece shorter than 3 chars" rule is implied: a kept
    piece has at least key, separator and value.)
    """
    result: dict[str, str] = {}
    for item in text.split(PROPERTY_SEPARATOR):
        key, _, value = item.partition(NAME_VALUE_SEPARATOR)
        if key and value:  # a non-empty value implies the separator was found
            result[key] = value
    return result


def encode_properties(properties: Mapping[str, str | None] | None) -> str:
    """Properties string as ``MessageDecoder#messageProperties2String`` writes it.

    ``name \\x01 value \\x02`` per entry, in mapping order, entries with a ``None`` value
    omitted, trailing ``\\x02`` included. Like Java, names and values are not checked for the
    separator characters.
    """
    if not properties:
        return ""
    return "".join(
        f"{name}{NAME_VALUE_SEPARATOR}{value}{PROPERTY_SEPARATOR}"
        for name, value in properties.items()
        if value is not None
    )


def _utf8(text: str) -> bytes:
    # Java's String#getBytes(UTF_8) replaces unpaired surrogates with '?', as does "replace".
    return text.encode("utf-8", "replace")


# --- host addresses and message ids ---------------------------------------------------------------

# Raw "ip + port" bytes -> "ip:port". Producers and brokers are few, so the cache stays small;
# it is cleared if something (e.g. fuzzing) fills it.
_host_cache: dict[bytes, str] = {}
_HOST_CACHE_LIMIT: Final = 4096


def _format_host(raw: bytes) -> str | None:
    """``"ip:port"`` for ip (4 or 16 bytes) + int32 port; None if the port is out of range.

    Java builds ``new InetSocketAddress(InetAddress.getByAddress(ip), port)``: an out-of-range
    port throws (the record is undecodable) and an IPv4-mapped IPv6 address becomes an
    ``Inet4Address``, so we print it as IPv4 too. IPv6 is printed ``[compressed]:port``
    (brackets as in ``NetworkUtil#normalizeHostAddress``), IPv4 ``a.b.c.d:port``.
    """
    port = int.from_bytes(raw[-4:], "big", signed=True)
    if not 0 <= port <= 0xFFFF:
        return None
    ip = raw[:-4]
    if len(ip) == 16:
        if ip[:12] != _V4_MAPPED_PREFIX:
            text = f"[{socket.inet_ntop(socket.AF_INET6, ip)}]:{port}"
            return _remember_host(raw, text)
        ip = ip[12:]
    return _remember_host(raw, f"{ip[0]}.{ip[1]}.{ip[2]}.{ip[3]}:{port}")


def _remember_host(raw: bytes, text: str) -> str:
    if len(_host_cache) >= _HOST_CACHE_LIMIT:
        _host_cache.clear()
    _host_cache[raw] = text
    return text


def _parse_host(address: str) -> tuple[bytes, int]:
    """``"a.b.c.d:port"``, ``"[v6]:port"`` (or Java's unbracketed ``"v6:port"``) -> (ip bytes, port).

    IPv4-mapped IPv6 addresses give 4 bytes, as Java's ``InetAddress`` would.
    """
    host, sep, port_text = address.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        ip = ipaddress.ip_address(host)
        port = int(port_text)
    except ValueError:
        raise InvalidArgument(f"not an 'ip:port' address: {address!r}") from None
    if not sep or not 0 <= port <= 0xFFFF:
        raise InvalidArgument(f"not an 'ip:port' address: {address!r}")
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.packed, port


def create_offset_msg_id(store_host: str, commit_log_offset: int, *, ipv6_layout: bool | None = None) -> str:
    """Offset message id: uppercase hex of store ip + int32 port + int64 commit-log offset.

    ``MessageDecoder#createMessageId`` + ``UtilAll#bytes2string``: 32 hex chars for IPv4, 56 for
    IPv6. ``ipv6_layout`` is the record's STOREHOSTADDRESS_V6_FLAG (default: by address family).
    Java sizes the id from that flag but fills it from the parsed address, so an IPv4-mapped
    address under the IPv6 flag gives the IPv4 bytes followed by 12 zero bytes (56 chars).
    """
    ip, port = _parse_host(store_host)
    raw = ip + port.to_bytes(4, "big") + (commit_log_offset & 0xFFFF_FFFF_FFFF_FFFF).to_bytes(8, "big")
    if ipv6_layout is None:
        ipv6_layout = len(ip) == 16
    if ipv6_layout:
        raw = raw.ljust(28, b"\x00")
    return raw.hex().upper()


def decode_offset_msg_id(msg_id: str) -> tuple[str, int]:
    """Offset message id -> (store address ``"ip:port"``, commit-log offset).

    ``MessageDecoder#decodeMessageId``: 32 hex chars mean an IPv4 store host, any other length a
    16-byte IPv6 one (so, like Java, the 56-char "IPv4 under the IPv6 flag" form does not round-trip).
    The offset is a signed int64 as in Java.

    Raises:
        InvalidArgument: not 32 or 56 hex digits.
    """
    if len(msg_id) not in (32, 56):
        raise InvalidArgument(f"offset message id must have 32 or 56 hex digits, got {len(msg_id)}")
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raise InvalidArgument(f"offset message id is not hexadecimal: {msg_id!r}") from None
    ip_len = 4 if len(msg_id) == 32 else 16
    address = _format_host(raw[: ip_len + 4])
    if address is None:  # Java: InetSocketAddress rejects the port
        raise InvalidArgument(f"offset message id has a port outside 0..65535: {msg_id!r}")
    offset = int.from_bytes(raw[ip_len + 4 : ip_len + 12], "big", signed=True)
    return address, offset


def body_crc(body: bytes) -> int:
    """BODYCRC as the broker stores it: ``UtilAll#crc32`` = CRC32 ``& 0x7FFFFFFF``."""
    return zlib.crc32(body) & _INT32_MAX


# --- the message ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Message:
    """One consumed message (Java ``MessageExt`` / ``MessageClientExt``), immutable.

    ``body`` is the decompressed body, and then ``sys_flag`` no longer has COMPRESSED_FLAG, as in
    Java. ``born_host``/``store_host`` are ``"a.b.c.d:port"`` or ``"[v6]:port"``.
    ``store_size`` is TOTALSIZE (0 for messages unwrapped from an inner batch, as in Java).
    """

    topic: str
    flag: int = 0
    queue_id: int = 0
    queue_offset: int = 0
    commit_log_offset: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: str = "0.0.0.0:0"
    store_timestamp: int = 0
    store_host: str = "0.0.0.0:0"
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    body: bytes = field(default=b"", repr=False)
    properties: dict[str, str] = field(default_factory=dict, hash=False)
    body_crc: int = 0
    store_size: int = 0

    @property
    def tags(self) -> str | None:
        """TAGS property (``Message#getTags``); what tag subscriptions compare."""
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> tuple[str, ...]:
        """KEYS split on ``KEY_SEPARATOR``, empty pieces dropped (as the broker's index does)."""
        text = self.properties.get(PROPERTY_KEYS)
        if not text:
            return ()
        return tuple(key for key in text.split(KEY_SEPARATOR) if key)

    @property
    def offset_msg_id(self) -> str:
        """Broker-assigned id: store host + commit-log offset (``MessageDecoder#createMessageId``)."""
        return create_offset_msg_id(
            self.store_host,
            self.commit_log_offset,
            ipv6_layout=bool(self.sys_flag & STOREHOSTADDRESS_V6_FLAG),
        )

    @property
    def msg_id(self) -> str:
        """``MessageClientExt#getMsgId``: the producer's UNIQ_KEY, else the offset message id."""
        uniq = self.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        return uniq if uniq is not None else self.offset_msg_id

    @property
    def transaction_id(self) -> str | None:
        """UNIQ_KEY if ``TRAN_MSG`` parses as true (``PullAPIWrapper#processPullResult``)."""
        # Boolean#parseBoolean: case-insensitive "true"
        if self.properties.get(PROPERTY_TRANSACTION_PREPARED, "").lower() == "true":
            return self.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        return None

    @property
    def user_properties(self) -> dict[str, str]:
        """Properties minus RocketMQ's reserved names (``MessageConst.STRING_HASH_SET``)."""
        return {k: v for k, v in self.properties.items() if k not in SYSTEM_PROPERTY_KEYS}

    @property
    def original_topic(self) -> str:
        """Topic the application produced to: RETRY_TOPIC for a message from a ``%RETRY%`` topic."""
        original = self.properties.get(PROPERTY_RETRY_TOPIC)
        if original is not None and is_retry_topic(self.topic):
            return original
        return self.topic

    def restore_retry_topic(self, consumer_group: str | None = None) -> Message:
        """Copy with the original topic restored for a redelivered message, else ``self``.

        With ``consumer_group`` this is exactly ``DefaultMQPushConsumerImpl#resetRetryAndNamespace``:
        only a message whose topic equals ``%RETRY%<group>`` and that has RETRY_TOPIC is changed.
        Without it, any ``%RETRY%`` topic qualifies.
        """
        original = self.properties.get(PROPERTY_RETRY_TOPIC)
        if original is None:
            return self
        if consumer_group is None:
            applies = is_retry_topic(self.topic)
        else:
            applies = self.topic == retry_topic(consumer_group)
        return replace(self, topic=original) if applies else self


# --- decoding -----------------------------------------------------------------------------------

# Fast construction of decoded messages. A frozen dataclass sets each field through
# object.__setattr__ (about 1.1 us for 16 fields, a third of the whole per-message decode cost).
# This twin has the same slots but plain attribute stores (about 0.15 us); each instance is then
# re-classed to Message, which CPython allows because the slot layouts are identical. The result
# is an ordinary, frozen Message (type(m) is Message).
_MessageBuilder = make_dataclass(
    "_MessageBuilder",
    [(f.name, f.type) for f in fields(Message)],
    slots=True,
    eq=False,
    repr=False,
)
if _MessageBuilder.__slots__ != Message.__slots__:  # type: ignore[attr-defined]  # pragma: no cover
    raise RuntimeError("_MessageBuilder must have exactly Message's slots")


def decode_messages(
    body: bytes | bytearray | memoryview,
    *,
    decompress: bool = True,
    unwrap_batches: bool = True,
    max_body_size: int = DEFAULT_MAX_BODY_SIZE,
) -> list[Message]:
    """Decode a PULL_MESSAGE body: message records back to back (``MessageDecoder#decodesBatch``).

    Args:
        body: the response body; a memoryview is read in place (only fields are copied).
        decompress: inflate bodies whose sysflag has COMPRESSED_FLAG (Java's
            ``decodeDecompressBody``, default true); the algorithm comes from sysflag bits 8-10.
        unwrap_batches: replace a record with INNER_BATCH_FLAG and NEED_UNWRAP_FLAG by its inner
            messages (``PullAPIWrapper#processPullResult``); skipped while the body is compressed.
        max_body_size: limit for an inflated body.

    Raises:
        MessageDecodeError: a record is truncated or corrupt; nothing is returned for the batch.
    """
    view = memoryview(body)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")  # e.g. format "b" would index as signed, "c" as bytes
    # Slicing bytes yields bytes in one step; other buffers are sliced through the view and copied.
    src: bytes | memoryview = body if type(body) is bytes else view
    copy_slices = src is view
    size = len(view)
    messages: list[Message] = []
    pos = 0
    index = 0
    head_unpack = _HEAD.unpack_from
    i16_unpack = _I16.unpack_from
    hosts = _host_cache
    while pos < size:
        remaining = size - pos
        if remaining < _MIN_RECORD_SIZE:
            raise _decode_error(
                index, pos, "TOTALSIZE", pos, f"only {remaining} bytes left, a record needs at least {_MIN_RECORD_SIZE}"
            )
        (total, magic, crc, queue_id, flag, queue_offset, commit_log_offset, sys_flag) = head_unpack(view, pos)
        if total > remaining:
            raise _decode_error(
                index, pos, "TOTALSIZE", pos, f"record of {total} bytes is truncated, only {remaining} bytes left"
            )
        if total < _MIN_RECORD_SIZE:
            raise _decode_error(
                index, pos, "TOTALSIZE", pos, f"{total} is below the minimum record size {_MIN_RECORD_SIZE}"
            )
        if magic == MESSAGE_MAGIC_CODE_V1:
            topic_len_size = 1
        elif magic == MESSAGE_MAGIC_CODE_V2:
            topic_len_size = 2
        else:
            raise _decode_error(index, pos, "MAGICCODE", pos + 4, f"unknown magic code {magic & 0xFFFFFFFF:#010x}")
        end = pos + total
        tail = _TAILS[(sys_flag >> 4) & 3]
        p = pos + 40 + tail.size  # first body byte
        if p + topic_len_size + 2 > end:
            raise _decode_error(
                index, pos, "TOTALSIZE", pos, f"{total} bytes cannot hold the fixed fields for sysflag {sys_flag:#x}"
            )
        (born_timestamp, born_raw, store_timestamp, store_raw, reconsume_times, prepared_offset, body_len) = (
            tail.unpack_from(view, pos + 40)
        )

        # 15 BODY
        if body_len < 0 or body_len > end - p - topic_len_size - 2:
            raise _decode_error(
                index, pos, "BODY", p - 4, f"length {body_len} does not fit the record of {total} bytes"
            )
        body_start = p
        p += body_len

        # 16 TOPIC: length read signed, 1 byte (V1) or 2 bytes (V2) (MessageVersion#getTopicLength)
        if topic_len_size == 1:
            topic_len = view[p]
            if topic_len > 127:
                topic_len -= 256
        else:
            topic_len = i16_unpack(view, p)[0]
        if topic_len < 0 or topic_len > end - p - topic_len_size - 2:
            raise _decode_error(index, pos, "TOPIC", p, f"length {topic_len} does not fit the record of {total} bytes")
        p += topic_len_size
        topic = str(src[p : p + topic_len], "utf-8", "replace")
        p += topic_len

        # 17 PROPERTIES: signed int16 length, parsed only if > 0; the record must end right after
        props_len = i16_unpack(view, p)[0]
        p += 2
        if props_len < 0 or p + props_len != end:
            raise _decode_error(
                index,
                pos,
                "PROPERTIES",
                p - 2,
                f"length {props_len} leaves {end - p - props_len} bytes of the {total}-byte record unaccounted for",
            )
        properties = decode_properties(str(src[p:end], "utf-8", "replace")) if props_len else {}

        born_host = hosts.get(born_raw) or _format_host(born_raw)
        if born_host is None:
            raise _decode_error(index, pos, "BORNHOST", pos + 48, "port outside 0..65535")
        store_host = hosts.get(store_raw) or _format_host(store_raw)
        if store_host is None:
            raise _decode_error(index, pos, "STOREHOST", pos + 56 + len(born_raw), "port outside 0..65535")

        message_body = src[body_start : body_start + body_len]
        if copy_slices:
            message_body = bytes(message_body)
        if sys_flag & COMPRESSED_FLAG and decompress and body_len > 0:
            # MessageDecoder#decode: inflate, then clear COMPRESSED_FLAG (Java skips empty bodies)
            try:
                message_body = _decompress(message_body, CompressionType.from_sys_flag(sys_flag), max_body_size)
            except DecompressionError as exc:
                raise _decode_error(index, pos, "BODY", body_start, str(exc)) from None
            sys_flag &= ~COMPRESSED_FLAG

        built = _MessageBuilder(
            topic,
            flag,
            queue_id,
            queue_offset,
            commit_log_offset,
            sys_flag,
            born_timestamp,
            born_host,
            store_timestamp,
            store_host,
            reconsume_times,
            prepared_offset,
            message_body,
            properties,
            crc,
            total,
        )
        built.__class__ = Message
        message = cast(Message, built)
        if unwrap_batches and sys_flag & _INNER_BATCH_FLAGS == _INNER_BATCH_FLAGS and not sys_flag & COMPRESSED_FLAG:
            messages.extend(_unwrap_inner_batch(message, index, pos, body_start))
        else:
            messages.append(message)
        pos = end
        index += 1
    return messages


def _unwrap_inner_batch(outer: Message, index: int, record_offset: int, body_offset: int) -> list[Message]:
    """Inner messages of a 5.x auto-batch record (``MessageDecoder#decodeMessage(MessageExt, List)``).

    Each takes flag, body and properties from its batch entry, ``queue_offset + i``, and everything
    else from the outer record; reconsume times, prepared offset, CRC and store size stay 0 as in Java.
    """
    try:
        entries = decode_batch(outer.body)
    except MessageDecodeError as exc:
        raise _decode_error(
            index,
            record_offset,
            f"BODY (inner batch entry #{exc.record_index}, field {exc.field})",
            body_offset + (exc.offset or 0),
            "malformed inner batch",
        ) from None
    return [
        Message(
            outer.topic,
            entry.flag,
            outer.queue_id,
            outer.queue_offset + i,
            outer.commit_log_offset,
            outer.sys_flag,
            outer.born_timestamp,
            outer.born_host,
            outer.store_timestamp,
            outer.store_host,
            0,
            0,
            entry.body,
            entry.properties,
            0,
            0,
        )
        for i, entry in enumerate(entries)
    ]


# --- batches (SEND_BATCH_MESSAGE body, inner batches) --------------------------------------------


class BatchItem(Protocol):
    """Anything with the three fields a batch record carries (``BatchEntry``, ``Message``)."""

    @property
    def body(self) -> bytes: ...

    @property
    def properties(self) -> Mapping[str, str]: ...

    @property
    def flag(self) -> int: ...


@dataclass(frozen=True, slots=True)
class BatchEntry:
    """One message of a batch body: only flag, body and properties travel (``#encodeMessage``)."""

    body: bytes = field(repr=False)
    properties: dict[str, str] = field(default_factory=dict, hash=False)
    flag: int = 0


def encode_batch_entry(item: BatchItem) -> bytes:
    """One batch record, ``MessageDecoder#encodeMessage``.

    Layout: int32 TOTALSIZE, int32 MAGICCODE (0), int32 BODYCRC (0), int32 FLAG, int32 BODYLEN,
    BODY, int16 PROPERTIESLEN, PROPERTIES (UTF-8).

    Raises:
        InvalidArgument: properties longer than 32767 bytes (4.9.x throws; 5.x would silently
            write a wrong length) or a body too large for an int32 record.
    """
    props = _utf8(encode_properties(item.properties))
    if len(props) > _INT16_MAX:
        raise InvalidArgument(f"properties of {len(props)} bytes exceed the limit of {_INT16_MAX}")
    payload = item.body
    total = _MIN_BATCH_RECORD_SIZE + len(payload) + len(props)
    if total > _INT32_MAX:
        raise InvalidArgument(f"batch record of {total} bytes does not fit an int32 length")
    return b"".join(
        (
            _BATCH_HEAD.pack(total, 0, 0, item.flag, len(payload)),
            payload,
            _I16.pack(len(props)),
            props,
        )
    )


def encode_batch(items: Iterable[BatchItem]) -> bytes:
    """SEND_BATCH_MESSAGE (320) body: the records of ``encode_batch_entry`` concatenated
    (``MessageDecoder#encodeMessages``)."""
    return b"".join(encode_batch_entry(item) for item in items)


def decode_batch(body: bytes | bytearray | memoryview) -> list[BatchEntry]:
    """Inverse of :func:`encode_batch` (``MessageDecoder#decodeMessages``).

    Java ignores TOTALSIZE, MAGICCODE and BODYCRC here; we still require TOTALSIZE to match the
    fields so that a corrupt batch fails instead of being misread.

    Raises:
        MessageDecodeError: truncated or inconsistent record (``record_index`` = entry number).
    """
    view = memoryview(body)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")  # e.g. format "b" would index as signed, "c" as bytes
    size = len(view)
    entries: list[BatchEntry] = []
    pos = 0
    index = 0
    while pos < size:
        remaining = size - pos
        if remaining < _MIN_BATCH_RECORD_SIZE:
            raise _decode_error(
                index,
                pos,
                "TOTALSIZE",
                pos,
                f"only {remaining} bytes left, a batch record needs at least {_MIN_BATCH_RECORD_SIZE}",
            )
        total, _magic, _crc, flag, body_len = _BATCH_HEAD.unpack_from(view, pos)
        if not _MIN_BATCH_RECORD_SIZE <= total <= remaining:
            raise _decode_error(
                index, pos, "TOTALSIZE", pos, f"{total} is not within {_MIN_BATCH_RECORD_SIZE}..{remaining}"
            )
        end = pos + total
        p = pos + _BATCH_HEAD.size
        if body_len < 0 or body_len > end - p - 2:
            raise _decode_error(
                index, pos, "BODY", p - 4, f"length {body_len} does not fit the record of {total} bytes"
            )
        entry_body = bytes(view[p : p + body_len])
        p += body_len
        props_len = _I16.unpack_from(view, p)[0]
        p += 2
        if props_len < 0 or p + props_len != end:
            raise _decode_error(
                index,
                pos,
                "PROPERTIES",
                p - 2,
                f"length {props_len} leaves {end - p - props_len} bytes of the {total}-byte record unaccounted for",
            )
        properties = decode_properties(str(view[p:end], "utf-8", "replace")) if props_len else {}
        entries.append(BatchEntry(entry_body, properties, flag))
        pos = end
        index += 1
    return entries
