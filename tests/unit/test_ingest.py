"""The run on plain data: repair, origin, gaps, watermarks, windows at stake, the carried ledger, verdicts.

The queues here are lists of store timestamps on paper, the lake a list of ledger entries, and the
recorded runs a set: each a plain-data stand-in for an interface of ``engine.ingest``, so every
branch of the protocol is exercised without a broker, Spark or Dagster. The runs are
``engine.run.run``, the sequence the Dagster asset drives in production; the same runs on real
brokers, Spark and Delta are in tests/integration/test_engine_runs.py.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from rocketlake.engine import ingest
from rocketlake.engine.failures import SENT_BACK, FailedMessage
from rocketlake.engine.identity import client_id
from rocketlake.engine.ledger import (
    BALANCED,
    BOUNDS_KEPT,
    BOUNDS_KEPT_PASSED,
    PENDING,
    UNBALANCED,
    LedgerEntry,
    Suspension,
)
from rocketlake.engine.run import Alone, Committed, LandingRequest, Unbalanced, run
from rocketlake.engine.windows import MessagesDeleted
from rocketlake.rocketmq.message_queue import MessageQueue, OffsetRange
from tests.unit.paper import MIN, A, B, LakeOnPaper, QueuesOnPaper, RacedLake, config, minutes, one_run, window
from tests.unit.support import Lines, Recorded


def test_a_group_set_back_on_the_broker_below_the_newest_entry_is_moved_forward_again_by_the_next_run():
    """A 5.x broker resets offsets itself (mqadmin resetOffsetByTime, ``useServerSideResetOffset``), telling no
    client: the next run finds the group behind what the table holds, even below the newest entry's ranges, and
    moves it forward again over the ledger instead of staying there (or landing anything twice)."""
    broker = QueuesOnPaper({A: minutes(3, 2, 2), B: minutes(1, 4, 1)})
    lake, recorded = LakeOnPaper(), Recorded()
    cfg = config(consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    for i in range(2):
        one_run(broker, lake, recorded, cfg, f"r{i}", [window(i)])
    assert broker.committed == {A: 5, B: 5}
    broker.committed = {A: 1, B: 0}  # the operator's reset: below the newest entry's ranges [3, 5) and [1, 5)
    prepared, landed, _ = one_run(broker, lake, recorded, cfg, "r2", [window(2)])
    assert sorted((m.queue, m.before, m.after) for m in prepared.repaired) == [(A, 1, 5), (B, 0, 5)]
    assert landed.ledger.windows[0].ranges == (OffsetRange(A, 5, 7), OffsetRange(B, 5, 6))  # nothing again
    assert broker.committed == {A: 7, B: 6}


def test_a_run_lands_its_windows_and_commits_their_ends():
    broker = QueuesOnPaper({A: minutes(3, 2), B: minutes(1, 4)})
    lake, recorded = LakeOnPaper(), Recorded()
    cfg = config(consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    prepared, landed, moves = one_run(broker, lake, recorded, cfg, "r1", [window(0)])
    assert prepared.origin == {A: 0, B: 0} and prepared.starts == {A: 0, B: 0}
    assert landed.ledger.windows[0].ranges == (OffsetRange(A, 0, 3), OffsetRange(B, 0, 1))
    assert landed.ledger.origin == {A: 0, B: 0}
    assert broker.committed == {A: 3, B: 1}
    _, landed, _ = one_run(broker, lake, recorded, cfg, "r2", [window(1)])
    assert landed.ledger.windows[0].ranges == (OffsetRange(A, 3, 5), OffsetRange(B, 1, 5))
    assert broker.committed == {A: 5, B: 5}


@pytest.mark.parametrize(
    ("where", "origin"),
    [
        ("CONSUME_FROM_FIRST_OFFSET", {A: 0, B: 0}),
        ("CONSUME_FROM_LAST_OFFSET", {A: 5, B: 5}),
        ("CONSUME_FROM_MIN_OFFSET", {A: 5, B: 5}),  # deprecated names start at the last offset, as in Java
    ],
)
def test_a_new_group_starts_per_consume_from_where_and_the_ledger_keeps_it(where, origin):
    broker = QueuesOnPaper({A: minutes(3, 2), B: minutes(1, 4)})
    lake, recorded = LakeOnPaper(), Recorded()
    cfg = config(consume_from_where=where)
    # Landed but not recorded: the broker still has no offset, only the ledger knows the origin.
    prepared, landed, _ = one_run(broker, lake, recorded, cfg, "r1", [window(0)], record=False)
    assert prepared.origin == origin and landed.ledger.origin == origin
    broker.stores[A] += [2 * MIN + i for i in range(7)]  # the queue grows meanwhile
    again = ingest.prepare(broker, lake, recorded, cfg, now_ms=100 * MIN, first_window_start_ms=0)
    assert again.origin == origin, "a later run agrees on the origin the first run decided"


def test_a_scheduled_run_starts_where_the_group_stands_a_backfill_takes_whole_windows():
    broker = QueuesOnPaper({A: minutes(4)}, committed={A: 2})
    lake, recorded = LakeOnPaper(), Recorded()
    _, landed, _ = one_run(broker, lake, recorded, config(), "r1", [window(0)], scheduled=True, commit=False)
    assert landed.ledger.windows[0].ranges == (OffsetRange(A, 2, 4),)
    _, landed, _ = one_run(broker, lake, recorded, config(), "r2", [window(0)], scheduled=False, commit=False)
    assert landed.ledger.windows[0].ranges == (OffsetRange(A, 0, 4),)


def test_a_landing_that_died_before_its_verdict_moves_no_offset_for_anyone_under_any_client_id():
    """Killed between its Delta commit and its verdict (in the send-back, say): neither the same deployment, nor
    the same one after its IP changed (another client id), nor another member may move the group over it."""
    broker = QueuesOnPaper({A: minutes(3, 2)}, committed={A: 0})
    lake, recorded = DiesBeforeVerdict(), Recorded()
    with pytest.raises(Died):
        one_run(broker, lake, recorded, config(), "dead", [window(0)])
    lake.__class__ = LakeOnPaper
    for cfg in (config(), config(client_ip="10.0.0.9"), config(instance_name="other")):
        prepared = ingest.prepare(broker, lake, recorded, cfg, 100 * MIN, 0, member=client_id(cfg))
        assert prepared.repaired == [] and broker.committed == {A: 0}, client_id(cfg)
        assert [e.run_id for e in prepared.at_stake] == ["dead"]  # still carried: it may never move an offset


def test_a_balanced_verdict_moves_offsets_without_dagsters_record_whoever_reads_it():
    """The verdict is committed only after every side effect of the landing: it is the proof for every reader,
    this deployment's next run after its IP changed included (trust does not hang on a client id)."""
    for reader in (config(), config(client_ip="10.0.0.9")):
        broker = QueuesOnPaper({A: minutes(3, 2)}, committed={A: 0})
        lake = LakeOnPaper()
        one_run(broker, lake, Recorded(), config(), "unrecorded", [window(0)], record=False)
        assert lake.ledger("g")[-1].verdict == BALANCED and broker.committed == {A: 0}
        prepared = ingest.prepare(broker, lake, Recorded(), reader, 100 * MIN, 0, member=client_id(reader))
        assert [(m.queue, m.before, m.after) for m in prepared.repaired] == [(A, 0, 3)], client_id(reader)


def test_the_failures_are_sent_back_before_the_verdict_is_committed():
    """A balanced verdict must never exist while a failure of its landing is still unsent."""
    steps = []

    class Failing(LakeOnPaper):
        def land(self, entry, queue_count, log, **kwargs):
            landing = super().land(entry, queue_count, log, **kwargs)
            failure = FailedMessage(A, 1, "0" * 32, "msg-id", "orders", 0, SENT_BACK, "boom")
            accounting = tuple(replace(a, rows=a.rows - 1, sent_back=1) for a in landing.accounting)
            return replace(landing, accounting=accounting, failures=(failure,))

        def record_verdict(self, verdict):
            steps.append("verdict")
            super().record_verdict(verdict)

    class Sending(QueuesOnPaper):
        def send_back(self, failure, max_reconsume_times, delay_level=0):
            steps.append(f"send back {failure.queue_offset}")

    broker = Sending({A: minutes(3, 2)}, committed={A: 0})
    one_run(broker, Failing(), Recorded(), config(), "r1", [window(0)])
    assert steps == ["send back 1", "verdict"] and broker.committed == {A: 3}


def test_a_recorded_landing_whose_commit_was_lost_is_repaired_by_the_next_run():
    broker = QueuesOnPaper({A: minutes(3, 2), B: minutes(1, 1)}, committed={A: 0, B: 0})
    lake, recorded = LakeOnPaper(), Recorded()
    one_run(broker, lake, recorded, config(), "crashed", [window(0)], commit=False)  # died before the commit
    assert broker.commits == []
    prepared = ingest.prepare(broker, lake, recorded, config(), 100 * MIN, 0)
    assert [(m.queue, m.before, m.after) for m in prepared.repaired] == [(A, 0, 3), (B, 0, 1)]
    assert broker.committed == {A: 3, B: 1} and prepared.starts == {A: 3, B: 1}
    assert prepared.at_stake == [], "once committed past, the entry is no longer at stake"


def test_offsets_never_skip_a_window_not_landed_nor_move_back():
    broker = QueuesOnPaper({A: minutes(2, 2, 2)}, committed={A: 0})
    lake, recorded = LakeOnPaper(), Recorded()
    _, _, moves = one_run(broker, lake, recorded, config(), "r3", [window(2)], scheduled=False)
    assert moves == [] and broker.committed == {A: 0}, "window 1 and 0 are missing below window 2"
    _, _, moves = one_run(broker, lake, recorded, config(), "r1", [window(0)], scheduled=False)
    assert broker.committed == {A: 2}
    _, _, moves = one_run(broker, lake, recorded, config(), "r2", [window(1)], scheduled=False)
    assert broker.committed == {A: 6}, "window 1 closes the gap: the watermark runs through window 2"
    _, _, moves = one_run(broker, lake, recorded, config(), "r0", [window(0)], scheduled=False)
    assert moves == [] and broker.committed == {A: 6}, "re-landing an old window never moves an offset back"


@pytest.mark.parametrize("whole_history", [False, True])
def test_only_the_windows_at_stake_are_looked_up_in_dagster(whole_history):
    broker = QueuesOnPaper({A: minutes(1, 1, 1, 1)}, committed={A: 0})
    lake, recorded = LakeOnPaper(whole_history=whole_history), Recorded()
    for i in range(3):
        one_run(broker, lake, recorded, config(), f"r{i}", [window(i)])
    one_run(broker, lake, recorded, config(), "dead", [window(3)], record=False)
    recorded.asked.clear()
    ingest.prepare(broker, lake, recorded, config(), 100 * MIN, 0)
    assert recorded.asked == [{"m3"}], "windows the offsets passed long ago are not asked about"


def test_deleted_messages_fail_the_run_naming_them_and_change_nothing():
    broker = QueuesOnPaper({A: minutes(5), B: minutes(5)}, committed={A: 1, B: 4}, deleted_below={A: 3, B: 2})
    lake = LakeOnPaper()
    with pytest.raises(MessagesDeleted, match=r"orders/broker-a/0: \[1, 3\)") as failure:
        ingest.prepare(broker, lake, Recorded(), config(on_deleted_messages="fail"), 100 * MIN, 0)
    assert "broker-b" not in str(failure.value)
    assert broker.commits == [] and lake.entries == []


def test_recorded_gaps_are_landed_in_the_ledger_and_the_offsets_move_past_them():
    broker = QueuesOnPaper({A: minutes(5, 2)}, committed={A: 1}, deleted_below={A: 3})
    lake, recorded = LakeOnPaper(), Recorded()
    prepared, landed, _ = one_run(broker, lake, recorded, config(on_deleted_messages="record"), "r1", [window(0)])
    assert prepared.gaps == {A: (1, 3)} and landed.ledger.gaps == {A: (1, 3)}
    assert landed.ledger.windows[0].ranges == (OffsetRange(A, 3, 5),)
    assert broker.committed == {A: 5}, "the gap [1, 3) counts as passed"


def test_each_entry_carries_what_is_at_stake_so_the_newest_alone_suffices():
    broker = QueuesOnPaper({A: minutes(1, 1, 1, 1)}, committed={A: 0})
    lake, recorded = DiesBeforeVerdict(), Recorded()
    with pytest.raises(Died):  # window 1's run dies before its verdict: its landing stays pending
        one_run(broker, lake, recorded, config(), "dead", [window(1)], scheduled=False)
    lake.__class__ = LakeOnPaper
    _, landed, _ = one_run(broker, lake, recorded, config(), "r0", [window(0)])
    assert [e.run_id for e in landed.ledger.carried] == ["dead"]
    assert broker.committed == {A: 1}, "window 1's landing was never decided"
    # Only the newest entry survives (the Delta log was cleaned): it still knows what is at stake.
    read_back = LedgerEntry.from_json(landed.ledger.to_json(), version=0)
    newest_only = LakeOnPaper([read_back])
    prepared = ingest.prepare(broker, newest_only, recorded, config(), 100 * MIN, 0)
    assert [e.run_id for e in prepared.at_stake] == ["dead"]
    one_run(broker, newest_only, recorded, config(), "r1", [window(1)])
    assert broker.committed == {A: 2}
    newest = newest_only.ledger("g")
    assert [e.run_id for e in newest] == ["dead", "r1"]
    assert ingest.prepare(broker, newest_only, recorded, config(), 100 * MIN, 0).at_stake == [], (
        "nothing is at stake once the offsets passed every landing"
    )


def test_an_orderly_run_refuses_a_window_that_skips_unlanded_messages_of_a_queue():
    broker = QueuesOnPaper({A: minutes(3, 2, 2), B: minutes(1, 4, 1)})
    lake, recorded = LakeOnPaper(), Recorded()
    cfg = config(consume_from_where="CONSUME_FROM_FIRST_OFFSET", consume_orderly=True)
    with pytest.raises(ingest.OutOfOrder) as refused:
        one_run(broker, lake, recorded, cfg, "r1", [window(1)], scheduled=False)  # minute 0 never landed
    assert "broker-a/0: window m1 starts at offset 3, but the group has landed only up to 0" in str(refused.value)
    assert lake.entries == [] and broker.commits == []  # nothing read, nothing moved
    one_run(broker, lake, recorded, cfg, "r2", [window(0)], scheduled=False)
    one_run(broker, lake, recorded, cfg, "r3", [window(1)], scheduled=False)  # in order now
    one_run(broker, lake, recorded, cfg, "r4", [window(0)], scheduled=False)  # re-landing a passed window is in order
    assert broker.committed == {A: 5, B: 5}
    # Without consume_orderly the same out-of-order backfill lands (and the watermark waits for the gap).
    fresh = QueuesOnPaper({A: minutes(3, 2, 2), B: minutes(1, 4, 1)})
    one_run(
        fresh,
        LakeOnPaper(),
        Recorded(),
        config(consume_from_where="CONSUME_FROM_FIRST_OFFSET"),
        "r5",
        [window(1)],
        scheduled=False,
    )
    assert fresh.committed == {A: 0, B: 0}


@dataclass
class SuspendingLake(LakeOnPaper):
    """Lands like ``LakeOnPaper``, but an orderly listener fails the message at ``poison`` (a queue and offset)
    ``fails`` times: a landing that reads it suspends its queue there, as ``materialize.with_suspensions`` does."""

    poison: tuple[MessageQueue, int] = (A, 0)
    fails: int = 0
    now_ms: int = 0

    def land(self, entry, queue_count, log, **kwargs):
        mq, offset = self.poison
        before = entry.suspended.get(mq)
        tried = before.attempts if before is not None and before.offset == offset else 0
        for w in entry.windows:
            for r in w.ranges:
                if r.queue == mq and r.start <= offset < r.end and tried < self.fails:
                    entry = replace(
                        entry,
                        suspended={
                            **entry.suspended,
                            mq: Suspension(
                                offset, tried + 1, self.now_ms + 1000, w.partition_key, w.start_ms, w.end_ms, "m", "no"
                            ),
                        },
                    )
                    break
            else:
                continue
            break
        else:
            entry = replace(
                entry,
                suspended={
                    q: s
                    for q, s in entry.suspended.items()
                    if not any(r.queue == q and r.size for w in entry.windows for r in w.ranges)
                },
            )
        landing = super().land(entry, queue_count, log, **kwargs)
        return replace(landing, entry=entry)


def orderly_run(broker, lake, recorded, cfg, run_id, windows, now_ms, log=None):
    def between(start_ms, end_ms):
        return [window(i) for i in range(start_ms // MIN, end_ms // MIN)]

    lake.now_ms = now_ms
    _, landed, _ = one_run(
        broker, lake, recorded, cfg, run_id, windows, now_ms=now_ms, log=log, windows_between=between
    )
    return landed.ledger


def test_a_suspended_orderly_queue_waits_then_resumes_at_its_message_and_lands_every_window_it_missed_in_order():
    broker = QueuesOnPaper({A: minutes(3, 2, 2), B: minutes(1, 4, 1)})
    lake, recorded = SuspendingLake(poison=(A, 1), fails=2), Recorded()
    cfg = config(
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        consume_orderly=True,
        listener="tests.unit.listeners:orderly_fail_by_tag",
    )
    t0 = 100 * MIN
    first = orderly_run(broker, lake, recorded, cfg, "r1", [window(0)], t0)
    assert first.suspended[A].offset == 1 and first.suspended[A].attempts == 1
    assert broker.committed == {A: 1, B: 1}  # A acknowledged up to its failing message, B all of minute 0

    log = Lines()
    lines = log.lines
    waiting = orderly_run(broker, lake, recorded, cfg, "r2", [window(1)], t0 + 500, log)
    assert [(r.queue, r.start, r.end) for w in waiting.windows for r in w.ranges] == [(B, 1, 5)]  # A's window waits
    assert waiting.suspended[A] == first.suspended[A]  # carried unchanged: no attempt was made
    assert any("broker-a/0 is suspended at offset 1" in line and "takes no range" in line for line in lines)
    assert broker.committed == {A: 1, B: 5}

    again = orderly_run(broker, lake, recorded, cfg, "r3", [window(2)], t0 + 2000)
    assert [(w.partition_key, r.queue, r.start, r.end) for w in again.windows for r in w.ranges] == [
        ("m0", A, 1, 3),
        ("m1", A, 3, 5),
        ("m2", A, 5, 7),
        ("m2", B, 5, 6),
    ]  # A resumes at 1 and catches up
    assert again.suspended[A].attempts == 2
    assert broker.committed == {A: 1, B: 6}

    done = orderly_run(broker, lake, recorded, cfg, "r4", [window(2)], t0 + 4000)
    assert [(w.partition_key, r.queue, r.start, r.end) for w in done.windows for r in w.ranges if r.size] == [
        ("m0", A, 1, 3),
        ("m1", A, 3, 5),
        ("m2", A, 5, 7),
    ]
    assert done.suspended == {}
    assert broker.committed == {A: 7, B: 6}
    later = orderly_run(broker, lake, recorded, cfg, "r5", [window(2)], t0 + 6000)
    assert later.suspended == {} and all(r.size == 0 for w in later.windows for r in w.ranges)


def test_a_reset_moves_offsets_forward_only():
    from rocketlake.engine.offsets import OffsetMove, plan_reset

    c = MessageQueue("orders", "broker-c", 0)
    plan = plan_reset({A: 5, B: None, c: 9}, {A: 8, B: 3, c: 4})
    assert plan.moves == [OffsetMove(A, 5, 8), OffsetMove(B, None, 3)]
    assert plan.backward == [OffsetMove(c, 9, 4)] and plan.unchanged == []
    assert plan_reset({A: 5}, {A: 5}).unchanged == [A]


def test_a_reset_to_a_time_targets_the_first_message_stored_at_or_after_it_on_each_queue():
    from rocketlake.engine.offsets import OffsetMove, plan_reset_to_time

    # A: store times 100, 200, 300, 400 and committed at 1; B: 150, 250 and never committed; c: committed at its end.
    c = MessageQueue("orders", "broker-c", 0)
    group = QueuesOnPaper({A: [100, 200, 300, 400], B: [150, 250], c: [50, 60]}, committed={A: 1, c: 2})
    committed, plan = plan_reset_to_time(group, 250)
    assert committed == {A: 1, B: None, c: 2}
    assert plan.moves == [OffsetMove(A, 1, 2), OffsetMove(B, None, 1)] and plan.unchanged == [c]
    _, later = plan_reset_to_time(group, 401)  # after every message: each queue's end
    assert later.moves == [OffsetMove(A, 1, 4), OffsetMove(B, None, 2)]
    _, earlier = plan_reset_to_time(group, 0)  # before every message: A would move back, which is refused
    assert earlier.backward == [OffsetMove(A, 1, 0), OffsetMove(c, 2, 0)] and earlier.moves == [OffsetMove(B, None, 0)]


class Died(Exception):
    """The process of a run was killed here."""


@dataclass
class DiesBeforeVerdict(LakeOnPaper):
    def record_verdict(self, verdict):
        raise Died


def members_of_one_group():
    """Two deployments (two Dagster instances) of one group: their configurations and their records."""
    return config(instance_name="m1"), config(instance_name="m2"), Recorded(), Recorded()


def test_two_members_share_one_table_and_a_handover_moves_offsets_over_the_other_members_balanced_landing():
    broker = QueuesOnPaper({A: minutes(2, 2, 2), B: minutes(1, 1, 1)}, committed={A: 0, B: 0})
    lake = LakeOnPaper()
    m1, m2, first, second = members_of_one_group()
    b0 = []
    raced = RacedLake(lake, lambda: b0.append(one_run(broker, lake, second, m2, "b0", [window(0)], only={B})[1].ledger))
    prepared, a0, _ = one_run(broker, raced, first, m1, "a0", [window(0)], only={A})  # m2 lands while m1 runs
    assert prepared.queues == [A]
    assert b0[0].windows[0].ranges == (OffsetRange(B, 0, 1),) and a0.ledger.windows[0].ranges == (OffsetRange(A, 0, 2),)
    assert a0.ledger.read_version == b0[0].read_version == -1 and broker.committed == {A: 2, B: 1}
    assert {e.run_id for e in lake.ledger("g")} == {"a0", "b0"}, "a0 does not carry b0, yet both are read"
    # m2 lands window 1 of B, commits its verdict (balanced) and dies before its Dagster records the run; m1,
    # alone now, takes both queues.
    one_run(broker, lake, Recorded(), m2, "b1", [window(1)], only={B}, record=False)
    assert broker.committed[B] == 1 and lake.ledger("g")[-1].verdict == BALANCED
    handover = ingest.prepare(broker, lake, first, m1, 100 * MIN, 0, member=client_id(m1), taken={A, B})
    assert [(m.queue, m.before, m.after) for m in handover.repaired] == [(B, 1, 2)], (
        "m2's balanced verdict is the proof of its slice: m1's instance never heard of run b1"
    )
    one_run(broker, lake, first, m1, "a2", [window(1), window(2)])
    assert broker.committed == {A: 6, B: 3}


def test_another_members_landing_whose_verdict_never_came_moves_no_offset_and_is_landed_again():
    broker = QueuesOnPaper({A: minutes(2, 2, 2), B: minutes(1, 1, 1)}, committed={A: 2, B: 1})
    lake = DiesBeforeVerdict()
    m1, m2, first, _ = members_of_one_group()
    with pytest.raises(Died):  # killed between its Delta commit and its verdict
        one_run(broker, lake, Recorded(), m2, "b1", [window(1)], only={B})
    assert [e.verdict for e in lake.ledger("g")] == [PENDING]
    handover = ingest.prepare(broker, lake, first, m1, 100 * MIN, 0, member=client_id(m1), taken={A, B})
    assert handover.repaired == [], "nobody knows whether b1's rows add up: its landing may not move an offset"
    lake.__class__ = LakeOnPaper  # m1's own run lives on
    _, landed, _ = one_run(broker, lake, first, m1, "a1", [window(1)])
    assert landed.ledger.windows[0].ranges == (OffsetRange(A, 2, 4), OffsetRange(B, 1, 2)), "m1 lands B's window again"
    assert broker.committed == {A: 4, B: 2}


def test_an_unbalanced_landing_is_never_recorded_never_moves_an_offset_and_a_balanced_rerun_does():
    broker = QueuesOnPaper({A: minutes(3, 2), B: minutes(1, 4)}, committed={A: 0, B: 0})
    lake, recorded = LakeOnPaper(lost_rows=1), Recorded()
    m1, m2, _, other = members_of_one_group()
    with pytest.raises(Unbalanced, match="no offset moved"):
        one_run(broker, lake, recorded, m1, "r1", [window(0)])
    assert recorded.runs == {} and broker.commits == []
    assert [e.verdict for e in lake.ledger("g")] == [UNBALANCED]
    # Whoever runs next: this member's next run, or another member's, moves nothing over it.
    assert ingest.prepare(broker, lake, recorded, m1, 100 * MIN, 0, member=client_id(m1)).repaired == []
    assert ingest.prepare(broker, lake, other, m2, 100 * MIN, 0, member=client_id(m2)).repaired == []
    assert broker.commits == []
    # A later balanced run of the same windows lands them anew and moves the offsets.
    one_run(broker, lake, recorded, m1, "r2", [window(0)])
    assert broker.committed == {A: 3, B: 1}


def test_a_copy_carried_as_pending_by_a_member_that_read_before_the_verdict_does_not_undo_it():
    broker = QueuesOnPaper({A: minutes(2, 2), B: minutes(1, 1)}, committed={A: 0, B: 0})
    lake = LakeOnPaper()
    m1, m2, first, second = members_of_one_group()
    one_run(broker, lake, first, m1, "a0", [window(0)], only={A}, commit=False)  # v0: slice, v1: verdict
    assert [e.verdict for e in lake.entries] == [PENDING, None] and lake.entries[1].carried[-1].verdict == BALANCED
    one_run(broker, lake, second, m2, "b0", [window(0)], only={B}, commit=False)  # v2, v3
    # As if m2 had read the table at v0, before a0's verdict: its entry carries a0 as it was then.
    stale = replace(lake.entries[0], version=None, carried=())
    lake.entries[2] = replace(lake.entries[2], read_version=0, carried=(stale,))
    assert [e.verdict for e in lake.ledger("g") if e.run_id == "a0"] == [BALANCED]
    assert [
        (m.queue, m.after)
        for m in ingest.prepare(broker, lake, second, m2, 100 * MIN, 0, member=client_id(m2), taken={A, B}).repaired
    ] == [(A, 2), (B, 1)]


def test_a_ledger_ahead_of_the_broker_is_refused_naming_the_queue_and_moves_nothing():
    """The broker's store was wiped after the table landed: repairing offsets from the ledger would commit
    offsets the broker never had."""
    broker = QueuesOnPaper({A: minutes(3, 2), B: minutes(1, 4)})
    lake, recorded = LakeOnPaper(), Recorded()
    cfg = config(consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    one_run(broker, lake, recorded, cfg, "r1", [window(0), window(1)], commit=False)  # landed, offsets not committed
    wiped = QueuesOnPaper({A: minutes(1), B: minutes(1)})
    with pytest.raises(ingest.LedgerAheadOfBroker) as refused:
        ingest.prepare(wiped, lake, recorded, cfg, now_ms=100 * MIN, first_window_start_ms=0)
    assert "broker-a/0: landed up to 5, the broker holds up to 1" in str(refused.value)
    assert "delete" not in str(refused.value)  # what the table landed may be all that is left of those messages
    assert wiped.commits == []


def test_thousands_of_windows_behind_one_stuck_queue_keep_the_entry_and_the_planning_flat():
    """Queue B's first window is never landed (a member that took it died; no rebalance run came): B's offset stays
    at 0 and every later landing of B stays at stake. The entries keep those landings as one merged span, so what a
    commit carries, what a run reads and what it asks Dagster stay the same from the 100th window to the 2000th."""
    windows = 2000
    broker = QueuesOnPaper({A: minutes(*[1] * windows), B: minutes(*[1] * windows)}, committed={A: 0, B: 0})
    lake, recorded = LakeOnPaper(), Recorded()
    one_run(broker, lake, recorded, config(), "r0", [window(0)], only={A}, now_ms=(windows + 1) * MIN)
    figures = {}
    for i in range(1, windows):
        recorded.asked.clear()
        prepared, landed, _ = one_run(
            broker, lake, recorded, config(), f"r{i}", [window(i)], now_ms=(windows + 1) * MIN
        )
        if i in (100, windows - 1):
            figures[i] = (
                len(landed.ledger.to_json()),
                len(lake.ledger("g")),
                len(prepared.at_stake),
                sorted(len(keys) for keys in recorded.asked),
            )
    assert broker.committed == {A: windows, B: 0}, "B is stuck behind its first window"
    # B's landings after the gap: one span; A: where the group stood, passed already (``ledger.merged``).
    assert lake.entries[-2].landed == {A: ((0, windows - 1),), B: ((1, windows - 1),)}
    (size_100, read_100, whole_100, asked_100), (size_last, read_last, whole_last, asked_last) = figures.values()
    # The same number of recorded boundaries at both (``ledger.kept_bounds``), each a time in ms and an offset that
    # gain 3 digits at the most from the 100th window to the 2000th.
    pairs = sum(len(p) for p in lake.entries[-2].bounds.values())
    assert pairs <= 2 * (BOUNDS_KEPT + BOUNDS_KEPT_PASSED)
    assert size_last <= size_100 + 64 + 3 * pairs, "the commit's ledger entry does not grow (a few more digits at most)"
    assert (read_last, whole_last, asked_last) == (read_100, whole_100, asked_100)
    assert whole_last == 0
    # Landing B's first window at last moves B over everything landed after it.
    one_run(
        broker, lake, recorded, config(), "late", [window(0)], scheduled=False, only={B}, now_ms=(windows + 1) * MIN
    )
    assert broker.committed == {A: windows, B: windows}


@pytest.mark.parametrize(
    ("compacted", "retention", "failing", "said"),
    [
        ([("1970-01-01", 4, 1)], 72, False, "vacuumed the table: files out of it for more than 72 h deleted"),
        ([("1970-01-01", 4, 1)], None, False, None),  # no vacuum_retention_hours: nothing said
        ([], 72, False, None),  # no day compacted: no VACUUM (it lists the whole table)
        ([("1970-01-01", 4, 1)], 72, True, "VACUUM skipped: OSError: storage said no"),
    ],
)
def test_vacuum_follows_a_days_compaction_and_a_failure_of_it_does_not_fail_the_landed_run(
    compacted, retention, failing, said
):
    class Maintained(LakeOnPaper):
        vacuums = 0

        def compact(self, entry, closed_before_ms):
            return compacted

        def vacuum(self):
            Maintained.vacuums += 1
            if failing:
                raise OSError("storage said no")
            return retention

    broker = QueuesOnPaper({A: minutes(3, 2)})
    log = Lines()
    _, _, moves = one_run(
        broker,
        Maintained(),
        Recorded(),
        config(consume_from_where="CONSUME_FROM_FIRST_OFFSET"),
        "r1",
        [window(0)],
        log=log,
    )
    assert broker.committed == {A: 3}  # landed and committed whatever the maintenance did
    assert Maintained.vacuums == (1 if compacted else 0)
    vacuum_lines = [line for line in log.lines if "VACUUM" in line or "vacuumed" in line]
    assert vacuum_lines == ([said] if said else [])


def test_an_orderly_run_holds_the_queue_locks_through_its_verdict_and_its_offset_commit():
    """Java's ConsumeMessageOrderlyService holds a queue's lock through the offset update: a member that takes the
    queue over never finds it landed but not yet decided or committed."""
    from contextlib import contextmanager

    steps = []

    class Locking(Alone):
        @contextmanager
        def locked(self, queues, log):
            steps.append("lock")
            yield
            steps.append("unlock")

    class Deciding(LakeOnPaper):
        def record_verdict(self, verdict):
            steps.append("verdict")
            super().record_verdict(verdict)

    class Committing(QueuesOnPaper):
        def commit_offset(self, queue, offset):
            steps.append(f"commit {offset}")
            super().commit_offset(queue, offset)

    broker, lake, recorded = Committing({A: minutes(3, 2)}, committed={A: 0}), Deciding(), Recorded()
    cfg = config(consume_orderly=True)
    events = run(
        broker, lake, recorded, Locking(), cfg, LandingRequest("orders", "r1", [window(0)], 100 * MIN, 0, True), Lines()
    )
    landed = next(events)
    recorded.record(landed.slice.ledger)
    assert [type(e) for e in events] == [Committed]
    assert steps == ["lock", "verdict", "commit 3", "unlock"]


def test_a_message_visible_only_after_its_window_was_planned_lands_in_the_next_window_once():
    """Dispatch lag, a short grace, a broker clock behind the planner's: minute 0 was planned before its last message
    was visible. The next window starts where minute 0's range ended, so that message lands there, once; searched
    afresh, minute 1 would have started after it, and the message would be in no window (the group stuck below)."""
    broker = QueuesOnPaper({A: minutes(3)})
    lake, recorded = LakeOnPaper(), Recorded()
    cfg = config(consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    _, first, _ = one_run(broker, lake, recorded, cfg, "r0", [window(0)])
    assert first.ledger.windows[0].ranges == (OffsetRange(A, 0, 3),)
    broker.stores[A] += [MIN - 5, MIN + 1, MIN + 2]  # the late one (stored in minute 0), then minute 1's
    _, second, _ = one_run(broker, lake, recorded, cfg, "r1", [window(1)])
    assert second.ledger.windows[0].ranges == (OffsetRange(A, 3, 6),)
    assert broker.committed == {A: 6}
    # Landed again (a backfill), minute 0 keeps the range it had: the late message is not landed twice.
    _, again, _ = one_run(broker, lake, recorded, cfg, "r2", [window(0)], scheduled=False)
    assert again.ledger.windows[0].ranges == (OffsetRange(A, 0, 3),)


def test_store_times_that_step_back_make_no_window_overlap_the_one_before():
    """A failover to a replica whose clock is 40 s behind: after minute 1 was planned, messages are stored with
    times of minute 1 again. Minute 2 starts where minute 1 ended: they land in minute 2, none twice, none lost."""
    broker = QueuesOnPaper({A: minutes(2, 2)})
    lake, recorded = LakeOnPaper(), Recorded()
    cfg = config(consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    one_run(broker, lake, recorded, cfg, "r0", [window(0), window(1)])
    broker.stores[A] += [MIN + 30_000, MIN + 40_000, 2 * MIN + 10]  # the clock stepped back, then on to minute 2
    _, landed, _ = one_run(broker, lake, recorded, cfg, "r1", [window(2)])
    assert landed.ledger.windows[0].ranges == (OffsetRange(A, 4, 7),)
    assert broker.committed == {A: 7}


def test_the_recorded_boundaries_an_entry_carries_stay_bounded():
    windows = 200
    broker = QueuesOnPaper({A: minutes(*[1] * windows), B: minutes(*[1] * windows)}, committed={A: 0, B: 0})
    lake, recorded = LakeOnPaper(), Recorded()
    one_run(broker, lake, recorded, config(), "r0", [window(0)], only={A}, now_ms=(windows + 1) * MIN)
    for i in range(1, windows):  # B's first window is never landed: B stays at 0, every later boundary above it
        one_run(broker, lake, recorded, config(), f"r{i}", [window(i)], now_ms=(windows + 1) * MIN)
    newest = lake.entries[-2]  # the last landing (the newest entry is its verdict)
    assert len(newest.bounds[A]) <= BOUNDS_KEPT_PASSED + 2 and len(newest.bounds[B]) <= BOUNDS_KEPT + 2
    assert LedgerEntry.from_json(newest.to_json()).bounds == newest.bounds


def test_a_broker_that_does_not_answer_holds_no_other_brokers_queues_back():
    """Broker-b is paused while the route still lists it: the run lands and commits broker-a's queue, leaves
    broker-b's out (said in the log), and keeps its entries at stake; once broker-b answers, a scheduled run of the
    same window lands its part, and the group ends at both queues' ends."""
    broker = QueuesOnPaper(
        {A: minutes(3, 2), B: minutes(1, 4)},
        committed={A: 0, B: 0},
        silent={"broker-b": "RequestTimeout: no answer within 3 s"},
    )
    lake, recorded, log = LakeOnPaper(), Recorded(), Lines()
    cfg = config(consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    prepared, landed, _ = one_run(broker, lake, recorded, cfg, "r0", [window(0)], log=log)
    assert prepared.queues == [A] and landed.ledger.windows[0].ranges == (OffsetRange(A, 0, 3),)
    assert broker.committed == {A: 3, B: 0}
    assert any("broker(s) broker-b do not answer" in line for line in log.lines), log.lines
    broker.silent = {}
    _, again, _ = one_run(broker, lake, recorded, cfg, "r1", [window(0), window(1)])
    assert again.ledger.windows[0].ranges == (OffsetRange(A, 3, 3), OffsetRange(B, 0, 1))
    assert broker.committed == {A: 5, B: 5}


def test_a_run_none_of_whose_brokers_answers_fails_and_moves_nothing():
    from rocketlake.engine.run import BrokersSilent

    broker = QueuesOnPaper({A: minutes(3)}, committed={A: 0}, silent={"broker-a": "ConnectionFailed: refused"})
    with pytest.raises(BrokersSilent, match="no broker of the group's queues answers"):
        one_run(broker, LakeOnPaper(), Recorded(), config(), "r0", [window(0)])
    assert broker.commits == []


def test_an_orderly_run_that_lost_a_lock_stops_before_its_send_back_verdict_and_commit():
    """The renewal lost a queue while the run read (another member may hold it now): the run raises at once, its
    landing stays pending (no one trusts it) and no offset moves."""
    from contextlib import contextmanager

    from rocketlake.engine.orderly import LockLost

    class Lost:
        def check(self):
            raise LockLost("orderly: the run lost broker-a/0 while it worked")

    class Losing(Alone):
        @contextmanager
        def locked(self, queues, log):
            yield Lost()

    broker, lake = QueuesOnPaper({A: minutes(3, 2)}, committed={A: 0}), LakeOnPaper()
    events = run(
        broker,
        lake,
        Recorded(),
        Losing(),
        config(consume_orderly=True),
        LandingRequest("orders", "r1", [window(0)], 100 * MIN, 0, True),
        Lines(),
    )
    with pytest.raises(LockLost):
        next(events)
    assert [e.verdict for e in lake.entries] == [PENDING] and broker.commits == []


def test_copies_are_looked_for_only_where_offsets_were_landed_before():
    """``landed_before``: a range over offsets the group passed, a trusted span, or an entry at stake may hold a
    message sent back earlier, whose copy the table may hold; a first landing above all of them cannot."""
    from rocketlake.engine.ledger import WindowEntry

    def planned(start, end, mq=A):
        return (WindowEntry("w", 0, MIN, (OffsetRange(mq, start, end),)),)

    passed = ingest.Prepared([A], [], [], {A: 10}, {A: 0}, {}, landed={A: ((0, 10),)})
    assert ingest.landed_before(planned(5, 12), passed)  # a backfill below the group's offset
    assert not ingest.landed_before(planned(10, 15), passed)  # the scheduled next window
    assert not ingest.landed_before(planned(5, 12, B), passed)  # another queue
    assert not ingest.landed_before(planned(7, 7), passed)  # an empty range reads nothing
    pending = LedgerEntry("orders", "g", "r1", planned(10, 15), {A: 0}, {}, verdict=PENDING)
    staked = ingest.Prepared([A], [pending], [], {A: 10}, {A: 0}, {}, landed={A: ((0, 10),)})
    assert ingest.landed_before(planned(10, 15), staked)  # a run killed during its send-back landed it
