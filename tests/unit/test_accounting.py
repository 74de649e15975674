"""The accounting of a landing (pipelines.accounting): every offset read is a row or an outcome not landed."""

import pytest

from rocketlake.engine.accounting import DUPLICATES, FILTERED, ROWS, Tally, account
from rocketlake.engine.failures import SENT_BACK
from rocketlake.engine.ledger import WindowEntry
from rocketlake.rocketmq.message_queue import MessageQueue, OffsetRange

A, B = MessageQueue("orders", "broker-a", 0), MessageQueue("orders", "broker-b", 0)
W = WindowEntry("2026-11-01-00:00", 0, 60_000, (OffsetRange(A, 0, 10), OffsetRange(B, 5, 9)))


def judged(a_rows: int = 7) -> Tally:
    """A judged landing: A's 10 offsets are rows, a filtered one, a sent-back one and a duplicate; B's 4 rows."""
    tally = Tally()
    for queue, outcome, count in (
        (A, ROWS, a_rows),
        (A, FILTERED, 1),
        (A, SENT_BACK, 1),
        (A, DUPLICATES, 1),
        (B, ROWS, 4),
    ):
        tally.add(0, outcome, count, queue)
    tally.landed_bytes[0] += 1_100
    return tally


def test_a_judged_landing_whose_rows_and_outcomes_add_up_per_queue_balances():
    (accounting,) = account((W,), {(0, A): 7, (0, B): 4}, judged())
    assert (accounting.planned, accounting.seen, accounting.rows) == (14, 14, 11)
    assert (accounting.filtered, accounting.sent_back, accounting.duplicates, accounting.body_bytes) == (1, 1, 1, 1_100)
    assert accounting.balanced and accounting.queue_problems == ()


def test_a_queue_whose_rows_in_the_table_differ_from_its_count_is_named():
    (accounting,) = account((W,), {(0, A): 6, (0, B): 4}, judged())  # a row of A missing from the table
    assert not accounting.balanced
    assert accounting.queue_problems == ("orders/broker-a/0: 6 rows + 3 not landed, range of 10",)


def test_counted_per_window_only_a_queue_may_not_hold_more_rows_than_its_range():
    tally = Tally()
    tally.add(0, FILTERED, 2)
    tally.add(0, ROWS, 12)
    (fine,) = account((W,), {(0, A): 8, (0, B): 4}, tally)
    assert fine.balanced and fine.seen == 14
    (too_many,) = account((W,), {(0, A): 8, (0, B): 5}, tally)
    assert too_many.queue_problems == ("orders/broker-b/0: 5 rows + 0 not landed, range of 4",)


def test_an_outcome_the_accounting_does_not_know_is_refused():
    with pytest.raises(ValueError, match="unknown outcome 'lost'"):
        Tally().add(0, "lost", 1)
