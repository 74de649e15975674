"""The engine's interfaces on paper: queues as lists of store timestamps, the lake as a list of ledger entries.

Each class is a plain-data stand-in for an interface of ``engine.ingest`` (``Broker``, ``Lake``); ``one_run``
drives ``engine.run.run`` as the Dagster asset does. Shared by the run's unit tests.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from rocketlake.engine.ingest import LandingReport, WindowAccounting
from rocketlake.engine.ledger import LedgerEntry, history_of
from rocketlake.engine.run import Alone, Committed, Landed, LandingRequest, run
from rocketlake.engine.windows import StoreTimeWindow
from rocketlake.rocketmq.message_queue import MessageQueue
from tests.unit.support import Lines, ingestion_config

MIN = 60_000
A, B = MessageQueue("orders", "broker-a", 0), MessageQueue("orders", "broker-b", 0)


config = ingestion_config


@dataclass
class QueuesOnPaper:
    """Queues as lists of store timestamps (offset = index), a committed-offset table, a min offset each."""

    stores: dict[MessageQueue, list[int]]
    committed: dict[MessageQueue, int] = field(default_factory=dict)
    deleted_below: dict[MessageQueue, int] = field(default_factory=dict)
    commits: list[tuple[MessageQueue, int]] = field(default_factory=list)
    cluster: str | None = "127.0.0.1:9876"

    def subscribed_queues(self):
        return sorted(self.stores)

    def committed_offset(self, queue):
        return self.committed.get(queue)

    def commit_offset(self, queue, offset):
        self.committed[queue] = offset
        self.commits.append((queue, offset))

    def min_offset(self, queue):
        return self.deleted_below.get(queue, 0)

    def max_offset(self, queue):
        return len(self.stores[queue])

    def search_offset(self, queue, timestamp_ms):
        return 0

    silent: dict = field(default_factory=dict)  # broker name -> why it does not answer

    pop_shared: str | None = None  # why POP consumers share the group, when they do

    def pop_refusal(self):
        return self.pop_shared

    def silent_brokers(self, queues):
        return {name: why for name, why in self.silent.items() if any(q.broker_name == name for q in queues)}

    def store_time(self, queue, offset):
        return self.stores[queue][offset]

    #: broker names whose offsets a slave answers: their master is down and the name server routes a slave in its
    #: place (a 5.x slave acting as master); ``stores`` then holds what that slave has copied
    slave_answers: set = field(default_factory=set)

    def masters(self, queues):
        return {q.broker_name: f"{q.broker_name}-master" for q in queues if q.broker_name not in self.slave_answers}


@dataclass
class LakeOnPaper:
    entries: list[LedgerEntry] = field(default_factory=list)
    whole_history: bool = False  # every entry, as from a table written before entries carried what is at stake

    def table_version(self):
        return len(self.entries) - 1 if self.entries else None

    def ledger(self, group):
        if self.whole_history:
            return [e for e in self.entries if e.consumer_group == group]
        # What ledger_log.read_ledger returns: the history newest first, as far as history_of needs.
        return history_of(reversed(self.entries), group, 0 if self.entries else None)[0]

    lost_rows: int = 0  # rows the next landing loses between read and write (its accounting does not balance)

    def land(self, entry, queue_count, log, **kwargs):
        self.entries.append(replace(entry, version=len(self.entries)))  # as Delta numbers its commits
        lost, self.lost_rows = self.lost_rows, 0
        accounting = tuple(
            WindowAccounting(w.partition_key, w.size, w.size, w.size - (lost if i == 0 else 0), 0)
            for i, w in enumerate(entry.windows)
        )
        return LandingReport(accounting, len(self.entries) - 1)

    def record_verdict(self, verdict):
        self.entries.append(replace(verdict, version=len(self.entries)))

    def columns(self):
        return []

    def compact(self, entry, closed_before_ms):
        return []

    def vacuum(self):
        return None

    def writers_refusal(self, members):
        return None


@dataclass
class RacedLake:
    """The shared lake, where another member's whole run lands between this run's read of the ledger and its
    own landing (``race``, once)."""

    lake: LakeOnPaper
    race: Callable[[], object]

    def __getattr__(self, name):
        return getattr(self.lake, name)

    def land(self, entry, queue_count, log, **kwargs):
        race, self.race = self.race, lambda: None
        race()
        return self.lake.land(entry, queue_count, log, **kwargs)


def minutes(*counts: int) -> list[int]:
    """Store timestamps: ``counts[i]`` messages in minute i."""
    return [i * MIN + j for i, n in enumerate(counts) for j in range(n)]


def window(i: int) -> tuple[str, StoreTimeWindow]:
    return f"m{i}", StoreTimeWindow(i * MIN, (i + 1) * MIN)


def one_run(
    broker,
    lake,
    recorded,
    cfg,
    run_id,
    windows,
    *,
    scheduled=True,
    record=True,
    commit=True,
    now_ms=100 * MIN,
    only=None,
    log=None,
    windows_between=None,
):
    """``engine.run.run`` as the asset drives it: the caller records a balanced landing (unless ``record`` is
    False: Dagster never recorded it) and resumes the run to commit (unless ``commit`` is False: the process
    died right after the record)."""
    request = LandingRequest("orders", run_id, windows, now_ms, 0, scheduled, only, windows_between)
    events = run(broker, lake, recorded, Alone(), cfg, request, log or Lines())
    landed = next(events)
    assert isinstance(landed, Landed)
    if record and landed.balanced:
        recorded.record(landed.slice.ledger)
    moves = []
    if commit:
        for event in events:
            if isinstance(event, Committed):
                moves = event.moves
    return landed.prepared, landed.slice, moves
