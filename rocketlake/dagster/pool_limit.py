"""A run refuses to start when its consumer group's pool is not limited to 1 on the instance it runs on.

Every ingestion step sits in the pool ``rocketmq_group_<group>`` (its dead-letter step in ``..._dlq``), and the
exactly-once protocol relies on that pool letting one step of the group run at a time: two runs of one group landing
at once would plan the same ranges. Dagster gives that only when the instance says so (``concurrency: pools:
default_limit: 1`` in ``dagster.yaml``, as ``rocketlake/dagster/dagster.yaml`` and ``deploy/dagster.yaml`` do, or ``dagster
instance concurrency set <pool> 1``); an instance without it (a user's ``dg dev``, a DAGSTER_HOME with no
``concurrency``) leaves pools unlimited, silently. So each ingestion step looks first, before anything is read or
written, and fails at once, for good (a retry meets the same instance), in one sentence naming the pool, the limit
found and the setting to fix.

"Limited to 1" here means what the step's own slot claim enforces (Dagster's ``InstanceConcurrencyContext.claim``):

- the instance's event log keeps pool slots (an ephemeral, in-memory instance keeps none: no step ever waits);
- its pools are enforced per step (``granularity: op``, or none set). With ``granularity: run`` the step claims
  nothing: only the queued run coordinator holds a run back, and a run executed in its own process
  (``rocketlake backfill``, ``dagster job execute``, ``execute_in_process``) never passes through the queue, so two
  runs of one group could still land at once;
- the pool's limit is 1: the one set for the pool, or the instance's ``default_limit`` when none is (a limit taken
  from the default follows the default, as the claim re-reads it). A limit of 0 blocks the pool: a step of it never
  starts, which is no danger to the tables, and not this check's business.
"""

from __future__ import annotations

from dataclasses import dataclass

from dagster import DagsterInstance

from rocketlake.dagster.dagster_private import PoolGranularity

DEFAULT_LIMIT_1 = (
    "`concurrency: pools: default_limit: 1` in $DAGSTER_HOME/dagster.yaml (as rocketlake/dagster/dagster.yaml has it)"
)
NOTHING_DONE = "nothing was read or written."


class PoolNotLimited(Exception):
    """The run's instance lets more than one step of the pool run at once; the message says what to set."""


@dataclass(frozen=True)
class PoolLimit:
    """What the instance enforces for one pool's steps."""

    keeps_slots: bool  # the event log storage keeps pool slots at all
    per_step: bool  # the step claims a slot (granularity op or unset), rather than the run queue alone
    limit: int | None  # None: no limit
    set_for_pool: bool  # the limit was set for this pool (`dagster instance concurrency set`), not the default

    @property
    def one_at_a_time(self) -> bool:
        return self.keeps_slots and self.per_step and self.limit is not None and self.limit <= 1


def pool_limit(instance: DagsterInstance, pool: str) -> PoolLimit:
    """The limit ``instance`` enforces on a step of ``pool``, as the step's slot claim reads it."""
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        return PoolLimit(keeps_slots=False, per_step=False, limit=None, set_for_pool=False)
    config = storage.get_pool_config()  # the storage's, as the claim reads it (a remote storage may differ)
    info = storage.get_concurrency_info(pool)
    if info.using_default_limit:
        return PoolLimit(True, config.pool_granularity != PoolGranularity.RUN, config.default_pool_limit, False)
    return PoolLimit(True, config.pool_granularity != PoolGranularity.RUN, info.limit, True)


def check_pool_limited(instance: DagsterInstance, pool: str, group: str) -> None:
    """Raise ``PoolNotLimited`` unless ``instance`` runs one step of ``pool`` (consumer group ``group``) at a time."""
    found = pool_limit(instance, pool)
    if found.one_at_a_time:
        return
    at_once = f"so two runs of consumer group {group} could land at once"
    if not found.keeps_slots:
        raise PoolNotLimited(
            f"this Dagster instance keeps no pool slots (an ephemeral instance), so pool {pool} has no limit and two "
            f"runs of consumer group {group} could land at once: run on a DAGSTER_HOME whose dagster.yaml sets "
            f"`concurrency: pools: default_limit: 1` (as rocketlake/dagster/dagster.yaml does); {NOTHING_DONE}"
        )
    if not found.per_step:
        raise PoolNotLimited(
            f"pool {pool} is limited only for runs the run queue launches (`concurrency: pools: granularity: run`), "
            f"not for runs executed in their own process (`rocketlake backfill`, `dagster job execute`), {at_once}: "
            f"set `granularity: op` under `concurrency: pools:` in $DAGSTER_HOME/dagster.yaml, with "
            f"`default_limit: 1`; {NOTHING_DONE}"
        )
    if found.limit is None:
        raise PoolNotLimited(
            f"pool {pool} has no limit on this Dagster instance, {at_once}: set {DEFAULT_LIMIT_1} or run "
            f"`dagster instance concurrency set {pool} 1`; {NOTHING_DONE}"
        )
    if found.set_for_pool:
        raise PoolNotLimited(
            f"pool {pool} is limited to {found.limit} (set for the pool) on this Dagster instance, {at_once}: run "
            f"`dagster instance concurrency set {pool} 1`; {NOTHING_DONE}"
        )
    raise PoolNotLimited(
        f"pool {pool} is limited to {found.limit} (`concurrency: pools: default_limit: {found.limit}`) on this Dagster "
        f"instance, {at_once}: set {DEFAULT_LIMIT_1} or run `dagster instance concurrency set {pool} 1`; "
        f"{NOTHING_DONE}"
    )
