"""The one exception hierarchy of the RocketMQ client.

Every failure the client raises is a :class:`RocketMQError`, so callers can write one
``except`` and still tell cases apart by subclass or by the ``retriable`` class attribute
(the kafka-python ``errors.py`` pattern). Broker answers are mapped to subclasses through a
dict keyed by response code, never through an if/elif chain. No class shadows a builtin
(there is no ``TimeoutError`` or ``ConnectionError`` here).

Each error carries the context needed to act on it -- broker address, request code, response
code and the broker's remark -- and ``str()`` spells all of it out, e.g.::

    127.0.0.1:10911 answered PULL_MESSAGE(11) with TOPIC_NOT_EXIST(17): topic[x] not exist...
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from .codes import ResponseCode, request_name, response_name

__all__ = [
    "BrokerError",
    "BrokerSystemError",
    "ConnectionFailed",
    "ConsumerNotOnline",
    "FlowControl",
    "GoAway",
    "IllegalOperation",
    "InvalidArgument",
    "InvalidName",
    "InvalidParameter",
    "MessageIllegal",
    "NoPermission",
    "NotLeaderForQueue",
    "ProtocolError",
    "QueryNotFound",
    "RangeUnreadable",
    "RequestCodeNotSupported",
    "RequestTimeout",
    "RocketMQError",
    "ServiceNotAvailable",
    "SubscriptionGroupNotExist",
    "SubscriptionNotExist",
    "SubscriptionNotLatest",
    "SubscriptionParseFailed",
    "SystemBusy",
    "TopicExistAlready",
    "TopicNotExist",
    "VersionNotSupported",
    "describe_request",
    "describe_response",
    "error_for_response",
]


def describe_request(code: int | None) -> str:
    """``PULL_MESSAGE(11)`` style label used in every message."""
    return "an unknown request" if code is None else f"{request_name(code)}({code})"


def describe_response(code: int | None) -> str:
    """``TOPIC_NOT_EXIST(17)`` style label used in every message."""
    return "an unknown response" if code is None else f"{response_name(code)}({code})"


class RocketMQError(Exception):
    """Base of every error raised by the client.

    ``retriable`` says whether repeating the same call later (possibly after a reconnect)
    can succeed without anyone changing configuration.
    """

    retriable: ClassVar[bool] = False

    def __init__(
        self,
        message: str = "",
        *,
        address: str | None = None,
        request_code: int | None = None,
        response_code: int | None = None,
        remark: str | None = None,
    ) -> None:
        self.address = address
        self.request_code = request_code
        self.response_code = response_code
        self.remark = remark
        self.message = message or self._default_message()
        super().__init__(self.message)

    def _default_message(self) -> str:
        parts = []
        if self.address:
            parts.append(self.address)
        if self.request_code is not None:
            parts.append(describe_request(self.request_code))
        if self.response_code is not None:
            parts.append(describe_response(self.response_code))
        if self.remark:
            parts.append(self.remark)
        return ": ".join(parts) or type(self).__name__

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-only constructors do not survive the default BaseException pickling,
        # and errors do cross process boundaries (Spark workers -> driver).
        return (type(self), (self.message,), self.__dict__.copy())


class ConnectionFailed(RocketMQError):
    """The TCP connection could not be opened, or broke while a call was in flight.

    The connection is discarded; the next call on the same address reconnects.
    """

    retriable = True


class ConnectionTurnedAway(ConnectionFailed):
    """The TLS handshake failed: an untrusted or expired certificate, a name the certificate lacks, a client
    certificate the server wants, TLS off at the server. Repeating the call cannot help: the cluster's ``tls``
    settings (or the server's certificate) must change."""

    retriable = False


class ClosedBeforeAnswer(ConnectionFailed):
    """The server closed a new connection before answering anything, and does not answer a TLS handshake either: it
    may have crashed at that moment. Retried like any broken connection; a process whose very first call meets it (a
    member starting) stops and says what to configure. A server that does answer TLS closed a plain client for not
    speaking it (``tls.server.mode=enforcing``): that is a ``ConnectionTurnedAway``, not retried."""


class RequestTimeout(RocketMQError):
    """No response arrived within the call's timeout.

    The request may still have been executed by the broker (e.g. an offset commit).
    """

    retriable = True


class ProtocolError(RocketMQError):
    """A frame or record is malformed: truncated, oversized or otherwise corrupt.

    ``offset`` is the byte offset of the offending field from the start of the frame
    (or of the decoded buffer) when known. A connection that produced one is closed,
    since the byte stream can no longer be trusted.
    """

    def __init__(self, message: str = "", *, offset: int | None = None, **context: Any) -> None:
        self.offset = offset
        if offset is not None and message:
            message = f"{message} (at byte offset {offset})"
        super().__init__(message, **context)


class RangeUnreadable(RocketMQError):
    """An offset of a range that must be read in full cannot be: the broker already deleted it,
    the queue ends before the range does, or the broker skipped it. The message names the queue
    and the offsets."""


class InvalidArgument(RocketMQError, ValueError):
    """A caller-supplied value is unusable (bad address, name, option); fix the input."""


class InvalidName(InvalidArgument):
    """A topic or group name breaks RocketMQ's naming rules (client Validators.java).

    ``kind`` is ``"topic"`` or ``"group"``, ``rule`` one of ``"blank"``, ``"max_length"``,
    ``"characters"``, ``"reserved"``, ``"not_allowed_send"``; ``limit`` is the length limit
    or allowed pattern the value broke, when the rule has one.
    """

    def __init__(
        self,
        message: str = "",
        *,
        kind: str = "",
        value: str | None = None,
        rule: str = "",
        limit: int | str | None = None,
    ) -> None:
        self.kind = kind
        self.value = value
        self.rule = rule
        self.limit = limit
        super().__init__(message)


class BrokerError(RocketMQError):
    """A broker or name server answered with a non-success response code.

    Use :func:`error_for_response` to build one: it picks the subclass registered for the
    response code. ``hint`` is an optional sentence telling the user what to do.
    """

    #: Response code this class stands for; ``None`` on the generic class.
    code: ClassVar[int | None] = None

    def __init__(
        self,
        message: str = "",
        *,
        address: str | None = None,
        request_code: int | None = None,
        response_code: int | None = None,
        remark: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.hint = hint
        if response_code is None:
            response_code = self.code
        super().__init__(
            message,
            address=address,
            request_code=request_code,
            response_code=response_code,
            remark=remark,
        )

    def _default_message(self) -> str:
        who = self.address or "the server"
        what = describe_request(self.request_code)
        text = f"{who} answered {what} with {describe_response(self.response_code)}"
        text += f": {self.remark}" if self.remark else " (no remark)"
        if self.hint:
            text += f" -- {self.hint}"
        return text


def _broker_error(name: str, code: int, meaning: str = "", *, retriable: bool = False) -> type[BrokerError]:
    """The :class:`BrokerError` subclass standing for one response code: what the code means, and whether
    repeating the call may succeed. Every such class is one line of the table below."""
    doc = f"{response_name(code)}({code})" + (f": {meaning}" if meaning else ".")
    return type(
        name,
        (BrokerError,),
        {"code": code, "retriable": retriable, "__doc__": doc, "__module__": __name__, "__qualname__": name},
    )


R = ResponseCode
BrokerSystemError = _broker_error(
    "BrokerSystemError", R.SYSTEM_ERROR, "uncaught broker exception or rejected input (4.9.x uses it for bad queueIds)"
)
SystemBusy = _broker_error(
    "SystemBusy",
    R.SYSTEM_BUSY,
    "broker flow control ('[REJECTREQUEST]'/'[OVERLOAD]system busy'); back off",
    retriable=True,
)
RequestCodeNotSupported = _broker_error(
    "RequestCodeNotSupported", R.REQUEST_CODE_NOT_SUPPORTED, "the server version does not know this request"
)
MessageIllegal = _broker_error("MessageIllegal", R.MESSAGE_ILLEGAL)
ServiceNotAvailable = _broker_error(
    "ServiceNotAvailable",
    R.SERVICE_NOT_AVAILABLE,
    "broker starting, shutting down or not writable right now",
    retriable=True,
)
VersionNotSupported = _broker_error("VersionNotSupported", R.VERSION_NOT_SUPPORTED)
NoPermission = _broker_error(
    "NoPermission", R.NO_PERMISSION, "broker/topic/group not readable or writable, or ACL denied"
)
TopicNotExist = _broker_error(
    "TopicNotExist", R.TOPIC_NOT_EXIST, "the topic is unknown to the broker or name server; create it first"
)
TopicExistAlready = _broker_error("TopicExistAlready", R.TOPIC_EXIST_ALREADY)
QueryNotFound = _broker_error("QueryNotFound", R.QUERY_NOT_FOUND, "e.g. no committed offset for this group and queue")
SubscriptionParseFailed = _broker_error(
    "SubscriptionParseFailed", R.SUBSCRIPTION_PARSE_FAILED, "the subscription expression is invalid"
)
SubscriptionNotExist = _broker_error(
    "SubscriptionNotExist", R.SUBSCRIPTION_NOT_EXIST, "pull without FLAG_SUBSCRIPTION and no heartbeat state"
)
SubscriptionNotLatest = _broker_error(
    "SubscriptionNotLatest",
    R.SUBSCRIPTION_NOT_LATEST,
    "broker has an older subscription until the next heartbeat",
    retriable=True,
)
SubscriptionGroupNotExist = _broker_error(
    "SubscriptionGroupNotExist", R.SUBSCRIPTION_GROUP_NOT_EXIST, "group unknown and not auto-created by the broker"
)
InvalidParameter = _broker_error(
    "InvalidParameter", R.INVALID_PARAMETER, "(5.x) e.g. a queueId outside the topic's queues"
)
ConsumerNotOnline = _broker_error(
    "ConsumerNotOnline", R.CONSUMER_NOT_ONLINE, "no live client of the group is connected to the broker"
)
FlowControl = _broker_error(
    "FlowControl", R.FLOW_CONTROL, "broker-side flow control; the Java client retries after 20 ms", retriable=True
)
NotLeaderForQueue = _broker_error(
    "NotLeaderForQueue", R.NOT_LEADER_FOR_QUEUE, "refresh the route and retry on the leader", retriable=True
)
IllegalOperation = _broker_error("IllegalOperation", R.ILLEGAL_OPERATION)
GoAway = _broker_error(
    "GoAway", R.GO_AWAY, "(5.x) the server is shutting down; reconnect and retry elsewhere", retriable=True
)
del R

_BROKER_ERRORS: dict[int, type[BrokerError]] = {
    cls.code: cls
    for cls in (
        BrokerSystemError,
        SystemBusy,
        RequestCodeNotSupported,
        MessageIllegal,
        ServiceNotAvailable,
        VersionNotSupported,
        NoPermission,
        TopicNotExist,
        TopicExistAlready,
        QueryNotFound,
        SubscriptionParseFailed,
        SubscriptionNotExist,
        SubscriptionNotLatest,
        SubscriptionGroupNotExist,
        InvalidParameter,
        ConsumerNotOnline,
        FlowControl,
        NotLeaderForQueue,
        IllegalOperation,
        GoAway,
    )
}


# How brokers word a refused signature: 4.9's plain ACL throws AclException (answered SYSTEM_ERROR
# with the exception as remark); 5.x authentication answers NO_PERMISSION with these sentences.
_ACL_REFUSAL = re.compile(
    r"AclException|AuthenticationException|check signature failed|username cannot be null|User:\S+ is not found"
)
_ACL_HINT = (
    "the broker has ACL on and refused this client's credentials: check the AccessKey and SecretKey it "
    "signs with (the variables the cluster's access_key_env and secret_key_env name), or set those two keys in "
    "the cluster's configuration if it signs with none"
)


def is_refusal(exc: BaseException) -> bool:
    """Whether the cluster turned this client away for what it is, not for a passing state: TLS it lacks or fails
    (the connection's sentence names tls), an ACL refusal of its signature. Retrying cannot help; a person must
    change the configuration."""
    if isinstance(exc, BrokerError):
        return exc.hint == _ACL_HINT
    return isinstance(exc, ConnectionTurnedAway)


def error_for_response(
    *,
    address: str | None,
    request_code: int | None,
    response_code: int,
    remark: str | None,
    hint: str | None = None,
) -> BrokerError:
    """Build (not raise) the :class:`BrokerError` subclass registered for ``response_code``.

    Unknown codes get the generic :class:`BrokerError`, which still names the code.
    """
    cls = _BROKER_ERRORS.get(response_code, BrokerError)
    if hint is None and remark and _ACL_REFUSAL.search(remark):
        hint = _ACL_HINT
    return cls(
        address=address,
        request_code=request_code,
        response_code=response_code,
        remark=remark,
        hint=hint,
    )
