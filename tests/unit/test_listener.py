"""The listener contract on plain data: statuses, ack_index, exceptions, consume_timeout, thread bounds."""

from __future__ import annotations

import threading
import time

import pandas as pd
import pytest

import rocketlake.engine.listener as listener_module
from rocketlake.engine.listener import (
    CallPool,
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeOrderlyStatus,
    ListenerError,
    ListenerHung,
    consume_in_order,
    consume_rows,
    error_in_worker,
    hung_calls,
    judge_batch,
    judge_frame,
    load_listener,
)

OK, LATER = ConsumeConcurrentlyStatus.CONSUME_SUCCESS, ConsumeConcurrentlyStatus.RECONSUME_LATER


def test_success_acknowledges_the_whole_batch_unless_ack_index_says_less():
    assert judge_batch(OK, ConsumeConcurrentlyContext(3)) == [None, None, None]
    partial = judge_batch(OK, ConsumeConcurrentlyContext(4, ack_index=1))
    assert partial[:2] == [None, None] and all(e and "ack_index=1" in e for e in partial[2:])
    assert (
        judge_batch(OK, ConsumeConcurrentlyContext(2, ack_index=-1))
        == [partial[2].replace("=1 in a batch of 4", "=-1 in a batch of 2")] * 2
    )


def test_reconsume_later_and_non_statuses_fail_the_whole_batch():
    assert judge_batch(LATER, ConsumeConcurrentlyContext(2)) == ["listener answered RECONSUME_LATER"] * 2
    assert all("not a ConsumeConcurrentlyStatus" in e for e in judge_batch(None, ConsumeConcurrentlyContext(2)))


def test_batches_are_at_most_batch_max_and_exceptions_are_reconsume_later():
    seen = []

    def listener(messages, context):
        seen.append(len(messages))
        if any(m["n"] == 4 for m in messages):
            raise RuntimeError("no 4s")
        return OK

    pool = CallPool(1, 2, timeout_s=10)
    errors = consume_rows([{"n": i, "msg_id": str(i)} for i in range(7)], listener, 3, pool)
    pool.close()
    assert sorted(seen) == [1, 3, 3]
    assert errors[:3] == [None] * 3 and errors[6] is None
    assert errors[3:6] == ["listener raised RuntimeError: no 4s"] * 3


def test_a_call_over_consume_timeout_fails_within_a_second_and_frees_the_pool():
    release = threading.Event()
    logged = []

    def listener(messages, context):
        if messages[0]["msg_id"] == "slow":
            release.wait(60)
        return OK

    pool = CallPool(1, 1, timeout_s=1.0)
    started = time.monotonic()
    errors = consume_rows([{"msg_id": "slow"}, {"msg_id": "fast"}], listener, 1, pool, logged.append)
    elapsed = time.monotonic() - started
    assert errors[0].startswith("consume_timeout") and errors[1] is None
    assert 1.0 <= elapsed < 2.0, elapsed  # the limit, to the second; the second batch ran on a new thread
    assert pool.abandoned_calls == 1 and "slow" in logged[0]
    release.set()
    pool.close()


def test_a_worker_keeps_at_most_consume_thread_max_hung_calls_then_refuses_tasks(monkeypatch):
    """Issue 45: Python cannot stop a thread and Spark reuses its Python workers, so calls given up at their limit
    would pile up task after task. Once a process carries consume_thread_max of them still running, the next task's
    pool refuses to start (its worker then exits with them); the calls that end are forgotten."""
    # A fresh worker's registry: the test process also holds calls other tests gave up on, some still ending (a CI
    # run found one still alive here).
    monkeypatch.setattr(listener_module, "_HUNG", [])
    release = threading.Event()
    threads: list[threading.Thread] = []

    def hangs(messages, context):
        threads.append(threading.current_thread())
        release.wait(60)
        return OK

    assert hung_calls() == 0
    try:
        for task in range(2):  # two tasks of one reused worker, each with one call given up
            pool = CallPool(1, 2, timeout_s=0.2)
            assert consume_rows([{"msg_id": f"m{task}"}], hangs, 1, pool)[0].startswith("consume_timeout")
            pool.close()
        assert hung_calls() == 2
        with pytest.raises(ListenerHung, match=r"2 listener call\(s\) given up at consume_timeout \(0.2s\)"):
            CallPool(1, 2, timeout_s=0.2)
        CallPool(1, 3, timeout_s=0.2).close()  # a pool allowed more threads still starts
    finally:
        release.set()
        for thread in threads:
            thread.join(5)
    assert hung_calls() == 0
    CallPool(1, 2, timeout_s=0.2).close()


def test_a_hung_worker_is_reported_in_its_own_words():
    spark_error = RuntimeError(
        'Job aborted... File "worker.py", line 9\nrocketlake.engine.listener.ListenerHung: '
        "2 listener call(s) given up at consume_timeout (6s) still run\n\tat org.apache"
    )
    assert str(error_in_worker(spark_error)) == "2 listener call(s) given up at consume_timeout (6s) still run"
    assert error_in_worker(RuntimeError("Job aborted: something else")) is None


def test_a_listener_a_spark_connect_servers_workers_cannot_import_is_a_listener_error_in_their_words():
    # As a daemon's run on the warm path reported it: the code location imports the listener, the server's Python
    # workers (another environment) cannot; Spark wraps the worker's error in the job's stack.
    spark_error = RuntimeError(
        '[PYTHON_EXCEPTION] ... File "/x/pipelines/listener.py", line 98, in load_listener\n    raise ListenerError('
        'f"listener ...\n'
        "rocketlake.engine.listener.ListenerError: listener 'tests.unit.listeners:fail_by_tag' cannot be loaded "
        "(ModuleNotFoundError: No module named 'tests'); it must be importable by the Dagster code location and by "
        "Spark's Python workers\n\tat org.apache.spark.api.python"
    )
    found = error_in_worker(spark_error)
    assert isinstance(found, ListenerError)
    assert str(found) == (
        "listener 'tests.unit.listeners:fail_by_tag' cannot be loaded (ModuleNotFoundError: No "
        "module named 'tests'); it must be importable by the Dagster code location and by Spark's "
        "Python workers"
    )


def test_at_most_max_threads_calls_run_at_once():
    running, peak, lock = [0], [0], threading.Lock()

    def listener(messages, context):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.05)  # work, not synchronisation: the bound is what is asserted
        with lock:
            running[0] -= 1
        return OK

    pool = CallPool(1, 3, timeout_s=10)
    assert consume_rows([{"msg_id": str(i)} for i in range(12)], listener, 1, pool) == [None] * 12
    pool.close()
    assert peak[0] == 3


def test_vectorised_answers():
    errors, frame = judge_frame(pd.Series([True, False]), 2)
    assert errors == [None, "listener answered RECONSUME_LATER"] and frame is None
    errors, frame = judge_frame(
        pd.DataFrame({"status": ["CONSUME_SUCCESS", "RECONSUME_LATER"], "error": [None, "bad amount"]}), 2
    )
    assert errors == [None, "bad amount"] and list(frame.columns) == ["status", "error"]
    with pytest.raises(ListenerError, match="1 statuses for 2 rows"):
        judge_frame([True], 2)
    with pytest.raises(ListenerError, match="'status' column"):
        judge_frame(pd.DataFrame({"x": [1]}), 1)


def test_load_listener_names_what_is_wrong():
    assert load_listener("tests.unit.listeners:fail_poison").__name__ == "fail_poison"
    with pytest.raises(ListenerError, match="cannot be loaded"):
        load_listener("tests.unit.listeners:missing")


def orderly_rows(spec):
    """(queue, offset, tag, decode error) -> the rows ``consume_in_order`` reads."""
    return [
        {
            "queue": q,
            "queue_offset": o,
            "matched": tag != "filtered",
            "duplicate": False,
            "error": err,
            "message": {"queue_offset": o, "tags": tag, "reconsume_times": 0},
        }
        for q, o, tag, err in spec
    ]


def test_orderly_calls_each_queue_in_offset_order_and_holds_it_at_its_first_failure():
    calls = []

    def listener(messages, context):
        calls.append((context.message_queue, [m["queue_offset"] for m in messages]))
        if any(m["tags"] == "bad" for m in messages):
            return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        return ConsumeOrderlyStatus.SUCCESS

    rows = orderly_rows(
        [
            ("a", 0, "ok", None),
            ("a", 1, "bad", None),
            ("a", 2, "ok", None),
            ("a", 3, "filtered", None),
            ("b", 0, "ok", None),
            ("b", 1, "filtered", None),
            ("b", 2, "ok", None),
            ("c", 0, "ok", None),
            ("c", 1, "ok", "body is not JSON"),
            ("c", 2, "ok", None),
        ]
    )
    held: set[str] = set()
    pool = CallPool(1, 1, 5)
    try:
        out = consume_in_order(rows, listener, 1, pool, {}, 16, held)
    finally:
        pool.close()
    assert calls == [("a", [0]), ("a", [1]), ("b", [0]), ("b", [2]), ("c", [0])]  # nothing after a failure is called
    assert out == [
        (None, False),
        ("listener answered SUSPEND_CURRENT_QUEUE_A_MOMENT", True),
        (None, True),
        (None, True),
        (None, False),
        (None, False),
        (None, False),
        (None, False),
        ("body is not JSON", True),
        (None, True),
    ]
    assert held == {"a", "c"}
    # The next Arrow batch of a held queue is held too, without a call.
    more = consume_in_order(orderly_rows([("a", 4, "ok", None)]), listener, 1, CallPool(1, 1, 5), {}, 16, held)
    assert more == [(None, True)] and len(calls) == 5


def test_orderly_dead_letters_a_message_out_of_attempts_and_goes_on():
    def listener(messages, context):
        ok = all(m["tags"] != "bad" for m in messages)
        return ConsumeOrderlyStatus.SUCCESS if ok else "SUSPEND_CURRENT_QUEUE_A_MOMENT"

    rows = orderly_rows([("a", 5, "bad", None), ("a", 6, "ok", None), ("a", 7, "bad", None), ("a", 8, "ok", None)])
    # Suspended at 5 after 2 failed attempts; max 2: the third failure sends it to the DLQ, 6 lands, 7 suspends anew.
    out = consume_in_order(rows, listener, 2, CallPool(1, 1, 5), {"a": (5, 2)}, 2, set())
    assert (
        out
        == [("listener answered SUSPEND_CURRENT_QUEUE_A_MOMENT", False)] * 2
        + [("listener answered SUSPEND_CURRENT_QUEUE_A_MOMENT", True)] * 2
    )
    # (batches of 2: [5, 6] failed together, so both go to the DLQ as Java's checkReconsumeTimes sends the batch.)
    out = consume_in_order(rows, listener, 1, CallPool(1, 1, 5), {"a": (5, 1)}, 2, set())
    assert [h for _, h in out] == [True, True, True, True]


def orderly_task(queues: int, threads: int) -> list[str | None]:
    """One Spark task's rows of ``queues`` queues (two offsets each) through ``listen_orderly``'s function."""
    import pyarrow as pa

    from rocketlake.spark.consume import DUPLICATE, ERROR, _in_order

    rows = [
        {
            "topic": "orders",
            "broker_name": "broker-a",
            "queue_id": q,
            "queue_offset": o,
            "origin_topic": "orders",
            "tags": "t",
            "reconsume_times": 0,
            "matched": True,
            DUPLICATE: False,
            ERROR: None,
        }
        for q in range(queues)
        for o in range(2)
    ]
    batch = pa.RecordBatch.from_pylist(
        rows,
        schema=pa.schema(
            [
                ("topic", pa.string()),
                ("broker_name", pa.string()),
                ("queue_id", pa.int32()),
                ("queue_offset", pa.int64()),
                ("origin_topic", pa.string()),
                ("tags", pa.string()),
                ("reconsume_times", pa.int32()),
                ("matched", pa.bool_()),
                (DUPLICATE, pa.bool_()),
                (ERROR, pa.string()),
            ]
        ),
    )
    apply = _in_order("tests.unit.listeners:orderly_meeting", 2, 30.0, {}, 16, threads)
    return [e for out in apply(iter([batch])) for e in out.column(ERROR).to_pylist()]


@pytest.mark.parametrize("threads", [3, 4])
def test_orderly_queues_of_one_task_are_consumed_side_by_side_up_to_consume_thread_max(threads):
    import threading

    from tests.unit import listeners

    listeners.MEETING[:] = [threading.Barrier(3, timeout=20)]  # three queues' calls must meet
    assert orderly_task(queues=3, threads=threads) == [None] * 6


def test_orderly_with_one_consume_thread_calls_one_queue_at_a_time():
    import threading

    from tests.unit import listeners

    listeners.MEETING[:] = [threading.Barrier(2, timeout=0.5)]  # never met: the second queue waits for the first
    errors = orderly_task(queues=2, threads=1)
    assert all(e is not None and "BrokenBarrierError" in e for e in errors[::2]), errors


def test_a_listener_whose_module_does_not_import_is_named_with_where_and_why(tmp_path, monkeypatch):
    (tmp_path / "broken_listener.py").write_text("def on_message(messages, context)\n    return 'ok'\n")
    (tmp_path / "raising_listener.py").write_text("import os\nSECRET = os.environ['NOT_SET_ANYWHERE_42']\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ListenerError, match=r"syntax error at .*broken_listener.py:1 \(expected ':'\)"):
        load_listener("broken_listener:on_message")
    with pytest.raises(ListenerError, match="importing raising_listener raised KeyError: 'NOT_SET_ANYWHERE_42'"):
        load_listener("raising_listener:on_message")
