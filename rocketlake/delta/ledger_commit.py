"""A ledger entry committed alone (no file added or removed) with delta-rs: no Spark session for it.

A quiet window's landing and every landing's verdict are commits that carry a ledger entry and change no row. With
Spark each costs a session's snapshot of the table and a write job on the server, a few CPU-seconds a window on a
Spark Connect server; with delta-rs, a JSON file written by the run's own process. Where delta-rs may not write the
table, the caller commits with Spark as before (``False``):

* a table on S3: Delta's S3 log store there is safe with one writer only, the Spark driver (``storage``);
* a table whose protocol needs a writer feature delta-rs lacks (row tracking, type widening, in-commit timestamps,
  clustering...: it refuses before writing anything).

On a local or mounted file system both writers create ``_delta_log/<version>.json`` only if absent, so a commit of
the one and a commit of the other never overwrite each other: the loser retries on the next version, as each does
with its own kind.
"""

from __future__ import annotations

from rocketlake.delta.storage import on_s3
from rocketlake.engine.ledger import LedgerEntry

#: Commits of others between reading the table and writing the entry: each is checked, then the entry goes on top.
COMMIT_RETRIES = 15


def commit_ledger_alone(path: str, entry: LedgerEntry, storage_options: dict[str, str] | None = None) -> bool:
    """Commit ``entry`` to the table at ``path`` with delta-rs, adding and removing nothing; False (nothing written)
    when delta-rs may not write this table, and Spark must."""
    if on_s3(path):
        return False
    from deltalake import CommitProperties, DeltaTable
    from deltalake.exceptions import CommitFailedError, DeltaProtocolError

    table = DeltaTable(path, storage_options=storage_options)
    try:
        table.create_write_transaction(
            [],
            mode="append",
            schema=table.schema(),
            partition_by=table.metadata().partition_columns,
            commit_properties=CommitProperties(
                custom_metadata={"userMetadata": entry.to_json()}, max_commit_retries=COMMIT_RETRIES
            ),
        )
    except DeltaProtocolError:
        return False
    except CommitFailedError as e:
        # delta-rs checks the table's writer features before it writes anything ("Unsupported table features
        # required: [RowTracking]", type widening, in-commit timestamps, clustering): Spark commits for it.
        if "unsupported table feature" in str(e).lower():
            return False
        raise
    return True
