"""Commit-log records encoded as the broker stores and serves them: the unit tests' test-only encoder (the broker is
the only real writer of records, so this is not in the package)."""

from __future__ import annotations

from rocketlake.rocketmq.errors import InvalidArgument
from rocketlake.rocketmq.message import (
    _HEAD,
    _I16,
    _INT16_MAX,
    _INT32_MAX,
    _TAILS,
    _V4_MAPPED_PREFIX,
    BORNHOST_V6_FLAG,
    MESSAGE_MAGIC_CODE_V1,
    MESSAGE_MAGIC_CODE_V2,
    STOREHOSTADDRESS_V6_FLAG,
    Message,
    _parse_host,
    _utf8,
    encode_properties,
)


def _host_bytes(address: str, ipv6_flag: bool) -> tuple[bytes, bool]:
    ip, port = _parse_host(address)
    if len(ip) == 16:
        ipv6_flag = True
    elif ipv6_flag:  # IPv4 under the IPv6 flag: stored IPv4-mapped, decoded back as IPv4
        ip = _V4_MAPPED_PREFIX + ip
    return ip + port.to_bytes(4, "big"), ipv6_flag


def encode_message_record(message: Message, *, magic_v2: bool | None = None) -> bytes:
    """A commit-log record for ``message`` as the broker stores and serves it.

    For fakes and tests; the broker is the only real writer. ``message.body`` is written as is (to
    serve a compressed body, compress it and set the sysflag bits yourself) and ``body_crc`` as
    given (see :func:`body_crc`); TOTALSIZE is computed. ``magic_v2=None`` picks V2 only for topics
    longer than 127 bytes (``autoMessageVersionOnTopicLen``). IPv6 hosts set their sysflag bits.

    Raises:
        InvalidArgument: topic or properties too long for the chosen format, or a bad host.
    """
    sys_flag = message.sys_flag
    born, born_v6 = _host_bytes(message.born_host, bool(sys_flag & BORNHOST_V6_FLAG))
    store, store_v6 = _host_bytes(message.store_host, bool(sys_flag & STOREHOSTADDRESS_V6_FLAG))
    sys_flag |= (BORNHOST_V6_FLAG if born_v6 else 0) | (STOREHOSTADDRESS_V6_FLAG if store_v6 else 0)
    topic = _utf8(message.topic)
    if magic_v2 is None:
        magic_v2 = len(topic) > 127
    if len(topic) > (_INT16_MAX if magic_v2 else 127):
        raise InvalidArgument(f"topic of {len(topic)} bytes is too long for magic {'V2' if magic_v2 else 'V1'}")
    props = _utf8(encode_properties(message.properties))
    if len(props) > _INT16_MAX:
        raise InvalidArgument(f"properties of {len(props)} bytes exceed the limit of {_INT16_MAX}")
    tail = _TAILS[(sys_flag >> 4) & 3]
    topic_len_size = 2 if magic_v2 else 1
    total = _HEAD.size + tail.size + len(message.body) + topic_len_size + len(topic) + 2 + len(props)
    if total > _INT32_MAX:
        raise InvalidArgument(f"record of {total} bytes does not fit an int32 length")
    return b"".join(
        (
            _HEAD.pack(
                total,
                MESSAGE_MAGIC_CODE_V2 if magic_v2 else MESSAGE_MAGIC_CODE_V1,
                message.body_crc,
                message.queue_id,
                message.flag,
                message.queue_offset,
                message.commit_log_offset,
                sys_flag,
            ),
            tail.pack(
                message.born_timestamp,
                born,
                message.store_timestamp,
                store,
                message.reconsume_times,
                message.prepared_transaction_offset,
                len(message.body),
            ),
            message.body,
            len(topic).to_bytes(topic_len_size, "big"),
            topic,
            _I16.pack(len(props)),
            props,
        )
    )
