"""The accounting of a landing: what became of every offset it read, and whether that adds up.

A landing counts each offset it read under one outcome (``OUTCOMES``) in a ``Tally``, per window, and per queue
where each message was judged (a listener, a body that may not decode, dead letters). ``account`` turns the tally
and the rows the table holds after the commit into one ``WindowAccounting`` per window: balanced when every planned
offset was read and is a row or one of the outcomes that are not landed. Pure: Spark fills the tally
(``spark.materialize``), nothing here needs it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from rocketlake.engine.failures import DEAD_LETTERED, FAILED, SENT_BACK
from rocketlake.engine.ingest import WindowAccounting
from rocketlake.engine.ledger import WindowEntry
from rocketlake.rocketmq.message_queue import MessageQueue

ROWS = "rows"  # landed as a row
FILTERED = "filtered"  # the subscription's tags filtered it out
DUPLICATES = "duplicates"  # a redelivered copy of a message landed already
HELD = "held"  # orderly: at or after the message its queue is suspended at
#: what an offset read can become, and those of them that are not landed
OUTCOMES = (ROWS, FILTERED, DUPLICATES, SENT_BACK, DEAD_LETTERED, FAILED, HELD)
NOT_LANDED = OUTCOMES[1:]


@dataclass
class Tally:
    """Offsets read, by window (its start, epoch ms) and outcome; by queue too where each message was judged."""

    by_window: dict[int, Counter] = field(default_factory=dict)
    by_queue: dict[tuple[int, MessageQueue], Counter] = field(default_factory=dict)
    landed_bytes: Counter = field(default_factory=Counter)  # window -> body bytes of the rows landed

    def add(self, window_ms: int, outcome: str, count: int, queue: MessageQueue | None = None) -> None:
        """``count`` offsets of the window (of ``queue``, when known) had ``outcome``."""
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {outcome!r}; one of {OUTCOMES}")
        self.by_window.setdefault(window_ms, Counter())[outcome] += count
        if queue is not None:
            self.by_queue.setdefault((window_ms, queue), Counter())[outcome] += count

    def seen(self, window_ms: int) -> int:
        return sum(self.by_window.get(window_ms, Counter()).values())

    def count(self, window_ms: int, outcome: str) -> int:
        return self.by_window.get(window_ms, Counter())[outcome]


def account(
    planned: tuple[WindowEntry, ...], rows: dict[tuple[int, MessageQueue], int], tally: Tally
) -> tuple[WindowAccounting, ...]:
    """One accounting per planned window, from the tally and ``rows``: the rows the table holds after the commit,
    per (window start, queue)."""
    accounting = []
    for w in planned:
        accounting.append(
            WindowAccounting(
                partition_key=w.partition_key,
                planned=sum(r.size for r in w.ranges),
                seen=tally.seen(w.start_ms),
                rows=sum(n for (start_ms, _), n in rows.items() if start_ms == w.start_ms),
                filtered=tally.count(w.start_ms, FILTERED),
                body_bytes=int(tally.landed_bytes[w.start_ms]),
                sent_back=tally.count(w.start_ms, SENT_BACK),
                dead_lettered=tally.count(w.start_ms, DEAD_LETTERED),
                failed=tally.count(w.start_ms, FAILED),
                duplicates=tally.count(w.start_ms, DUPLICATES),
                held=tally.count(w.start_ms, HELD),
                queue_problems=queue_problems(w, rows, tally),
            )
        )
    return tuple(accounting)


def queue_problems(window: WindowEntry, rows: dict[tuple[int, MessageQueue], int], tally: Tally) -> tuple[str, ...]:
    """The queues of ``window`` whose offsets do not add up: rows in the table + offsets not landed = range size.

    Where the outcomes were counted per queue that is exact; otherwise only the window's counts are known, and a
    queue must at least not hold more rows than its range."""
    found = []
    for r in window.ranges:
        landed = rows.get((window.start_ms, r.queue), 0)
        counted = tally.by_queue.get((window.start_ms, r.queue))
        other = sum(counted[name] for name in NOT_LANDED) if counted is not None else 0
        if (counted is not None and (landed + other != r.size or sum(counted.values()) != r.size)) or landed > r.size:
            found.append(f"{r.queue.key}: {landed} rows + {other} not landed, range of {r.size}")
    return tuple(found)
