"""Pure-Python client for the RocketMQ classic remoting protocol (name server + broker over TCP)."""

from .acl import AclClientRPCHook, Credentials

# Broker requests and the client the rest of rocketlake uses.
from .admin import ConsumeStats, OffsetWrapper, SubscriptionGroupConfig
from .broker import BoundaryType, BrokerClient
from .client import BrokerNotFound, RocketMQClient
from .codes import CURRENT_VERSION, MAX_FRAME_SIZE, LanguageCode, RequestCode, ResponseCode, SerializeType
from .connection import Connection, RPCHook, close_all, get_connection, split_address
from .errors import (
    BrokerError,
    ConnectionFailed,
    InvalidArgument,
    InvalidName,
    NoPermission,
    ProtocolError,
    QueryNotFound,
    RangeUnreadable,
    RequestTimeout,
    RocketMQError,
    SubscriptionGroupNotExist,
    SystemBusy,
    TopicNotExist,
    error_for_response,
)
from .frame import FrameDecoder, RemotingCommand, decode, encode, ext_fields
from .heartbeat import ConsumeFromWhere, ConsumerData, ConsumeType, MessageModel, new_client_id
from .message_queue import MessageQueue
from .namesrv import BrokerData, ClusterInfo, NameServerClient, QueueData, TopicRoute
from .pools import PrivateConnections
from .pull import GetMessageStatus, PullResult, PullStatus
from .range_reader import read_ranges
from .retry import NO_RETRY, Backoff, ExponentialBackoff
from .send import OutgoingMessage, SendResult, SendStatus
from .validators import check_consumer_group, check_group, check_topic, check_topic_for_send
