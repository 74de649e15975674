"""A run waiting for its consumer group's pool slot sleeps between its checks of the slot.

Runs of one group queue for the group's pool (limit 1, ``granularity: op``): a backfill beside the schedule's run,
the next window's run behind a slow one. Dagster's in-process executor (1.13) re-checks a blocked slot on a backoff
of 1 to 15 s, but between checks it does not sleep: its interval to the next check is ``min([0, ...])``, never above
0, so a waiting run spun a core for as long as it waited (a run of the deployed-stack test that waited about 35 s
behind a backfill used 35.9 CPU seconds; the runs that did not wait, 3 to 5). rocketlake's executor waits the
interval out.
"""

from __future__ import annotations

import threading
import time

import pytest
from dagster import DagsterInstance, execute_job, job, op, reconstructable

from rocketlake.dagster.run_guard import rocketlake_executor
from tests.dagster_instance import pooled_instance
from tests.integration.ingestion_support import until

pytestmark = pytest.mark.unit
POOL = "rocketmq_group_waiting"
HELD_S = 3.0  # how long another run holds the slot while this one waits: three of Dagster's claim checks


@op(pool=POOL)
def pooled_step() -> int:
    return 1


@job(executor_def=rocketlake_executor)
def pooled_job():
    pooled_step()


def test_a_run_waiting_for_its_pool_slot_sleeps_until_the_slot_is_free():
    with pooled_instance() as instance:
        storage = instance.event_log_storage
        storage.set_concurrency_slots(POOL, 1)
        assert storage.claim_concurrency_slot(POOL, "another-run", "its-step").is_claimed  # another run of the group

        results = []
        waiting = threading.Thread(target=lambda: results.append(run(instance)))
        waiting.start()
        clock = time.pthread_getcpuclockid(waiting.ident)
        until(lambda: storage.get_concurrency_info(POOL).pending_step_count == 1, 60, "the run to wait for the slot")
        cpu_at_start = time.clock_gettime(clock)
        time.sleep(HELD_S)  # the time measured, not a synchronisation: the other run holds the slot this long
        used = time.clock_gettime(clock) - cpu_at_start
        storage.free_concurrency_slot_for_step("another-run", "its-step")
        waiting.join(60)

        assert results and results[0].success, "the run went on once the slot was free"
        assert used < 0.2 * HELD_S, f"the run used {used:.2f} CPU seconds of {HELD_S:.0f} s waiting for its slot"


def run(instance: DagsterInstance):
    with execute_job(reconstructable(pooled_job), instance=instance) as result:
        return result
