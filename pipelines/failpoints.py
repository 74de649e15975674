"""Named crash points for the crash-recovery tests: a test hook, inert unless ``ROCKETLAKE_FAILPOINT`` names one.

A run must survive dying at any instruction; the tests prove it at the worst places by setting
``ROCKETLAKE_FAILPOINT`` to one of ``POINTS`` and running the real CLI as the leader of a session of its
own (``start_new_session=True``). When reached, the point SIGKILLs that session's leading process group
(the Dagster process and Spark's JVM) and its own group (PySpark's daemon puts its Python workers in a
group of their own, in the same session): no cleanup, no finally blocks, like a machine losing power.
Unset, a failpoint costs one dictionary lookup; nothing outside the pipeline's own modules imports it.
"""

from __future__ import annotations

import os
import signal

ENV = "ROCKETLAKE_FAILPOINT"
POINTS = frozenset({
    "during_pull",             # a Spark task has pulled its first batch
    "during_write",            # the last planned chunk is being read, earlier ones are written files
    "after_delta_commit",      # the slice and ledger are committed, the materialization not yet recorded
    "during_send_back",        # half of the run's failures are sent back to the retry topic, half not yet
    "after_send_back",         # every failure is sent back, the materialization not yet recorded
    "before_offset_commit",    # the materialization is recorded, the broker offsets not yet committed
    "offset_store_between_renames",  # BROADCASTING: the old store moved to .bak, the new one not yet in place
})


def failpoint(name: str) -> None:
    armed = os.environ.get(ENV)
    if not armed:
        return
    if armed not in POINTS:
        raise ValueError(f"{ENV}={armed!r} is not one of {sorted(POINTS)}")
    if armed == name:
        os.killpg(os.getsid(0), signal.SIGKILL)   # the run's process group: its leader leads the session
        os.killpg(os.getpgrp(), signal.SIGKILL)   # a Python worker's own group, if we are one
