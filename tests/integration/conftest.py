"""Data the ingestion tests share: producing across minute windows costs real minutes, so once for all.

The shared minutes are sent in the background from the moment the session's cluster is up: the broker and
engine tiers run meanwhile, and by the time the first Dagster test asks for them they are usually closed.
"""

from __future__ import annotations

import os
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

import pyspark
import pytest

from rocketlake import jars
from rocketlake.local.cluster import LocalCluster
from rocketlake.local.peers import produce
from rocketlake.rocketmq.client import RocketMQClient
from tests.conftest import running_test
from tests.integration.engine_support import java_body_encoder
from tests.integration.ingestion_support import (
    SHARED_MINUTES,
    Produced,
    SentInMinutes,
    in_shared_minutes,
    minute_key,
    order,
    unique,
    wait_for_next_minute,
)

PROTOBUF_JAVA = jars.JarSet(
    "protobuf-java-util-4.36.2", (jars.Artifact("com.google.protobuf", "protobuf-java-util", "4.36.2"),)
)

#: 30 + 45 orders in two consecutive minutes (windows of different sizes), on 2 queues of each broker: the data of
#: most ingestion tests (fixture ``produced``).
ORDERS = in_shared_minutes(
    "orders",
    {"orders": (2, None)},
    lambda t: [order(i, t["orders"]) for i in range(30)],
    lambda t: [order(i, t["orders"]) for i in range(30, 75)],
)


def send_shared_minutes(cluster: LocalCluster) -> dict[str, SentInMinutes]:
    """Every registered scenario's messages (``in_shared_minutes``), sent into the same consecutive minutes; returns
    once the last of them is closed (+ the tests' 2 s grace). Each minute's sends start a second into it."""
    namesrv = cluster.spec.namesrv_address
    # A Java peer of its own (peers keep one process per state directory): a long call of a test running meanwhile
    # cannot hold up a minute's sends.
    state_dir = cluster.spec.state_dir / "shared-minutes"
    state_dir.mkdir(exist_ok=True)
    result: dict[str, SentInMinutes] = {}
    with RocketMQClient(namesrv, timeout=10.0) as client:
        for name, scenario in SHARED_MINUTES.items():
            topics = {alias: unique(alias) for alias in scenario.topics}
            for alias, (queues, brokers) in scenario.topics.items():
                client.create_topic(topics[alias], queues, brokers=brokers)
            result[name] = SentInMinutes(topics, [])
    for minute in range(max(len(s.minutes) for s in SHARED_MINUTES.values())):
        wait_for_next_minute(offset_s=1)
        for name, scenario in SHARED_MINUTES.items():
            if minute < len(scenario.minutes):
                result[name].by_minute.append(
                    produce(namesrv, state_dir, scenario.minutes[minute](result[name].topics))
                )
    wait_for_next_minute(offset_s=3)  # the last minute closes (+ 2 s grace)
    return result


class MinuteClock(threading.Thread):
    """``send_shared_minutes`` in the background; ``result()`` waits for it and raises what it raised."""

    def __init__(self, cluster: LocalCluster, started_by: str) -> None:
        super().__init__(name="shared-minutes", daemon=True)
        self.cluster = cluster
        self.started_by, self.started_at = started_by, time.monotonic()  # for the summary when a test waits
        self._sent: dict[str, SentInMinutes] | None = None
        self._error: BaseException | None = None

    def run(self) -> None:
        try:
            self._sent = send_shared_minutes(self.cluster)
        except BaseException as e:  # noqa: BLE001 - handed to the test that waits for the minutes
            self._error = e

    def result(self) -> dict[str, SentInMinutes]:
        self.join()
        if self._error is not None:
            raise RuntimeError("sending the shared minutes failed") from self._error
        return self._sent


_clock: list[MinuteClock] = []
_wanted: list[bool] = [False]  # does a collected test use the shared minutes?


@pytest.hookimpl(trylast=True)  # after `-m` and `-k` deselected what will not run
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Under pytest-xdist each worker collects every test and cannot know which files it will be sent, so each
    # worker sends the minutes on its own cluster: a few background sends, cheaper than waiting.
    _wanted[0] = any("shared_minutes" in item.fixturenames for item in items)


def start_shared_minutes(request: pytest.FixtureRequest) -> None:
    """Start the session's cluster and the shared minutes in the background, once, if a selected test needs them."""
    if not _clock and _wanted[0]:
        clock = MinuteClock(request.getfixturevalue("local_cluster"), request.node.nodeid)
        _clock.append(clock)
        clock.start()


@pytest.fixture(autouse=True)
def _shared_minutes_early(request: pytest.FixtureRequest) -> None:
    """Start the shared minutes with the worker's first integration test, so they are sent while it runs
    (``tests/chaos/conftest.py`` starts them with the chaos soak, beside which they cost a worker nothing)."""
    start_shared_minutes(request)


@pytest.fixture(scope="session")
def shared_minutes(local_cluster) -> dict[str, SentInMinutes]:
    """What each registered scenario sent, its minutes closed. A minute's messages that spilled over into the next
    minute (a send held up for most of a minute) would change the windows the tests expect, so that fails here."""
    test = running_test[0]  # the test that asked first
    if not _clock:
        _clock.append(MinuteClock(local_cluster, test.nodeid))
        _clock[0].start()
    asked = time.monotonic()
    result = _clock[0].result()
    waited = time.monotonic() - asked
    if waited > 20:  # the minutes were meant to be closed by now: say who started them, and when
        clock = _clock[0]
        test.user_properties.append(
            (
                "summary",
                (
                    f"shared minutes: {test.nodeid} waited {waited:.0f} s for them on worker "
                    f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}; started "
                    f"{asked - clock.started_at:.0f} s before it asked, by {clock.started_by}"
                ),
            )
        )
    for name, sent in result.items():
        store_ms = {
            m["msgId"]: m["storeTimestamp"]
            for alias in sent.topics
            for m in sent.produced(local_cluster, alias).by_msg_id.values()
        }
        keys = [sorted({minute_key(store_ms[s.msg_id]) for s in minute}) for minute in sent.by_minute]
        assert all(len(k) == 1 for k in keys), f"{name}: a minute's messages spilled over a minute boundary: {keys}"
        sent.windows = [k[0] for k in keys]
    minutes = sorted({w for sent in result.values() for w in sent.windows})
    starts = [datetime.strptime(w, "%Y-%m-%d-%H:%M") for w in minutes]
    assert all(b - a == timedelta(minutes=1) for a, b in zip(starts, starts[1:])), f"not consecutive: {minutes}"
    assert all(sent.windows == minutes[: len(sent.windows)] for sent in result.values()), result
    return result


@pytest.fixture(scope="session")
def produced(local_cluster, shared_minutes) -> Produced:
    """30 + 45 messages in two consecutive one-minute windows (of different sizes), on 2 queues of each broker."""
    return shared_minutes[ORDERS].produced(local_cluster, "orders")


@pytest.fixture(scope="session")
def protobuf_bodies(tmp_path_factory):
    """``protobuf_bodies(descriptor_set, message_name, messages, frame=None)``: the bodies the Java runtime encodes from messages
    in Protobuf's JSON mapping (``ProtobufBodies.java``, compiled once against protobuf-java and its JSON util)."""
    classpath = ":".join(str(p) for p in jars.resolve(PROTOBUF_JAVA))
    encode = java_body_encoder(tmp_path_factory.mktemp("protobuf_bodies"), "ProtobufBodies", classpath)

    def bodies(descriptors: Path, message_name: str, messages: list[dict], frame: tuple[int, str] | None = None):
        """``frame``: (schema id, message indexes "2" or "1.0"): framed as Confluent's serializer frames them."""
        return encode([str(descriptors), message_name, *map(str, frame or ())], messages)

    return bodies


@pytest.fixture(scope="session")
def avro_bodies(tmp_path_factory):
    """``avro_bodies(schema_path, encoding, records)``: the bodies Avro's Java classes encode (``AvroBodies.java``,
    compiled once against the Avro jars Spark ships)."""
    classpath = str(Path(pyspark.__file__).parent / "jars" / "*")
    encode = java_body_encoder(tmp_path_factory.mktemp("avro_bodies"), "AvroBodies", classpath)
    return lambda schema, encoding, records: encode([str(schema), encoding], records)
