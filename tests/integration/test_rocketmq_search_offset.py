"""SEARCH_OFFSET_BY_TIMESTAMP against the Java admin API, on 5.3.3 (LOWER/UPPER) and 4.9.7 (nearest).

Timestamps probed per queue: before the first message, exactly on every store timestamp (some
repeat: several messages stored in one millisecond), one millisecond after each (between two
messages where there is a gap), and after the last message. The messages arrive in two bursts
with a gap of seconds between them, so "between" always exists.
"""

from __future__ import annotations

import pytest

from rocketlake.rocketmq.broker import BoundaryType
from rocketlake.rocketmq.message_queue import MessageQueue
from tests.conftest import pull_range

pytestmark = pytest.mark.broker


def probes(store_times: list[int]) -> list[int]:
    first, last = store_times[0], store_times[-1]
    points = {first - 60_000, first - 1, last + 1, last + 60_000}
    points.update(store_times)
    points.update(t + 1 for t in store_times)
    points.update(t - 1 for t in store_times)
    return sorted(points)


def test_search_offset_agrees_with_the_java_admin(rocketmq_client, new_topic, java_peers):
    topic = new_topic(queues=2)
    targets = [("broker-a", 1), ("broker-b", 1)]
    for burst in range(2):
        java_peers.produce(
            [
                {"topic": topic, "body": f"burst {burst} #{i}", "broker": b, "queue_id": q}
                for i in range(6)
                for b, q in targets
            ]
        )
    boundaries = [None] if java_peers.is_4x else [None, "LOWER", "UPPER"]

    checks = []
    for broker, queue_id in targets:
        mq = MessageQueue(topic, broker, queue_id)
        store_times = [m.store_timestamp for m, _ in pull_range(rocketmq_client, mq, 0, 12)]
        assert store_times == sorted(store_times)
        gaps = [t for t in probes(store_times) if store_times[0] < t < store_times[-1] and t not in store_times]
        assert gaps, "no timestamp between two messages was probed"
        for ts in probes(store_times):
            for boundary in boundaries:
                checks.append((mq, ts, boundary, store_times))

    commands = [
        {
            "op": "searchOffset",
            "topic": mq.topic,
            "broker": mq.broker_name,
            "queue_id": mq.queue_id,
            "timestamp": ts,
            **({"boundary": b} if b else {}),
        }
        for mq, ts, b, _ in checks
    ]
    answers = java_peers.admin(commands)
    assert all(a["ok"] for a in answers), [a for a in answers if not a["ok"]][:3]

    for (mq, ts, boundary, store_times), java in zip(checks, answers):
        ours = rocketmq_client.search_offset(mq, ts, boundary)
        assert ours == java["value"], (mq, ts, boundary, store_times)
        if boundary == "LOWER" or (boundary is None and not java_peers.is_4x):
            # first offset stored at or after ts; the max offset when none is
            expected = next((i for i, t in enumerate(store_times) if t >= ts), len(store_times))
            assert ours == expected, (ts, store_times)
        elif boundary == "UPPER":
            # last offset stored at or before ts (0 when every message is newer)
            expected = max((i for i, t in enumerate(store_times) if t <= ts), default=0)
            assert ours == expected, (ts, store_times)
        else:
            # 4.9: the nearest entry, ties resolved towards the older one (first/last at the ends)
            assert 0 <= ours < len(store_times)
            best = min(abs(t - ts) for t in store_times)
            assert abs(store_times[ours] - ts) == best, (ts, ours, store_times)


def test_boundary_is_only_sent_where_it_is_understood(rocketmq_client, new_topic, java_peers):
    topic = new_topic(queues=1, brokers=("broker-a",))
    mq = MessageQueue(topic, "broker-a", 0)
    broker = rocketmq_client.broker("broker-a")
    assert broker.supports_search_boundary(topic, 0) is (not java_peers.is_4x)
    assert broker.server_version == (407 if java_peers.is_4x else 479)
    # An empty queue: every boundary answers 0 on both lines.
    assert [rocketmq_client.search_offset(mq, 1, b) for b in (None, BoundaryType.LOWER, BoundaryType.UPPER)] == [
        0,
        0,
        0,
    ]
