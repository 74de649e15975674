"""User listeners: the ``MessageListenerConcurrently`` of a rocketlake ingestion, and how a task calls them.

An ingestion names ``listener: "package.module:function"``. Two forms:

* **per batch** (RocketMQ's form): ``fn(messages: list[dict], context: ConsumeConcurrentlyContext)`` gets at
  most ``consume_message_batch_max_size`` messages (a dict per message, every column the table has; ``topic``
  is the original topic for a redelivered message, as ``resetRetryAndNamespace`` does) and returns
  ``ConsumeConcurrentlyStatus.CONSUME_SUCCESS`` or ``RECONSUME_LATER``. ``context.ack_index = i`` on success
  acknowledges messages ``0..i`` only, the rest fail, as in ``ConsumeConcurrentlyContext``. An exception is
  RECONSUME_LATER.
* **vectorised** (the fast path): ``@vectorized(columns="amount_eur DOUBLE")`` on ``fn(df: pandas.DataFrame)``
  that returns a status per row (a Series or list of bools or statuses), or a DataFrame with a ``status``
  column, optionally an ``error`` column, and the declared ``columns`` (or replaced values of existing ones).
  One call per Arrow batch (up to ``pull_threshold_for_queue`` rows).

Orderly ingestions (``consume_orderly: true``) take a per-batch ``MessageListenerOrderly``: ``fn(messages,
context: ConsumeOrderlyContext)`` returning ``ConsumeOrderlyStatus.SUCCESS`` or ``SUSPEND_CURRENT_QUEUE_A_MOMENT``;
``consume_in_order`` calls it on one queue's messages in offset order and stops the queue at a failure.

Calls run on at most ``consume_thread_max`` threads of a Spark task (``consume_thread_min`` started up
front), each limited to ``consume_timeout``: a call still running at its limit counts as RECONSUME_LATER
for its messages, is reported with their ids, and is abandoned on a daemon thread, so it never holds the
queue or the task. Python cannot stop a thread, and Spark reuses its Python workers across tasks (and runs, on a
long-lived server): a worker keeps at most ``consume_thread_max`` abandoned calls still running. A task that finds
that many refuses to start (``ListenerHung``): the task fails, and the worker exits with the calls in it.
Everything here runs in Spark's Python workers; nothing needs Spark.
"""

from __future__ import annotations

import enum
import importlib
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


class ConsumeConcurrentlyStatus(enum.Enum):
    """What a per-batch listener answers (``MessageListenerConcurrently``): the batch landed, or comes back later."""

    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


class ConsumeOrderlyStatus(enum.Enum):
    """What an orderly listener answers (``MessageListenerOrderly``)."""

    SUCCESS = "SUCCESS"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"


@dataclass(frozen=True)
class ConsumeOrderlyContext:
    """The queue an orderly batch comes from (``topic/broker_name/queue_id``)."""

    message_queue: str


@dataclass
class ConsumeConcurrentlyContext:
    """What a per-batch listener may set, as in RocketMQ: the last acknowledged index of the batch."""

    batch_size: int
    ack_index: int = 2**31 - 1  # Integer.MAX_VALUE: every message of a successful batch


class ListenerError(ValueError):
    """The configured listener cannot be loaded or answered something that is not a status."""


@dataclass(frozen=True)
class Vectorized:
    """A vectorised listener: ``fn(pandas.DataFrame) -> statuses or DataFrame``, adding ``columns`` (Spark DDL)."""

    fn: Callable[[Any], Any]
    columns: str | None = None

    def __call__(self, df):
        return self.fn(df)


def vectorized(fn: Callable | None = None, *, columns: str | None = None):
    """Mark ``fn`` as a vectorised listener; ``columns``: the Spark DDL of the columns it adds to each row."""
    if fn is None:
        return lambda f: Vectorized(f, columns)
    return Vectorized(fn, columns)


def load_listener(path: str) -> Callable:
    """The object ``package.module:attribute`` names; a clear error if it cannot be imported."""
    module_name, _, attribute = path.partition(":")
    try:
        target = importlib.import_module(module_name)
        for part in attribute.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as e:
        raise ListenerError(
            f"listener {path!r} cannot be loaded ({type(e).__name__}: {e}); it must be importable "
            "by the Dagster code location and by Spark's Python workers"
        ) from None
    except SyntaxError as e:  # the module's own text: where, so the user can fix it
        raise ListenerError(
            f"listener {path!r} cannot be loaded: its module has a syntax error at {e.filename}:{e.lineno} ({e.msg})"
        ) from None
    except Exception as e:  # noqa: BLE001 - whatever the module raises while it is imported is the user's to fix
        raise ListenerError(
            f"listener {path!r} cannot be loaded: importing {module_name} raised {type(e).__name__}: {e}"
        ) from None
    if not callable(target):
        raise ListenerError(f"listener {path!r} is a {type(target).__name__}, not a function")
    return target


def _error_of(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:1000]


def judge_batch(answer: Any, context: ConsumeConcurrentlyContext) -> list[str | None]:
    """Per message of a batch: None (consumed) or why it is consumed again later (processConsumeResult)."""
    n = context.batch_size
    if answer is ConsumeConcurrentlyStatus.RECONSUME_LATER or answer == "RECONSUME_LATER":
        return ["listener answered RECONSUME_LATER"] * n
    if answer is not ConsumeConcurrentlyStatus.CONSUME_SUCCESS and answer != "CONSUME_SUCCESS":
        # Java's listener returning null counts as RECONSUME_LATER; so does anything that is not a status.
        return [f"listener answered {answer!r}, not a ConsumeConcurrentlyStatus"] * n
    ok = min(context.ack_index, n - 1) + 1
    return [None] * ok + [f"not acknowledged: the listener set ack_index={context.ack_index} in a batch of {n}"] * (
        n - ok
    )


class ListenerHung(RuntimeError):
    """A Python worker already carries as many abandoned, still-running listener calls as it may."""


def error_in_worker(error: BaseException) -> Exception | None:
    """The ``ListenerHung`` or ``ListenerError`` a Spark task raised in its Python worker, or the schema registry's
    ``RegistryUnreachable``, out of the error Spark reports for the job (a listener the driver imports but a Spark
    Connect server's workers cannot, for one): its sentence, without Spark's stack."""
    import re

    from rocketlake.engine.registry import RegistryUnreachable

    kinds = {"ListenerHung": ListenerHung, "ListenerError": ListenerError, "RegistryUnreachable": RegistryUnreachable}
    found = re.search(rf"({'|'.join(kinds)}): ([^\n]+)", str(error))
    if found is None:
        return None
    return kinds[found.group(1)](found.group(2))


#: this process's listener calls given up at their limit whose threads still run (across pools, tasks and runs)
_HUNG: list[threading.Thread] = []
_HUNG_LOCK = threading.Lock()


def hung_calls() -> int:
    """Abandoned listener calls still running in this process (the finished ones are forgotten)."""
    with _HUNG_LOCK:
        _HUNG[:] = [t for t in _HUNG if t.is_alive()]
        return len(_HUNG)


class CallPool:
    """Listener calls on daemon threads: at most ``max_threads`` at once, each over after ``timeout_s``.

    A call over its limit is given up (its thread is abandoned and replaced), so capacity stays
    ``max_threads`` live calls and no call can hold the pool, the task or the worker process.
    """

    def __init__(self, min_threads: int, max_threads: int, timeout_s: float):
        hung = hung_calls()
        if hung >= max_threads:
            import os

            raise ListenerHung(
                f"{hung} listener call(s) given up at consume_timeout ({timeout_s:g}s) in earlier tasks still run "
                f"in this Spark Python worker (pid {os.getpid()}), as many as consume_thread_max allows: the task "
                "stops so that the worker exits with them, and the run fails with nothing committed (its windows "
                "land again). The listener hangs: make its calls end (a timeout on what it waits for)"
            )
        self.max_threads = max_threads
        self.timeout_s = timeout_s
        self._tasks: queue.SimpleQueue = queue.SimpleQueue()
        self._done: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._started: dict[int, float] = {}  # call index -> monotonic start
        self._threads: dict[int, threading.Thread] = {}  # call index -> the thread running it
        self._abandoned: set[int] = set()  # calls given up: their threads exit when (if) they return
        self._live = 0  # threads serving the pool (abandoned ones excluded)
        self._next_id = 0  # call ids are unique over the pool's life, across ``run``s
        self.abandoned_calls = 0
        for _ in range(min_threads):
            self._spawn()

    def _spawn(self) -> None:
        self._live += 1
        threading.Thread(target=self._serve, daemon=True, name="rocketlake-listener").start()

    def _serve(self) -> None:
        while True:
            index, fn = self._tasks.get()
            with self._lock:
                if index < 0:  # shut down
                    return
                self._started[index] = time.monotonic()
                self._threads[index] = threading.current_thread()
            try:
                result: tuple[bool, Any] = (True, fn())
            except BaseException as e:  # noqa: BLE001 - a listener's exception is its answer
                result = (False, e)
            with self._lock:
                if index in self._abandoned:
                    return  # given up at its limit: a new thread took its place
                del self._started[index]  # finished in time: no longer a candidate for the timeout
                del self._threads[index]
            self._done.put((index, result))

    def run(self, calls: Sequence[Callable[[], Any]]) -> list[tuple[str, Any]]:
        """Each call's outcome, in order: ("ok", value), ("error", exception) or ("timeout", seconds)."""
        first = self._next_id
        self._next_id += len(calls)
        outcomes: dict[int, tuple[str, Any]] = {}
        for i, fn in enumerate(calls):
            self._tasks.put((first + i, fn))
        with self._lock:
            for _ in range(min(len(calls), self.max_threads) - self._live):
                self._spawn()
        remaining = len(calls)
        while remaining:
            with self._lock:
                deadlines = [start + self.timeout_s for start in self._started.values()]
            # Wake at the earliest deadline of a running call; poll briefly while calls are still being picked up.
            wait = min(deadlines) - time.monotonic() if deadlines else 0.05
            try:
                index, (ok, value) = self._done.get(timeout=max(0.001, wait))
                outcomes[index] = ("ok", value) if ok else ("error", value)
                remaining -= 1
            except queue.Empty:
                pass
            now = time.monotonic()
            with self._lock:
                for index, start in list(self._started.items()):
                    if now - start >= self.timeout_s:
                        outcomes[index] = ("timeout", now - start)
                        remaining -= 1
                        self._abandoned.add(index)
                        del self._started[index]
                        with _HUNG_LOCK:
                            _HUNG.append(self._threads.pop(index))
                        self.abandoned_calls += 1
                        self._live -= 1
                        self._spawn()  # keep max_threads live calls possible
        return [outcomes[first + i] for i in range(len(calls))]

    def close(self) -> None:
        with self._lock:
            live = self._live
        for _ in range(live):
            self._tasks.put((-1, None))


def consume_rows(
    rows: list[dict], listener: Callable, batch_max: int, pool: CallPool, log: Callable[[str], None] = lambda _: None
) -> list[str | None]:
    """Per row: None (consumed) or why not, calling a per-batch ``listener`` on batches of ``batch_max``."""
    batches = [rows[i : i + batch_max] for i in range(0, len(rows), batch_max)]
    contexts = [ConsumeConcurrentlyContext(len(b)) for b in batches]

    def call(batch: list[dict], context: ConsumeConcurrentlyContext) -> Callable[[], Any]:
        return lambda: listener(batch, context)

    errors: list[str | None] = []
    for batch, context, (kind, value) in zip(
        batches, contexts, pool.run([call(b, c) for b, c in zip(batches, contexts)])
    ):
        if kind == "ok":
            errors += judge_batch(value, context)
        elif kind == "error":
            errors += [f"listener raised {_error_of(value)}"] * len(batch)
        else:
            errors += timed_out(batch, value, pool.timeout_s, log)
    return errors


def consume_in_order(
    rows: list[dict],
    listener: Callable | None,
    batch_max: int,
    pool: CallPool,
    prior: dict[str, tuple[int, int]],
    max_attempts: int,
    held: set[str],
    log: Callable[[str], None] = lambda _: None,
) -> list[tuple[str | None, bool]]:
    """Orderly consumption of rows sorted by queue and offset: per row (error or None, held).

    Rows carry ``queue`` (its key), ``queue_offset``, ``matched``, ``duplicate`` and ``error`` (a body that did not
    decode). Each queue's consumable messages go to the listener in offset order, in batches of at most
    ``batch_max``, one call at a time. A failed batch (SUSPEND_CURRENT_QUEUE_A_MOMENT, an exception, a timeout, an
    undecodable body) stops its queue: it and every later message of the queue are held (``held`` remembers the
    queue across calls). ``prior``: queue -> (offset, failed attempts) where the queue was suspended before; a
    batch starting there that fails again after ``max_attempts`` attempts is not held but dead-lettered (its error,
    not held), and the queue goes on, as ConsumeMessageOrderlyService.checkReconsumeTimes does.
    """
    out: list[tuple[str | None, bool]] = [(r["error"], False) for r in rows]
    i = 0
    while i < len(rows):
        row = rows[i]
        queue_key = row["queue"]
        if queue_key in held:
            out[i] = (None, True)
            i += 1
            continue
        if not row["matched"] or row["duplicate"]:
            i += 1
            continue
        batch = [i]
        if row["error"] is None:
            while (
                len(batch) < batch_max
                and batch[-1] + 1 < len(rows)
                and rows[batch[-1] + 1]["queue"] == queue_key
                and rows[batch[-1] + 1]["matched"]
                and not rows[batch[-1] + 1]["duplicate"]
                and rows[batch[-1] + 1]["error"] is None
            ):
                batch.append(batch[-1] + 1)
            error = _call_orderly(listener, [rows[j]["message"] for j in batch], queue_key, pool, log)
        else:
            error = row["error"]
        i = batch[-1] + 1
        if error is None:
            continue
        offset, attempts = prior.get(queue_key, (None, 0))
        failed_before = attempts if offset == row["queue_offset"] else 0
        if failed_before >= max_attempts:
            log(
                f"{queue_key} offset {row['queue_offset']}: failed {failed_before + 1} times (max_reconsume_times "
                f"{max_attempts}); sent to the dead-letter queue, the queue goes on"
            )
            for j in batch:
                out[j] = (error, False)
            continue
        for j in batch:
            out[j] = (error, True)
        held.add(queue_key)
    return out


def _call_orderly(
    listener: Callable | None, messages: list[dict], queue_key: str, pool: CallPool, log: Callable[[str], None]
) -> str | None:
    """One orderly listener call: None if the batch is consumed, else why not."""
    if listener is None:
        return None
    [(kind, value)] = pool.run([lambda: listener(messages, ConsumeOrderlyContext(queue_key))])
    if kind == "error":
        return f"listener raised {_error_of(value)}"
    if kind == "timeout":
        return timed_out(messages, value, pool.timeout_s, log)[0]
    if value is ConsumeOrderlyStatus.SUCCESS or value == "SUCCESS":
        return None
    if value is ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT or value == "SUSPEND_CURRENT_QUEUE_A_MOMENT":
        return "listener answered SUSPEND_CURRENT_QUEUE_A_MOMENT"
    return f"listener answered {value!r}, not a ConsumeOrderlyStatus"


def timed_out(rows: list[dict], seconds: float, limit_s: float, log: Callable[[str], None]) -> list[str]:
    ids = [str(r.get("msg_id")) for r in rows]
    text = f"consume_timeout: the listener call ran {seconds:.1f}s, over the limit of {limit_s:g}s"
    log(f"{text}; messages consumed again later: {', '.join(ids)}")
    return [text] * len(rows)


def judge_frame(answer: Any, n: int) -> tuple[list[str | None], Any]:
    """A vectorised listener's answer: (per-row error or None, the DataFrame of changed columns or None)."""
    import pandas as pd

    frame = None
    if isinstance(answer, pd.DataFrame):
        if "status" not in answer.columns:
            raise ListenerError("a vectorised listener's DataFrame needs a 'status' column (bool or status per row)")
        frame = answer
        statuses = list(answer["status"])
        reasons = list(answer["error"]) if "error" in answer.columns else [None] * len(statuses)
    else:
        statuses = list(answer)
        reasons = [None] * len(statuses)
    if len(statuses) != n:
        raise ListenerError(f"a vectorised listener answered {len(statuses)} statuses for {n} rows")
    errors: list[str | None] = []
    for status, reason in zip(statuses, reasons):
        errors.append(
            None
            if _consumed(status)
            else (str(reason) if reason is not None and reason == reason else "listener answered RECONSUME_LATER")
        )
    return errors, frame


def _consumed(status: Any) -> bool:
    """A vectorised status: CONSUME_SUCCESS (the enum or its name) or a true value (NaN and None are not)."""
    if isinstance(status, ConsumeConcurrentlyStatus):
        return status is ConsumeConcurrentlyStatus.CONSUME_SUCCESS
    if isinstance(status, str):
        return status == "CONSUME_SUCCESS"
    return status is not None and status == status and bool(status)
