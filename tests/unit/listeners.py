"""Listeners the unit tests name by import path, as a user's configuration does."""

from __future__ import annotations

from rocketlake.pipelines.listener import ConsumeConcurrentlyStatus, vectorized


def fail_poison(messages, context):
    """RECONSUME_LATER for a batch holding a message tagged 'poison'."""
    if any(m.get("tags") == "poison" for m in messages):
        return ConsumeConcurrentlyStatus.RECONSUME_LATER
    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS


@vectorized(columns="shout STRING")
def vectorised_upper(df):
    out = df.assign(shout=df["body"].map(lambda b: bytes(b).decode("utf-8", "replace").upper()))
    out["status"] = out["tags"] != "poison"
    return out[["status", "shout"]]
