"""A group's progress per queue: lag as mqadmin's Diff, lag in seconds from the oldest pending message."""

import pytest

from rocketlake.engine.progress import QueueProgress, Unanswered, group_progress, last_landed, left_the_route, render
from rocketlake.rocketmq.errors import ConnectionTurnedAway, RequestTimeout
from rocketlake.rocketmq.message_queue import MessageQueue

A0, A1, B0 = (
    MessageQueue("orders", "broker-a", 0),
    MessageQueue("orders", "broker-a", 1),
    MessageQueue("orders", "broker-b", 0),
)


class Offsets:
    """A group's offsets as plain data: (min, max, committed) per queue, store time = 1000 * offset."""

    def __init__(self, table: dict[MessageQueue, tuple[int, int, int | None]]):
        self.table = table
        self.reads: list[tuple[MessageQueue, int]] = []

    def subscribed_queues(self):
        return sorted(self.table)

    def min_offset(self, mq):
        return self.table[mq][0]

    def max_offset(self, mq):
        return self.table[mq][1]

    def committed_offset(self, mq):
        return self.table[mq][2]

    def store_time(self, mq, offset):
        self.reads.append((mq, offset))
        return 1000 * offset


def test_lag_and_the_oldest_pending_message_per_queue():
    group = Offsets({A0: (0, 10, 4), A1: (5, 9, None), B0: (0, 7, 7)})
    rows = {r.queue: r for r in group_progress(group)}
    assert [rows[q].lag for q in (A0, A1, B0)] == [6, 9, 0]  # no offset counts as 0, as in mqadmin
    assert rows[A0].oldest_pending_ms == 4000  # the message at the committed offset
    assert rows[A1].oldest_pending_ms == 5000  # no offset: the queue's first message still there
    assert rows[B0].oldest_pending_ms is None and (B0, 7) not in group.reads  # caught up: nothing read
    assert rows[A0].lag_seconds(10_000) == 6.0 and rows[B0].lag_seconds(10_000) == 0.0


class Unanswering(Offsets):
    """Offsets whose broker-a raises ``error`` at every request, counting them."""

    def __init__(self, table, error):
        super().__init__(table)
        self.error, self.asked_a = error, 0

    def min_offset(self, mq):
        if mq.broker_name == "broker-a":
            self.asked_a += 1
            raise self.error
        return super().min_offset(mq)


def test_a_broker_not_answering_is_named_once_and_the_others_are_still_read():
    timeout = RequestTimeout("127.0.0.1:10911 did not answer GET_MIN_OFFSET(31) within 3 s", address="127.0.0.1:10911")
    group = Unanswering({A0: (0, 10, 4), A1: (0, 9, 9), B0: (0, 7, 5)}, timeout)
    unread = {}
    rows = group_progress(group, unread)
    assert [r.queue for r in rows] == [B0]
    assert list(unread) == ["broker-a"] and unread["broker-a"].queues == [A0, A1]
    assert unread["broker-a"].address == "127.0.0.1:10911" and "GET_MIN_OFFSET" in unread["broker-a"].error
    assert group.asked_a == 1  # one timeout for the broker, not one per queue
    with pytest.raises(RequestTimeout):  # without ``unread`` (the CLI's offsets show): the error, as before
        group_progress(Unanswering({A0: (0, 10, 4)}, timeout))
    with pytest.raises(ConnectionTurnedAway):  # a TLS refusal is configuration: never read as a broker down
        group_progress(Unanswering({A0: (0, 10, 4)}, ConnectionTurnedAway("tls")), {})


def test_a_broker_read_last_time_and_in_no_route_now_is_named_with_its_queues():
    rows = group_progress(Offsets({B0: (0, 7, 5)}))  # broker-a killed: the route lists broker-b alone
    gone = left_the_route(rows, {}, [A0, A1, B0], "2026-11-01T10:00:00.000Z")
    assert list(gone) == ["broker-a"] and gone["broker-a"].queues == [A0, A1]
    assert gone["broker-a"].describe("broker-a") == "broker-a is in no route of the group's topics"
    assert gone["broker-a"].error == "it held them when last read, at 2026-11-01T10:00:00.000Z"
    # A broker unanswering is named as such already; every broker read or listed is not gone; nothing seen, nothing.
    paused = {"broker-a": Unanswered("127.0.0.1:10911", "timeout", [A0])}
    assert left_the_route(rows, paused, [A0, A1, B0], "t") == {}
    assert left_the_route(rows, {}, [B0], "t") == {} and left_the_route([], {}, [], "") == {}


def test_a_committed_offset_below_the_min_reads_the_first_message_still_stored():
    [row] = group_progress(Offsets({A0: (50, 60, 10)}))
    assert row.oldest_pending_ms == 50_000 and row.lag == 50


def test_render_has_a_line_per_queue_and_a_total():
    rows = [QueueProgress(A0, 0, 10, 4, 4000), QueueProgress(B0, 0, 7, None, 0)]
    text = render(rows, 10_000, {A0: "2026-11-23-10:05"}, {A0: "10.0.0.1@m1"}).splitlines()
    assert len(text) == 4
    assert text[1].split() == ["orders", "broker-a", "0", "0", "10", "4", "6", "6.0", "2026-11-23-10:05", "10.0.0.1@m1"]
    assert text[2].split() == ["orders", "broker-b", "0", "0", "7", "-", "7", "10.0", "-", "-"]
    assert text[3].split() == ["total", "2", "13", "10.0"]


def test_the_last_window_landed_per_queue_is_the_newest_key():
    assert last_landed({"2026-11-23-10:05": {A0}, "2026-11-23-10:04": {A0, B0}}) == {
        A0: "2026-11-23-10:05",
        B0: "2026-11-23-10:04",
    }
