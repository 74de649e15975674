"""Pure-Python client for the RocketMQ classic remoting protocol (name server + broker over TCP)."""

from .acl import AclClientRPCHook, Credentials
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
    RequestTimeout,
    RocketMQError,
    SubscriptionGroupNotExist,
    SystemBusy,
    TopicNotExist,
    error_for_response,
)
from .frame import FrameDecoder, RemotingCommand, decode, encode, ext_fields
from .namesrv import BrokerData, ClusterInfo, NameServerClient, QueueData, TopicRoute
from .validators import check_consumer_group, check_group, check_topic, check_topic_for_send
