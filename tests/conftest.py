"""Fixtures on the real thing: a local RocketMQ cluster, the Java producer peer, Spark with Delta.

The cluster runs on free ports with its own state and store, so a demo cluster on the default
ports keeps running undisturbed while the tests run.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rocketlake.resources.jars import ROCKETMQ_4_VERSION, ROCKETMQ_VERSION
from rocketlake.resources.local.cluster import LocalCluster
from rocketlake.resources.local.peers import SentMessage, produce
from rocketlake.resources.local.process import port_in_use
from rocketlake.resources.local.spec import BrokerSpec, ClusterSpec, default_store_root

_rng = random.Random()


def free_ports(count: int, *, block: int = 1) -> list[int]:
    """``count`` ports p, each with p-2 .. p+block-1 free too (a broker uses p-2, p and p+1)."""
    chosen: list[int] = []
    taken: set[int] = set()
    for _ in range(10_000):
        p = _rng.randrange(20_000, 60_000)
        span = set(range(p - 2, p + block))
        if span & taken or any(port_in_use(q) for q in span):
            continue
        chosen.append(p)
        taken |= span
        if len(chosen) == count:
            return chosen
    raise RuntimeError("no free loopback ports found")


def make_spec(state_dir: Path, store_root: Path | None = None, version: str = ROCKETMQ_VERSION) -> ClusterSpec:
    namesrv, a, b = free_ports(3, block=2)
    return ClusterSpec(state_dir=state_dir, store_root=store_root or default_store_root(state_dir),
                       namesrv_port=namesrv, brokers=(BrokerSpec("broker-a", a), BrokerSpec("broker-b", b)),
                       version=version)


def _running_cluster(tmp_path_factory: pytest.TempPathFactory, version: str, **spec_changes) -> Iterator[LocalCluster]:
    """A cluster on free ports, stopped and wiped at the end; ``spec_changes`` replace ClusterSpec fields."""
    spec = dataclasses.replace(make_spec(tmp_path_factory.mktemp(f"rocketmq-{version}"), version=version), **spec_changes)
    cluster = LocalCluster(spec)
    try:
        cluster.up()
        yield cluster
    finally:
        cluster.down(wipe=True)


#: Retry delays of the test brokers: level n waits n seconds (RocketMQ's default goes from 1 s to 2 h), so a message
#: sent back comes back in seconds, and each level is still told apart from the next.
SHORT_DELAY_LEVELS = (("messageDelayLevel", " ".join(f"{n}s" for n in range(1, 19))),)


@pytest.fixture(scope="session")
def local_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A 5.x name server and two brokers for the whole test session, stopped and wiped at the end."""
    yield from _running_cluster(tmp_path_factory, ROCKETMQ_VERSION, extra_broker_properties=SHORT_DELAY_LEVELS)


@pytest.fixture(scope="session")
def local_cluster_4x(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The same on the 4.9 line, which many users still run."""
    yield from _running_cluster(tmp_path_factory, ROCKETMQ_4_VERSION)


_topic_counter = itertools.count()


@pytest.fixture
def create_topic(local_cluster: LocalCluster) -> Callable[..., str]:
    """``create_topic(queues=4, brokers=None, prefix="t")`` -> a fresh topic routed on the chosen brokers."""

    def create(queues: int = 4, brokers: tuple[str, ...] | None = None, prefix: str = "t") -> str:
        topic = f"{prefix}_{next(_topic_counter)}_{uuid.uuid4().hex[:8]}"
        local_cluster.create_topic(topic, queues, brokers)
        return topic

    return create


@pytest.fixture
def java_producer(local_cluster: LocalCluster) -> Callable[..., list[SentMessage]]:
    """``java_producer(messages=[...], args=[...])``: send with the official Java client, get its answers."""

    def send(messages: list[dict] | None = None, args: list[str] = ()) -> list[SentMessage]:
        return produce(local_cluster.spec.namesrv_address, local_cluster.spec.state_dir, messages, args=list(args),
                       version=local_cluster.spec.version)

    return send


@pytest.fixture(scope="session")
def spark():
    from rocketlake.resources.spark import spark_session

    session = spark_session("local[2]")
    yield session
    session.stop()


# --------------------------------------------------------------------------------------------
# Either cluster: the same test runs against the 5.x and the 4.9 line.

#: pytest id -> name of the session fixture that runs that line's cluster
CLUSTER_FIXTURES = {f"rocketmq-{ROCKETMQ_VERSION}": "local_cluster", f"rocketmq-{ROCKETMQ_4_VERSION}": "local_cluster_4x"}


@pytest.fixture(params=list(CLUSTER_FIXTURES))
def rocketmq_cluster(request: pytest.FixtureRequest) -> LocalCluster:
    """``local_cluster`` and ``local_cluster_4x`` in turn: a test using it runs once per RocketMQ line."""
    return request.getfixturevalue(CLUSTER_FIXTURES[request.param])


@pytest.fixture
def rocketmq_client(rocketmq_cluster: LocalCluster):
    """Our client for the cluster of ``rocketmq_cluster`` (route cache is per test)."""
    from rocketlake.resources.rocketmq.client import RocketMQClient

    return RocketMQClient(rocketmq_cluster.spec.namesrv_address, timeout=10.0)


@pytest.fixture
def new_topic(rocketmq_client) -> Callable[..., str]:
    """``new_topic(queues=4, brokers=None, prefix="t")`` on the ``rocketmq_cluster``, created with
    UPDATE_AND_CREATE_TOPIC (milliseconds, where ``create_topic``'s mqadmin takes seconds) and
    routed by the name server before it returns."""

    def create(queues: int = 4, brokers: tuple[str, ...] | None = None, prefix: str = "t") -> str:
        topic = f"{prefix}_{next(_topic_counter)}_{uuid.uuid4().hex[:8]}"
        rocketmq_client.create_topic(topic, queues, brokers=brokers)
        return topic

    return create


class JavaPeers:
    """The official Java client programs (resources/local/peers.py) bound to one cluster."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.namesrv = cluster.spec.namesrv_address
        self.state_dir = cluster.spec.state_dir
        self.version = cluster.spec.version

    @property
    def is_4x(self) -> bool:
        return self.cluster.spec.is_4x

    def produce(self, messages: list[dict] | None = None, args: list[str] = ()) -> list[SentMessage]:
        return produce(self.namesrv, self.state_dir, messages, args=list(args), version=self.version)

    def consume(self, topic: str, ranges: dict[tuple[str, int], tuple[int, int]], **options) -> list[dict]:
        from rocketlake.resources.local.peers import consume

        return consume(self.namesrv, self.state_dir, topic, ranges, version=self.version, **options)

    def admin(self, commands: list[dict]) -> list[dict]:
        from rocketlake.resources.local.peers import admin

        answers = admin(self.namesrv, self.state_dir, commands, version=self.version)
        assert len(answers) == len(commands), answers
        return answers

    def mqadmin(self):
        return self.cluster.mqadmin()


@pytest.fixture
def java_peers(rocketmq_cluster: LocalCluster) -> JavaPeers:
    return JavaPeers(rocketmq_cluster)


def pull_range(client, mq, start: int, end: int, *, group: str = "rocketlake_test_reader", **options) -> list:
    """Every ``(message, pull_result)`` of ``mq`` in ``[start, end)``, pulled with ``client``.

    Fails if the queue ends before ``end`` (NO_NEW_MSG / OFFSET_ILLEGAL while offsets are missing).
    """
    from rocketlake.resources.rocketmq.pull import PullStatus

    out = []
    offset = start
    while offset < end:
        result = client.pull(mq, offset, 32, consumer_group=group, **options)
        if result.status in (PullStatus.NO_NEW_MSG, PullStatus.OFFSET_ILLEGAL):
            raise AssertionError(f"{mq} ended at {offset} ({result}), expected messages up to {end}")
        out.extend((m, result) for m in result.messages if m.queue_offset < end)
        assert result.next_begin_offset > offset, result
        offset = result.next_begin_offset
    return out


@pytest.fixture(name="pull_range")
def pull_range_fixture() -> Callable[..., list]:
    """:func:`pull_range` as a fixture, for test modules that cannot import conftest."""
    return pull_range
