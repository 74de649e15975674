"""Consume traces in the Java client's encoding (``engine.traces``): pure logic."""

from __future__ import annotations

import pytest

from rocketlake.engine.traces import CONTENT, FIELD, MAX_TRACE_MESSAGE, Consumed, encode, trace_messages

pytestmark = pytest.mark.unit


def test_a_consumed_message_is_a_sub_before_and_a_sub_after_as_trace_data_encoder_writes_them():
    text = encode("g1", Consumed("MSGID1", "k1 k2", 2), "REQ", 1_700_000_000_000, 12)
    before, after, rest = text.split(FIELD)
    assert rest == ""
    assert before.split(CONTENT) == ["SubBefore", "1700000000000", "DefaultRegion", "g1", "REQ", "MSGID1", "2", "k1 k2"]
    # TraceDataEncoder.decoderFromTraceDataString reads line[1..8] of a SubAfter: request id, msgId, cost, success,
    # keys, context code, then (not on CLOUD) the time stamp and the group.
    assert after.split(CONTENT) == ["SubAfter", "REQ", "MSGID1", "12", "true", "k1 k2", "0", "1700000000012", "g1"]


def test_contexts_are_batched_into_messages_keyed_by_what_they_trace():
    consumed = [Consumed(f"ID{i:06d}", f"key-{i}") for i in range(2000)]
    messages = list(trace_messages("g1", consumed, 1, 1, request_id="R"))
    assert len(messages) > 1 and all(len(m.body.encode()) <= MAX_TRACE_MESSAGE for m in messages)
    assert "".join(m.body for m in messages).count("SubBefore") == 2000
    keys = [k for m in messages for k in m.keys]
    assert keys.count("ID000007") == 1 and "key-7" in keys and len(keys) == 4000
    assert list(trace_messages("g1", [], 1, 1)) == []
