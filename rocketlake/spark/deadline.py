"""A run's deadline (``run_timeout``): past it, the run's Spark work is interrupted and the run fails cleanly.

A run holds its consumer group's pool slot while it runs; a run that never ends (a listener that hangs in every
call, a task stuck on a lost executor) would hold it for ever and every later window would wait behind it. At the
deadline the Spark operations this run started are interrupted by their tag (classic and Connect sessions alike),
which also stops their Python workers and any listener thread still running in them. What the run committed before
stays (the protocol is safe at any instant, as after a crash); what it did not is landed again by a later run.

Dagster's run monitoring ends a run whose process no longer answers at all (the job's ``dagster/max_runtime``
tag, the same limit); this watch is the one that fails a live run with a sentence saying why.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from pyspark.sql import SparkSession

from rocketlake.delta.writer import _on_connect

#: what becomes of a landing stopped at the deadline
LANDING = "Nothing it had not committed is kept and no offset moved past it; its windows land again in the next run."


INTERRUPT_EVERY_S = 1.0


class RunDeadlinePassed(TimeoutError):
    """The run passed ``run_timeout``: its Spark operations were interrupted."""


class SparkDeadline:
    """The deadline of one run's Spark work, counted from when this object is made (the run's step starts)."""

    def __init__(self, session: Callable[[], SparkSession], timeout_s: float):
        self.session = session  # how to get the run's session: a run opens it only when it first needs it
        self.timeout_s = timeout_s
        self.at = time.monotonic() + timeout_s
        self.tag = f"rocketlake-run-{uuid.uuid4().hex[:12]}"

    @property
    def spark(self) -> SparkSession:
        return self.session()

    @contextmanager
    def watch(self, what: str, after: str = LANDING) -> Iterator[None]:
        """Run the block's Spark operations under the run's tag; at the deadline, interrupt them and raise
        ``RunDeadlinePassed`` naming ``what`` the run was doing and ``after``, what becomes of its work."""
        left = self.at - time.monotonic()
        if left <= 0:
            raise RunDeadlinePassed(self._sentence(what, after, started=False))
        fired, done = threading.Event(), threading.Event()

        def interrupt() -> None:
            if done.wait(left):
                return
            fired.set()
            # Again every second: an operation the block starts after the first interruption (the block may be
            # between two Spark jobs at the deadline) is stopped as well.
            while not done.is_set():
                self._interrupt()
                done.wait(INTERRUPT_EVERY_S)

        self._tag(add=True)  # the operations this thread starts
        watcher = threading.Thread(target=interrupt, daemon=True, name="rocketlake-run-deadline")
        watcher.start()
        try:
            yield
        except Exception as e:
            if fired.is_set():  # an interrupted operation fails with Spark's own error: say why it was
                raise RunDeadlinePassed(self._sentence(what, after, started=True)) from e
            raise
        finally:
            done.set()
            watcher.join()
            self._tag(add=False)
        if fired.is_set():  # the block ended at the deadline without an operation to interrupt: over all the same
            raise RunDeadlinePassed(self._sentence(what, after, started=True))

    def _tag(self, add: bool) -> None:
        if _on_connect(self.spark):
            (self.spark.addTag if add else self.spark.removeTag)(self.tag)
        else:  # a classic session's own tags are known only to the thread that added them: the job tags are not
            context = self.spark.sparkContext
            (context.addJobTag if add else context.removeJobTag)(self.tag)

    def _interrupt(self) -> None:
        """From the watching thread: Connect's server finds the session's operations by tag from any thread; a
        classic session's SparkContext cancels its jobs by tag from any thread."""
        if _on_connect(self.spark):
            self.spark.interruptTag(self.tag)
        else:
            self.spark.sparkContext.cancelJobsWithTag(self.tag)

    def _sentence(self, what: str, after: str, started: bool) -> str:
        return (
            f"the run passed its deadline (run_timeout: {self.timeout_s / 60:g} min) "
            f"{'while' if started else 'before'} {what}: its Spark work was stopped. {after} If runs of this size "
            "need longer, raise run_timeout; if the listener hangs, fix it (a call over consume_timeout is "
            "given up)"
        )
