"""SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320): what a producer sends, and the answer (sans I/O).

What ``DefaultMQProducerImpl#sendKernelImpl`` does before the wire, and we do the same:

* every message gets a ``UNIQ_KEY`` (:mod:`.unique_key`) unless it has one, and ``WAIT=true``;
  tags and keys travel as the ``TAGS`` / ``KEYS`` properties (keys joined by a space);
* a single message's body of 4096 bytes or more (``compressMsgBodyOverHowmuch``, compared with
  ``>=`` as Java does) is compressed with zlib level 5 and the sysFlag gets
  ``COMPRESSED_FLAG | ZLIB << 8`` (``0x301``); batches are never compressed (Java: "batch does
  not support compressing right now");
* the header is ``SendMessageRequestHeaderV2`` with its one-letter field names (reference 2.13).

One deliberate difference for batches: Java also puts a batch-level ``UNIQ_KEY`` into the batch
header's properties, and the broker appends those properties to every message of the batch
(``MessageExtEncoder#encode(MessageExtBatch)``), so the batch key *overrides* each message's own
key -- every message of a Java batch reads back with the same msgId (observed on 4.9.7 and
5.3.3). We send only ``WAIT`` at batch level, so each message keeps its own unique key.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .codes import RequestCode, ResponseCode
from .compression import (
    COMPRESSED_FLAG,
    DEFAULT_COMPRESS_LEVEL,
    DEFAULT_COMPRESS_OVER_BYTES,
    CompressionType,
    compress,
)
from .errors import InvalidArgument, ProtocolError, error_for_response
from .frame import RemotingCommand
from .message import SYSTEM_PROPERTY_KEYS, BatchEntry, encode_batch, encode_properties, is_retry_topic
from .message_queue import MessageQueue
from .unique_key import create_uniq_id
from .validators import check_topic_for_send

__all__ = [
    "DEFAULT_PRODUCER_GROUP",
    "MAX_MESSAGE_SIZE",
    "OutgoingMessage",
    "RetryMessage",
    "SendResult",
    "SendStatus",
    "build_retry_request",
    "build_send_batch_request",
    "build_send_request",
    "parse_send_response",
]

#: ``MixAll.DEFAULT_PRODUCER_GROUP`` is reserved for Java; ours has its own name.
DEFAULT_PRODUCER_GROUP = "rocketlake_producer"
#: ``DefaultMQProducer.maxMessageSize`` default (4 MiB), checked before compression like Java.
MAX_MESSAGE_SIZE = 4 * 1024 * 1024
#: ``TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC`` / ``DefaultMQProducer.defaultTopicQueueNums``
_DEFAULT_TOPIC = "TBW102"
_DEFAULT_TOPIC_QUEUE_NUMS = 4

_UNIQ_KEY = "UNIQ_KEY"
_SEPARATORS = ("\x01", "\x02")


class SendStatus(enum.Enum):
    """``SendStatus.java``; all four mean the broker stored the message."""

    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


_SEND_STATUS = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}


@dataclass(frozen=True, slots=True)
class OutgoingMessage:
    """A message to produce: topic, body, and what Java's ``Message`` carries besides.

    ``properties`` are user properties; RocketMQ's reserved names (``MessageConst.STRING_HASH_SET``)
    are refused like ``Message#putUserProperty`` does, except ``UNIQ_KEY``, which may be given to
    fix the message id. ``delay_level`` (1..18) sets ``DELAY``.
    """

    topic: str
    body: bytes = field(repr=False)
    tags: str | None = None
    keys: Sequence[str] = ()
    properties: Mapping[str, str] = field(default_factory=dict, hash=False)
    flag: int = 0
    delay_level: int = 0

    def __post_init__(self) -> None:
        check_topic_for_send(self.topic)
        if not isinstance(self.body, (bytes, bytearray, memoryview)):
            raise InvalidArgument(f"message body must be bytes, got {type(self.body).__name__}")
        if len(self.body) == 0:
            raise InvalidArgument("the message body length is zero")
        if len(self.body) > MAX_MESSAGE_SIZE:
            raise InvalidArgument(
                f"the message body size over max value, MAX: {MAX_MESSAGE_SIZE} (got {len(self.body)})"
            )
        # Own copies: a caller mutating its list or dict later must not change a built message.
        keys = ((self.keys,) if self.keys else ()) if isinstance(self.keys, str) else tuple(self.keys)
        object.__setattr__(self, "keys", keys)
        object.__setattr__(self, "properties", dict(self.properties))
        for name, value in self.properties.items():
            if name in SYSTEM_PROPERTY_KEYS and name != _UNIQ_KEY:
                raise InvalidArgument(f"The Property<{name}> is used by system, input another please")
            if not isinstance(name, str) or not isinstance(value, str) or not name.strip() or not value.strip():
                raise InvalidArgument(
                    f"The name or value of property can not be null or blank string! ({name!r}: {value!r})"
                )
        if not all(isinstance(k, str) for k in self.keys):
            raise InvalidArgument(f"message keys must be strings, got {self.keys!r}")
        for text in (self.tags or "", *self.keys, *self.properties, *self.properties.values()):
            if any(sep in text for sep in _SEPARATORS):
                raise InvalidArgument(f"{text!r} contains a property separator (\\x01 or \\x02)")
        if not 0 <= self.delay_level <= 18:
            raise InvalidArgument(f"delay_level must be within [0, 18], got {self.delay_level}")

    def wire_properties(self, uniq_key: str | None = None) -> dict[str, str]:
        """Every property sent: user ones, then TAGS, KEYS, DELAY, WAIT and UNIQ_KEY."""
        props = dict(self.properties)
        if self.tags:
            props["TAGS"] = self.tags
        keys = " ".join(k for k in self.keys if k)
        if keys:
            props["KEYS"] = keys
        if self.delay_level:
            props["DELAY"] = str(self.delay_level)
        props["WAIT"] = "true"
        if _UNIQ_KEY not in props:
            props[_UNIQ_KEY] = uniq_key or create_uniq_id()
        return props


@dataclass(frozen=True, slots=True)
class SendResult:
    """The broker's answer for one message (``SendResult.java``, one per message of a batch)."""

    status: SendStatus
    msg_id: str  # the producer's UNIQ_KEY, what consumers see as msgId
    offset_msg_id: str  # the broker's store id (store host + commit-log offset)
    queue: MessageQueue
    queue_offset: int
    transaction_id: str | None = None


def _header(
    *,
    producer_group: str,
    topic: str,
    queue_id: int,
    sys_flag: int,
    flag: int,
    properties: str,
    batch: bool,
    broker_name: str | None,
    reconsume_times: int = 0,
    max_reconsume_times: int | None = None,
) -> dict[str, object]:
    # SendMessageRequestHeaderV2#createSendMessageRequestHeaderV2: one-letter aliases.
    return {
        "a": producer_group,
        "b": topic,
        "c": _DEFAULT_TOPIC,
        "d": _DEFAULT_TOPIC_QUEUE_NUMS,
        "e": queue_id,
        "f": sys_flag,
        "g": int(time.time() * 1000),
        "h": flag,
        "i": properties,
        "j": reconsume_times,
        "k": False,
        "l": max_reconsume_times,
        "m": batch,
        "n": broker_name,
    }


def build_send_request(
    message: OutgoingMessage,
    queue_id: int,
    *,
    producer_group: str = DEFAULT_PRODUCER_GROUP,
    broker_name: str | None = None,
    compress_over: int = DEFAULT_COMPRESS_OVER_BYTES,
    compression: CompressionType = CompressionType.ZLIB,
    compress_level: int = DEFAULT_COMPRESS_LEVEL,
) -> tuple[RemotingCommand, list[str]]:
    """SEND_MESSAGE_V2 for one message; returns the request and ``[UNIQ_KEY]``."""
    return _single_request(
        message.topic,
        queue_id,
        message.body,
        message.wire_properties(),
        message.flag,
        producer_group=producer_group,
        broker_name=broker_name,
        compress_over=compress_over,
        compression=compression,
        compress_level=compress_level,
    )


def _single_request(
    topic: str,
    queue_id: int,
    body: bytes,
    props: dict[str, str],
    flag: int,
    *,
    producer_group: str,
    broker_name: str | None,
    compress_over: int,
    compression: CompressionType = CompressionType.ZLIB,
    compress_level: int = DEFAULT_COMPRESS_LEVEL,
    reconsume_times: int = 0,
    max_reconsume_times: int | None = None,
) -> tuple[RemotingCommand, list[str]]:
    """SEND_MESSAGE_V2 of one body (compressed from ``compress_over`` bytes, as Java's producer does)."""
    body = bytes(body)
    sys_flag = 0
    if len(body) >= compress_over:
        body = compress(body, compression, compress_level)
        sys_flag |= COMPRESSED_FLAG | compression.sys_flag_bits
    header = _header(
        producer_group=producer_group,
        topic=topic,
        queue_id=queue_id,
        sys_flag=sys_flag,
        flag=flag,
        properties=encode_properties(props),
        batch=False,
        broker_name=broker_name,
        reconsume_times=reconsume_times,
        max_reconsume_times=max_reconsume_times,
    )
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, header, body), [props[_UNIQ_KEY]]


@dataclass(frozen=True, slots=True)
class RetryMessage:
    """A message a consumer produces into its group's retry topic itself, when the broker that stores it does not
    take CONSUMER_SEND_MSG_BACK (``DefaultMQPushConsumerImpl#sendMessageBackAsNormalMessage``).

    ``properties`` travel as given, RocketMQ's own names included (the original's ``UNIQ_KEY``, ``RETRY_TOPIC``,
    ``ORIGIN_MESSAGE_ID``, ``DELAY``, ...). ``reconsume_times`` and ``max_reconsume_times`` also go in the header
    (``j``, ``l``), where Java's producer moves them from ``RECONSUME_TIME`` / ``MAX_RECONSUME_TIMES`` for a
    ``%RETRY%`` topic (``DefaultMQProducerImpl#sendKernelImpl``): the broker stores the message with that
    reconsume count, or in ``%DLQ%<group>`` once it is over the maximum (``SendMessageProcessor#handleRetryAndDLQ``).
    """

    topic: str
    body: bytes = field(repr=False)
    properties: Mapping[str, str] = field(hash=False)
    reconsume_times: int
    max_reconsume_times: int
    flag: int = 0

    def __post_init__(self) -> None:
        if not is_retry_topic(self.topic):
            raise InvalidArgument(f"{self.topic!r} is not a retry topic (%RETRY%<group>)")
        if len(self.body) == 0:
            raise InvalidArgument("the message body length is zero")
        object.__setattr__(self, "properties", dict(self.properties))


def build_retry_request(
    message: RetryMessage,
    queue_id: int,
    *,
    producer_group: str = DEFAULT_PRODUCER_GROUP,
    broker_name: str | None = None,
    compress_over: int = DEFAULT_COMPRESS_OVER_BYTES,
) -> tuple[RemotingCommand, list[str]]:
    """SEND_MESSAGE_V2 of a :class:`RetryMessage`; returns the request and ``[UNIQ_KEY]`` (the original's, else a new
    one, as Java's ``MessageClientIDSetter#setUniqID`` keeps an existing key)."""
    props = dict(message.properties)
    props.setdefault(_UNIQ_KEY, create_uniq_id())
    return _single_request(
        message.topic,
        queue_id,
        message.body,
        props,
        message.flag,
        producer_group=producer_group,
        broker_name=broker_name,
        compress_over=compress_over,
        reconsume_times=message.reconsume_times,
        max_reconsume_times=message.max_reconsume_times,
    )


def build_send_batch_request(
    messages: Sequence[OutgoingMessage],
    queue_id: int,
    *,
    producer_group: str = DEFAULT_PRODUCER_GROUP,
    broker_name: str | None = None,
) -> tuple[RemotingCommand, list[str]]:
    """SEND_BATCH_MESSAGE for messages of one topic; returns the request and their UNIQ_KEYs."""
    if not messages:
        raise InvalidArgument("send_batch needs at least one message")
    topic = messages[0].topic
    if any(m.topic != topic for m in messages):
        raise InvalidArgument("The topic of the messages in one batch should be the same")
    if any(m.delay_level for m in messages):
        raise InvalidArgument("TimeDelayLevel is not supported for batching")
    if is_retry_topic(topic):
        raise InvalidArgument("Retry Group is not supported for batching")
    entries = []
    keys = []
    for m in messages:
        props = m.wire_properties()
        keys.append(props[_UNIQ_KEY])
        entries.append(BatchEntry(bytes(m.body), props, m.flag))
    body = encode_batch(entries)
    if len(body) > MAX_MESSAGE_SIZE:
        raise InvalidArgument(f"a batch of {len(body)} bytes exceeds the maximum message size {MAX_MESSAGE_SIZE}")
    header = _header(
        producer_group=producer_group,
        topic=topic,
        queue_id=queue_id,
        sys_flag=0,
        flag=0,
        properties=encode_properties({"WAIT": "true"}),
        batch=True,
        broker_name=broker_name,
    )
    return RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, header, body), keys


def parse_send_response(
    response: RemotingCommand,
    uniq_keys: Sequence[str],
    *,
    topic: str,
    broker_name: str,
    address: str,
    request_code: int,
) -> list[SendResult]:
    """One :class:`SendResult` per sent message (``MQClientAPIImpl#processSendResponse``).

    A batch answers with its offset ids comma-joined and the queue offset of its first message.
    """
    status = _SEND_STATUS.get(response.code)
    if status is None:
        raise error_for_response(
            address=address, request_code=request_code, response_code=response.code, remark=response.remark
        )
    fields = response.ext_fields
    try:
        queue_id = int(fields["queueId"])
        first_offset = int(fields["queueOffset"])
        offset_ids = fields["msgId"].split(",")
    except (KeyError, ValueError) as exc:
        raise ProtocolError(
            f"{address} answered a send without a valid {exc}: {fields}", address=address, request_code=request_code
        ) from None
    if len(offset_ids) != len(uniq_keys):
        raise ProtocolError(
            f"{address} answered a send of {len(uniq_keys)} messages with {len(offset_ids)} message ids",
            address=address,
            request_code=request_code,
        )
    queue = MessageQueue(topic, broker_name, queue_id)
    return [
        SendResult(status, uniq, offset_id, queue, first_offset + i, fields.get("transactionId"))
        for i, (uniq, offset_id) in enumerate(zip(uniq_keys, offset_ids))
    ]
