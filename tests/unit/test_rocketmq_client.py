"""RocketMQClient (routes, queue keys, retries), MessageQueue order, unique keys, backoff.

The client runs against scripted loopback peers standing in for a name server and brokers (the
frame echo peer of test_rocketmq_connection with test-written answers), so route caching, route
refreshes and retry decisions are observed on the wire. Real brokers: tests/integration.
"""

from __future__ import annotations

import itertools
import json
import os
import pickle
import re
import threading
from collections.abc import Callable, Iterator

import pytest

from rocketlake.rocketmq import unique_key
from rocketlake.rocketmq.client import BrokerNotFound, RocketMQClient
from rocketlake.rocketmq.codes import RequestCode
from rocketlake.rocketmq.errors import (
    BrokerError,
    ConnectionFailed,
    RequestTimeout,
    SystemBusy,
    TopicNotExist,
)
from rocketlake.rocketmq.frame import RemotingCommand, encode
from rocketlake.rocketmq.message_queue import MessageQueue
from rocketlake.rocketmq.pull import FLAG_COMMIT_OFFSET
from rocketlake.rocketmq.retry import NO_RETRY, ExponentialBackoff, call_with_retries
from rocketlake.rocketmq.send import OutgoingMessage, RetryMessage
from tests.unit.frame_peer import CLOSE, FrameEchoPeer

# --------------------------------------------------------------------------- MessageQueue


def test_message_queues_sort_like_java_and_key_by_broker() -> None:
    queues = [
        MessageQueue("T", "broker-b", 0),
        MessageQueue("T", "broker-a", 10),
        MessageQueue("S", "z", 0),
        MessageQueue("T", "broker-a", 2),
    ]
    assert sorted(queues) == [
        MessageQueue("S", "z", 0),
        MessageQueue("T", "broker-a", 2),
        MessageQueue("T", "broker-a", 10),
        MessageQueue("T", "broker-b", 0),
    ]
    assert len({MessageQueue("T", "broker-a", 0), MessageQueue("T", "broker-b", 0)}) == 2
    # Java compares UTF-16 code units: U+FF5E (one unit) sorts after U+1F600 (surrogates D83D...).
    assert MessageQueue("T", "\U0001f600", 0) < MessageQueue("T", "\uff5e", 0)
    assert "\uff5e" < "\U0001f600"  # while Python's code-point order says the opposite
    assert str(MessageQueue("T", "b", 1)) == "MessageQueue [topic=T, brokerName=b, queueId=1]"
    assert MessageQueue.from_json_dict(MessageQueue("T", "b", 1).as_json_dict()) == MessageQueue("T", "b", 1)


# --------------------------------------------------------------------------- unique keys


def test_unique_keys_have_the_java_layout_and_do_not_repeat() -> None:
    keys = [unique_key.create_uniq_id() for _ in range(1000)]
    assert len(set(keys)) == 1000
    assert all(re.fullmatch(r"[0-9A-F]{32}", k) for k in keys)
    assert len({k[:20] for k in keys}) == 1  # ip + pid + per-process random: fixed
    assert keys[0][8:12] == f"{os.getpid() & 0xFFFF:04X}"
    counters = [int(k[-4:], 16) for k in keys[:2]]
    assert (counters[1] - counters[0]) % 0x10000 == 1


def test_unique_key_time_field_counts_ms_from_the_month_start() -> None:
    start, nxt = unique_key.month_start_ms(1_700_000_000_000)
    assert (
        start <= 1_700_000_000_000 < nxt and 28 * 86_400_000 - 3_600_000 <= nxt - start <= 31 * 86_400_000 + 3_600_000
    )
    key = unique_key.create_uniq_id(now_ms=start + 12345)
    assert int(key[20:28], 16) == 12345


def test_a_forked_child_gets_a_new_fixed_part(monkeypatch) -> None:
    parent = unique_key.create_uniq_id()
    monkeypatch.setattr(os, "getpid", lambda: 4242)
    child = unique_key.create_uniq_id()
    assert child[8:12] == f"{4242:04X}" and child[:20] != parent[:20]


# --------------------------------------------------------------------------- retry policy


def test_exponential_backoff_and_retry_decisions() -> None:
    assert list(ExponentialBackoff(retries=4, initial=0.1, multiplier=2, max_delay=0.3).delays()) == [
        0.1,
        0.2,
        0.3,
        0.3,
    ]
    assert list(NO_RETRY.delays()) == []
    slept: list[float] = []
    calls = itertools.count(1)

    def flaky() -> str:
        if next(calls) < 3:
            raise ConnectionFailed("gone", address="a:1")
        return "ok"

    seen: list[int] = []
    assert (
        call_with_retries(
            flaky,
            ExponentialBackoff(retries=2, initial=0.5),
            sleep=slept.append,
            on_retry=lambda exc, n: seen.append(n),
        )
        == "ok"
    )
    assert slept == [0.5, 1.0] and seen == [1, 2]

    def missing() -> None:
        raise TopicNotExist(address="a:1", request_code=11, remark="x")

    with pytest.raises(TopicNotExist):
        call_with_retries(missing, ExponentialBackoff(retries=5), sleep=slept.append)
    assert slept == [0.5, 1.0]  # not retried

    def always_down() -> None:
        raise ConnectionFailed("down", address="a:1")

    with pytest.raises(ConnectionFailed):  # the last error surfaces once the delays run out
        call_with_retries(always_down, ExponentialBackoff(retries=1, initial=0), sleep=slept.append)
    with pytest.raises(ValueError):
        ExponentialBackoff(retries=-1)


# --------------------------------------------------------------------------- the client on scripted peers


def route_body(topic: str, brokers: dict[str, tuple[str, int]]) -> bytes:
    """brokers: name -> (address, perm); 2 queues each."""
    return json.dumps(
        {
            "queueDatas": [
                {"brokerName": n, "readQueueNums": 2, "writeQueueNums": 2, "perm": perm, "topicSysFlag": 0}
                for n, (_, perm) in brokers.items()
            ],
            "brokerDatas": [
                {"cluster": "c", "brokerName": n, "brokerAddrs": {"0": addr}} for n, (addr, _) in brokers.items()
            ],
        }
    ).encode()


class Cluster:
    """A scripted name server and brokers; ``broker_script[name]`` answers that broker's requests."""

    def __init__(self) -> None:
        self.perms: dict[str, int] = {"broker-a": 6, "broker-b": 6}
        self.broker_script: dict[str, Callable[[RemotingCommand], list[bytes]]] = {}
        self.brokers = {name: FrameEchoPeer(self._broker_reply(name)) for name in self.perms}
        self.namesrv = FrameEchoPeer(self._namesrv_reply)
        self.route_requests = 0
        self.cluster_requests = 0
        self.unknown_topics: set[str] = set()
        self.registered_as: dict[str, int] = {}  # broker name -> the id its broker registered with (default 0)
        self._lock = threading.Lock()

    def _namesrv_reply(self, request: RemotingCommand) -> list[bytes]:
        if request.code == RequestCode.GET_BROKER_CLUSTER_INFO:
            self.cluster_requests += 1
            body = json.dumps(
                {
                    "brokerAddrTable": {
                        n: {
                            "cluster": "c",
                            "brokerName": n,
                            "brokerAddrs": {str(self.registered_as.get(n, 0)): p.address},
                        }
                        for n, p in self.brokers.items()
                    },
                    "clusterAddrTable": {"c": list(self.brokers)},
                }
            ).encode()
            return [encode(answer(request, body=body))]
        topic = request.ext_fields["topic"]
        with self._lock:
            self.route_requests += 1
        if topic in self.unknown_topics:
            return [encode(answer(request, code=17, remark="No topic route info"))]
        routed = {n: (p.address, self.perms[n]) for n, p in self.brokers.items()}
        return [encode(answer(request, body=route_body(topic, routed)))]

    def _broker_reply(self, name: str) -> Callable[[RemotingCommand], list[bytes]]:
        def reply(request: RemotingCommand) -> list[bytes]:
            script = self.broker_script.get(name)
            if script is None:
                return [encode(answer(request, offset="11"))]
            return script(request)

        return reply

    def close(self) -> None:
        for peer in (*self.brokers.values(), self.namesrv):
            peer.close()


def answer(
    request: RemotingCommand, code: int = 0, remark: str | None = None, body: bytes = b"", **fields: str
) -> RemotingCommand:
    return RemotingCommand(
        code=code, ext_fields=dict(fields), body=body, opaque=request.opaque, flag=1, remark=remark, language="JAVA"
    )


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    c = Cluster()
    yield c
    c.close()


@pytest.fixture
def client(cluster: Cluster) -> Iterator[RocketMQClient]:
    slept: list[float] = []
    c = RocketMQClient(
        cluster.namesrv.address,
        timeout=1.0,
        private_connections=True,
        sleep=slept.append,
        backoff=ExponentialBackoff(retries=2, initial=0.01),
    )
    c.slept = slept  # type: ignore[attr-defined]
    yield c
    c.close()


def test_queues_come_from_a_cached_route(cluster: Cluster, client: RocketMQClient) -> None:
    cluster.perms["broker-b"] = 2  # write-only: not subscribable
    assert client.queues("T") == [MessageQueue("T", "broker-a", 0), MessageQueue("T", "broker-a", 1)]
    assert len(client.queues("T", readable=False)) == 4
    assert client.writable_queues("T") == sorted(
        MessageQueue("T", b, q) for b in ("broker-a", "broker-b") for q in (0, 1)
    )
    assert cluster.route_requests == 1  # three lookups, one request
    client.refresh_route("T")
    assert cluster.route_requests == 2
    assert client.broker("broker-b").address == cluster.brokers["broker-b"].address


def test_an_expired_route_is_fetched_again(cluster: Cluster) -> None:
    with RocketMQClient(cluster.namesrv.address, route_ttl=0.0, private_connections=True) as c:
        c.queues("T")
        c.queues("T")
    assert cluster.route_requests == 2


def test_retriable_failures_are_retried_after_a_route_refresh(cluster: Cluster, client: RocketMQClient) -> None:
    attempts = itertools.count(1)

    def first_attempt_breaks(request: RemotingCommand) -> list[bytes]:
        return [CLOSE] if next(attempts) == 1 else [encode(answer(request, offset="7"))]

    cluster.broker_script["broker-a"] = first_attempt_breaks
    mq = MessageQueue("T", "broker-a", 0)
    client.queues("T")
    assert client.get_max_offset(mq) == 7
    assert client.slept == [0.01] and cluster.route_requests == 2  # waited once, refreshed the route


def test_non_retriable_errors_are_raised_at_once_and_a_missing_topic_drops_its_route(
    cluster: Cluster, client: RocketMQClient
) -> None:
    cluster.broker_script["broker-a"] = lambda r: [encode(answer(r, code=17, remark="topic[T] not exist"))]
    client.queues("T")
    with pytest.raises(TopicNotExist) as caught:
        client.get_max_offset(MessageQueue("T", "broker-a", 0))
    assert caught.value.address == cluster.brokers["broker-a"].address and client.slept == []
    client.queues("T")
    assert cluster.route_requests == 2  # the cached route was forgotten


def test_sends_are_not_retried_when_they_may_have_been_stored(cluster: Cluster, client: RocketMQClient) -> None:
    received: list[int] = []

    def silent(request: RemotingCommand) -> list[bytes]:
        received.append(request.code)
        return []

    cluster.broker_script["broker-a"] = silent
    mq = MessageQueue("T", "broker-a", 0)
    with pytest.raises(RequestTimeout):
        client.send(OutgoingMessage("T", b"once"), mq)
    assert received == [RequestCode.SEND_MESSAGE_V2] and client.slept == []

    busy_first = itertools.count(1)

    def busy_then_ok(request: RemotingCommand) -> list[bytes]:
        if next(busy_first) == 1:
            return [encode(answer(request, code=2, remark="[REJECTREQUEST]system busy"))]
        return [encode(answer(request, queueId="0", queueOffset="3", msgId="ID"))]

    cluster.broker_script["broker-a"] = busy_then_ok
    result = client.send(OutgoingMessage("T", b"twice"), mq)  # refused unprocessed: safe to repeat
    assert result.queue_offset == 3 and client.slept == [0.01]


def test_a_retry_message_is_produced_on_another_broker_than_the_one_that_refused(
    cluster: Cluster, client: RocketMQClient
) -> None:
    """Where the retry topic is routed on other brokers, one of their queues; where it is not (it exists only where
    messages were sent back before), queue 0 of another master, which creates it. A broker that fails too is left
    for the next; the last error surfaces when none takes the message."""
    got: dict[str, list[RemotingCommand]] = {"broker-a": [], "broker-b": []}

    def taking(name: str):
        def reply(request: RemotingCommand) -> list[bytes]:
            got[name].append(request)
            return [encode(answer(request, queueId=request.ext_fields["e"], queueOffset="0", msgId="OFFSETID"))]

        return reply

    for name in got:
        cluster.broker_script[name] = taking(name)
    message = RetryMessage("%RETRY%g", b"x", {"UNIQ_KEY": "U1"}, 1, 16)
    for _ in range(3):
        result = client.send_retry(message, avoid=("broker-a",))
        assert result.queue.broker_name == "broker-b" and result.msg_id == "U1"
    assert got["broker-a"] == [] and {r.ext_fields["e"] for r in got["broker-b"]} <= {"0", "1"}

    cluster.unknown_topics.add("%RETRY%g")
    client.forget_route("%RETRY%g")
    got["broker-b"].clear()
    assert client.send_retry(message, avoid=("broker-b",)).queue == MessageQueue("%RETRY%g", "broker-a", 0)
    assert got["broker-b"] == []

    cluster.broker_script["broker-b"] = lambda r: [encode(answer(r, code=1, remark="store failed"))]
    with pytest.raises(BrokerError, match="store failed"):
        client.send_retry(message, avoid=("broker-a",))
    with pytest.raises(BrokerNotFound, match="no broker other than broker-a, broker-b"):
        client.send_retry(message, avoid=("broker-a", "broker-b"))


def test_busy_errors_exhaust_the_backoff_then_surface(cluster: Cluster, client: RocketMQClient) -> None:
    cluster.broker_script["broker-a"] = lambda r: [encode(answer(r, code=2, remark="[OVERLOAD]system busy"))]
    with pytest.raises(SystemBusy):
        client.get_min_offset(MessageQueue("T", "broker-a", 0))
    assert client.slept == [0.01, 0.02]


def test_unknown_brokers_and_topics(cluster: Cluster, client: RocketMQClient) -> None:
    with pytest.raises(BrokerNotFound, match="broker-z"):
        client.broker("broker-z")
    assert cluster.cluster_requests >= 1
    assert client.broker("broker-a").address == cluster.brokers["broker-a"].address  # via cluster info
    cluster.unknown_topics.add("nope")
    with pytest.raises(TopicNotExist):
        client.queues("nope")


def test_the_client_pickles_as_configuration(cluster: Cluster, client: RocketMQClient) -> None:
    client.queues("T")
    copy = pickle.loads(pickle.dumps(client))
    assert copy.timeout == 1.0 and copy.private_connections and copy.namesrv.addresses == client.namesrv.addresses
    assert copy.get_max_offset(MessageQueue("T", "broker-a", 0)) == 11
    copy.close()


def test_credentials_sign_every_name_server_and_broker_request(cluster: Cluster) -> None:
    from rocketlake.rocketmq.acl import Credentials

    with RocketMQClient(cluster.namesrv.address, credentials=Credentials("ak", "sk"), private_connections=True) as c:
        assert c.get_max_offset(MessageQueue("T", "broker-a", 0)) == 11
    to_namesrv = cluster.namesrv.next_received()
    to_broker = cluster.brokers["broker-a"].next_received()
    for request in (to_namesrv, to_broker):
        assert request.ext_fields["AccessKey"] == "ak" and request.ext_fields["Signature"]


def test_heartbeat_skips_topics_without_a_route_yet(cluster: Cluster, client: RocketMQClient) -> None:
    from rocketlake.rocketmq.heartbeat import ConsumerData

    cluster.unknown_topics.add("%RETRY%g")  # created by the broker on the first heartbeat
    cluster.broker_script["broker-a"] = lambda r: [encode(answer(r, IS_SUB_CHANGE="true"))]
    cluster.broker_script["broker-b"] = cluster.broker_script["broker-a"]
    answers = client.heart_beat("c1", [ConsumerData.of("g", {"T": "*", "%RETRY%g": "*"})])
    assert answers == {"broker-a": {"IS_SUB_CHANGE": "true"}, "broker-b": {"IS_SUB_CHANGE": "true"}}
    cluster.unknown_topics.add("T")
    client.forget_route("T")
    assert set(client.heart_beat("c1", [ConsumerData.of("g", {"T": "*"})])) == {"broker-a", "broker-b"}
    assert cluster.cluster_requests >= 1  # no route at all: every broker of the cluster


def test_every_pull_option_reaches_the_broker_through_the_client(cluster: Cluster, client: RocketMQClient) -> None:
    seen: list[RemotingCommand] = []

    def script(request: RemotingCommand) -> list[bytes]:
        seen.append(request)
        return [encode(answer(request, code=19, nextBeginOffset="3", minOffset="0", maxOffset="3"))]  # NO_NEW_MSG

    cluster.broker_script["broker-a"] = script
    mq = MessageQueue("T", "broker-a", 0)
    client.pull(mq, 3, 8, consumer_group="g", sub_expression="TagA", post_subscription=False, commit_offset=2)
    fields = seen[-1].ext_fields
    assert "subscription" not in fields and int(fields["sysFlag"]) == FLAG_COMMIT_OFFSET  # no FLAG_SUBSCRIPTION
    client.pull(mq, 3, 8, consumer_group="g", sub_expression="TagA")
    assert seen[-1].ext_fields["subscription"] == "TagA"
    with pytest.raises(TypeError, match="post_subscriptions"):
        client.pull(mq, 3, 8, consumer_group="g", post_subscriptions=False)


def test_offsets_from_master_leaves_out_a_slave_the_routes_list_as_brokerId_0(
    cluster: Cluster, client: RocketMQClient
) -> None:
    """A 5.x name server with supportActingMaster routes a slave answering for its dead master as brokerId 0; its
    cluster info still lists the slave under the id it registered with."""
    both = {n: cluster.brokers[n].address for n in ("broker-a", "broker-b")}
    client.route("T")  # as a run's client has it: offset requests go to the brokerId 0 of the cached routes
    assert client.offsets_from_master(["broker-b", "broker-a", "broker-a"]) == both
    cluster.registered_as["broker-a"] = 1  # broker-a's master is down; its slave is routed in its place
    assert client.route("T", refresh=True).broker("broker-a").master_addr == both["broker-a"]
    assert client.offsets_from_master(["broker-a", "broker-b"]) == {"broker-b": both["broker-b"]}
    assert client.offsets_from_master(["broker-c"]) == {} and client.offsets_from_master([]) == {}
    assert client._cluster is None  # asked afresh each time, never kept for the offset requests' fallback


def routed(addresses: dict[int, str]):
    """Topic T's route: broker-a's addresses by broker id, as a name server gives them."""
    from rocketlake.rocketmq.namesrv import BrokerData, QueueData, TopicRoute

    return TopicRoute("T", (QueueData("broker-a", 2, 2, 6),), (BrokerData("c", "broker-a", addresses),))


def test_pulls_go_where_the_last_answer_suggested_else_to_the_master_else_while_it_is_down_to_its_slave() -> None:
    """PullAPIWrapper.recalculatePullFromWhichNode + MQClientInstance.findBrokerAddressInSubscribe, on plain routes."""
    import time

    from rocketlake.rocketmq.pull import PullResult, PullStatus

    client = RocketMQClient("127.0.0.1:1", private_connections=True)  # no request is made: the routes are given
    mq, other = MessageQueue("T", "broker-a", 0), MessageQueue("T", "broker-a", 1)
    client._routes["T"] = (routed({0: "127.0.0.1:10911", 1: "127.0.0.1:10916"}), time.monotonic())
    assert client.reader(mq).address == "127.0.0.1:10911"  # nothing suggested yet: the master

    def answered(suggested: int) -> bool:
        return client.pulled(mq, PullResult(PullStatus.FOUND, 1, 0, 9, suggest_which_broker_id=suggested))

    assert answered(1) and client.reader(mq).address == "127.0.0.1:10916"  # the master said: read the slave
    assert client.reader(other).address == "127.0.0.1:10911"  # per queue
    assert not answered(1)  # the same suggestion again: nothing changes
    assert answered(0) and client.reader(mq).address == "127.0.0.1:10911"
    client._routes["T"] = (routed({1: "127.0.0.1:10916"}), time.monotonic())  # the master is down
    # ... while another topic's route, cached before, still lists it: the queue's own route decides.
    client._routes["%RETRY%g"] = (routed({0: "127.0.0.1:10911", 1: "127.0.0.1:10916"}), time.monotonic())
    assert client.reader(mq).address == "127.0.0.1:10916"
    assert answered(7) and client.reader(mq).address == "127.0.0.1:10916"  # an id the route lacks: any it lists
    client.close()
