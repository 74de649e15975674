"""A replica promoted with a truncated tail (5.x controller mode, or a slave promoted by hand), on plain data.

The table landed a queue up to offset E from the old master; the replica promoted in its place had copied it only up
to T < E, and stores new messages at the reused offsets T, T+1, ... The run says so in one sentence, keeps what was
landed, and lands every new message in the next windows: it never skips them, never refuses the broker, never
advises deleting the table. A store that holds none of what the table landed (wiped, another cluster) is still
refused, with advice that keeps the table.
"""

from __future__ import annotations

import pytest

from rocketlake.dagster.metadata import REPLACED_TAILS, windows_metadata
from rocketlake.engine import ingest
from rocketlake.rocketmq.message_queue import OffsetRange
from tests.unit.paper import MIN, A, B, LakeOnPaper, QueuesOnPaper, RacedLake, config, minutes, one_run, window
from tests.unit.support import Lines, Recorded

FIRST = config(consume_from_where="CONSUME_FROM_FIRST_OFFSET")


def landed_two_windows(*, commit: bool = True):
    """Minutes 0 and 1 landed: A up to 5 (boundary 1 min -> 3, 2 min -> 5), B up to 5."""
    broker = QueuesOnPaper({A: minutes(3, 2), B: minutes(1, 4)})
    lake, recorded = LakeOnPaper(), Recorded()
    one_run(broker, lake, recorded, FIRST, "r0", [window(0)], commit=commit)
    one_run(broker, lake, recorded, FIRST, "r1", [window(1)], commit=commit)
    return broker, lake, recorded


def two_members_landed_two_windows():
    """m1 lands A and m2 lands B of windows 0 and 1 into one table: (m1, m2, broker, lake, m1's and m2's records)."""
    m1, m2 = (
        config(instance_name="m1", consume_from_where="CONSUME_FROM_FIRST_OFFSET"),
        config(instance_name="m2", consume_from_where="CONSUME_FROM_FIRST_OFFSET"),
    )
    broker = QueuesOnPaper({A: minutes(3, 2), B: minutes(1, 4)})
    lake, first, second = LakeOnPaper(), Recorded(), Recorded()
    for i in range(2):
        one_run(broker, lake, first, m1, f"a{i}", [window(i)], only={A})
        one_run(broker, lake, second, m2, f"b{i}", [window(i)], only={B})
    return m1, m2, broker, lake, first, second


def promote_without_the_tail(broker: QueuesOnPaper, kept: int, new: int) -> None:
    """The new master of A holds the old messages [0, kept) only, then ``new`` messages stored after the failover
    (in minute 2) at the reused offsets from ``kept`` on."""
    broker.stores[A] = broker.stores[A][:kept] + [2 * MIN + 30_000 + i for i in range(new)]


def test_new_messages_at_reused_offsets_land_in_the_next_window_and_none_is_skipped():
    """The replica copied the group's offset (5) but not message 4; it then stored 3 new messages at 4, 5, 6. The
    next window lands all three, from offset 4; the message lost with the old master stays in the table."""
    broker, lake, recorded = landed_two_windows()
    assert broker.committed == {A: 5, B: 5}
    promote_without_the_tail(broker, kept=4, new=3)
    log = Lines()
    prepared, landed, _ = one_run(broker, lake, recorded, FIRST, "r2", [window(2)], log=log)
    assert landed.ledger.windows[0].ranges == (OffsetRange(A, 4, 7), OffsetRange(B, 5, 5))
    assert broker.committed == {A: 7, B: 5}
    [said] = [line for line in log.lines if "broker-a" in line and "landed" in line and "[4, 5)" in line]
    assert "up to offset 5" in said and "from offset 4" in said and "stay in the table" in said
    assert "delete" not in said
    [replaced] = prepared.replaced
    assert (replaced.queue, replaced.landed_end, replaced.anchor) == (A, 5, 4)
    # The window's materialization says it too, where the UI shows the run's figures.
    shown = windows_metadata(landed, replaced=(replaced.describe("g"),))["m2"][REPLACED_TAILS]
    assert said in shown.value
    # The entry forgets the old tail: nothing it carries moves the group over the reused offsets again.
    assert dict(landed.ledger.bounds[A])[2 * MIN] == 4
    assert all(end <= 7 for _, end in landed.ledger.landed.get(A, ()))
    # The next run finds the queue consistent again: no warning, the next minute starts at 7.
    broker.stores[A] += [3 * MIN + 1]
    quiet = Lines()
    _, later, _ = one_run(broker, lake, recorded, FIRST, "r3", [window(3)], log=quiet)
    assert later.ledger.windows[0].ranges[0] == OffsetRange(A, 7, 8)
    assert not [line for line in quiet.lines if "stay in the table" in line]


@pytest.mark.parametrize("committed", [True, False], ids=["offset-copied", "offset-not-committed"])
def test_a_replica_whose_queue_ends_below_the_landed_end_is_followed_not_refused(committed):
    """The promoted replica ends at 4, below the landed end 5, with nothing new yet: the group's offset goes to 4
    (back from 5 when the replica had copied it; instead of a refusal when the ledger would repair it to 5), and the
    messages stored later from offset 4 land in the next window."""
    broker, lake, recorded = landed_two_windows(commit=committed)
    promote_without_the_tail(broker, kept=4, new=0)
    prepared = ingest.prepare(broker, lake, recorded, FIRST, now_ms=100 * MIN, first_window_start_ms=0)
    assert broker.committed[A] == 4 and prepared.starts[A] == 4
    assert [(r.queue, r.landed_end, r.broker_end, r.anchor) for r in prepared.replaced] == [(A, 5, 4, 4)]
    # A run that dies here and the next one that prepares again agree: the same anchor, nothing moves further.
    again = ingest.prepare(broker, lake, recorded, FIRST, now_ms=100 * MIN, first_window_start_ms=0)
    assert broker.committed[A] == 4 and again.starts[A] == 4
    promote_without_the_tail(broker, kept=4, new=2)
    _, landed, _ = one_run(broker, lake, recorded, FIRST, "r2", [window(2)])
    assert landed.ledger.windows[0].ranges[0] == OffsetRange(A, 4, 6)
    assert broker.committed[A] == 6


def test_a_wiped_store_is_refused_with_advice_that_keeps_the_table():
    """Nothing the table landed is on the broker any more (a store recreated): no boundary it recorded holds, so
    this is no truncated tail. Refused, naming the queue; the advice never says to delete the table."""
    broker, lake, recorded = landed_two_windows(commit=False)
    wiped = QueuesOnPaper({A: [5 * MIN], B: [5 * MIN]})
    with pytest.raises(ingest.LedgerAheadOfBroker) as refused:
        ingest.prepare(wiped, lake, recorded, FIRST, now_ms=100 * MIN, first_window_start_ms=0)
    assert "broker-a/0" in str(refused.value) and "delete" not in str(refused.value)
    assert "table" in str(refused.value) and wiped.commits == []


def test_a_truncated_queue_on_another_cluster_is_refused():
    """The same queue names on another cluster (the ingestion now points elsewhere): its messages are not the ones
    the table landed, whatever their offsets and times, so nothing is anchored on them."""
    broker, lake, recorded = landed_two_windows()
    promote_without_the_tail(broker, kept=4, new=3)
    broker.cluster = "10.0.0.9:9876"
    with pytest.raises(ingest.LedgerAheadOfBroker) as refused:
        ingest.prepare(broker, lake, recorded, FIRST, now_ms=100 * MIN, first_window_start_ms=0)
    assert "10.0.0.9:9876" in str(refused.value) and "127.0.0.1:9876" in str(refused.value)
    assert "delete" not in str(refused.value) and broker.committed == {A: 5, B: 5}


@pytest.mark.parametrize("owner_first", [True, False], ids=["owner-first", "other-member-first"])
def test_two_members_of_one_table_skip_nothing_whichever_runs_first_after_the_failover(owner_first):
    """m1 takes A, m2 takes B, both write the table. Whichever runs first after A's failover, the entry it writes
    carries no old tail of A (nothing moves the group over the reused offsets), and m1 still finds A replaced (m2
    keeps A's boundaries as they were): every new message of A lands once, from offset 4."""
    m1, m2, broker, lake, first, second = two_members_landed_two_windows()
    assert broker.committed == {A: 5, B: 5}
    promote_without_the_tail(broker, kept=4, new=3)
    broker.stores[B] += [2 * MIN + 40_000]
    runs = [(first, m1, "a", {A}), (second, m2, "b", {B})]
    for minute in (2, 3):
        for recorded, cfg, name, only in runs if owner_first else runs[::-1]:
            one_run(broker, lake, recorded, cfg, f"{name}{minute}", [window(minute)], only=only)
        broker.stores[A] += [3 * MIN + 1] if minute == 2 else []
    landed_a = sorted(
        (r.start, r.end)
        for e in lake.entries
        for w in e.windows
        if w.start_ms >= 2 * MIN
        for r in w.ranges
        if r.queue == A and e.run_id.startswith("a")
    )
    assert landed_a == [(4, 7), (7, 8)] and broker.committed == {A: 8, B: 6}


def test_another_members_run_that_read_the_ledger_during_the_re_anchoring_carries_no_old_tail():
    """m2 lands B while m1 re-anchors A (after m1 read the ledger, before m1's commit). m2 read the old tail of A too;
    if the entry it writes carried it, m1's next run would repair A's offset over the new messages stored there."""
    m1, m2, broker, lake, first, second = two_members_landed_two_windows()
    promote_without_the_tail(broker, kept=3, new=1)  # landed up to 5, the new master holds [0, 3) and one new one
    broker.stores[B] += [2 * MIN + 40_000]
    raced = RacedLake(lake, lambda: one_run(broker, lake, second, m2, "b2", [window(2)], only={B}))
    _, a2, _ = one_run(broker, raced, first, m1, "a2", [window(2)], only={A})
    assert a2.ledger.windows[0].ranges == (OffsetRange(A, 3, 4),) and broker.committed[A] == 4
    broker.stores[A] += [3 * MIN + 1, 3 * MIN + 2]  # offsets 4 and 5: reused again, below the old landed end 5
    _, a3, _ = one_run(broker, lake, first, m1, "a3", [window(3)], only={A})
    assert a3.ledger.windows[0].ranges == (OffsetRange(A, 4, 6),) and broker.committed[A] == 6


@pytest.mark.parametrize("copied", [5, None], ids=["offset-copied", "no-offset-copied"])
def test_a_lagging_slave_answering_for_a_master_that_is_down_is_no_replaced_tail(copied):
    """broker-a's master is down and a slave answers for it (a 5.x slave acting as master): it has copied A only up
    to 4 of the 5 the table landed, and stores nothing new (a slave takes no writes). That is no replaced tail: the
    master holds every message and comes back with them. Nothing on A is re-anchored or moved back, nothing of A is
    landed again, and once the master answers again the next messages land from 5, each once."""
    broker, lake, recorded = landed_two_windows()
    on_master = list(broker.stores[A])
    broker.stores[A], broker.slave_answers = on_master[:4], {"broker-a"}
    broker.stores[B] += [2 * MIN + 40_000]
    if copied is None:
        del broker.committed[A]  # the slave had not copied the group's offsets yet
    else:
        broker.committed[A] = copied
    broker.commits.clear()
    if copied is None:  # the ledger would move the group to 5, past what the slave holds: refused, nothing moved
        with pytest.raises(ingest.SlaveBehind) as refused:
            one_run(broker, lake, recorded, FIRST, "r2", [window(2)])
        assert "broker-a/0: landed up to 5, the broker holds up to 4" in str(refused.value)
        assert "master of broker-a does not answer" in str(refused.value) and "delete" not in str(refused.value)
        assert broker.commits == [] and A not in broker.committed
    else:  # the group stays at 5; A waits, B lands
        prepared, landed, _ = one_run(broker, lake, recorded, FIRST, "r2", [window(2)])
        assert prepared.replaced == ()
        [on_a, on_b] = landed.ledger.windows[0].ranges
        assert on_a.end <= on_a.start and on_b == OffsetRange(B, 5, 6)  # nothing of A read from the slave
        assert broker.committed == {A: 5, B: 6} and all(offset >= 5 for _, offset in broker.commits)
    # The master is back with every message, its copy of the offset at 5, and two new messages stored in minute 3.
    broker.stores[A], broker.slave_answers, broker.committed[A] = on_master + [3 * MIN + 1, 3 * MIN + 2], set(), 5
    prepared, landed, _ = one_run(broker, lake, recorded, FIRST, "r3", [window(3)])
    assert prepared.replaced == () and landed.ledger.windows[0].ranges[0] == OffsetRange(A, 5, 7)
    assert broker.committed[A] == 7


def test_a_master_that_changes_while_the_run_reads_it_re_anchors_nothing():
    """A's tail looks replaced, but broker-a's master changed between the reads and the re-anchoring (it died, and
    a slave may have answered some reads in its place): which store answered is not known, so nothing moves and the
    run is refused; the next run reads again."""
    broker, lake, recorded = landed_two_windows()
    promote_without_the_tail(broker, kept=4, new=3)
    answers = iter([{"broker-a": "a1:10911", "broker-b": "b:10911"}, {"broker-a": "a2:10911"}])
    broker.masters = lambda queues: next(answers)
    commits = list(broker.commits)
    with pytest.raises(ingest.MasterChanged, match="broker-a: a1:10911 before, a2:10911 now"):
        ingest.prepare(broker, lake, recorded, FIRST, now_ms=100 * MIN, first_window_start_ms=0)
    assert broker.commits == commits and broker.committed == {A: 5, B: 5}
