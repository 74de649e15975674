"""Bodies the 5.x Java producer compresses with its own setting (``setCompressType``: LZ4, ZSTD, zlib), landed by a
window run on real brokers, Spark and Delta: each row's body is the body sent, beside bodies sent uncompressed in the
same window and queue (a compressed record leaves the reader's columnar path, an uncompressed one stays on it)."""

from __future__ import annotations

import base64
import random

import pytest
from deltalake import DeltaTable

from rocketlake.engine.windows import StoreTimeWindow
from rocketlake.rocketmq.message_queue import MessageQueue
from tests.conftest import pull_range
from tests.integration.engine_support import Engine, from_first, now_ms
from tests.integration.ingestion_support import unique, wait_until

pytestmark = pytest.mark.engine

#: The producer's setting, and the compression type it leaves in a message's sysFlag (MessageSysFlag).
KINDS = {"LZ4": 0x100, "ZSTD": 0x200, "ZLIB": 0x300}
COMPRESSION_TYPE_BITS = 0x700
COMPRESSED_FLAG = 0x1


def test_bodies_each_compression_of_the_5x_producer_lands_as_sent(
    local_cluster, create_topic, java_producer, spark, tmp_path
):
    topic, group = create_topic(queues=1, brokers=("broker-a",)), unique("g_compressed")
    rng = random.Random(topic)
    sent: dict[str, bytes] = {}
    started = now_ms()
    for kind in KINDS:
        bodies = {f"{kind}-{i}": f"{kind} {i} ".encode() * 300 + rng.randbytes(500) for i in range(2)}  # over 1 KiB
        bodies[f"{kind}-short"] = kind.encode()  # under the producer's threshold: stored as sent
        answers = java_producer(
            [{"topic": topic, "keys": [k], "body_base64": base64.b64encode(b).decode()} for k, b in bodies.items()],
            args=["--compress-over", "1024", "--compress-type", kind],
        )
        assert [a.status for a in answers] == ["SEND_OK"] * len(bodies)
        sent |= bodies
    end = now_ms() + 1
    wait_until(end / 1000)

    engine = Engine(local_cluster, spark, tmp_path / "orders", from_first(topic, group))
    [accounting] = engine.run("r1", [("w1", StoreTimeWindow(started, end))]).slice.accounting
    assert (accounting.planned, accounting.rows) == (len(sent), len(sent))
    landed = DeltaTable(engine.lake.table_path).to_pyarrow_table(columns=["keys", "body"]).to_pylist()
    assert {row["keys"]: row["body"] for row in landed} == sent

    # Each was stored as its producer said: compressed by its kind over the threshold, as sent under it.
    stored = {
        m.keys[0]: m.sys_flag for m, _ in pull_range(engine.client, MessageQueue(topic, "broker-a", 0), 0, len(sent))
    }
    for kind, bits in KINDS.items():
        assert [stored[f"{kind}-{i}"] & COMPRESSION_TYPE_BITS for i in range(2)] == [bits, bits], kind
        assert not stored[f"{kind}-short"] & (COMPRESSION_TYPE_BITS | COMPRESSED_FLAG), kind
