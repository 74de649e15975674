"""Data the ingestion tests share: producing across minute windows costs real minutes, so once."""

from __future__ import annotations

import pytest

from rocketlake.resources.local.peers import produce
from tests.integration.ingestion_support import Produced, java_dump, order, unique, wait_for_next_minute


@pytest.fixture(scope="session")
def produced(local_cluster) -> Produced:
    """30 + 45 messages in two consecutive one-minute windows (of different sizes), on 2 queues of each broker."""
    topic = unique("orders")
    local_cluster.create_topic(topic, 2)

    def send(first: int, count: int) -> list:
        return produce(local_cluster.spec.namesrv_address, local_cluster.spec.state_dir,
                       [order(i, topic) for i in range(first, first + count)])

    wait_for_next_minute(offset_s=1)  # leave room so each batch stays inside its minute
    sent = send(0, 30)
    wait_for_next_minute(offset_s=1)
    sent += send(30, 45)
    wait_for_next_minute(offset_s=3)  # the second window closes (+ 2 s grace)
    return Produced(topic, java_dump(local_cluster, topic, sent), sent)
