"""Queues left behind: a check that is red while one trails, and the run that lands what it trails by.

A queue *trails* when its oldest message the group has not passed was stored before the end of the newest window
past its deadline (close + ``window.grace_seconds`` + ``window.freshness_slack_seconds``): by then every window up to
that one should be landed and the group's offset past it. That is the stated bound of the ``caught_up`` check.
Ways a queue comes to trail while later windows keep landing (and ``fresh`` stays green):

- windows never asked for: the daemon was down for longer than the schedule reaches back (``schedules.CATCH_UP``);
- a window whose run failed or was killed and fell out of the schedule's reach (its ledger entry stays pending);
- a window landed without some queues: their broker was down when it was planned, the route no longer listed them.

The lag sensor reads every queue's committed offset and the store time of its oldest message not passed each minute
(``engine.progress``): the same figures decide the check and, while a queue trails, one run of the windows from
the one holding that message to the newest one due (``MOST_WINDOWS`` at most), of the trailing queues only, starting
where the group stands on each (``CATCH_UP_TAG``, like a scheduled run): so windows landed already are not landed
twice, and the commit at its end moves the group over everything landed since. Asked again every ``RETRY_EVERY_S``
while nothing moves (a failed run), never while a catch-up or a window's own run of those windows is queued.

A queue without a committed offset never trails: where a new group starts is ``consume_from_where``'s to say, and
its first scheduled run says it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone

from dagster import AssetCheckSeverity, MetadataValue, RunRequest, RunsFilter

from rocketlake.dagster.dagster_private import cron_string_iterator
from rocketlake.dagster.ingestion import CATCH_UP_TAG, QUEUES_TAG
from rocketlake.dagster.partitions import (
    RANGE_END,
    RANGE_START,
    last_closed_windows,
    materialized_among,
    run_windows,
    window_end,
    window_key,
    window_start,
)
from rocketlake.dagster.run_guard import ON_ITS_WAY
from rocketlake.engine.config import IngestionConfig
from rocketlake.engine.progress import QueueProgress, Unanswered
from rocketlake.engine.windows import iso

CAUGHT_UP_CHECK = "caught_up"
#: A broker in the last lag observation and in no route now fails the check (``engine.progress.left_the_route``)
#: until it is back; when the last observation is older than this (none is recorded while a broker is unread), the
#: broker is taken for retired on purpose and the check judges the brokers in the route.
RETIRED_AFTER_S = 24 * 3600
#: The most windows one catch-up run lands: a long outage is caught up over several runs, each of bounded size.
MOST_WINDOWS = 60
#: A catch-up whose run failed (nothing moved) is asked again after this long, not at every tick.
RETRY_EVERY_S = 600


@dataclass(frozen=True)
class Behind:
    """The newest window due, and the queues that trail it."""

    due: str | None
    due_end_ms: int
    trailing: tuple[QueueProgress, ...]

    @property
    def oldest_ms(self) -> int | None:
        return min((r.oldest_pending_ms for r in self.trailing), default=None)


def behind(cfg: IngestionConfig, partitions, rows: Iterable[QueueProgress], now: datetime) -> Behind:
    """Which queues trail the newest window past its deadline at ``now``."""
    slack = cfg.window.grace_seconds + cfg.window.freshness_slack_seconds
    due = last_closed_windows(partitions, now, slack, 1)
    if not due:
        return Behind(None, 0, ())
    due_end_ms = int(window_end(partitions, due[-1]).timestamp() * 1000)
    trailing = tuple(
        r
        for r in rows
        if r.committed is not None and r.oldest_pending_ms is not None and r.oldest_pending_ms < due_end_ms
    )
    return Behind(due[-1], due_end_ms, trailing)


def caught_up_outcome(
    cfg: IngestionConfig, found: Behind, now_ms: int, unread: dict[str, Unanswered] | None = None
) -> dict:
    """The ``caught_up`` check's result (the keyword arguments of an AssetCheckResult or AssetCheckEvaluation).
    ``unread``: the brokers that did not answer the progress read; their queues may trail unseen, so the check
    fails naming them, whatever the others' queues show."""
    bound = (
        f"a queue may trail at most to the newest window past its deadline (close + "
        f"{cfg.window.grace_seconds}s grace + {cfg.window.freshness_slack_seconds}s slack)"
    )
    metadata = {
        "newest_due_window": MetadataValue.text(found.due or "none"),
        "trailing_queues": MetadataValue.int(len(found.trailing)),
    }
    if unread:
        metadata["unanswering_brokers"] = MetadataValue.text(", ".join(sorted(unread)))
        down = "; ".join(
            f"{u.describe(broker)} (the progress of {len(u.queues)} queue(s) of group {cfg.consumer_group} on it is "
            f"unknown): {u.error}"
            for broker, u in sorted(unread.items())
        )
        others = (
            f" The other brokers' queues: {len(found.trailing)} trail window {found.due}."
            if found.trailing
            else " The other brokers' queues are caught up."
        )
        if any(u.address is None for u in unread.values()):
            others += (
                f" A broker retired on purpose is forgotten {RETIRED_AFTER_S // 3600} h after its last lag observation."
            )
        return {
            "passed": False,
            "severity": AssetCheckSeverity.ERROR,
            "metadata": metadata,
            "description": f"{down}. A broker's queues land once it answers again: the next runs land each "
            f"window from the offset the group committed there, none is skipped.{others}",
        }
    if not found.trailing:
        return {
            "passed": True,
            "severity": AssetCheckSeverity.ERROR,
            "metadata": metadata,
            "description": f"every queue of group {cfg.consumer_group} passed window {found.due or '(none due)'}; "
            + bound,
        }
    worst = max((now_ms - r.oldest_pending_ms) / 1000 for r in found.trailing)
    listed = "; ".join(
        f"{r.queue.key} at offset {r.committed} (stored {iso(r.oldest_pending_ms)})"
        for r in sorted(found.trailing, key=lambda r: r.oldest_pending_ms)[:10]
    )
    more = f" and {len(found.trailing) - 10} more" if len(found.trailing) > 10 else ""
    metadata["oldest_not_passed_seconds"] = MetadataValue.float(round(worst, 1))
    return {
        "passed": False,
        "severity": AssetCheckSeverity.ERROR,
        "metadata": metadata,
        "description": f"{len(found.trailing)} queue(s) of group {cfg.consumer_group} trail window {found.due}: "
        f"{listed}{more}. The lag sensor asks for a run of the windows they trail by; if it "
        f"fails, its log says why. {bound}",
    }


def unread_outcome(cfg: IngestionConfig, why: str) -> dict:
    """The ``caught_up`` check's result when no progress of the group could be read this tick (``why``: the error,
    one sentence): whether its queues trail is unknown, which is not green."""
    return {
        "passed": False,
        "severity": AssetCheckSeverity.ERROR,
        "metadata": {"newest_due_window": MetadataValue.text("unknown")},
        "description": f"{why}. Whether a queue of group {cfg.consumer_group} trails is unknown until the cluster "
        "answers again; nothing is skipped meanwhile: the next runs land each window from the "
        "offsets the group committed.",
    }


def window_holding(partitions, at_ms: int) -> str:
    """The key of the window that holds the instant ``at_ms`` (never before the first window)."""
    at = max(datetime.fromtimestamp(at_ms / 1000, tz=timezone.utc), partitions.start)
    ticks = cron_string_iterator(at.timestamp(), partitions.cron_schedule, partitions.timezone, ascending=False)
    return window_key(partitions, next(ticks))


def windows_through(partitions, first: str, last: str, most: int) -> list[str]:
    """Keys from ``first`` to ``last`` (both included), ``most`` at the most."""
    keys = []
    start, stop = window_start(partitions, first).timestamp(), window_start(partitions, last).timestamp()
    for tick in cron_string_iterator(start, partitions.cron_schedule, partitions.timezone):
        if tick.timestamp() > stop or len(keys) == most:  # instants, not local times: DST repeats an hour
            break
        keys.append(window_key(partitions, tick))
    return keys


def pending_windows(instance, table: str, job_name: str, partitions) -> tuple[bool, set[str]]:
    """Whether a catch-up of ``table`` is queued or running, and the windows its schedule's runs are landing."""
    runs = instance.get_runs(RunsFilter(statuses=ON_ITS_WAY, tags={CATCH_UP_TAG: table}), limit=1)
    scheduled = instance.get_runs(RunsFilter(job_name=job_name, statuses=ON_ITS_WAY))
    return bool(runs), set().union(*(run_windows(partitions, run.tags) for run in scheduled))


def windows_on_their_way(instance, asset_key, job_name: str, partitions) -> set[str]:
    """The windows of ``asset_key`` that a queued, starting or running run lands: its schedule's (``job_name``) and
    the sensors' (which select the asset)."""
    found: set[str] = set()
    for run in instance.get_runs(RunsFilter(statuses=ON_ITS_WAY)):
        if run.job_name == job_name or asset_key in (run.asset_selection or ()):
            found |= run_windows(partitions, run.tags)
    return found


def catch_up_request(
    cfg: IngestionConfig, asset_key, job_name: str, partitions, found: Behind, instance, now: datetime, log
) -> RunRequest | None:
    """One run of the windows the trailing queues trail by, or None (nothing trails, or a run of them is queued)."""
    if not found.trailing:
        return None
    table = asset_key.to_user_string()
    catching_up, scheduled = pending_windows(instance, table, job_name, partitions)
    if catching_up:
        log.info(f"{table}: a catch-up run is queued or running; not asking for another")
        return None
    keys = windows_through(partitions, window_holding(partitions, found.oldest_ms), found.due, MOST_WINDOWS)
    if keys[0] in scheduled:
        return None  # the window's own run is on its way: it lands from where the group stands
    keys = keys[: next((i for i, k in enumerate(keys) if k in scheduled), len(keys))]
    # Up to the newest window not landed yet: windows landed already (after a hole) need no run, only the
    # commit at the run's end, which moves the group over them.
    landed = materialized_among(instance, asset_key, keys)
    missing = [k for k in keys if k not in landed]
    # None missing: windows were landed without these queues (their broker did not answer): all of them again.
    last = missing[-1] if missing else keys[-1]
    queues = ",".join(sorted(r.queue.key for r in found.trailing))
    state = ",".join(f"{r.queue.key}={r.committed}" for r in sorted(found.trailing, key=lambda r: r.queue))
    digest = hashlib.sha1(f"{keys[0]}..{last}|{state}".encode()).hexdigest()[:12]
    attempt = int(now.timestamp()) // RETRY_EVERY_S
    log.info(
        f"{table}: {len(found.trailing)} queue(s) trail window {found.due}; requesting a run of windows "
        f"{keys[0]} .. {last} for them"
    )
    return RunRequest(
        run_key=f"{table}:catch_up:{digest}:{attempt}",
        asset_selection=[asset_key],
        tags={RANGE_START: keys[0], RANGE_END: last, QUEUES_TAG: queues, CATCH_UP_TAG: table},
    )
