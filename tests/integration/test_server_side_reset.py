"""`mqadmin resetOffsetByTime` on a 5.x broker, which resets the group's offsets itself and tells no client
(``useServerSideResetOffset``, on by default): the broker announces the reset to the group's next pull of each queue
(PULL_OFFSET_MOVED, erasing it) and ignores commits of that queue until then. Runs neither fail on it nor land
anything twice; a reset backward is undone by the next run, over the ledger, even below its newest entry; a reset
forward skips, as ``rocketlake offsets reset`` does."""

from __future__ import annotations

import pytest
from deltalake import DeltaTable

from rocketlake.engine.windows import StoreTimeWindow
from tests.integration.engine_support import Engine, now_ms, send_in_two_windows
from tests.integration.ingestion_support import order, unique, wait_until
from tests.unit.support import ingestion_config

pytestmark = pytest.mark.engine


def test_runs_after_a_server_side_reset_neither_fail_nor_land_twice_and_undo_it_backward(
    local_cluster, create_topic, java_producer, spark, tmp_path
):
    topic, group = create_topic(queues=2), unique("g_reset")
    cfg = ingestion_config(
        topic=topic,
        consumer_group=group,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        window={"cron": "* * * * *", "start": "1970-01-01", "grace_seconds": 0},
    )
    engine = Engine(local_cluster, spark, tmp_path / "orders", cfg)
    (k1, w1), (k2, w2) = send_in_two_windows(java_producer, topic, 6)
    engine.run("r1", [(k1, w1)])
    engine.run("r2", [(k2, w2)])
    ends = engine.offsets(topic)
    assert sum(ends.values()) == 12

    # Back to the start of the first window: below the newest entry's ranges. The broker moves the group at once.
    local_cluster.mqadmin().run("resetOffsetByTime", "-g", group, "-t", topic, "-s", str(w1.start_ms - 1))
    assert set(engine.offsets(topic).values()) == {0}
    start = now_ms()
    java_producer([order(i, topic) for i in range(12, 16)])
    end = now_ms() + 1
    wait_until(end / 1000)
    third = engine.run("r3", [("w3", StoreTimeWindow(start, end))])  # no failure on the announced reset
    assert third.balanced and sum(a.rows for a in third.slice.accounting) == 4
    after = engine.offsets(topic)
    assert sum(after.values()) == 16 and all(after[q] >= ends[q] for q in ends)  # set back, then forward again

    # Forward, to now: the next window's messages sent before it are skipped, as a reset forward means.
    java_producer([order(i, topic) for i in range(16, 20)])
    local_cluster.mqadmin().run("resetOffsetByTime", "-g", group, "-t", topic, "-s", "now")
    start = now_ms()
    java_producer([order(i, topic) for i in range(20, 22)])
    end = now_ms() + 1
    wait_until(end / 1000)
    engine.run("r4", [("w4", StoreTimeWindow(start, end))])
    keys = DeltaTable(str(engine.lake.table_path)).to_pyarrow_table(columns=["keys"]).column("keys").to_pylist()
    expected = [f"o-{i}" for i in (*range(16), 20, 21)]
    assert sorted(keys) == sorted(expected)  # each once; 16-19 were skipped by the reset
    assert sum(engine.offsets(topic).values()) == 22
