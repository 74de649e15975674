"""Named crash points, installed by the crash-recovery tests only: nothing in rocketlake knows them.

The crash tests put this folder on ``PYTHONPATH`` and name one of ``POINTS`` in ``ROCKETLAKE_FAILPOINT``; every
Python process of the run (the Dagster CLI, its step process, Spark's Python workers, which inherit
``PYTHONPATH``) then imports this ``sitecustomize`` at start-up. It wraps the product's own interfaces, as
each module is imported, so that reaching the named instant SIGKILLs the run: the session's leading process
group (the Dagster process and Spark's JVM; the test starts the CLI with ``start_new_session=True``) and the
caller's own group (PySpark's daemon puts its Python workers in a group of their own, in the same session).
No cleanup, no finally blocks, like a machine losing power.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import signal
import sys

ENV = "ROCKETLAKE_FAILPOINT"
#: Optional: the point fires only while this file exists, and only in the first process to reach it, which removes
#: it (the chaos soak arms one run of a daemon's many: ``tests/chaos``); without it, every time the point is reached.
ONCE_ENV = "ROCKETLAKE_FAILPOINT_ONCE"
POINTS = frozenset(
    {
        "during_pull",  # a Spark task has pulled its first batch
        "during_write",  # a task has read its last batch, its file is being written; earlier ones are
        "after_delta_commit",  # the slice and ledger are committed, the verdict and the materialization not yet
        "during_send_back",  # half of the run's failures are sent back to the retry topic, half not yet
        "after_send_back",  # every failure is sent back, the materialization not yet recorded
        "before_offset_commit",  # the materialization is recorded, the broker offsets not yet committed
        "offset_store_between_renames",  # BROADCASTING: the old store moved to .bak, the new one not yet in place
    }
)


def fires() -> bool:
    """Whether reaching the armed point kills this process now (see ``ONCE_ENV``)."""
    once = os.environ.get(ONCE_ENV)
    if not once:
        return True
    try:
        os.unlink(once)  # atomic: of the processes reaching the point, one removes the file
    except FileNotFoundError:
        return False
    return True


def die() -> None:
    if os.environ.get(ONCE_ENV):
        # A run the daemon launched shares the daemon's session and group: only the run's own process dies (on a
        # Spark Connect server it is the whole run; a JVM of its own ends when its parent's pipe closes).
        os.kill(os.getpid(), signal.SIGKILL)
    os.killpg(os.getsid(0), signal.SIGKILL)  # the run's process group: its leader leads the session
    os.killpg(os.getpgrp(), signal.SIGKILL)  # a Python worker's own group, if we are one


def _broker_access(module) -> None:  # during_pull
    pull_chunks = module.pull_chunks

    def pulled_then_die(*args, **kwargs):
        for chunk in pull_chunks(*args, **kwargs):
            die()
            yield chunk

    module.pull_chunks = pulled_then_die


def _source(module) -> None:  # during_write
    read = module.RocketMQReader.read

    def read_then_die(self, partition):
        yield from read(self, partition)
        die()

    module.RocketMQReader.read = read_then_die


def _materialize(module) -> None:  # after_delta_commit: the table's slice (not the failures table's) is committed
    write_slice = module.write_slice

    def write_then_die(*args, with_ledger: bool = True, **kwargs):
        attempts = write_slice(*args, with_ledger=with_ledger, **kwargs)
        if with_ledger:
            die()
        return attempts

    module.write_slice = write_then_die


def _ingest(module) -> None:  # during_send_back, after_send_back, before_offset_commit
    send_back, commit = module.send_back, module.commit
    from rocketlake.engine.failures import DEAD_LETTERED, SENT_BACK

    class HalfThenDie:
        def __init__(self, broker, total):
            self.broker, self.total, self.sent = broker, total, 0

        def __getattr__(self, name):
            return getattr(self.broker, name)

        def send_back(self, *args, **kwargs):
            if self.sent == self.total // 2:
                die()
            self.sent += 1
            return self.broker.send_back(*args, **kwargs)

    def sending_back(broker, cfg, m, *args, **kwargs):
        total = sum(f.outcome in (SENT_BACK, DEAD_LETTERED) for f in m.report.failures)
        if ARMED == "during_send_back" and total and fires():
            broker = HalfThenDie(broker, total)
        sent = send_back(broker, cfg, m, *args, **kwargs)
        # Armed once, the point waits for a run that has something to send back.
        if ARMED == "after_send_back" and (total or not os.environ.get(ONCE_ENV)) and fires():
            die()
        return sent

    def committing(*args, **kwargs):
        if ARMED == "before_offset_commit":
            die()
        return commit(*args, **kwargs)

    module.send_back, module.commit = sending_back, committing


def _offset_store(module) -> None:  # offset_store_between_renames
    class RenamesThenDie:
        def __getattr__(self, name):
            return getattr(os, name)

        @staticmethod
        def replace(src, dst):
            os.replace(src, dst)
            if str(dst).endswith(".bak"):
                die()

    module.os = RenamesThenDie()


PATCHES = {
    "during_pull": {"rocketlake.engine.broker_access": _broker_access},
    "during_write": {"rocketlake.spark.source": _source},
    "after_delta_commit": {"rocketlake.spark.materialize": _materialize},
    "during_send_back": {"rocketlake.engine.ingest": _ingest},
    "after_send_back": {"rocketlake.engine.ingest": _ingest},
    "before_offset_commit": {"rocketlake.engine.ingest": _ingest},
    "offset_store_between_renames": {"rocketlake.engine.offset_store": _offset_store},
}


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    """Runs a patch on a module right after it is first executed (before anyone imports names from it)."""

    def __init__(self, patches: dict):
        self.patches = patches

    def find_spec(self, name, path, target=None):
        patch = self.patches.get(name)
        if patch is None:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            patch(module)

        spec.loader.exec_module = exec_module
        return spec


ARMED = os.environ.get(ENV)
if ARMED:
    if ARMED not in POINTS:
        raise ValueError(f"{ENV}={ARMED!r} is not one of {sorted(POINTS)}")
    sys.meta_path.insert(0, _PatchAfterImport(PATCHES[ARMED]))

# Python runs one sitecustomize: the one this folder shadows (Debian's, for instance) still runs.
_here = os.path.dirname(os.path.abspath(__file__))
for _entry in sys.path:
    if _entry and os.path.abspath(_entry) != _here and os.path.exists(os.path.join(_entry, "sitecustomize.py")):
        _spec = importlib.util.spec_from_file_location(
            "_shadowed_sitecustomize", os.path.join(_entry, "sitecustomize.py")
        )
        _spec.loader.exec_module(importlib.util.module_from_spec(_spec))
        break
