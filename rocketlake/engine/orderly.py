"""Orderly consumption (``consume_orderly: true``): broker locks on a run's queues, and windows in order.

A push consumer in orderly mode reads a queue only while it holds the broker's lock on it
(LOCK_BATCH_MQ, renewed every 20 s by RebalanceImpl; the broker lets a lock lapse after 60 s), so two
members never process one queue at once. A run does the same around its read and Delta commit: it
locks every queue it reads, renews the locks while Spark works, and unlocks at the end. A queue held
by another member is asked for again a few times, then the run stops before reading anything; the
next run retries. Orderly also means a window of a queue never lands before the previous window of
that queue: ``out_of_order`` names the queues where a run would skip unlanded messages.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Protocol

from rocketlake.engine.ledger import WindowEntry
from rocketlake.rocketmq.message_queue import MessageQueue

LOCK_RENEW_S = 20.0  # RebalanceImpl's lock renewal interval (the broker's lock lasts 60 s)
LOCK_ATTEMPTS = 3
LOCK_RETRY_S = 5.0


class QueueLocker(Protocol):
    def lock_batch_mq(self, group: str, client_id: str, queues: Iterable[MessageQueue]) -> set[MessageQueue]: ...

    def unlock_batch_mq(self, group: str, client_id: str, queues: Iterable[MessageQueue]) -> None: ...


class QueuesLocked(RuntimeError):
    """Another member holds some of the run's queues: nothing was read."""


class OutOfOrder(RuntimeError):
    """An orderly run would land a window of a queue before an earlier one: nothing was read."""


class LockLost(RuntimeError):
    """A queue's lock lapsed or was taken while the run read it."""


def _names(queues: Iterable[MessageQueue]) -> str:
    return ", ".join(mq.key for mq in sorted(queues))


def out_of_order(windows: Iterable[WindowEntry], positions: dict[MessageQueue, int]) -> list[str]:
    """For each queue, the first planned range the group has not passed must start where the group stands.

    ``positions``: where the group stands on each queue (its committed offset, its origin, or the end
    of a recorded gap). A range ending at or below that position re-lands messages already passed and
    is in order; a range starting above it would leave ``[position, start)`` unlanded behind it.
    """
    problems, checked = [], set()
    for w in sorted(windows, key=lambda w: w.start_ms):
        for r in w.ranges:
            position = positions.get(r.queue)
            if r.queue in checked or position is None or r.size == 0 or r.end <= position:
                continue
            checked.add(r.queue)
            if r.start > position:
                problems.append(
                    f"{r.queue.key}: window {w.partition_key} starts at offset {r.start}, but the group "
                    f"has landed only up to {position}"
                )
    return problems


class _Renewal(threading.Thread):
    """Re-locks the queues every ``LOCK_RENEW_S`` until stopped; remembers any queue it failed to keep."""

    def __init__(self, locker: QueueLocker, group: str, client_id: str, queues: list[MessageQueue], every_s: float):
        super().__init__(name="rocketlake-lock-renewal", daemon=True)
        self.locker, self.group, self.client_id, self.queues, self.every_s = locker, group, client_id, queues, every_s
        self.stopped = threading.Event()
        self.lost: set[MessageQueue] = set()
        self.error: Exception | None = None

    def check(self) -> None:
        """Raise ``LockLost`` if a renewal lost a queue (or failed) so far: the body asks before each step that
        another member must not see half done (the send-back and verdict, the offset commit)."""
        if self.lost or self.error:
            why = f"lost {_names(self.lost)}" if self.lost else f"could not renew ({self.error})"
            raise LockLost(
                f"orderly: the run {why} while it worked; another member may have read them meanwhile. The "
                "table holds each message once (slices are replaced), but the offsets were not committed: "
                "the next run lands the windows again"
            )

    def run(self) -> None:
        while not self.stopped.wait(self.every_s):
            try:
                self.lost |= set(self.queues) - self.locker.lock_batch_mq(self.group, self.client_id, self.queues)
            except Exception as e:  # noqa: BLE001 - reported by the run once the read is over
                self.error = e


@contextmanager
def queues_locked(
    locker: QueueLocker,
    group: str,
    client_id: str,
    queues: Iterable[MessageQueue],
    *,
    log: Callable[[str], None] = lambda _: None,
    wait: Callable[[float], None] | None = None,
    renew_every_s: float = LOCK_RENEW_S,
) -> Iterator[_Renewal]:
    """Hold the broker locks of ``queues`` for ``client_id`` for the body; unlock them at the end.

    Raises ``QueuesLocked`` (after ``LOCK_ATTEMPTS`` tries) before the body runs when another member
    holds any of them, and ``LockLost`` after the body when a renewal lost one. The body gets the renewal: its
    ``check()`` raises ``LockLost`` at once, before a step that must not happen without the locks.
    """
    queues = sorted(set(queues))
    wait = wait or threading.Event().wait
    granted: set[MessageQueue] = set()
    for attempt in range(1, LOCK_ATTEMPTS + 1):
        granted = locker.lock_batch_mq(group, client_id, queues)
        missing = set(queues) - granted
        if not missing:
            break
        if attempt < LOCK_ATTEMPTS:
            log(
                f"orderly: {_names(missing)} locked by another member of group {group}; asking again in "
                f"{LOCK_RETRY_S:.0f}s ({attempt}/{LOCK_ATTEMPTS})"
            )
            wait(LOCK_RETRY_S)
    else:
        if granted:
            locker.unlock_batch_mq(group, client_id, granted)
        raise QueuesLocked(
            f"orderly: {_names(missing)} of group {group} are locked by another member (LOCK_BATCH_MQ "
            f"refused {LOCK_ATTEMPTS} times); nothing was read and no offset moved: the next run "
            "tries again"
        )
    log(f"orderly: {client_id} holds the broker locks of {len(queues)} queue(s) of group {group}")
    renewal = _Renewal(locker, group, client_id, queues, renew_every_s)
    renewal.start()
    try:
        yield renewal
    finally:
        renewal.stopped.set()
        renewal.join()
        locker.unlock_batch_mq(group, client_id, queues)
        log(f"orderly: {client_id} unlocked its {len(queues)} queue(s)")
    renewal.check()
