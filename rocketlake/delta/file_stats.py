"""What a table's files can hold, from the statistics in its Delta log (delta-rs: no Spark job).

A quiet window (every queue's range empty) lands as a ledger commit alone when no file of the table can hold a row
of its windows: then there is nothing for a slice write to replace, and nothing to count back.
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc

MIN, MAX = "min.window_start", "max.window_start"


def may_hold_windows(path: str, window_starts_ms: Iterable[int], storage_options: dict[str, str] | None = None) -> bool:
    """Whether a file of the table at ``path`` may hold a row whose ``window_start`` is one of ``window_starts_ms``:
    its statistics' range covers one of them, or it has no statistics of ``window_start`` (a file written without,
    a table whose statistics leave the column out). False when the table has no file at all, or does not exist."""
    from rocketlake.delta.ledger_log import open_log

    starts = sorted(set(window_starts_ms))
    table = open_log(path, storage_options) if starts else None
    if table is None:
        return False
    files = pa.table(table.get_add_actions(flatten=True))
    if files.num_rows == 0:
        return False
    if MIN not in files.column_names or MAX not in files.column_names:
        return True
    low = pc.cast(files[MIN], pa.timestamp("ms", tz="UTC")).cast(pa.int64())
    high = pc.cast(files[MAX], pa.timestamp("ms", tz="UTC")).cast(pa.int64())
    if low.null_count or high.null_count:
        return True
    lows, highs = low.to_numpy(), high.to_numpy()
    return any(bool(((lows <= ms) & (ms <= highs)).any()) for ms in starts)
