"""Wire vocabulary of the RocketMQ classic remoting protocol.

Numbers are wire-visible and must match upstream exactly, so each enum names the
Java file it mirrors. Only ``IntEnum`` lookups are done here; nothing in this module
does I/O or depends on another module of the package.
"""

from __future__ import annotations

from enum import IntEnum

__all__ = [
    "CURRENT_VERSION",
    "MAX_FRAME_SIZE",
    "LanguageCode",
    "RequestCode",
    "ResponseCode",
    "SerializeType",
    "request_name",
    "response_name",
]

#: ``MQVersion.Version.V5_3_3.ordinal()`` (common/.../MQVersion.java). Sent as the
#: ``version`` header field: the name server answers standard JSON routes only for
#: ``version >= 401`` (V4_9_4), and ``maxReconsumeTimes`` is honoured only for ``>= 121``.
CURRENT_VERSION = 479

#: ``com.rocketmq.remoting.frameMaxLength`` default (remoting/.../netty/NettyDecoder.java).
#: A frame whose 4-byte length prefix exceeds this makes the broker close the channel;
#: we refuse to allocate for such a frame too.
MAX_FRAME_SIZE = 16_777_216


class SerializeType(IntEnum):
    """High byte of the header-length word (remoting/.../protocol/SerializeType.java)."""

    JSON = 0
    ROCKETMQ = 1


class LanguageCode(IntEnum):
    """Byte values of remoting/.../protocol/LanguageCode.java (the JSON header carries the name)."""

    JAVA = 0
    CPP = 1
    DOTNET = 2
    PYTHON = 3
    DELPHI = 4
    ERLANG = 5
    RUBY = 6
    OTHER = 7
    HTTP = 8
    GO = 9
    PHP = 10
    OMS = 11
    RUST = 12
    NODE_JS = 13  # 5.x only; 4.9.8 stops at RUST.


class RequestCode(IntEnum):
    """Request codes (remoting/.../protocol/RequestCode.java; 4.9.x: common/.../protocol/RequestCode.java).

    The set is the one a pull consumer, its tests and the server-to-client requests need;
    numbers are identical in 4.9.8 and 5.x unless noted.
    """

    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_MESSAGE = 12
    QUERY_BROKER_OFFSET = 13
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    UPDATE_AND_CREATE_TOPIC = 17
    GET_BROKER_RUNTIME_INFO = 28
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    GET_EARLIEST_MSG_STORETIME = 32
    VIEW_MESSAGE_BY_ID = 33
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    CONSUMER_SEND_MSG_BACK = 36
    END_TRANSACTION = 37
    GET_CONSUMER_LIST_BY_GROUP = 38
    CHECK_TRANSACTION_STATE = 39  # broker -> client
    NOTIFY_CONSUMER_IDS_CHANGED = 40  # broker -> client, oneway
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    GET_ROUTEINFO_BY_TOPIC = 105
    QUERY_ASSIGNMENT = 400  # 5.x: the queues a client is assigned, and the group's message request mode (PULL/POP)
    GET_BROKER_CLUSTER_INFO = 106
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
    GET_TOPIC_STATS_INFO = 202
    GET_CONSUMER_CONNECTION_LIST = 203
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    DELETE_SUBSCRIPTIONGROUP = 207
    GET_CONSUME_STATS = 208
    DELETE_TOPIC_IN_BROKER = 215
    DELETE_TOPIC_IN_NAMESRV = 216
    RESET_CONSUMER_CLIENT_OFFSET = 220  # broker -> client
    GET_CONSUMER_STATUS_FROM_CLIENT = 221  # broker -> client
    GET_CONSUMER_RUNNING_INFO = 307  # broker -> client
    CONSUME_MESSAGE_DIRECTLY = 309  # broker -> client
    SEND_MESSAGE_V2 = 310
    SEND_BATCH_MESSAGE = 320
    QUERY_CONSUME_QUEUE = 321
    PUSH_REPLY_MESSAGE_TO_CLIENT = 326  # broker -> client
    GET_TOPIC_CONFIG = 351
    LITE_PULL_MESSAGE = 361  # 5.x only; use PULL_MESSAGE for portability


class ResponseCode(IntEnum):
    """Response codes (remoting/.../protocol/RemotingSysResponseCode.java + ResponseCode.java).

    Controller (2000-2016) and auth (3001, 3002) codes are left out: a consumer never sees them.
    """

    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    TRANSACTION_FAILED = 4
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    VERSION_NOT_SUPPORTED = 15
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    TOPIC_EXIST_ALREADY = 18
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_PARSE_FAILED = 23
    SUBSCRIPTION_NOT_EXIST = 24
    SUBSCRIPTION_NOT_LATEST = 25
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    FILTER_DATA_NOT_EXIST = 27
    FILTER_DATA_NOT_LATEST = 28
    INVALID_PARAMETER = 29  # 5.x only (4.9.x answers SYSTEM_ERROR instead)
    TRANSACTION_SHOULD_COMMIT = 200
    TRANSACTION_SHOULD_ROLLBACK = 201
    TRANSACTION_STATE_UNKNOW = 202  # sic, upstream spelling
    TRANSACTION_STATE_GROUP_WRONG = 203
    NO_BUYER_ID = 204
    NOT_IN_CURRENT_UNIT = 205
    CONSUMER_NOT_ONLINE = 206
    CONSUME_MSG_TIMEOUT = 207
    NO_MESSAGE = 208
    POLLING_FULL = 209
    POLLING_TIMEOUT = 210
    BROKER_NOT_EXIST = 211
    BROKER_DISPATCH_NOT_COMPLETE = 212
    BROADCAST_CONSUMPTION = 213
    FLOW_CONTROL = 215
    NOT_LEADER_FOR_QUEUE = 501
    ILLEGAL_OPERATION = 604
    GO_AWAY = 1500  # 5.x: server shutting down, only sent to version > 475
    # Client-local pseudo codes used by the Java client; never on the wire.
    RPC_UNKNOWN = -1000
    RPC_ADDR_IS_NULL = -1002
    RPC_SEND_TO_CHANNEL_FAILED = -1004
    RPC_TIME_OUT = -1006


def request_name(code: int) -> str:
    """Name of a request code for messages; unknown codes are labelled, not rejected."""
    try:
        return RequestCode(code).name
    except ValueError:
        return "UNKNOWN_REQUEST"


def response_name(code: int) -> str:
    """Name of a response code for messages; unknown codes are labelled, not rejected."""
    try:
        return ResponseCode(code).name
    except ValueError:
        return "UNKNOWN_RESPONSE"
