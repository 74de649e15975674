"""Listeners the unit tests name by import path, as a user's configuration does."""

from __future__ import annotations

from rocketlake import ConsumeConcurrentlyStatus, ConsumeOrderlyStatus, vectorized  # the front door, as users import


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


#: tag -> fail while reconsume_times is below this (RetryPeer's --fail rules, the same on both sides)
FAIL_UNTIL = {"poison": 99, "flaky": 1}


def fail_by_tag(messages, context):
    """RECONSUME_LATER for a batch holding a message that ``FAIL_UNTIL`` still fails."""
    for m in messages:
        if m["reconsume_times"] < FAIL_UNTIL.get(m["tags"], 0):
            return ConsumeConcurrentlyStatus.RECONSUME_LATER
    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS


def fail_every_third_once(messages, context):
    """RECONSUME_LATER the first time for a batch holding a message whose ``seq`` property is a multiple of 3."""
    for m in messages:
        if m["reconsume_times"] == 0 and int(dict(m["properties"]).get("seq", 1)) % 3 == 0:
            return ConsumeConcurrentlyStatus.RECONSUME_LATER
    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS


def fail_every_third_while_flagged(messages, context):
    """``fail_every_third_once`` while the file ``fail_flag(topic)`` exists: a downstream that fails for a while, then
    recovers (a window landed again afterwards consumes its originals). The flag is named after the messages' topic
    (a redelivered copy's is its original topic), not by the run's environment: on a Spark Connect server the
    listener runs in the server's Python workers, which share the machine's temporary directory, not the run's
    environment."""
    import os

    if not os.path.exists(fail_flag(messages[0]["topic"])):
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS
    return fail_every_third_once(messages, context)


def fail_flag(topic: str) -> str:
    """The file whose presence makes ``fail_every_third_while_flagged`` fail on ``topic``'s messages."""
    import tempfile

    return f"{tempfile.gettempdir()}/rocketlake-downstream-fails-{topic}"


def sleep_on_slow(messages, context):
    """Hangs for a minute on a message tagged 'slow' (a stuck downstream call), succeeds on the others."""
    import time

    if any(m["tags"] == "slow" for m in messages):
        time.sleep(60)
    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS


def pause_on_slow(messages, context):
    """Takes 10 s over a batch holding a message tagged 'slow' (a run that is still working a while), succeeds."""
    import time

    if any(m["tags"] == "slow" for m in messages):
        time.sleep(10)
    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS


#: orderly: tag -> suspend while the message's failed attempts (reconsume_times) are below this
ORDERLY_FAIL_UNTIL = {"hold": 1, "poison": 99}


def orderly_fail_by_tag(messages, context):
    """SUSPEND_CURRENT_QUEUE_A_MOMENT for a batch holding a message that ``ORDERLY_FAIL_UNTIL`` still fails. Every
    call is appended to ``calls_file(topic)`` (queue, offset, attempts per message), so a test can check the order
    of the calls: Spark's Python workers share the machine's temporary directory, not the test's variables."""
    with open(calls_file(messages[0]["topic"]), "a") as f:
        for m in messages:
            f.write(f"{m['broker_name']}/{m['queue_id']} {m['queue_offset']} {m['reconsume_times']}\n")
    for m in messages:
        if m["reconsume_times"] < ORDERLY_FAIL_UNTIL.get(m["tags"], 0):
            return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
    return ConsumeOrderlyStatus.SUCCESS


def calls_file(topic: str) -> str:
    import tempfile

    return f"{tempfile.gettempdir()}/rocketlake-listener-calls-{topic}.txt"


#: set by the test that names ``orderly_meeting``: the calls of how many queues must be in flight at once
MEETING: list = []


def orderly_meeting(messages, context):
    """Waits for the other queues' calls at a barrier: it passes only if those calls run at the same time."""
    MEETING[0].wait()
    return ConsumeOrderlyStatus.SUCCESS
