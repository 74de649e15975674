"""One writer at a time for a Delta table on a local file system, across the processes of this machine.

Delta makes a commit by writing version N's file only if no other writer did (put-if-absent), and retries on the
next version when it lost. Its log store for local paths (HDFSLogStore over Hadoop's checksummed LocalFileSystem)
checks that the file is absent and then renames onto it, and two processes can both pass the check: both "win"
version N, one commit is lost, and the file and its ``.crc`` may come from different writers, after which every
read of that version fails with a ChecksumException (two deployments creating one table at the same instant did
this: tests/integration/test_consumer_group.py). Delta documents the local file system as safe for one writing
process only. Object stores and HDFS keep their own put-if-absent, so only local paths take this lock: an OS lock
(``flock``) on a file named after the table's absolute path, held while rocketlake writes or compacts it. The
writers of other machines (a lake on NFS) are not covered: give such a lake one writing machine, or an object store.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

#: Where the lock files live: one a table, named by a digest of its path (the lake itself stays as Delta has it).
LOCK_DIR = Path(tempfile.gettempdir()) / f"rocketlake-delta-locks-{os.getuid()}"


def local_path(path: str) -> Path | None:
    """The table's directory when ``path`` is on the local file system (no scheme, or ``file:``), else None."""
    parsed = urlparse(path)
    if parsed.scheme in ("", "file"):
        return Path(parsed.path if parsed.scheme else path).absolute()
    return None


@contextmanager
def one_writer(path: str) -> Iterator[None]:
    """Hold the machine-wide lock of the Delta table at ``path`` (nothing for a table on an object store or HDFS)."""
    table = local_path(path)
    if table is None:
        yield
        return
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha1(str(table).encode()).hexdigest()[:20]
    with open(LOCK_DIR / f"{digest}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
