"""Reading the ledger from a table's Delta log: the one reader runs, sensors and the CLI share.

It reads the commits' ``userMetadata`` with delta-rs (no Spark needed: a sensor or the CLI has none), newest
first and a page at a time, only as far as a reader needs: with one writer, the group's newest entry
(it keeps every earlier entry still at stake), so commits cleaned from the Delta log are never needed.
"""

from __future__ import annotations

from pathlib import Path

from rocketlake.engine.ledger import LedgerEntry, history_of, with_verdicts

#: How many of the newest commits to read at first; a group's newest entry is nearly always among them.
FIRST_HISTORY_PAGE = 20
#: How many of the newest commits a sensor reads: enough for the windows it checks, with every member writing.
RECENT_COMMITS = 200


def open_log(path: str | Path, storage_options: dict[str, str] | None = None):
    """The table at ``path`` opened with delta-rs to read its log (a ``deltalake.DeltaTable``), None when there is no
    table yet; ``storage_options`` reach an S3 lake (``delta.storage.delta_rs_options``). (delta-rs 1.6 and later load
    the file list whatever they are asked, and warn at each call that ``without_files`` is ignored: it is not asked.)"""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(str(path), storage_options=storage_options)
    except TableNotFoundError:
        return None


def _history(path: str, limit: int, storage_options: dict[str, str] | None = None) -> list[dict] | None:
    """The ``limit`` newest commits (None when there is no table yet)."""
    table = open_log(path, storage_options)
    return None if table is None else table.history(limit)


def table_version(path: str, storage_options: dict[str, str] | None = None) -> int | None:
    """The table's newest commit version, None when there is no table yet. Read with delta-rs from the log, not with
    Spark's DESCRIBE HISTORY, which costs the server a Spark job, several times a landing."""
    table = open_log(path, storage_options)
    return None if table is None else table.version()


def _entries(history: list[dict]) -> list[LedgerEntry]:
    """The ledger entries of ``history``, newest first (commits of others, OPTIMIZE, a user's, left out)."""
    found = (LedgerEntry.from_json(c.get("userMetadata"), c.get("version")) for c in history if c.get("userMetadata"))
    return sorted((e for e in found if e is not None), key=lambda e: -(e.version or 0))


def read_ledger(
    path: str, group: str | None = None, storage_options: dict[str, str] | None = None
) -> list[LedgerEntry]:
    """The ledger entries a run of ``group`` needs, oldest first (if ``group`` is None, every landing's entry of the
    log, with the verdicts committed after it)."""
    limit = FIRST_HISTORY_PAGE
    while True:
        history = _history(path, limit, storage_options)
        if history is None:
            return []
        newest_first = _entries(history)
        if group is None:
            if len(history) < limit:
                return with_verdicts(list(reversed(newest_first)))
        else:
            lowest = min((c["version"] for c in history), default=None)
            entries, complete = history_of(newest_first, group, lowest)
            if complete or len(history) < limit:
                return entries
        limit *= 10


def recent_entries(
    path: str, limit: int = RECENT_COMMITS, storage_options: dict[str, str] | None = None
) -> list[LedgerEntry]:
    """The ledger entries among the table's newest ``limit`` commits, newest first ([] when no table yet)."""
    return _entries(_history(path, limit, storage_options) or [])


def source_of(table: Path | str, limit: int = 50) -> str | None:
    """The name server the table's newest ledger entry among its ``limit`` newest commits was landed from; None
    when none says (a table of someone else, or one landed before entries named it)."""
    from deltalake.exceptions import DeltaError

    try:
        entries = recent_entries(str(table), limit)
    except (DeltaError, OSError, ValueError):
        return None  # not a readable Delta table: not rocketlake's to delete
    return next((e.namesrv for e in entries if e.namesrv), None)
