"""Named crash points for the crash-recovery tests, inert unless ``ROCKETLAKE_FAILPOINT`` names one.

A run must survive dying at any instruction; the tests prove it at the worst places by setting
``ROCKETLAKE_FAILPOINT`` to one of ``POINTS`` and running the real CLI in its own process group.
When reached, the point SIGKILLs that whole group (the Dagster process, Spark's JVM and its Python
workers): no cleanup, no finally blocks, exactly like a machine losing power.
"""

from __future__ import annotations

import os
import signal

ENV = "ROCKETLAKE_FAILPOINT"
POINTS = frozenset({
    "during_pull",             # a Spark task has pulled its first batch
    "during_write",            # the last planned chunk is being read, earlier ones are written files
    "after_delta_commit",      # the slice and ledger are committed, the materialization not yet recorded
    "before_offset_commit",    # the materialization is recorded, the broker offsets not yet committed
})


GROUP_ENV = "ROCKETLAKE_FAILPOINT_PGID"


def arm() -> None:
    """Publish the driver's process group before Spark starts: PySpark's workers live in a group of
    their own (its daemon calls setpgid), and they inherit the JVM's environment, hence ours."""
    if os.environ.get(ENV):
        if os.environ[ENV] not in POINTS:
            raise ValueError(f"{ENV}={os.environ[ENV]!r} is not one of {sorted(POINTS)}")
        os.environ.setdefault(GROUP_ENV, str(os.getpgrp()))


def failpoint(name: str) -> None:
    if os.environ.get(ENV) == name:
        os.killpg(int(os.environ.get(GROUP_ENV, os.getpgrp())), signal.SIGKILL)
