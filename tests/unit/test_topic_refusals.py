"""Which topic attributes (5.x ``GET_TOPIC_CONFIG``) make a topic one offset windows cannot land."""

from __future__ import annotations

import pytest

from rocketlake.engine.broker_access import compaction_refusal

pytestmark = pytest.mark.unit


def test_a_compaction_topic_is_refused_naming_it_and_what_to_do():
    why = compaction_refusal("prices", {"cleanup.policy": "COMPACTION", "message.type": "NORMAL"})
    assert why is not None
    assert why.startswith("topic prices is a compaction topic (cleanup.policy=COMPACTION)")
    assert "nothing was read" in why and "cleanup.policy=DELETE" in why


@pytest.mark.parametrize("attributes", [{}, {"cleanup.policy": "DELETE"}, {"queue.type": "SimpleCQ"}])
def test_a_topic_that_keeps_its_log_is_accepted(attributes):
    assert compaction_refusal("orders", attributes) is None
