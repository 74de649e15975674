"""RocketMQClient: the one object the rest of rocketlake talks to RocketMQ through.

It knows the name servers, keeps each topic's route (refreshed after ``route_ttl`` seconds like
Java's ``pollNameServerInterval``, on demand, and after a broker error), turns a
:class:`~.message_queue.MessageQueue` into the :class:`~.broker.BrokerClient` of its broker's
master, and runs the broker operations keyed by queue.

Retries: only errors whose class is ``retriable`` (connection lost, timeout, broker busy, ...) are
retried, with the pluggable ``backoff`` (:mod:`.retry`), and the route is refreshed before each
retry (the broker may have moved). Calls that are not idempotent -- send, send_batch,
consumer_send_msg_back -- are retried only when the *broker* answered that it did not take the
request (busy, flow control, not available); after a timeout or a broken connection they may
have been executed, so the error is raised instead of risking a duplicate.

Picklable: only the configuration travels (routes and brokers are re-learnt in the worker).
"""

from __future__ import annotations

import functools
import itertools
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, TypeVar, Unpack

from . import pop_log
from .acl import AclClientRPCHook, Credentials
from .admin import ConsumeStats, SubscriptionGroupConfig
from .broker import BoundaryType, BrokerClient, PullOptions
from .connection import DEFAULT_TIMEOUT, get_connection
from .errors import BrokerError, ConnectionFailed, InvalidArgument, RequestTimeout, RocketMQError, TopicNotExist
from .heartbeat import ConsumerData
from .message import Message
from .message_queue import MessageQueue
from .namespace_hook import request_hook
from .namesrv import MASTER_ID, ClusterInfo, NameServerClient, TopicRoute
from .pools import PrivateConnections
from .pull import PullResult, ask_again
from .retry import Backoff, ExponentialBackoff, call_with_retries, is_retriable
from .send import DEFAULT_PRODUCER_GROUP, OutgoingMessage, RetryMessage, SendResult
from .tls import TlsSettings

__all__ = ["DEFAULT_BACKOFF", "BrokerNotFound", "RocketMQClient"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")

#: Two retries, 0.1 s then 0.2 s: enough for a reconnect or a short "system busy".
DEFAULT_BACKOFF = ExponentialBackoff(retries=2, initial=0.1, multiplier=2.0, max_delay=1.0)
#: ``ClientConfig#pollNameServerInterval``
DEFAULT_ROUTE_TTL = 30.0
_PERM_READ, _PERM_WRITE = 4, 2


def _pick(addresses: Mapping[int, str], wanted: int) -> int | None:
    """The broker id a queue's pulls go to (``findBrokerAddressInSubscribe``): ``wanted`` (its last answer's
    suggestion) if listed, else the master, else, while the master is down, the smallest id listed."""
    if wanted in addresses:
        return wanted
    if MASTER_ID in addresses:
        return MASTER_ID
    return min(addresses) if addresses else None


class BrokerNotFound(RocketMQError):
    """No master address is registered for a broker name (yet): it may be restarting."""

    retriable = True


def _broker_said_not_taken(exc: BaseException) -> bool:
    # The broker answered and refused before doing anything (busy, flow control, not writable).
    return isinstance(exc, BrokerError) and type(exc).retriable


class RocketMQClient:
    """A client of the RocketMQ cluster behind ``namesrv`` (``"host:port[;host:port]"``).

    ``credentials`` sign every request (ACL 1.0); ``namespace_v2`` goes in every request's fields (RocketMQ's
    second namespace form, :mod:`.namespace_hook`). ``timeout`` bounds each request (seconds);
    ``backoff`` paces retries of retriable failures (:data:`~.retry.NO_RETRY` to disable).
    ``private_connections=True`` gives this client its own connection to each broker instead of the
    process-wide pool: needed for a distinct group member, since brokers key members by connection
    (a second client id heartbeating over the same connection *replaces* the first). Name server
    requests always use the shared pool.
    """

    def __init__(
        self,
        namesrv: str | Sequence[str],
        *,
        credentials: Credentials | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        backoff: Backoff = DEFAULT_BACKOFF,
        route_ttl: float = DEFAULT_ROUTE_TTL,
        producer_group: str = DEFAULT_PRODUCER_GROUP,
        private_connections: bool = False,
        sleep: Callable[[float], None] = time.sleep,
        tls: TlsSettings | None = None,
        namespace_v2: str | None = None,
    ) -> None:
        if timeout <= 0:
            raise InvalidArgument(f"timeout must be > 0 seconds, got {timeout}")
        self._namesrv_addrs = namesrv
        self.credentials = credentials
        self.timeout = timeout
        self.backoff = backoff
        self.route_ttl = route_ttl
        self.producer_group = producer_group
        self._sleep = sleep
        self.namespace_v2 = namespace_v2
        self._rpc_hook = request_hook(namespace_v2, AclClientRPCHook(credentials) if credentials is not None else None)
        self.tls = tls
        self.namesrv = NameServerClient(namesrv, timeout=timeout, rpc_hook=self._rpc_hook, tls=tls)
        #: the name server address(es) as one string, ``host:port[;host:port]``: which cluster this is
        self.namesrv_address = namesrv if isinstance(namesrv, str) else ";".join(namesrv)
        self._lock = threading.Lock()
        self._routes: dict[str, tuple[TopicRoute, float]] = {}
        self._cluster: ClusterInfo | None = None
        self._brokers: dict[str, BrokerClient] = {}  # by address
        self._unreadable_pop_logs: set[str] = set()  # revive logs and timer topics a refusal was logged for
        # The broker id each queue's last pull answer suggested (PullAPIWrapper.pullFromWhichNodeTable).
        self._pull_from: dict[MessageQueue, int] = {}
        self._round_robin = itertools.count()
        self.private_connections = private_connections
        self._connections = (
            PrivateConnections(tls) if private_connections else functools.partial(get_connection, tls=tls)
        )

    def __repr__(self) -> str:
        return (
            f"RocketMQClient({';'.join(self.namesrv.addresses)!r}, timeout={self.timeout:g}"
            f"{', tls' if self.tls is not None else ''})"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _rebuild,
            (
                self._namesrv_addrs,
                self.credentials,
                self.timeout,
                self.backoff,
                self.route_ttl,
                self.producer_group,
                self.private_connections,
                self.tls,
                self.namespace_v2,
            ),
        )

    def close(self) -> None:
        """Close this client's private connections (a no-op with the shared pool, which other
        clients of the process use too); the client reconnects if used again."""
        if isinstance(self._connections, PrivateConnections):
            self._connections.close()

    def __enter__(self) -> RocketMQClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ routes

    def route(self, topic: str, *, refresh: bool = False) -> TopicRoute:
        """The topic's route, from the cache unless older than ``route_ttl`` or ``refresh``.

        A failed refresh of an expired route falls back to the old one (logged) if the failure
        is retriable (name server unreachable); TopicNotExist always propagates.
        """
        now = time.monotonic()
        cached = self._routes.get(topic)
        if cached is not None and not refresh and now - cached[1] < self.route_ttl:
            return cached[0]
        try:
            route = self.namesrv.topic_route(topic)
        except TopicNotExist:
            with self._lock:
                self._routes.pop(topic, None)
            raise
        except RocketMQError as exc:
            if cached is not None and is_retriable(exc) and not refresh:
                log.warning("route refresh of %s failed, keeping the old route: %s", topic, exc)
                return cached[0]
            raise
        with self._lock:
            self._routes[topic] = (route, now)
        return route

    def refresh_route(self, topic: str) -> TopicRoute:
        """Fetch the topic's route from the name server now."""
        return self.route(topic, refresh=True)

    def forget_route(self, topic: str) -> None:
        with self._lock:
            self._routes.pop(topic, None)

    def queues(self, topic: str, readable: bool = True) -> list[MessageQueue]:
        """The topic's queues, sorted like Java's MessageQueue order.

        ``readable=True``: the subscribable queues (brokers whose perm allows reading, ``range(
        readQueueNums)``, as ``topicRouteData2TopicSubscribeInfo``). ``readable=False``: every
        queue id the route lists on any broker, whatever its permission.
        """
        route = self.route(topic)
        out = []
        for q in route.queue_datas:
            if readable:
                if q.perm & _PERM_READ:
                    out.extend(MessageQueue(topic, q.broker_name, i) for i in range(q.read_queue_nums))
            else:
                out.extend(
                    MessageQueue(topic, q.broker_name, i) for i in range(max(q.read_queue_nums, q.write_queue_nums))
                )
        return sorted(out)

    def writable_queues(self, topic: str) -> list[MessageQueue]:
        """The queues a producer may send to (``topicRouteData2TopicPublishInfo``): writable
        brokers with a master, ``range(writeQueueNums)``."""
        route = self.route(topic)
        out = []
        for q in route.queue_datas:
            data = route.broker(q.broker_name)
            if q.perm & _PERM_WRITE and data is not None and data.master_addr:
                out.extend(MessageQueue(topic, q.broker_name, i) for i in range(q.write_queue_nums))
        return sorted(out)

    def topics(self) -> list[str]:
        """Every topic the name server lists (system, retry and dead-letter topics included)."""
        return self.namesrv.topic_list()

    def cluster_info(self, *, refresh: bool = False) -> ClusterInfo:
        if self._cluster is None or refresh:
            self._cluster = self.namesrv.cluster_info()
        return self._cluster

    def _master_address(self, broker_name: str) -> str | None:
        for route, _ in list(self._routes.values()):
            data = route.broker(broker_name)
            if data is not None and data.master_addr:
                return data.master_addr
        if self._cluster is not None:
            data = self._cluster.broker_addr_table.get(broker_name)
            if data is not None and data.master_addr:
                return data.master_addr
        return None

    def reader(self, mq: MessageQueue) -> BrokerClient:
        """Where pulls of ``mq`` go, as the Java client chooses (``recalculatePullFromWhichNode``, then
        ``findBrokerAddressInSubscribe``): the broker id the queue's last answer suggested (``suggestWhichBrokerId``)
        if the route lists it, else the master, else, while the master is down, another broker of that name (its
        slave, which serves what it has copied)."""
        # The queue's own topic route (fetched again once expired, and on every retry): another topic's cached route
        # may still list a master that has died since.
        try:
            data = self.route(mq.topic).broker(mq.broker_name)
        except TopicNotExist:  # the name server routes no such topic: the broker's master answers for itself
            data = None
        addresses = dict(data.broker_addrs) if data is not None else {}
        if not addresses:
            master = self._master_address(mq.broker_name)
            if master is None:
                self.cluster_info(refresh=True)
                master = self._master_address(mq.broker_name)
            addresses = {MASTER_ID: master} if master else {}
        chosen = _pick(addresses, self._pull_from.get(mq, MASTER_ID))
        address = addresses[chosen] if chosen is not None else None
        if address is None:
            raise BrokerNotFound(
                f"no broker named {mq.broker_name!r} is registered with the name server "
                f"{';'.join(self.namesrv.addresses)}: it may be down or restarting"
            )
        return self._client_of(address, mq.broker_name)

    def pulled(self, mq: MessageQueue, result: PullResult) -> bool:
        """Remember the broker the answer suggests for the queue's next pulls (``updatePullFromWhichNode``); True
        if that is another one than before."""
        suggested = result.suggest_which_broker_id
        current = self._pull_from.get(mq, MASTER_ID)
        if not result.found and self._read_from_slave(mq) and self._master_listed(mq):
            # An empty answer from a slave: a slave copies asynchronously, so it can be behind what the master stores
            # (a range planned from the master's offsets), and its master may be back since the route was cached
            # (while it was down, its slave was the only broker listed). The Java client pulls again later, after
            # its next route refresh; a bounded read asks the name server now and, the master listed, the master.
            self._pull_from[mq] = MASTER_ID
            return True
        if suggested < 0 or current == suggested:
            return False
        self._pull_from[mq] = suggested
        return True

    def _read_from_slave(self, mq: MessageQueue) -> bool:
        """Whether :meth:`reader` picks a slave of ``mq``'s broker, by the route cached."""
        try:
            data = self.route(mq.topic).broker(mq.broker_name)
        except TopicNotExist:
            return False
        addresses = data.broker_addrs if data is not None else {}
        return _pick(addresses, self._pull_from.get(mq, MASTER_ID)) not in (None, MASTER_ID)

    def _master_listed(self, mq: MessageQueue) -> bool:
        """Whether the name server lists ``mq``'s master now (the route fetched afresh, and cached)."""
        try:
            data = self.route(mq.topic, refresh=True).broker(mq.broker_name)
        except RocketMQError:  # no route, or the name server does not answer: the answer stands
            return False
        return data is not None and MASTER_ID in data.broker_addrs

    def offsets_from_master(self, broker_names: Iterable[str]) -> dict[str, str]:
        """Of ``broker_names``, those whose offset requests (:meth:`broker`) go to their master now, each with its
        address: the broker asked is the one registered with the name server as brokerId 0, asked afresh.

        Left out: a name whose master is down and no broker answers for it, or a slave answers in its place. A 5.x
        name server with ``supportActingMaster`` routes the surviving slave with the smallest id as brokerId 0 of its
        master's topics (read-only), so a route cannot tell: the cluster info lists each broker under the id it
        registered with. In controller mode the replica the controller promotes registers as brokerId 0."""
        names = sorted(set(broker_names))
        if not names:
            return {}
        registered = self.namesrv.cluster_info().broker_addr_table  # not kept: :meth:`broker` reads routes first
        found = {}
        for name in names:
            data = registered.get(name)
            master = data.master_addr if data is not None else None
            if master is None:
                continue
            try:
                asked = self.broker(name).address
            except BrokerNotFound:
                continue
            if asked == master:
                found[name] = master
        return found

    def broker(self, broker_name: str) -> BrokerClient:
        """The BrokerClient of ``broker_name``'s master, found in the cached routes, else in the
        name server's cluster info (asked once more if the name is unknown)."""
        address = self._master_address(broker_name)
        if address is None:
            self.cluster_info(refresh=True)
            address = self._master_address(broker_name)
        if address is None:
            raise BrokerNotFound(
                f"no master of broker {broker_name!r} is registered with the name server "
                f"{';'.join(self.namesrv.addresses)}: it may be down or restarting"
            )
        return self._client_of(address, broker_name)

    def _client_of(self, address: str, broker_name: str) -> BrokerClient:
        with self._lock:
            client = self._brokers.get(address)
            if client is None or client.broker_name != broker_name:
                client = self._brokers[address] = BrokerClient(
                    address,
                    broker_name=broker_name,
                    timeout=self.timeout,
                    rpc_hook=self._rpc_hook,
                    connections=self._connections,
                )
        return client

    def broker_names(self, topic: str | None = None) -> list[str]:
        """Brokers serving ``topic`` (from its route), or every broker of the cluster info."""
        if topic is not None:
            return sorted({q.broker_name for q in self.route(topic).queue_datas})
        return sorted(self.cluster_info(refresh=True).broker_addr_table)

    # ------------------------------------------------------------------ retry plumbing

    def _run(
        self,
        broker_name: str,
        op: Callable[[BrokerClient], _T],
        *,
        topic: str | None = None,
        idempotent: bool = True,
        reading: MessageQueue | None = None,
    ) -> _T:
        def on_retry(exc: BaseException, attempt: int) -> None:
            log.info("retry %d on broker %s after %s: %s", attempt, broker_name, type(exc).__name__, exc)
            try:
                if topic is not None:
                    self.refresh_route(topic)
                else:
                    self.cluster_info(refresh=True)
            except RocketMQError as refresh_error:  # the retry will tell; do not mask the original
                log.info("route refresh before retry failed: %s", refresh_error)

        def attempt() -> _T:
            try:
                return op(self.reader(reading) if reading is not None else self.broker(broker_name))
            except TopicNotExist:
                if topic is not None:
                    self.forget_route(topic)
                raise

        return call_with_retries(
            attempt,
            self.backoff,
            retriable=is_retriable if idempotent else _broker_said_not_taken,
            on_retry=on_retry,
            sleep=self._sleep,
        )

    # ------------------------------------------------------------------ pull and offsets

    def pull(
        self, mq: MessageQueue, offset: int, max_msgs: int = 32, *, consumer_group: str, **options: Unpack[PullOptions]
    ) -> PullResult:
        """:meth:`BrokerClient.pull` on the broker of ``mq`` its last answer suggested (:meth:`reader`; ``options``:
        :class:`PullOptions`)."""

        def once() -> PullResult:
            return self._run(
                mq.broker_name,
                lambda b: b.pull(mq.topic, mq.queue_id, offset, max_msgs, consumer_group=consumer_group, **options),
                topic=mq.topic,
                reading=mq,
            )

        result = once()
        if ask_again(self.pulled(mq, result), result):
            result = once()
            self.pulled(mq, result)
        return result

    def get_min_offset(self, mq: MessageQueue) -> int:
        return self._run(mq.broker_name, lambda b: b.get_min_offset(mq.topic, mq.queue_id), topic=mq.topic)

    def get_max_offset(self, mq: MessageQueue) -> int:
        return self._run(mq.broker_name, lambda b: b.get_max_offset(mq.topic, mq.queue_id), topic=mq.topic)

    def stored_sizes(self, mq: MessageQueue, index: int, count: int) -> list[int]:
        """:meth:`BrokerClient.stored_sizes` of ``mq``, asked of its master."""
        return self._run(mq.broker_name, lambda b: b.stored_sizes(mq.topic, mq.queue_id, index, count), topic=mq.topic)

    def get_earliest_msg_store_time(self, mq: MessageQueue) -> int | None:
        return self._run(mq.broker_name, lambda b: b.get_earliest_msg_store_time(mq.topic, mq.queue_id), topic=mq.topic)

    def search_offset(self, mq: MessageQueue, timestamp: int, boundary: BoundaryType | str | None = None) -> int:
        """:meth:`BrokerClient.search_offset` (LOWER/UPPER only on 5.1.4+, nearest otherwise)."""
        return self._run(
            mq.broker_name, lambda b: b.search_offset(mq.topic, mq.queue_id, timestamp, boundary), topic=mq.topic
        )

    def supports_search_boundary(self, mq: MessageQueue) -> bool:
        return self._run(mq.broker_name, lambda b: b.supports_search_boundary(mq.topic, mq.queue_id), topic=mq.topic)

    def query_consumer_offset(
        self, group: str, mq: MessageQueue, *, set_zero_if_not_found: bool | None = None
    ) -> int | None:
        """:meth:`BrokerClient.query_consumer_offset`: the committed offset, or None (not found)."""
        return self._run(
            mq.broker_name,
            lambda b: b.query_consumer_offset(
                group, mq.topic, mq.queue_id, set_zero_if_not_found=set_zero_if_not_found
            ),
            topic=mq.topic,
        )

    def update_consumer_offset(self, group: str, mq: MessageQueue, offset: int) -> bool:
        """:meth:`BrokerClient.update_consumer_offset` (idempotent, so retried)."""
        return self._run(
            mq.broker_name, lambda b: b.update_consumer_offset(group, mq.topic, mq.queue_id, offset), topic=mq.topic
        )

    # ------------------------------------------------------------------ membership

    def message_request_modes(self, group: str, topic: str) -> set[str]:
        """:meth:`BrokerClient.message_request_modes`, asked of the first broker serving ``topic`` that answers
        (``mqadmin setConsumeMode -c`` sets every broker of the cluster); empty when none answers."""
        return self._first_answer(topic, lambda b: b.message_request_modes(topic, group), set())

    def consume_type(self, group: str, topic: str) -> str | None:
        """:meth:`BrokerClient.consume_type`, asked of the first broker serving ``topic`` that answers (every broker
        of a consumer's topics has its heartbeat); None when none answers."""
        return self._first_answer(topic, lambda b: b.consume_type(group), None)

    def pop_traces(self, group: str, topics: Iterable[str]) -> set[str]:
        """The topics ``group`` popped or acknowledged by POP, as the newest entries of the revive logs and timer
        topics of the brokers serving ``topics`` say (:mod:`.pop_log`): gRPC consumers, whose heartbeats stay in a
        proxy, leave this trace. One try of each broker, no retry; a broker that is down, a 4.x broker (no revive log)
        or one that refuses the read adds nothing."""
        brokers: set[str] = set()
        logs = {pop_log.TIMER_TOPIC}
        for topic in topics:
            try:
                route = self.route(topic)
            except TopicNotExist:
                continue
            serving = {q.broker_name for q in route.queue_datas}
            brokers |= serving
            logs |= {
                pop_log.revive_topic(b.cluster) for b in route.broker_datas if b.broker_name in serving and b.cluster
            }
        found: set[str] = set()
        for log in sorted(logs) if brokers else ():
            try:
                queues = [q for q in self.queues(log) if q.broker_name in brokers]
            except RocketMQError:  # no such topic (4.x, the timer wheel off, no POP yet), or the name server refused
                continue
            for mq in queues:
                found |= pop_log.popped_topics(self._newest(mq, pop_log.NEWEST_ENTRIES, group), group)
        return found

    def _newest(self, mq: MessageQueue, count: int, group: str) -> list[Message]:
        """The newest ``count`` messages of ``mq`` at most, asked of its master once each (pulled as ``group``, on
        until the end: a broker answers at most 32 messages and 256 KiB a pull, 8 and 64 KiB from disk); none when it
        is down or paused, and none, with a warning, when it refuses the read (an ACL without read on system topics)."""
        messages: list[Message] = []
        try:
            broker = self.broker(mq.broker_name)
            end = broker.get_max_offset(mq.topic, mq.queue_id)
            offset = max(0, end - count)
            for _ in range(count):  # each pull answers at least one message or moves on; bounded all the same
                if offset >= end:
                    break
                result = broker.pull(mq.topic, mq.queue_id, offset, end - offset, consumer_group=group)
                if result.messages:
                    messages += result.messages
                    offset = result.messages[-1].queue_offset + 1
                elif offset < result.next_begin_offset <= end:  # the oldest of them were deleted
                    offset = result.next_begin_offset
                else:
                    break
        except (ConnectionFailed, RequestTimeout, BrokerNotFound):
            return messages
        except RocketMQError as e:
            if mq.topic not in self._unreadable_pop_logs:
                self._unreadable_pop_logs.add(mq.topic)
                log.warning("POP traces in %s cannot be read, so POP consumers there go unseen: %s", mq.topic, e)
            return messages
        return messages

    def topic_attributes(self, topic: str) -> dict[str, str]:
        """:meth:`BrokerClient.topic_attributes`, asked of the first broker serving ``topic`` that answers (``mqadmin
        updateTopic -c`` sets every broker of the cluster alike); empty when none answers."""
        return self._first_answer(topic, lambda b: b.topic_attributes(topic), {})

    def _first_answer(self, topic: str, call, default):
        """``call`` on the brokers of ``topic`` in turn until one answers: one that is down or paused is another
        matter (the run leaves its queues out), not a reason to fail here."""
        for name in self.broker_names(topic):
            try:
                return call(self.broker(name))  # once each, no retry: the next broker is the retry
            except (ConnectionFailed, RequestTimeout, BrokerNotFound):  # down, paused, or its master gone
                continue
        return default

    def get_consumer_list_by_group(self, group: str, topic: str) -> list[str]:
        """Live members of ``group``, asked of a broker serving ``topic`` (the next one on failure)."""
        last: RocketMQError | None = None
        for name in self.broker_names(topic):
            try:
                return self._run(name, lambda b: b.get_consumer_list_by_group(group), topic=topic)
            except RocketMQError as exc:
                if not is_retriable(exc):
                    raise
                last = exc
        assert last is not None  # a route always names at least one broker
        raise last

    def _brokers_of(self, topics: Iterable[str], brokers: Iterable[str] | None) -> list[str]:
        if brokers is not None:
            return sorted(set(brokers))
        names: set[str] = set()
        for topic in topics:
            try:
                names.update(self.broker_names(topic))
            except TopicNotExist:  # e.g. %RETRY%<group>, which the first heartbeat creates
                continue
        return sorted(names) or self.broker_names()

    def heart_beat(
        self,
        client_id: str,
        consumers: Sequence[ConsumerData],
        producer_groups: Sequence[str] = (),
        *,
        brokers: Iterable[str] | None = None,
    ) -> dict[str, dict[str, str]]:
        """HEART_BEAT to every broker serving a subscribed topic (or to ``brokers``; every broker of
        the cluster if no subscribed topic has a route yet).

        Returns each broker's answer fields by broker name.
        """
        topics = {s.topic for c in consumers for s in c.subscriptions}
        return {
            name: self._run(name, lambda b: b.heart_beat(client_id, consumers, producer_groups))
            for name in self._brokers_of(topics, brokers)
        }

    def unregister_client(
        self,
        client_id: str,
        *,
        consumer_group: str | None = None,
        producer_group: str | None = None,
        brokers: Iterable[str] | None = None,
    ) -> None:
        """UNREGISTER_CLIENT on ``brokers`` (those the client's heartbeats reached: the Java client says goodbye to the
        brokers it knows, and a 5.x proxy, which stands for the brokers, answers no cluster list), else on every
        broker of the cluster."""
        for name in self._brokers_of((), brokers):
            self._run(
                name,
                lambda b: b.unregister_client(client_id, consumer_group=consumer_group, producer_group=producer_group),
            )

    # ------------------------------------------------------------------ failures and order

    def consumer_send_msg_back(
        self,
        group: str,
        mq: MessageQueue,
        message: Message,
        delay_level: int = 0,
        max_reconsume_times: int = 16,
    ) -> None:
        """CONSUMER_SEND_MSG_BACK to the broker ``message`` was pulled from (``mq``)."""
        self._run(
            mq.broker_name,
            lambda b: b.consumer_send_msg_back(group, message, delay_level, max_reconsume_times),
            topic=mq.topic,
            idempotent=False,
        )

    def _by_broker(self, queues: Iterable[MessageQueue]) -> dict[str, list[MessageQueue]]:
        grouped: dict[str, list[MessageQueue]] = {}
        for mq in sorted(set(queues)):
            grouped.setdefault(mq.broker_name, []).append(mq)
        return grouped

    def lock_batch_mq(self, group: str, client_id: str, queues: Iterable[MessageQueue]) -> set[MessageQueue]:
        """LOCK_BATCH_MQ on each queue's broker; the union of the queues now locked for ``client_id``."""
        locked: set[MessageQueue] = set()
        for name, mqs in self._by_broker(queues).items():
            locked |= self._run(name, lambda b, mqs=mqs: b.lock_batch_mq(group, client_id, mqs), topic=mqs[0].topic)
        return locked

    def unlock_batch_mq(self, group: str, client_id: str, queues: Iterable[MessageQueue]) -> None:
        for name, mqs in self._by_broker(queues).items():
            self._run(name, lambda b, mqs=mqs: b.unlock_batch_mq(group, client_id, mqs), topic=mqs[0].topic)

    # ------------------------------------------------------------------ produce

    def _target(self, topic: str, queue: MessageQueue | None) -> MessageQueue:
        if queue is not None:
            if queue.topic != topic:
                raise InvalidArgument(f"message topic {topic!r} differs from the target queue's {queue}")
            return queue
        candidates = self.writable_queues(topic)
        if not candidates:
            raise InvalidArgument(f"topic {topic!r} has no writable queue in its route")
        return candidates[next(self._round_robin) % len(candidates)]

    def send(self, message: OutgoingMessage, queue: MessageQueue | None = None) -> SendResult:
        """Send one message to ``queue``, or to the next writable queue (round robin)."""
        mq = self._target(message.topic, queue)
        return self._run(
            mq.broker_name,
            lambda b: b.send(message, mq.queue_id, producer_group=self.producer_group),
            topic=mq.topic,
            idempotent=False,
        )

    def send_retry(self, message: RetryMessage, *, avoid: Collection[str] = ()) -> SendResult:
        """Produce ``message`` into its retry topic on a broker other than those of ``avoid`` (the one that did not
        take a send-back), as Java's consumer does through its internal producer.

        Candidates: the topic's writable queues on other brokers (round robin), then queue 0 of every other master of
        the cluster: a broker creates a retry topic a send asks for (``AbstractSendMessageProcessor#msgCheck``), and
        the group's retry topic may exist only where its messages were sent back before. Each candidate broker is
        tried once, in turn, until one stores the message (Java retries a failed send on another broker too,
        ``retryTimesWhenSendFailed``); the last error is raised when none does.
        """
        try:
            routed = [q for q in self.writable_queues(message.topic) if q.broker_name not in avoid]
        except TopicNotExist:
            routed = []
        if routed:
            first = next(self._round_robin) % len(routed)
            routed = routed[first:] + routed[:first]
        candidates: dict[str, MessageQueue] = {}  # one queue per broker, the route's first
        for mq in routed:
            candidates.setdefault(mq.broker_name, mq)
        for name in self.broker_names():
            if name not in avoid and name not in candidates and self._master_address(name):
                candidates[name] = MessageQueue(message.topic, name, 0)
        if not candidates:
            raise BrokerNotFound(
                f"no broker other than {', '.join(sorted(avoid))} has a master registered with the "
                f"name server {';'.join(self.namesrv.addresses)} to produce into {message.topic}"
            )
        error: RocketMQError | None = None
        for mq in candidates.values():
            try:
                return self._run(
                    mq.broker_name,
                    lambda b, mq=mq: b.send_retry(message, mq.queue_id, producer_group=self.producer_group),
                    topic=mq.topic,
                    idempotent=False,
                )
            except RocketMQError as exc:
                log.info("producing into %s on broker %s failed: %s", mq.topic, mq.broker_name, exc)
                error = exc
        assert error is not None
        raise error

    def send_batch(self, messages: Sequence[OutgoingMessage], queue: MessageQueue | None = None) -> list[SendResult]:
        """Send messages of one topic as one batch, stored at consecutive offsets of one queue."""
        if not messages:
            raise InvalidArgument("send_batch needs at least one message")
        mq = self._target(messages[0].topic, queue)
        return self._run(
            mq.broker_name,
            lambda b: b.send_batch(messages, mq.queue_id, producer_group=self.producer_group),
            topic=mq.topic,
            idempotent=False,
        )

    # ------------------------------------------------------------------ admin

    def create_topic(
        self,
        topic: str,
        queues: int = 8,
        *,
        brokers: Iterable[str] | None = None,
        wait: float = 30.0,
    ) -> TopicRoute:
        """Create ``topic`` with ``queues`` read/write queues on each broker (default: all of the
        cluster) and wait until the name server routes it so (polling, at most ``wait`` s)."""
        names = self._brokers_of((), brokers)
        for name in names:
            self._run(name, lambda b: b.create_topic(topic, queues))
        deadline = time.monotonic() + wait
        while True:
            try:
                route = self.refresh_route(topic)
                routed = {q.broker_name: q.write_queue_nums for q in route.queue_datas}
                if all(routed.get(n) == queues for n in names):
                    return route
            except TopicNotExist:
                pass
            if time.monotonic() >= deadline:
                raise RocketMQError(f"topic {topic!r} was created on {names} but is not routed so after {wait:g} s")
            time.sleep(0.1)  # the broker registers new topics with the name server asynchronously

    def create_subscription_group(
        self, config: SubscriptionGroupConfig | str, *, brokers: Iterable[str] | None = None
    ) -> None:
        """Create or update a consumer group on each broker (default: all of the cluster)."""
        for name in self._brokers_of((), brokers):
            self._run(name, lambda b: b.create_subscription_group(config))

    def get_consume_stats(self, group: str, topic: str | None = None) -> ConsumeStats:
        """The group's progress on every queue of ``topic`` (or of all its topics), all brokers merged."""
        stats = ConsumeStats()
        names = self.broker_names(topic) if topic is not None else self.broker_names()
        for name in names:
            stats = stats.merged(self._run(name, lambda b: b.get_consume_stats(group, topic), topic=topic))
        return stats


def _rebuild(
    namesrv: str | Sequence[str],
    credentials: Credentials | None,
    timeout: float,
    backoff: Backoff,
    route_ttl: float,
    producer_group: str,
    private_connections: bool,
    tls: TlsSettings | None = None,
    namespace_v2: str | None = None,
) -> RocketMQClient:
    return RocketMQClient(
        namesrv,
        credentials=credentials,
        timeout=timeout,
        backoff=backoff,
        route_ttl=route_ttl,
        producer_group=producer_group,
        private_connections=private_connections,
        tls=tls,
        namespace_v2=namespace_v2,
    )
