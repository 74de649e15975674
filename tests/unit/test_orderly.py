"""Orderly runs: locks held around the read and released after, refused when another member holds one,
lost locks reported; windows of a queue in order. Locks here are a plain table of holders."""

from __future__ import annotations

import threading

import pytest

from rocketlake.engine.ledger import WindowEntry
from rocketlake.engine.orderly import (
    LOCK_ATTEMPTS,
    LockLost,
    QueuesLocked,
    out_of_order,
    queues_locked,
)
from rocketlake.rocketmq.message_queue import MessageQueue, OffsetRange

A, B = MessageQueue("orders", "broker-a", 0), MessageQueue("orders", "broker-b", 0)


class LockTable:
    """Queue -> holder, granting a lock to whoever holds it already or when it is free, as the broker does."""

    def __init__(self, holders=None):
        self.holders: dict[MessageQueue, str] = dict(holders or {})
        self.calls: list[tuple[str, str, tuple]] = []
        self.renewed = threading.Event()

    def lock_batch_mq(self, group, client_id, queues):
        queues = tuple(queues)
        self.calls.append(("lock", client_id, queues))
        if len([c for c in self.calls if c[0] == "lock"]) > 1:
            self.renewed.set()
        granted = set()
        for mq in queues:
            if self.holders.setdefault(mq, client_id) == client_id:
                granted.add(mq)
        return granted

    def unlock_batch_mq(self, group, client_id, queues):
        self.calls.append(("unlock", client_id, tuple(queues)))
        for mq in queues:
            if self.holders.get(mq) == client_id:
                del self.holders[mq]


def test_locks_are_held_for_the_body_and_released_after():
    table = LockTable()
    with queues_locked(table, "g", "10.0.0.1@DEFAULT", [B, A]):
        assert table.holders == {A: "10.0.0.1@DEFAULT", B: "10.0.0.1@DEFAULT"}
    assert table.holders == {}
    assert [c[0] for c in table.calls] == ["lock", "unlock"]


def test_a_queue_held_by_another_member_stops_the_run_before_the_body():
    table, waits, ran = LockTable({B: "10.0.0.2@DEFAULT"}), [], []
    with pytest.raises(QueuesLocked) as refused:
        with queues_locked(table, "g", "10.0.0.1@DEFAULT", [A, B], wait=waits.append):
            ran.append(True)
    assert not ran and len(waits) == LOCK_ATTEMPTS - 1
    assert "orders/broker-b/0" in str(refused.value) and "nothing was read" in str(refused.value)
    assert table.holders == {B: "10.0.0.2@DEFAULT"}  # what it got meanwhile (A) is released; B untouched


def test_a_lock_lost_while_reading_fails_the_run_after_the_body():
    table = LockTable()
    with pytest.raises(LockLost) as lost:
        with queues_locked(table, "g", "me", [A, B], renew_every_s=0.01):
            table.holders[A] = "someone else"  # the broker let our lock lapse and gave it away
            table.renewed.clear()
            assert table.renewed.wait(10)  # a renewal ran after the loss
    assert "lost orders/broker-a/0" in str(lost.value)


def windows(*ranges_per_window):
    return [WindowEntry(f"m{i}", i * 60_000, (i + 1) * 60_000, tuple(rs)) for i, rs in enumerate(ranges_per_window)]


def test_out_of_order_names_the_queues_that_would_skip_messages():
    planned = windows([OffsetRange(A, 0, 3), OffsetRange(B, 5, 9)], [OffsetRange(A, 3, 6), OffsetRange(B, 9, 9)])
    assert out_of_order(planned, {A: 0, B: 5}) == []
    assert out_of_order(planned, {A: 3, B: 9}) == []  # A re-lands [0, 3) then continues at 3; B has nothing new
    [problem] = out_of_order(planned[1:], {A: 0, B: 5})
    assert problem.startswith("orders/broker-a/0: window m1 starts at offset 3, but the group has landed only up to 0")
    assert out_of_order(planned, {}) == []  # queues with no known position are not judged
