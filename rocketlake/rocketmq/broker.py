"""BrokerClient: every broker request rocketlake makes, for one broker address.

Requests go over the process's pooled :class:`~.connection.Connection` to the address (so a
BrokerClient holds no socket, is cheap, and pickles to Spark workers; a broker restart needs no
new client), or over ``connections`` of its own (:class:`~.pools.PrivateConnections`): the broker
tells group members apart by connection, not by client id. Every call has a timeout (the client's, or ``timeout=`` per call) and the optional
RPC hook (ACL signing) on every request. Failures are the :mod:`.errors` classes, naming the
address, the request and the response code. Requests, bodies and answers are built and read by
the sans-I/O modules :mod:`.pull`, :mod:`.send`, :mod:`.heartbeat` and :mod:`.admin`; this module
only sends them.

Version differences the caller can see (reference section 9):

* :meth:`search_offset` -- ``boundary`` (LOWER/UPPER) exists from 5.1.4 and is sent only to such
  brokers; 4.9.x and 5.0-5.1.3 answer the *nearest* entry whatever is asked
  (:meth:`supports_search_boundary` tells which). The broker's version comes with each of its
  answers and is remembered (:attr:`server_version`).
* :meth:`query_consumer_offset` -- no committed offset: the broker still answers **0** when the
  queue's min offset is 0 and its first message is "hot" (5.1+: in page cache; 4.9.x/5.0: not
  on disk, which includes an *empty* queue); otherwise QUERY_NOT_FOUND, returned as ``None``.
  ``set_zero_if_not_found=False`` (5.x only) turns that 0 into ``None`` as well.
* :meth:`update_consumer_offset` -- 5.3 refuses groups it does not know (SUBSCRIPTION_GROUP_NOT_EXIST;
  a :meth:`heart_beat` creates the group) and 5.1+ unknown topics; 4.9.x stores anything.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypedDict, Unpack

from . import fastjson
from .admin import (
    ConsumeStats,
    SubscriptionGroupConfig,
    build_create_topic_request,
    encode_lock_body,
    parse_consume_stats,
    parse_kv_table,
    parse_lock_response,
)
from .codes import RequestCode, ResponseCode
from .connection import (
    DEFAULT_TIMEOUT,
    Connection,
    PendingResponse,
    RPCHook,
    get_connection,
    split_address,
)
from .errors import (
    BrokerError,
    InvalidArgument,
    ProtocolError,
    QueryNotFound,
    describe_request,
    error_for_response,
)
from .filter import EXPRESSION_TYPE_TAG, Subscription
from .frame import RemotingCommand, RequestTemplate
from .heartbeat import ConsumerData, encode_heartbeat
from .message import Message
from .message_queue import MessageQueue
from .pull import PULL_OPEN_FIELDS, PullResult, build_pull_request, check_pull_numbers, parse_pull_response
from .send import (
    DEFAULT_PRODUCER_GROUP,
    OutgoingMessage,
    RetryMessage,
    SendResult,
    build_retry_request,
    build_send_batch_request,
    build_send_request,
    parse_send_response,
)

__all__ = ["SEARCH_BOUNDARY_MIN_VERSION", "BoundaryType", "BrokerClient", "PendingPull", "PullStream"]

#: ``MQVersion.Version.V5_1_4.ordinal()``: first version whose SEARCH_OFFSET honours ``boundaryType``.
SEARCH_BOUNDARY_MIN_VERSION = 441
#: UPDATE_CONSUMER_OFFSET answered SUCCESS but ignored (5.x ``ConsumerManageProcessor``, server-side reset)
_RESET_REMARK = "Offset has been previously reset"
#: GET_CONSUMER_LIST_BY_GROUP's SYSTEM_ERROR remark for a group without live members
_NO_CONSUMER_REMARK = "no consumer for this group"
#: Pull templates a broker client keeps (one per queue, group and subscription it pulls), cleared when full.
_PULL_TEMPLATES_KEPT = 4096


class BoundaryType(enum.Enum):
    """``common/.../BoundaryType.java`` (5.1.4+): which entry SEARCH_OFFSET returns for a timestamp.

    LOWER: the first message stored at or after it. UPPER: the last message stored at or before it.
    """

    LOWER = "LOWER"
    UPPER = "UPPER"


class PullOptions(TypedDict, total=False):
    """How a PULL_MESSAGE asks, beyond queue, offset, count and group: the one list of them (the client's and the
    broker client's pulls take the same keywords; ``PULL_DEFAULTS`` holds their defaults).

    The subscription is ``subscription`` or ``sub_expression`` (``"*"``, ``"TagA || TagB"``, or SQL92 with
    ``expression_type="SQL92"``); ``post_subscription`` sends it with the pull (FLAG_SUBSCRIPTION), else the
    broker uses the group's registered one. ``commit_offset`` commits the group's offset on the way
    (FLAG_COMMIT_OFFSET). ``suspend_timeout_ms > 0`` long-polls; the call's timeout then defaults to the
    client's timeout *plus* the hold, and an explicit ``timeout`` must exceed the hold. ``columnar`` leaves the
    records undecoded for :mod:`.columnar` where it can take them (see :func:`parse_pull_response`).
    """

    sub_expression: str | None
    expression_type: str
    subscription: Subscription | None
    commit_offset: int | None
    suspend_timeout_ms: int
    post_subscription: bool
    timeout: float | None
    columnar: bool


PULL_DEFAULTS: PullOptions = {
    "sub_expression": "*",
    "expression_type": EXPRESSION_TYPE_TAG,
    "subscription": None,
    "commit_offset": None,
    "suspend_timeout_ms": 0,
    "post_subscription": True,
    "timeout": None,
    "columnar": False,
}


class BrokerClient:
    """Requests to the broker at ``address`` (``"host:port"``, normally a master).

    ``broker_name`` is used in messages, in MessageQueues of answers, and as the 5.x ``bname``
    header field. The client is immutable apart from the remembered :attr:`server_version`.
    """

    def __init__(
        self,
        address: str,
        *,
        broker_name: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        rpc_hook: RPCHook | None = None,
        connections: Callable[[str], Connection] = get_connection,
    ) -> None:
        split_address(address)  # fail early on a malformed address
        if timeout <= 0:
            raise InvalidArgument(f"timeout must be > 0 seconds, got {timeout}")
        self.address = address
        self.broker_name = broker_name
        self.timeout = timeout
        self.rpc_hook = rpc_hook
        self.connections = connections
        self._server_version: int | None = None
        self._pull_templates: dict[tuple, RequestTemplate] = {}

    def __repr__(self) -> str:
        return f"BrokerClient({self.address!r}, broker_name={self.broker_name!r}, timeout={self.timeout:g})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _rebuild,
            (self.address, self.broker_name, self.timeout, self.rpc_hook, self.connections, self._server_version),
        )

    @property
    def label(self) -> str:
        """``broker-a (127.0.0.1:10911)`` or just the address."""
        return f"{self.broker_name} ({self.address})" if self.broker_name else self.address

    @property
    def server_version(self) -> int | None:
        """The broker's ``MQVersion`` ordinal from its last answer (e.g. 407 = 4.9.7, 479 = 5.3.3)."""
        return self._server_version

    # ------------------------------------------------------------------ plumbing

    def _invoke(self, request: RemotingCommand, timeout: float | None) -> RemotingCommand:
        wait = self.timeout if timeout is None else timeout
        if wait <= 0:
            raise InvalidArgument(f"timeout must be > 0 seconds, got {wait}")
        response = self.connections(self.address).invoke(request, wait, rpc_hook=self.rpc_hook)
        self._server_version = response.version
        return response

    def _call(
        self,
        code: int,
        fields: dict[str, Any] | None = None,
        body: bytes = b"",
        *,
        timeout: float | None = None,
        hint: str | None = None,
        ok_codes: tuple[int, ...] = (ResponseCode.SUCCESS,),
    ) -> RemotingCommand:
        response = self._invoke(RemotingCommand.request(code, fields, body), timeout)
        if response.code not in ok_codes:
            raise self._error(code, response, hint)
        return response

    def _bad_body(self, request_code: RequestCode, exc: Exception) -> ProtocolError:
        """The answer's body to ``request_code`` could not be read: the broker, the request and why."""
        return ProtocolError(
            f"{self.address} answered {request_code.name} with a bad body: {exc}",
            address=self.address,
            request_code=request_code,
        )

    def _error(self, request_code: int, response: RemotingCommand, hint: str | None = None) -> BrokerError:
        if hint is None and response.code == ResponseCode.TOPIC_NOT_EXIST:
            hint = f"the topic does not exist on broker {self.label}; create it first (mqadmin updateTopic)"
        return error_for_response(
            address=self.address,
            request_code=request_code,
            response_code=response.code,
            remark=response.remark,
            hint=hint,
        )

    def _long(self, request_code: int, response: RemotingCommand, key: str) -> int:
        raw = response.ext_fields.get(key)
        try:
            return int(raw)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise ProtocolError(
                f"{self.address} answered {describe_request(request_code)} without a numeric {key} "
                f"(extFields {response.ext_fields})",
                address=self.address,
                request_code=request_code,
            ) from None

    def _queue_fields(self, topic: str, queue_id: int) -> dict[str, Any]:
        if queue_id < 0:
            raise InvalidArgument(f"queue_id must be >= 0, got {queue_id}")
        return {"topic": topic, "queueId": queue_id, "bname": self.broker_name}

    # ------------------------------------------------------------------ pull

    def pull(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_msgs: int = 32,
        *,
        consumer_group: str,
        **options: Unpack[PullOptions],
    ) -> PullResult:
        """PULL_MESSAGE from ``offset``: at most ``max_msgs`` (the broker also stops at 32 hot /
        8 cold messages and 256 / 64 KiB, reference 7). ``options``: see :class:`PullOptions`."""
        return self.pull_async(topic, queue_id, offset, max_msgs, consumer_group=consumer_group, **options).result()

    def pull_async(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_msgs: int = 32,
        *,
        consumer_group: str,
        **options: Unpack[PullOptions],
    ) -> PendingPull:
        """:meth:`pull`, sent now; :meth:`PendingPull.result` waits for and reads the answer.

        Several pulls can be in flight on the broker's one connection at once (Java's
        ``pullMessageAsync``); the timeout counts from the send.
        """
        return self.pull_stream(topic, queue_id, consumer_group=consumer_group, **options).send(offset, max_msgs)

    def pull_stream(
        self, topic: str, queue_id: int, *, consumer_group: str, **options: Unpack[PullOptions]
    ) -> PullStream:
        """The pulls of one queue for one group with the same ``options``, checked and encoded once: each
        :meth:`PullStream.send` then fills in an offset and a count (``options`` as for :meth:`pull`; a
        ``commit_offset`` is the same for every pull of the stream)."""
        unknown = sorted(set(options) - set(PullOptions.__annotations__))
        if unknown:
            raise TypeError(
                f"pull() got unexpected option(s) {unknown}; the options are {sorted(PullOptions.__annotations__)}"
            )
        o = {**PULL_DEFAULTS, **options}
        sub_expression, expression_type, subscription = o["sub_expression"], o["expression_type"], o["subscription"]
        commit_offset, suspend_timeout_ms, timeout = o["commit_offset"], o["suspend_timeout_ms"], o["timeout"]
        sub = subscription or Subscription.parse(topic, sub_expression, expression_type)
        if sub.topic != topic:
            raise InvalidArgument(f"subscription is for topic {sub.topic!r}, the pull for {topic!r}")
        if timeout is None:
            timeout = self.timeout + suspend_timeout_ms / 1000
        elif suspend_timeout_ms and timeout * 1000 <= suspend_timeout_ms:
            raise InvalidArgument(
                f"a long poll held {suspend_timeout_ms} ms by the broker needs a timeout above that, got {timeout:g} s"
            )
        if timeout <= 0:
            raise InvalidArgument(f"timeout must be > 0 seconds, got {timeout}")
        check_pull_numbers(queue_id, 0, 1, commit_offset, suspend_timeout_ms)
        request = dict(
            consumer_group=consumer_group,
            topic=topic,
            queue_id=queue_id,
            subscription=sub,
            suspend_timeout_ms=suspend_timeout_ms,
            post_subscription=o["post_subscription"],
            broker_name=self.broker_name,
        )
        # A hook signs the fields, so a signed request is encoded whole at each send; otherwise from a template.
        template = None if self.rpc_hook is not None else self._pull_template(request, commit_offset is not None)
        return PullStream(self, request, template, commit_offset, timeout, o["columnar"])

    def _pull_template(self, request: dict[str, Any], commits: bool) -> RequestTemplate:
        """The encoded pull request of one queue, group and subscription, its numbers left open (a stream of pulls
        of a queue differs in nothing else)."""
        sub: Subscription = request["subscription"]
        key = (
            *(v for k, v in request.items() if k != "subscription"),
            commits,
            sub.sub_string,
            sub.expression_type,
            0 if sub.is_tag_type else sub.sub_version,
        )
        template = self._pull_templates.get(key)
        if template is None:
            if len(self._pull_templates) >= _PULL_TEMPLATES_KEPT:
                self._pull_templates.clear()
            built = build_pull_request(**request, offset=0, max_msgs=1, commit_offset=0 if commits else None)
            template = self._pull_templates[key] = RequestTemplate(built, PULL_OPEN_FIELDS)
        return template

    # ------------------------------------------------------------------ offsets

    def get_min_offset(self, topic: str, queue_id: int, *, timeout: float | None = None) -> int:
        """GET_MIN_OFFSET: the queue's first offset still stored (0 for an unknown queue)."""
        r = self._call(RequestCode.GET_MIN_OFFSET, self._queue_fields(topic, queue_id), timeout=timeout)
        return self._long(RequestCode.GET_MIN_OFFSET, r, "offset")

    def get_max_offset(self, topic: str, queue_id: int, *, timeout: float | None = None) -> int:
        """GET_MAX_OFFSET: one past the last message (0 for an empty or unknown queue)."""
        fields = {**self._queue_fields(topic, queue_id), "committed": True}
        r = self._call(RequestCode.GET_MAX_OFFSET, fields, timeout=timeout)
        return self._long(RequestCode.GET_MAX_OFFSET, r, "offset")

    def stored_sizes(
        self, topic: str, queue_id: int, index: int, count: int, *, timeout: float | None = None
    ) -> list[int]:
        """QUERY_CONSUME_QUEUE (what ``mqadmin queryCq`` asks): the sizes in the commit log of the messages at
        offsets ``index`` .. ``index + count - 1``, as the queue's entries record them (fewer at the queue's end,
        none before its first offset). A 5.x proxy does not forward it."""
        fields = {"topic": topic, "queueId": queue_id, "index": index, "count": count}
        ok = (ResponseCode.SUCCESS, ResponseCode.REQUEST_CODE_NOT_SUPPORTED)
        r = self._call(RequestCode.QUERY_CONSUME_QUEUE, fields, timeout=timeout, ok_codes=ok)
        if r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
            hint = "it does not serve the queues' entries (a 5.x proxy does not forward them): ask the brokers"
            raise self._error(RequestCode.QUERY_CONSUME_QUEUE, r, hint)
        try:
            entries = fastjson.loads(r.body or b"{}").get("queueData") or []
            return [int(e["physicSize"]) for e in entries]
        except (ProtocolError, AttributeError, KeyError, TypeError, ValueError) as exc:
            raise self._bad_body(RequestCode.QUERY_CONSUME_QUEUE, exc) from None

    def get_earliest_msg_store_time(self, topic: str, queue_id: int, *, timeout: float | None = None) -> int | None:
        """GET_EARLIEST_MSG_STORETIME: store time (ms) of the first stored message; None if there is none
        (the broker answers -1)."""
        r = self._call(RequestCode.GET_EARLIEST_MSG_STORETIME, self._queue_fields(topic, queue_id), timeout=timeout)
        value = self._long(RequestCode.GET_EARLIEST_MSG_STORETIME, r, "timestamp")
        return None if value < 0 else value

    def supports_search_boundary(
        self, topic: str = "TBW102", queue_id: int = 0, *, timeout: float | None = None
    ) -> bool:
        """Whether this broker honours SEARCH_OFFSET's ``boundaryType`` (5.1.4+).

        If no answer has told the broker's version yet, asks it once with a cheap GET_MIN_OFFSET
        (of ``topic``/``queue_id``, so ACL permissions for that topic suffice).
        """
        if self._server_version is None:
            self.get_min_offset(topic, queue_id, timeout=timeout)
        return (self._server_version or 0) >= SEARCH_BOUNDARY_MIN_VERSION

    def search_offset(
        self,
        topic: str,
        queue_id: int,
        timestamp: int,
        boundary: BoundaryType | str | None = None,
        *,
        timeout: float | None = None,
    ) -> int:
        """SEARCH_OFFSET_BY_TIMESTAMP for a store timestamp in ms (reference 2.5).

        5.1.4+: LOWER (the broker's default) = first offset stored at or after ``timestamp``, or
        the max offset if all are older; UPPER = last offset stored at or before it. Older
        brokers, 4.9.x included, ignore ``boundary`` and answer the nearest entry (ties to the
        older one; the last message if all are older, the first if all are newer), so ``boundary``
        is only sent where it is understood.
        """
        fields: dict[str, Any] = {**self._queue_fields(topic, queue_id), "timestamp": int(timestamp)}
        if boundary is not None:
            kind = BoundaryType(boundary.upper() if isinstance(boundary, str) else boundary.value)
            if self.supports_search_boundary(topic, queue_id, timeout=timeout):
                fields["boundaryType"] = kind.value
        r = self._call(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, fields, timeout=timeout)
        return self._long(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, r, "offset")

    def query_consumer_offset(
        self,
        group: str,
        topic: str,
        queue_id: int,
        *,
        set_zero_if_not_found: bool | None = None,
        timeout: float | None = None,
    ) -> int | None:
        """QUERY_CONSUMER_OFFSET: the group's committed offset (the next one to consume) or None.

        None = QUERY_NOT_FOUND. Without a commit the broker may still answer 0 -- see the module
        docstring; that answer is returned as the broker gives it, so a caller applying
        ``consumeFromWhere`` treats it exactly as the Java client does (start at 0).
        """
        fields = {"consumerGroup": group, **self._queue_fields(topic, queue_id)}
        if set_zero_if_not_found is not None:
            fields["setZeroIfNotFound"] = set_zero_if_not_found
        try:
            r = self._call(RequestCode.QUERY_CONSUMER_OFFSET, fields, timeout=timeout)
        except QueryNotFound:
            return None
        return self._long(RequestCode.QUERY_CONSUMER_OFFSET, r, "offset")

    def update_consumer_offset(
        self, group: str, topic: str, queue_id: int, offset: int, *, timeout: float | None = None
    ) -> bool:
        """UPDATE_CONSUMER_OFFSET, as a request with an answer (Java sends it oneway and never
        learns of a failure).

        Returns False when the 5.x broker answered that it *ignored* the update because a
        server-side offset reset is pending (SUCCESS with remark "Offset has been previously reset").
        """
        if offset < 0:
            raise InvalidArgument(f"a committed offset must be >= 0, got {offset}")
        fields = {"consumerGroup": group, **self._queue_fields(topic, queue_id), "commitOffset": offset}
        hint = None
        r = self._invoke(RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, fields), timeout)
        if r.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST:
            hint = f"the broker does not know group {group!r} yet: send a heart_beat for it first"
        if r.code != ResponseCode.SUCCESS:
            raise self._error(RequestCode.UPDATE_CONSUMER_OFFSET, r, hint)
        return not (r.remark or "").startswith(_RESET_REMARK)

    # ------------------------------------------------------------------ group membership

    def get_consumer_list_by_group(self, group: str, *, timeout: float | None = None) -> list[str]:
        """GET_CONSUMER_LIST_BY_GROUP: client ids with a live heartbeat, sorted; [] when none.

        (The broker answers SYSTEM_ERROR "no consumer for this group" for an empty group.)
        """
        r = self._invoke(
            RemotingCommand.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group}), timeout
        )
        if r.code == ResponseCode.SYSTEM_ERROR and (r.remark or "").startswith(_NO_CONSUMER_REMARK):
            return []
        if r.code != ResponseCode.SUCCESS:
            raise self._error(RequestCode.GET_CONSUMER_LIST_BY_GROUP, r)
        try:
            ids = json.loads(r.body or b"{}").get("consumerIdList") or []
        except (ValueError, AttributeError) as exc:
            raise self._bad_body(RequestCode.GET_CONSUMER_LIST_BY_GROUP, exc) from None
        return sorted(str(i) for i in ids)

    def consume_type(self, group: str, *, timeout: float | None = None) -> str | None:
        """GET_CONSUMER_CONNECTION_LIST: how the group's live consumers consume (``CONSUME_ACTIVELY``,
        ``CONSUME_PASSIVELY``, 5.x's ``CONSUME_POP``), as their heartbeats say; None when none is online."""
        r = self._call(
            RequestCode.GET_CONSUMER_CONNECTION_LIST,
            {"consumerGroup": group},
            timeout=timeout,
            ok_codes=(ResponseCode.SUCCESS, ResponseCode.CONSUMER_NOT_ONLINE),
        )
        if r.code == ResponseCode.CONSUMER_NOT_ONLINE:
            return None
        try:
            found = fastjson.loads(r.body or b"{}").get("consumeType")
        except (ProtocolError, AttributeError) as exc:
            raise self._bad_body(RequestCode.GET_CONSUMER_CONNECTION_LIST, exc) from None
        return None if found is None else str(found)

    def topic_attributes(self, topic: str, *, timeout: float | None = None) -> dict[str, str]:
        """GET_TOPIC_CONFIG (5.x): the topic's attributes on this broker (``cleanup.policy``, ``queue.type``,
        ``message.type``), as ``mqadmin updateTopic -a`` set them; empty when the broker does not know the topic or
        the request (4.x brokers, and a 5.x proxy, which does not forward it), or an ACL denies it (5.x ACL 2.0
        asks for the GET action, which a consumer's user may not have)."""
        r = self._call(
            RequestCode.GET_TOPIC_CONFIG,
            {"topic": topic, "lo": "false"},
            timeout=timeout,
            ok_codes=(
                ResponseCode.SUCCESS,
                ResponseCode.TOPIC_NOT_EXIST,
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                ResponseCode.NO_PERMISSION,
            ),
        )
        if r.code != ResponseCode.SUCCESS:
            return {}
        try:
            found = fastjson.loads(r.body or b"{}").get("attributes") or {}
            return {str(k).lstrip("+"): str(v) for k, v in found.items()}
        except (ProtocolError, AttributeError) as exc:
            raise self._bad_body(RequestCode.GET_TOPIC_CONFIG, exc) from None

    def message_request_modes(self, topic: str, group: str, *, timeout: float | None = None) -> set[str]:
        """QUERY_ASSIGNMENT (5.x), asked as a BROADCASTING client so that the broker balances nothing and names every
        queue: the group's message request modes on ``topic`` (``PULL``, or ``POP`` when set by ``mqadmin
        setConsumeMode`` or the broker's default); empty when the broker assigns nothing (a topic it does not know)
        or does not know the request (4.x)."""
        body = json.dumps(
            {
                "topic": topic,
                "consumerGroup": group,
                "clientId": "rocketlake-mode-probe",
                "strategyName": "AVG",
                "messageModel": "BROADCASTING",
            }
        ).encode()
        r = self._call(
            RequestCode.QUERY_ASSIGNMENT,
            None,
            body,
            timeout=timeout,
            ok_codes=(ResponseCode.SUCCESS, ResponseCode.REQUEST_CODE_NOT_SUPPORTED),
        )
        if r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
            return set()  # a 4.x broker: no POP there
        try:
            assignments = fastjson.loads(r.body or b"{}").get("messageQueueAssignments") or []
            return {str(a.get("mode")) for a in assignments if a.get("mode") is not None}
        except (ProtocolError, AttributeError) as exc:
            raise self._bad_body(RequestCode.QUERY_ASSIGNMENT, exc) from None

    def heart_beat(
        self,
        client_id: str,
        consumers: Sequence[ConsumerData] = (),
        producer_groups: Sequence[str] = (),
        *,
        timeout: float | None = None,
    ) -> dict[str, str]:
        """HEART_BEAT: register this client for ``consumers``' groups (and producer groups).

        Java repeats it every 30 s; the broker forgets a silent client after 120 s. Returns the
        answer's extFields (``IS_SUPPORT_HEART_BEAT_V2`` / ``IS_SUB_CHANGE`` on 5.x).
        """
        body = encode_heartbeat(client_id, consumers, producer_groups)
        return dict(self._call(RequestCode.HEART_BEAT, None, body, timeout=timeout).ext_fields)

    def unregister_client(
        self,
        client_id: str,
        *,
        consumer_group: str | None = None,
        producer_group: str | None = None,
        timeout: float | None = None,
    ) -> None:
        """UNREGISTER_CLIENT: drop this client from a group at once (instead of after 120 s)."""
        fields = {"clientID": client_id, "consumerGroup": consumer_group, "producerGroup": producer_group}
        self._call(RequestCode.UNREGISTER_CLIENT, fields, timeout=timeout)

    # ------------------------------------------------------------------ failures, order

    def consumer_send_msg_back(
        self,
        group: str,
        message: Message,
        delay_level: int = 0,
        max_reconsume_times: int = 16,
        *,
        origin_topic: str | None = None,
        timeout: float | None = None,
    ) -> None:
        """CONSUMER_SEND_MSG_BACK: redeliver ``message`` via ``%RETRY%<group>`` (reference 2.11).

        ``delay_level`` 0 lets the broker use ``3 + reconsume_times``; a negative level, or
        ``message.reconsume_times >= max_reconsume_times``, moves it to ``%DLQ%<group>``. Must go to
        the broker that stores the message (its commit-log offset identifies it).
        """
        fields = {
            "offset": message.commit_log_offset,
            "group": group,
            "delayLevel": delay_level,
            "originMsgId": message.msg_id,
            "originTopic": origin_topic or message.original_topic,
            "unitMode": False,
            "maxReconsumeTimes": max_reconsume_times,
            "bname": self.broker_name,
        }
        self._call(RequestCode.CONSUMER_SEND_MSG_BACK, fields, timeout=timeout)

    def lock_batch_mq(
        self,
        group: str,
        client_id: str,
        queues: Iterable[MessageQueue],
        *,
        only_this_broker: bool = False,
        timeout: float | None = None,
    ) -> set[MessageQueue]:
        """LOCK_BATCH_MQ: lock queues of this broker for ``client_id``; returns those now held
        (the broker's lock lasts 60 s unless renewed)."""
        body = encode_lock_body(group, client_id, queues, only_this_broker=only_this_broker)
        r = self._call(RequestCode.LOCK_BATCH_MQ, None, body, timeout=timeout)
        try:
            return parse_lock_response(r.body)
        except ProtocolError as exc:
            raise self._bad_body(RequestCode.LOCK_BATCH_MQ, exc) from exc

    def unlock_batch_mq(
        self,
        group: str,
        client_id: str,
        queues: Iterable[MessageQueue],
        *,
        only_this_broker: bool = False,
        timeout: float | None = None,
    ) -> None:
        """UNLOCK_BATCH_MQ (sent as a request, not oneway, so a failure is seen)."""
        body = encode_lock_body(group, client_id, queues, only_this_broker=only_this_broker)
        self._call(RequestCode.UNLOCK_BATCH_MQ, None, body, timeout=timeout)

    # ------------------------------------------------------------------ produce

    def _broker_name_for(self, what: str) -> str:
        if not self.broker_name:
            raise InvalidArgument(f"{what} needs the BrokerClient's broker_name (it names the queue in the answer)")
        return self.broker_name

    def send(
        self,
        message: OutgoingMessage,
        queue_id: int,
        *,
        producer_group: str = DEFAULT_PRODUCER_GROUP,
        timeout: float | None = None,
    ) -> SendResult:
        """SEND_MESSAGE_V2 of one message to ``queue_id`` (bodies >= 4 KiB zlib-compressed like Java)."""
        broker_name = self._broker_name_for("send")
        request, keys = build_send_request(message, queue_id, producer_group=producer_group, broker_name=broker_name)
        return self._sent_one(request, keys, message.topic, broker_name, timeout)

    def _sent_one(self, request, keys: list[str], topic: str, broker_name: str, timeout: float | None) -> SendResult:
        response = self._invoke(request, timeout)
        return parse_send_response(
            response,
            keys,
            topic=topic,
            broker_name=broker_name,
            address=self.address,
            request_code=RequestCode.SEND_MESSAGE_V2,
        )[0]

    def send_retry(
        self,
        message: RetryMessage,
        queue_id: int,
        *,
        producer_group: str = DEFAULT_PRODUCER_GROUP,
        timeout: float | None = None,
    ) -> SendResult:
        """SEND_MESSAGE_V2 of a :class:`~.send.RetryMessage` into its retry topic's ``queue_id`` on this broker (which
        creates the retry topic if it has none, ``AbstractSendMessageProcessor#msgCheck``)."""
        broker_name = self._broker_name_for("send_retry")
        request, keys = build_retry_request(message, queue_id, producer_group=producer_group, broker_name=broker_name)
        return self._sent_one(request, keys, message.topic, broker_name, timeout)

    def send_batch(
        self,
        messages: Sequence[OutgoingMessage],
        queue_id: int,
        *,
        producer_group: str = DEFAULT_PRODUCER_GROUP,
        timeout: float | None = None,
    ) -> list[SendResult]:
        """SEND_BATCH_MESSAGE: messages of one topic, stored at consecutive offsets of ``queue_id``."""
        broker_name = self._broker_name_for("send_batch")
        request, keys = build_send_batch_request(
            messages, queue_id, producer_group=producer_group, broker_name=broker_name
        )
        response = self._invoke(request, timeout)
        return parse_send_response(
            response,
            keys,
            topic=messages[0].topic,
            broker_name=broker_name,
            address=self.address,
            request_code=RequestCode.SEND_BATCH_MESSAGE,
        )

    # ------------------------------------------------------------------ admin

    def create_topic(
        self,
        topic: str,
        read_queue_nums: int = 8,
        write_queue_nums: int | None = None,
        *,
        perm: int = 6,
        order: bool = False,
        timeout: float | None = None,
    ) -> None:
        """UPDATE_AND_CREATE_TOPIC on this broker; it then registers the topic with the name
        servers within a moment (poll the route before relying on it)."""
        request = build_create_topic_request(
            topic,
            read_queue_nums=read_queue_nums,
            write_queue_nums=read_queue_nums if write_queue_nums is None else write_queue_nums,
            perm=perm,
            order=order,
        )
        response = self._invoke(request, timeout)
        if response.code != ResponseCode.SUCCESS:
            raise self._error(RequestCode.UPDATE_AND_CREATE_TOPIC, response)

    def create_subscription_group(self, config: SubscriptionGroupConfig | str, *, timeout: float | None = None) -> None:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: create or update a consumer group on this broker."""
        if isinstance(config, str):
            config = SubscriptionGroupConfig(config)
        self._call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, None, config.encode(), timeout=timeout)

    def get_broker_runtime_info(self, *, timeout: float | None = None) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO: the broker's figures, as ``mqadmin brokerStatus`` prints them (name -> value)."""
        r = self._call(RequestCode.GET_BROKER_RUNTIME_INFO, None, timeout=timeout)
        try:
            return parse_kv_table(r.body)
        except ProtocolError as exc:
            raise self._bad_body(RequestCode.GET_BROKER_RUNTIME_INFO, exc) from exc

    def get_consume_stats(self, group: str, topic: str | None = None, *, timeout: float | None = None) -> ConsumeStats:
        """GET_CONSUME_STATS: the group's offsets on this broker's queues (of ``topic``, or of every
        topic the group is known to consume here)."""
        r = self._call(RequestCode.GET_CONSUME_STATS, {"consumerGroup": group, "topic": topic}, timeout=timeout)
        try:
            return parse_consume_stats(r.body)
        except ProtocolError as exc:
            raise self._bad_body(RequestCode.GET_CONSUME_STATS, exc) from exc


def _rebuild(
    address: str,
    broker_name: str | None,
    timeout: float,
    rpc_hook: RPCHook | None,
    connections: Callable[[str], Connection],
    version: int | None,
) -> BrokerClient:
    client = BrokerClient(address, broker_name=broker_name, timeout=timeout, rpc_hook=rpc_hook, connections=connections)
    client._server_version = version
    return client


class PullStream:
    """One queue's pulls for one group and subscription (:meth:`BrokerClient.pull_stream`): what a range read sends
    many times a second per queue, so everything but the offset and the count is checked and encoded once."""

    __slots__ = (
        "_broker",
        "_columnar",
        "_commit",
        "_commit_offset",
        "_connection",
        "_request",
        "_template",
        "_timeout",
    )

    def __init__(
        self,
        broker: BrokerClient,
        request: dict[str, Any],
        template: RequestTemplate | None,
        commit_offset: int | None,
        timeout: float,
        columnar: bool,
    ) -> None:
        self._broker = broker
        self._request = request
        self._template = template
        self._commit_offset = commit_offset
        self._commit = str(commit_offset or 0)
        self._timeout = timeout
        self._columnar = columnar
        self._connection = broker.connections(broker.address)

    def send(self, offset: int, max_msgs: int = 32) -> PendingPull:
        """PULL_MESSAGE of at most ``max_msgs`` from ``offset``, sent now."""
        return self.send_many([(offset, max_msgs)])[0]

    def send_many(self, spans: list[tuple[int, int]]) -> list[PendingPull]:
        """:meth:`send` of each ``(offset, max_msgs)``, written to the socket at once (one system call for all). All
        or none: when it raises, no pull of the list stays outstanding."""
        for offset, max_msgs in spans:
            if offset < 0 or not 1 <= max_msgs <= 1024:
                check_pull_numbers(0, offset, max_msgs, None, 0)  # raises, naming the number
        connection = self._connection
        if connection.closed:  # the pool's connections were closed (close_all): the pool opens a new one
            connection = self._connection = self._broker.connections(self._broker.address)
        if self._template is not None:
            commit = self._commit
            pendings = connection.invoke_template_many_async(
                self._template,
                [(str(offset), str(max_msgs), commit) for offset, max_msgs in spans],
                self._timeout,
                body_in_place=True,
            )
        else:  # a hook signs the fields: each request is encoded whole and sent on its own
            pendings = []
            try:
                for offset, max_msgs in spans:
                    built = build_pull_request(
                        **self._request, offset=offset, max_msgs=max_msgs, commit_offset=self._commit_offset
                    )
                    pendings.append(
                        connection.invoke_async(
                            built, self._timeout, rpc_hook=self._broker.rpc_hook, body_in_place=True
                        )
                    )
            except BaseException:
                for pending in pendings:  # all or none, as with one write: the caller asks again for every span
                    pending.cancel()
                raise
        broker, subscription, columnar = self._broker, self._request["subscription"], self._columnar
        return [PendingPull(broker, pending, subscription, columnar) for pending in pendings]


class PendingPull:
    """A PULL_MESSAGE on the wire (from :meth:`PullStream.send` or :meth:`PullStream.send_many`)."""

    __slots__ = ("_broker", "_columnar", "_pending", "_subscription")

    def __init__(
        self, broker: BrokerClient, pending: PendingResponse, subscription: Subscription, columnar: bool = False
    ) -> None:
        self._broker = broker
        self._pending = pending
        self._subscription = subscription
        self._columnar = columnar

    def done(self) -> bool:
        return self._pending.done()

    def result(self) -> PullResult:
        """The decoded answer, or the error it maps to (as :meth:`BrokerClient.pull` raises)."""
        response = self._pending.result()
        broker = self._broker
        broker._server_version = response.version
        hint = None
        if response.code == ResponseCode.TOPIC_NOT_EXIST:
            hint = (
                f"topic {self._subscription.topic!r} does not exist on broker {broker.label}; "
                "create it first (mqadmin updateTopic)"
            )
        return parse_pull_response(
            response, self._subscription, address=broker.address, hint=hint, columnar=self._columnar
        )

    def cancel(self) -> None:
        """Stop waiting for the answer (it is dropped when it arrives)."""
        self._pending.cancel()
