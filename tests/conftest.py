"""Fixtures on the real thing: a local RocketMQ cluster, the Java producer peer, Spark with Delta.

The cluster runs on free ports with its own state and store, so a demo cluster on the default
ports keeps running undisturbed while the tests run.
"""

from __future__ import annotations

import itertools
import random
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from resources.local.cluster import LocalCluster
from resources.local.peers import SentMessage, produce
from resources.local.process import port_in_use
from resources.local.spec import BrokerSpec, ClusterSpec, default_store_root

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


def make_spec(state_dir: Path, store_root: Path | None = None) -> ClusterSpec:
    namesrv, a, b = free_ports(3, block=2)
    return ClusterSpec(state_dir=state_dir, store_root=store_root or default_store_root(state_dir),
                       namesrv_port=namesrv, brokers=(BrokerSpec("broker-a", a), BrokerSpec("broker-b", b)))


@pytest.fixture(scope="session")
def local_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A name server and two brokers for the whole test session, stopped and wiped at the end."""
    cluster = LocalCluster(make_spec(tmp_path_factory.mktemp("rocketmq")))
    try:
        cluster.up()
        yield cluster
    finally:
        cluster.down(wipe=True)


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
        return produce(local_cluster.spec.namesrv_address, local_cluster.spec.state_dir, messages, args=list(args))

    return send


@pytest.fixture(scope="session")
def spark():
    from resources.spark import spark_session

    session = spark_session("local[2]")
    yield session
    session.stop()
