"""A consumer group's progress per queue, as ``mqadmin consumerProgress`` reports it, plus lag in time.

Lag in messages is the broker's max offset minus the committed offset (0 when the group has none),
exactly mqadmin's "Diff", so the two can be compared at a glance. Lag in seconds is how long ago the
oldest message not yet passed was stored (``now - store time at the committed offset``): the figure a
person watching a lake cares about, and 0 when the group is caught up.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from rocketlake.rocketmq.errors import ConnectionFailed, RequestTimeout
from rocketlake.rocketmq.message_queue import MessageQueue


class GroupOffsets(Protocol):
    """What progress needs of a group on a live cluster (``broker_access.GroupBroker`` provides it)."""

    def subscribed_queues(self) -> list[MessageQueue]: ...
    def min_offset(self, queue: MessageQueue) -> int: ...
    def max_offset(self, queue: MessageQueue) -> int: ...
    def committed_offset(self, queue: MessageQueue) -> int | None: ...
    def store_time(self, queue: MessageQueue, offset: int) -> int: ...


@dataclass(frozen=True, slots=True)
class QueueProgress:
    queue: MessageQueue
    min_offset: int
    max_offset: int
    committed: int | None  # None: the group has no offset on this queue yet
    oldest_pending_ms: int | None  # store time of the first message the group has not passed; None if none

    @property
    def lag(self) -> int:
        return max(0, self.max_offset - (self.committed or 0))

    def lag_seconds(self, now_ms: int) -> float:
        return 0.0 if self.oldest_pending_ms is None else max(0.0, (now_ms - self.oldest_pending_ms) / 1000)


@dataclass
class Unanswered:
    """A broker whose queues' progress is unknown: one that did not answer a progress read (a refused connection, a
    timeout: ``address`` is where it is, ``error`` what it said), or one that left the route while it held queues of
    the group (``address`` None, ``error`` since when: ``left_the_route``)."""

    address: str | None
    error: str
    queues: list[MessageQueue] = field(default_factory=list)

    @property
    def what(self) -> str:
        return "is in no route of the group's topics" if self.address is None else "did not answer"

    def describe(self, broker: str) -> str:
        """``broker-b (127.0.0.1:10911) did not answer`` or ``broker-a is in no route of the group's topics``."""
        return f"{broker} {self.what}" if self.address is None else f"{broker} ({self.address}) {self.what}"


def left_the_route(
    rows: Iterable[QueueProgress], unread: dict[str, Unanswered], last_seen: Iterable[MessageQueue], seen: str
) -> dict[str, Unanswered]:
    """The brokers that held queues of the group when they were last read (``last_seen``, at ``seen``) and are
    neither read nor unanswering now, with those queues.

    The name server drops a broker from every route the moment its connection closes (stopped, killed, its host
    down), so a read of the routes finds nothing to ask there: the broker's queues are not caught up, their progress
    is unknown. (A broker cut off from the name server stays listed until 120 s after its last heartbeat, and is
    unanswering meanwhile.)"""
    present = {r.queue.broker_name for r in rows} | set(unread)
    gone: dict[str, Unanswered] = {}
    for mq in last_seen:
        if mq.broker_name not in present:
            gone.setdefault(mq.broker_name, Unanswered(None, f"it held them when last read, at {seen}")).queues.append(
                mq
            )
    return gone


def group_progress(group: GroupOffsets, unread: dict[str, Unanswered] | None = None) -> list[QueueProgress]:
    """Every subscribed queue's offsets, one store-time read per queue that has messages pending.

    ``unread``: given, a broker that does not answer (its route still listed: a broker cut off from the name server
    stays listed until 120 s after its last heartbeat) has its queues left out and recorded there under its name,
    after one failed request rather than one timeout per queue, and the other brokers' queues are still read.
    Without it, the first failure raises.
    """
    rows = []
    for mq in group.subscribed_queues():
        if unread is not None and mq.broker_name in unread:
            unread[mq.broker_name].queues.append(mq)
            continue
        try:
            lo, hi = group.min_offset(mq), group.max_offset(mq)
            committed = group.committed_offset(mq)
            first_pending = max(lo, committed if committed is not None else lo)
            oldest = group.store_time(mq, first_pending) if first_pending < hi else None
        except (ConnectionFailed, RequestTimeout) as e:
            if unread is None or not e.retriable:  # a TLS refusal is configuration, not a broker down
                raise
            unread[mq.broker_name] = Unanswered(e.address or "?", str(e), [mq])
            continue
        rows.append(QueueProgress(mq, lo, hi, committed, oldest))
    return rows


def landed_ends(entries, group: str) -> dict[MessageQueue, int]:
    """Queue -> the end of the highest range ``group``'s ledger entries landed on it (carried entries included)."""
    ends: dict[MessageQueue, int] = {}
    for entry in entries:
        for e in (entry, *entry.carried):
            if e.consumer_group != group:
                continue
            for w in e.windows:
                for r in w.ranges:
                    if r.size and r.end > ends.get(r.queue, -1):
                        ends[r.queue] = r.end
    return ends


def last_landed(landed: dict[str, set[MessageQueue]]) -> dict[MessageQueue, str]:
    """Queue -> the newest window key some ledger entry landed it in (keys sort as their times)."""
    last: dict[MessageQueue, str] = {}
    for key in sorted(landed):
        for mq in landed[key]:
            last[mq] = key
    return last


def render(
    rows: Iterable[QueueProgress],
    now_ms: int,
    last_windows: dict[MessageQueue, str] | None = None,
    owners: dict[MessageQueue, str] | None = None,
) -> str:
    """A table a person reads, one line per queue and a total line; with the last window landed and the member
    that owns the queue now when given."""
    rows = list(rows)
    last_windows, owners = last_windows or {}, owners or {}
    header = (
        f"{'topic':<32} {'broker':<12} {'queue':>5} {'min':>10} {'max':>10} {'committed':>10} {'lag':>10} "
        f"{'lag s':>9}  {'last window':<16}  owner"
    )
    lines = [header]
    for r in rows:
        committed = "-" if r.committed is None else str(r.committed)
        lines.append(
            f"{r.queue.topic:<32} {r.queue.broker_name:<12} {r.queue.queue_id:>5} {r.min_offset:>10} "
            f"{r.max_offset:>10} {committed:>10} {r.lag:>10} {r.lag_seconds(now_ms):>9.1f}  "
            f"{last_windows.get(r.queue, '-'):<16}  {owners.get(r.queue, '-')}"
        )
    worst = max((r.lag_seconds(now_ms) for r in rows), default=0.0)
    lines.append(
        f"{'total':<32} {'':<12} {len(rows):>5} {'':>10} {'':>10} {'':>10} {sum(r.lag for r in rows):>10} {worst:>9.1f}"
    )
    return "\n".join(lines)
