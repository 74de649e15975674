"""5.x POP consumption shares a group's queues message by message: a run refuses such a group by name before it
reads anything (``GroupBroker.pop_refusal``), whether the group was switched to POP mode (``mqadmin
setConsumeMode``) or POP consumers are online in it."""

from __future__ import annotations

import pytest

from rocketlake.engine.run import GroupSharedWithPop
from rocketlake.engine.windows import StoreTimeWindow
from tests.integration.engine_support import Engine, now_ms
from tests.integration.ingestion_support import unique
from tests.unit.support import ingestion_config

pytestmark = pytest.mark.engine


def test_a_group_in_pop_mode_is_refused_by_name_and_one_in_pull_mode_is_not(
    local_cluster, create_topic, spark, tmp_path
):
    topic = create_topic(queues=2)
    popped, pulled = unique("g_pop"), unique("g_pull")
    local_cluster.mqadmin().run(
        "setConsumeMode", "-c", local_cluster.spec.cluster_name, "-t", topic, "-g", popped, "-m", "POP", "-q", "1"
    )
    window = [("w1", StoreTimeWindow(now_ms() - 60_000, now_ms() - 1))]

    def engine(group: str, name: str) -> Engine:
        cfg = ingestion_config(
            topic=topic,
            consumer_group=group,
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            window={"cron": "* * * * *", "start": "1970-01-01", "grace_seconds": 0},
        )
        return Engine(local_cluster, spark, tmp_path / name, cfg)

    refused = engine(popped, "popped")
    assert refused.client.message_request_modes(popped, topic) == {"POP"}
    with pytest.raises(GroupSharedWithPop, match=f"consumer group {popped} is in POP mode on it .* topic {topic}"):
        refused.run("r1", window)
    assert not (tmp_path / "popped").exists()
    assert set(refused.offsets(topic).values()) <= {None, 0}  # nothing moved

    landed = engine(pulled, "pulled")
    assert landed.client.message_request_modes(pulled, topic) == {"PULL"}
    assert landed.client.consume_type(pulled, topic) is None  # no consumer online
    landed.run("r1", window)
    assert (tmp_path / "pulled" / "_delta_log").exists()
