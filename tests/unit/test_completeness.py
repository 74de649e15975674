"""Slices nobody landed, found from the ledger, and the windows a rebalance sensor checks."""

from __future__ import annotations

from datetime import datetime, timezone

from rocketlake.dagster.partitions import last_closed_windows, next_boundary, window_partitions
from rocketlake.engine.completeness import landed_queues, missing_slices
from rocketlake.engine.config import WindowConfig
from rocketlake.engine.ledger import LedgerEntry, WindowEntry
from rocketlake.rocketmq.message_queue import MessageQueue, OffsetRange

Q = [MessageQueue("orders", b, i) for b in ("broker-a", "broker-b") for i in range(2)]


def entry(run, key, *queues, group="g", carried=()):
    return LedgerEntry(
        "orders",
        group,
        run,
        (WindowEntry(key, 0, 60_000, tuple(OffsetRange(q, 0, 0) for q in queues)),),
        carried=tuple(carried),
    )


def test_a_window_is_complete_when_some_member_landed_every_queue_even_an_empty_range():
    first_half = entry("m1", "w1", Q[0], Q[1])
    landed = landed_queues(
        [
            entry("m2", "w1", Q[2], Q[3]),
            entry("m1b", "w2", Q[0], carried=[first_half]),
            entry("x", "w2", Q[1], group="other"),
        ],
        "g",
    )
    assert landed == {"w1": set(Q), "w2": {Q[0]}}
    assert missing_slices(landed, ["w1", "w2", "w3"], Q[:2]) == {"w2": [Q[1]], "w3": Q[:2]}, (
        "another group's entry lands nothing for this one"
    )


def test_a_queue_added_after_a_window_was_landed_makes_it_incomplete():
    landed = landed_queues([entry("r", "w1", *Q)], "g")
    added = MessageQueue("orders", "broker-a", 2)
    assert missing_slices(landed, ["w1"], [*Q, added]) == {"w1": [added]}


def test_the_sensor_checks_the_last_closed_windows_and_names_the_next_boundary():
    partitions = window_partitions(WindowConfig(cron="*/5 * * * *", start="2026-11-23", grace_seconds=30))
    now = datetime(2026, 11, 23, 1, 0, 20, tzinfo=timezone.utc)  # 00:55 is not closed until 01:00:30
    assert last_closed_windows(partitions, now, 30, 3) == ["2026-11-23-00:40", "2026-11-23-00:45", "2026-11-23-00:50"]
    assert next_boundary(partitions, now) == "2026-11-23-01:05"
    assert last_closed_windows(partitions, datetime(2026, 11, 22, tzinfo=timezone.utc), 30, 3) == []


def test_a_landing_that_did_not_balance_or_whose_verdict_never_came_lands_nothing_for_the_sensor():
    from dataclasses import replace

    from rocketlake.engine.ledger import BALANCED, PENDING, UNBALANCED

    decided = replace(entry("ok", "w1", Q[0]), verdict=PENDING)
    # Its verdict commit, shaped as ``ingest.verdict_of`` makes it: no windows, the decided copy carried.
    verdict = replace(decided, windows=(), verdict=None, carried=(replace(decided, verdict=BALANCED),))
    died = replace(entry("died", "w1", Q[1]), verdict=PENDING)  # killed between its commit and its verdict
    short = replace(entry("short", "w1", Q[2]), verdict=UNBALANCED)
    newest_first = [short, died, verdict, decided]
    assert landed_queues(newest_first, "g") == {"w1": {Q[0]}}
    assert missing_slices(landed_queues(newest_first, "g"), ["w1"], Q) == {"w1": Q[1:]}
