"""Name server client: topic routes and cluster layout.

Two requests (reference section 2.1/2.2): GET_ROUTEINFO_BY_TOPIC (105) and
GET_BROKER_CLUSTER_INFO (106). Their JSON bodies are written by fastjson, which prints
``Map<Long, String>`` keys bare -- ``{"brokerAddrs":{0:"127.0.0.1:10911"}}`` -- unless the
route request carries ``version >= 401`` or ``acceptStandardJsonOnly=true`` (name server
>= 4.9.4; ``N/processor/ClientRequestProcessor.java``). Cluster info is always in that
dialect. :func:`normalize_json` quotes such keys before ``json.loads``.

With several name servers (``"a:9876;b:9876"``) each is tried in order; the first answer
wins, and if all fail the last error is raised, its message listing every address tried.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .codes import RequestCode, ResponseCode
from .connection import DEFAULT_TIMEOUT, RPCHook, get_connection, split_address
from .errors import InvalidArgument, ProtocolError, RocketMQError, describe_request, error_for_response
from .frame import RemotingCommand
from .tls import TlsSettings

__all__ = [
    "BrokerData",
    "ClusterInfo",
    "NameServerClient",
    "QueueData",
    "TopicRoute",
    "cluster_info_from_response",
    "normalize_json",
    "parse_cluster_info",
    "parse_topic_route",
    "topic_route_from_response",
]

_T = TypeVar("_T")

#: ``C/constant/PermName.java``
PERM_READ = 4
PERM_WRITE = 2
#: ``C/MixAll.java#MASTER_ID``
MASTER_ID = 0


@dataclass(frozen=True, slots=True)
class QueueData:
    """Queues one broker serves for a topic (``RP/route/QueueData.java``)."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    @property
    def readable(self) -> bool:
        """``PermName.isReadable``: only readable queues are subscribable."""
        return bool(self.perm & PERM_READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)


@dataclass(frozen=True, slots=True)
class BrokerData:
    """One broker group (``RP/route/BrokerData.java``): ``broker_addrs`` maps brokerId -> "ip:port",
    id 0 being the master."""

    cluster: str
    broker_name: str
    broker_addrs: dict[int, str]
    zone_name: str | None = None
    enable_acting_master: bool = False

    @property
    def master_addr(self) -> str | None:
        return self.broker_addrs.get(MASTER_ID)


@dataclass(frozen=True, slots=True)
class TopicRoute:
    """``RP/route/TopicRouteData.java`` for one topic."""

    topic: str
    queue_datas: tuple[QueueData, ...]
    broker_datas: tuple[BrokerData, ...]
    order_topic_conf: str | None = None
    filter_server_table: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: A static topic's brokers (5.x ``topicQueueMappingByBroker``): its queues are logical, mapped onto physical
    #: queues of several brokers; empty for a topic of physical queues.
    static_brokers: tuple[str, ...] = ()

    def broker(self, broker_name: str) -> BrokerData | None:
        """The BrokerData of ``broker_name``, or None if the route does not list it."""
        for data in self.broker_datas:
            if data.broker_name == broker_name:
                return data
        return None


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    """``RP/body/ClusterInfo.java``: every broker group, and the groups of each cluster."""

    broker_addr_table: dict[str, BrokerData]
    cluster_addr_table: dict[str, tuple[str, ...]]


# --------------------------------------------------------------------------- JSON dialect

# A whole string literal (consumed as one token, so nothing inside it is ever rewritten),
# or a structural "{" / "," followed by a bare integer and a colon: an unquoted map key.
_STRING_OR_BARE_KEY = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|([{,])(\s*)(-?\d+)(\s*):', re.DOTALL)


def _quote_key(match: re.Match[str]) -> str:
    if match.group(1) is None:
        return match.group(0)
    return f'{match.group(1)}{match.group(2)}"{match.group(3)}"{match.group(4)}:'


def normalize_json(text: str) -> str:
    """Quote fastjson's bare integer map keys (``{0:"a"}`` -> ``{"0":"a"}``) outside strings.

    Standard JSON passes through unchanged; text inside string literals is never touched.
    One regex pass, no Python-level loop over characters.
    """
    return _STRING_OR_BARE_KEY.sub(_quote_key, text)


def _loads(body: bytes, what: str) -> Any:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"{what} body is not UTF-8: {exc.reason}", offset=exc.start) from None
    fixed = normalize_json(text)
    try:
        return json.loads(fixed)
    except json.JSONDecodeError as exc:
        raise ProtocolError(
            f"{what} body is not JSON even after quoting integer keys: {exc.msg} at character "
            f"{exc.pos} of the normalised text (near {fixed[max(exc.pos - 20, 0) : exc.pos + 20]!r})"
        ) from None
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(f"{what} body cannot be parsed: {exc}") from None


class _Reader:
    """Typed access to one decoded JSON object, naming the path of anything missing or mistyped."""

    __slots__ = ("_obj", "_path")

    def __init__(self, obj: Any, path: str) -> None:
        if not isinstance(obj, dict):
            raise ProtocolError(f"{path} is a {type(obj).__name__}, expected an object")
        self._obj = obj
        self._path = path

    def _get(self, key: str, kinds: tuple[type, ...], default: Any, required: bool) -> Any:
        value = self._obj.get(key)
        if value is None:
            if required:
                raise ProtocolError(f"{self._path}.{key} is missing")
            return default
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise ProtocolError(f"{self._path}.{key} is {value!r}, expected {'/'.join(k.__name__ for k in kinds)}")
        return value

    def text(self, key: str, default: str | None = None, *, required: bool = True) -> Any:
        return self._get(key, (str,), default, required)

    def integer(self, key: str, default: int = 0, *, required: bool = True) -> int:
        return self._get(key, (int,), default, required)

    def flag(self, key: str) -> bool:
        return self._get(key, (bool,), False, False)

    def array(self, key: str) -> list[Any]:
        return self._get(key, (list,), [], False)

    def mapping(self, key: str) -> dict[str, Any]:
        return self._get(key, (dict,), {}, False)


def _broker_data(obj: Any, path: str) -> BrokerData:
    r = _Reader(obj, path)
    addrs: dict[int, str] = {}
    for key, addr in r.mapping("brokerAddrs").items():
        try:
            broker_id = int(key)
        except ValueError:
            raise ProtocolError(f"{path}.brokerAddrs key {key!r} is not a broker id") from None
        if not isinstance(addr, str):
            raise ProtocolError(f"{path}.brokerAddrs[{key}] is {addr!r}, expected an address string")
        addrs[broker_id] = addr
    return BrokerData(
        cluster=r.text("cluster", "", required=False),
        broker_name=r.text("brokerName"),
        broker_addrs=addrs,
        zone_name=r.text("zoneName", required=False),
        enable_acting_master=r.flag("enableActingMaster"),
    )


def _string_tuple(value: Any, path: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ProtocolError(f"{path} is {value!r}, expected a list of strings")
    return tuple(value)


def parse_topic_route(topic: str, body: bytes) -> TopicRoute:
    """Parse a GET_ROUTEINFO_BY_TOPIC body (either JSON dialect)."""
    what = f"route of topic {topic!r}"
    r = _Reader(_loads(body, what), what)
    queue_datas = []
    for i, obj in enumerate(r.array("queueDatas")):
        q = _Reader(obj, f"{what}: queueDatas[{i}]")
        queue_datas.append(
            QueueData(
                broker_name=q.text("brokerName"),
                read_queue_nums=q.integer("readQueueNums"),
                write_queue_nums=q.integer("writeQueueNums"),
                perm=q.integer("perm"),
                topic_sys_flag=q.integer("topicSysFlag", required=False),
            )
        )
    broker_datas = tuple(_broker_data(obj, f"{what}: brokerDatas[{i}]") for i, obj in enumerate(r.array("brokerDatas")))
    filters = {
        addr: _string_tuple(servers, f"{what}: filterServerTable[{addr}]")
        for addr, servers in r.mapping("filterServerTable").items()
    }
    return TopicRoute(
        topic=topic,
        queue_datas=tuple(queue_datas),
        broker_datas=broker_datas,
        order_topic_conf=r.text("orderTopicConf", required=False),
        filter_server_table=filters,
        static_brokers=tuple(sorted(r.mapping("topicQueueMappingByBroker"))),
    )


def parse_cluster_info(body: bytes) -> ClusterInfo:
    """Parse a GET_BROKER_CLUSTER_INFO body (always fastjson's bare-integer-key dialect)."""
    r = _Reader(_loads(body, "cluster info"), "cluster info")
    brokers = {
        name: _broker_data(obj, f"cluster info: brokerAddrTable[{name}]")
        for name, obj in r.mapping("brokerAddrTable").items()
    }
    clusters = {
        name: _string_tuple(names, f"cluster info: clusterAddrTable[{name}]")
        for name, names in r.mapping("clusterAddrTable").items()
    }
    return ClusterInfo(broker_addr_table=brokers, cluster_addr_table=clusters)


# --------------------------------------------------------------------------- client


def _split_addresses(addrs: str | Sequence[str]) -> tuple[str, ...]:
    parts = addrs.split(";") if isinstance(addrs, str) else list(addrs)
    out = tuple(p.strip() for p in parts if p and p.strip())
    if not out:
        raise InvalidArgument(f"no name server address in {addrs!r}: expected e.g. '127.0.0.1:9876;10.0.0.2:9876'")
    for address in out:
        split_address(address)  # validate early, with the offending value in the message
    return out


class NameServerClient:
    """Asks the name servers of ``addrs`` (``"a:9876;b:9876"`` or a sequence) for routes.

    Holds no sockets itself: connections come from the per-process pool, so a client is
    cheap to build and safe to pickle (to Spark workers).
    """

    def __init__(
        self,
        addrs: str | Sequence[str],
        *,
        timeout: float = DEFAULT_TIMEOUT,
        rpc_hook: RPCHook | None = None,
        tls: TlsSettings | None = None,
    ) -> None:
        self._addresses = _split_addresses(addrs)
        self.timeout = timeout
        self.rpc_hook = rpc_hook
        self.tls = tls

    @property
    def addresses(self) -> tuple[str, ...]:
        return self._addresses

    def __repr__(self) -> str:
        return f"NameServerClient({';'.join(self._addresses)!r}, timeout={self.timeout:g})"

    def topic_route(self, topic: str) -> TopicRoute:
        """Route of ``topic``; :class:`TopicNotExist` if no name server knows it."""
        if not topic or not topic.strip():
            raise InvalidArgument("topic_route() needs a non-blank topic name")
        # acceptStandardJsonOnly (>= 4.9.4) and our version 479 (>= 401) both ask for standard
        # JSON; older name servers ignore the field and answer bare keys, which we also parse.
        request = RemotingCommand.request(
            RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic, "acceptStandardJsonOnly": True}
        )
        return self._ask_each(request, lambda address, response: topic_route_from_response(address, topic, response))

    def cluster_info(self) -> ClusterInfo:
        """Every broker group registered with the name server, and the clusters they form."""
        return self._ask_each(RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO), cluster_info_from_response)

    def topic_list(self) -> list[str]:
        """Every topic the name server knows (GET_ALL_TOPIC_LIST_FROM_NAMESERVER), system ones included."""
        code = RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER
        return self._ask_each(
            RemotingCommand.request(code),
            lambda address, response: _parse_success(address, code, response, parse_topic_list),
        )

    def _ask_each(self, request: RemotingCommand, handle: Callable[[str, RemotingCommand], _T]) -> _T:
        failures: list[RocketMQError] = []
        for address in self._addresses:
            try:
                response = get_connection(address, self.tls).invoke(request, self.timeout, rpc_hook=self.rpc_hook)
                return handle(address, response)
            except RocketMQError as exc:
                failures.append(exc)
        raise _all_failed(self._addresses, failures)


def topic_route_from_response(address: str, topic: str, response: RemotingCommand) -> TopicRoute:
    """The pure half of :meth:`NameServerClient.topic_route`: check and parse one answer.

    TOPIC_NOT_EXIST becomes :class:`TopicNotExist` with a hint on how to create the topic.
    """
    request_code = RequestCode.GET_ROUTEINFO_BY_TOPIC
    if response.code == ResponseCode.TOPIC_NOT_EXIST:
        raise error_for_response(
            address=address,
            request_code=request_code,
            response_code=response.code,
            remark=response.remark,
            hint=(
                f"topic {topic!r} does not exist: create it first, e.g. `mqadmin updateTopic -n {address} "
                f"-c <cluster> -t {topic}`; a broker registers a new topic with the name server within seconds"
            ),
        )
    return _parse_success(address, request_code, response, lambda body: parse_topic_route(topic, body))


def parse_topic_list(body: bytes | None) -> list[str]:
    """A TopicList body: ``{"topicList": [...]}`` (``brokerAddr`` too, when a broker answers)."""
    data = json.loads(body or b"{}")
    return sorted(str(t) for t in data.get("topicList") or [])


def cluster_info_from_response(address: str, response: RemotingCommand) -> ClusterInfo:
    """The pure half of :meth:`NameServerClient.cluster_info`: check and parse one answer."""
    return _parse_success(address, RequestCode.GET_BROKER_CLUSTER_INFO, response, parse_cluster_info)


def _parse_success(address: str, request_code: int, response: RemotingCommand, parse: Callable[[bytes], _T]) -> _T:
    if response.code != ResponseCode.SUCCESS:
        raise error_for_response(
            address=address, request_code=request_code, response_code=response.code, remark=response.remark
        )
    try:
        return parse(response.body)
    except ProtocolError as exc:
        raise ProtocolError(
            f"{address} answered {describe_request(request_code)} with a bad body: {exc}",
            address=address,
            request_code=request_code,
        ) from exc


def _all_failed(addresses: Sequence[str], failures: Sequence[RocketMQError]) -> RocketMQError:
    """The last failure, re-labelled to list every name server tried and why each failed."""
    last = failures[-1]
    if len(failures) == 1:
        return last
    summary = "; ".join(f"{type(exc).__name__}: {exc}" for exc in failures)
    error = copy.copy(last)
    error.message = f"all {len(addresses)} name servers failed ({', '.join(addresses)}): {summary}"
    error.args = (error.message,)
    error.__cause__ = last
    return error
