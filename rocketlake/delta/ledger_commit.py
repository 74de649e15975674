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

delta-rs writes no checksum (``<version>.crc``), and Delta Spark keeps a small table's whole state in each one (its
files, protocol, metadata): without it, the next session to read the table after such a commit rebuilds the state
from the log with two Spark jobs (a log replay and an aggregate), about a second of the Spark server a window. A
commit that adds and removes nothing leaves that state as it was, so the previous version's checksum, less its
transaction id, is the new version's: it is written beside the commit (``_carry_checksum``). Delta's own check
(``allFilesInCrc.verificationMode``) finds it equal to the log's replay (``tests/integration/test_ledger_checksum.py``).

Delta Spark checkpoints a table only when its own commit lands on a multiple of the table's checkpoint interval. Where
the ledger's commits take those versions (a window's verdict follows its slice, a quiet window's entry is alone), no
checkpoint was ever written, and each new snapshot replayed the whole log since the table began: a window's cost grew
with the table's age. A ledger commit on such a version writes the checkpoint itself (``_checkpoint_on_interval``), as
Spark's would have.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from rocketlake.delta.delta_rs import Protocol, read_refusal
from rocketlake.delta.local_commits import local_path
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
    from deltalake.exceptions import CommitFailedError, DeltaError, DeltaProtocolError

    table = DeltaTable(path, storage_options=storage_options)
    before = table.version()
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
    local = local_path(path)
    if local is None:
        return True  # an object store: not worth a checksum's round trips here
    log = local / "_delta_log"
    try:
        version = _committed_version(log, before, entry.to_json())
    except (OSError, ValueError):
        return True  # the commit is made; what follows only spares Spark work
    if version is None:
        return True
    try:
        _carry_checksum(log, version)
    except (OSError, ValueError):
        pass  # best effort, as Delta's own checksums: without one the table is read right, after a log replay
    try:
        _checkpoint_on_interval(table, log, version)
    except (OSError, ValueError, DeltaError):
        pass  # best effort, as Delta Spark's own checkpoints: the next multiple's commit writes one
    return True


def _committed_version(log: Path, before: int, user_metadata: str) -> int | None:
    """The version that holds ``user_metadata`` (committed after ``before`` by delta-rs, with commitInfo alone)."""
    for version in range(before + 1, before + 2 + COMMIT_RETRIES):
        try:
            lines = (log / f"{version:020d}.json").read_text().splitlines()
        except FileNotFoundError:
            return None
        actions = [json.loads(line) for line in lines if line.strip()]
        info = actions[0].get("commitInfo", {}) if len(actions) == 1 else {}
        if info.get("userMetadata") == user_metadata:
            return version
        # else another writer's commit, taken before ours
    return None


def _carry_checksum(log: Path, version: int) -> None:
    """Write the checksum of ``version`` (a commit adding and removing nothing) from the checksum of the version
    before it, where that one exists."""
    try:
        state = json.loads((log / f"{version - 1:020d}.crc").read_text())
    except FileNotFoundError:
        return  # none to carry: the version before has none either (its writer wrote none, or failed to)
    if "inCommitTimestampOpt" in state:
        return  # a timestamp of each commit's own: not carried (delta-rs refuses such tables anyway)
    state.pop("txnId", None)  # the transaction that wrote the previous version, not ours
    temporary = log / f".{version:020d}.crc.{os.getpid()}.tmp"
    temporary.write_text(json.dumps(state))
    try:
        os.link(temporary, log / f"{version:020d}.crc")  # whole, and never over a checksum already there
    except FileExistsError:
        pass
    finally:
        temporary.unlink()


#: Delta's checkpoint interval where a table names none (``delta.checkpointInterval``; delta-rs's own default is 100).
CHECKPOINT_INTERVAL = 10


def _checkpoint_on_interval(table, log: Path, version: int) -> None:
    """Checkpoint ``version`` of ``table`` (a ``deltalake.DeltaTable``) when it is a multiple of the table's interval,
    as Delta Spark does after its own commits; unless one is there already, or the table has a reader feature
    delta-rs does not read (deletion vectors, column mapping...): its checkpoint must carry what delta-rs knows
    nothing of, and is left to Delta Spark."""
    interval = int((table.metadata().configuration or {}).get("delta.checkpointInterval", CHECKPOINT_INTERVAL))
    if version % interval or any(log.glob(f"{version:020d}.checkpoint.*")):
        return
    if read_refusal(Protocol.of(table)) is not None:
        return
    table.load_as_version(version)
    table.create_checkpoint()
