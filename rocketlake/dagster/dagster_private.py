"""Every import rocketlake makes from Dagster's private ``dagster._`` modules, each with why no public API serves.

Kept in one place so that a Dagster upgrade that moves one of them breaks here, visibly, and nowhere else
(``tests/unit/test_dagster_private.py`` fails when another module imports ``dagster._``).
"""

# The executor of rocketlake's own jobs (``run_guard``) is Dagster's in-process executor with one step added
# before any step claims its pool slot: reclaiming the slots of dead runs. Dagster has no public hook that runs
# in the run's process before the slot claims (hooks run after a step; run monitoring needs a run launcher
# that can check a worker, and none sees a `dagster` CLI run die), so the executor is extended:
# - the in-process executor class, to subclass its ``execute``;
from dagster._core.executor.in_process import InProcessExecutor

# - its config schema and constructor, so the executor takes the same run config as Dagster's ``in_process``;
from dagster._core.definitions.executor_definition import IN_PROC_CONFIG, _core_in_process_executor_creation

# - the engine event an executor yields to write a line in the run's log (``context.log`` exists for steps only).
from dagster._core.events import EngineEventData

# - and, to replace the loop's concurrency context (``pool_wait``: Dagster 1.13's never sleeps while a step waits
#   for its pool slot), the pieces the in-process executor's ``execute`` is made of: the iterable that runs a loop
#   in a run's execution context,
from dagster._core.execution.api import ExecuteRunWithPlanIterable

# - the manager of that execution context,
from dagster._core.execution.context_creation_job import PlanExecutionContextManager

# - the plan's execution loop itself,
from dagster._core.execution.plan.execute_plan import inner_plan_execution_iterator

# - and the context that claims pool slots (subclassed).
from dagster._core.execution.plan.instance_concurrency_context import InstanceConcurrencyContext

# ``rocketlake backfill`` runs a job of the code location in this process with the job's executor:
# ``execute_job`` needs a reconstructable job, and the public ``reconstructable`` needs a module-level
# function, which a job made per ingestion from the configuration is not.
from dagster._core.definitions.reconstruct import ReconstructableRepository

# Window boundaries (``partitions``): the public partitions definition walks one window per call
# (``get_next_partition_window``, milliseconds each: minutes for a year of minute windows); this streams them.
from dagster._utils.schedules import cron_string_iterator

# ... and keys them as Dagster does, the second of two equal local times (daylight saving time ends) with its
# UTC offset: the partitions definition keys a window only through lookups that walk from its start.
from dagster._time import dst_safe_strftime

# ... and reads a key back to its window's start the same way (``time_window_for_partition_key`` also computes the
# end, walking the cron: too slow for every landed window of a table, which the freshness check compares).
from dagster._time import dst_safe_strptime

# The granularity an instance's pools are enforced at (``pool_limit``): the enum the instance's pool config holds
# (``event_log_storage.get_pool_config()``) is not exported by ``dagster``.
from dagster._core.instance.config import PoolGranularity

# A run launcher (``rocketlake.dagster.warm_runs``): Dagster exports no base class for one; its own launchers outside the core
# (dagster-docker, dagster-k8s) build on these:
# - the launcher's base class, its launch context and the health a run monitor asks for;
from dagster._core.launcher import CheckRunHealthResult, LaunchRunContext, RunLauncher, WorkerStatus

# - the ``dagster api execute_run`` arguments of a run, which those launchers hand their containers and the warm
#   launcher's forks run;
from dagster._grpc.types import ExecuteRunArgs

# - what makes a class configurable from ``dagster.yaml`` (``run_launcher: {module, class, config}``).
from dagster._serdes import ConfigurableClass, ConfigurableClassData

# - how a code location's initial load keeps what it read outside (a table per topic's topics) for the runs' processes
#   to rebuild the same definitions: public as ``dagster.DefinitionsLoadContext`` from 1.13 on, not in 1.12.
from dagster._core.definitions.definitions_load_context import DefinitionsLoadContext, DefinitionsLoadType

# - asking a code server to load its definitions again (what the UI's Reload asks): the gRPC client the webserver
#   and the daemon use; no public API reloads a code location.
from dagster._grpc.client import DagsterGrpcClient

__all__ = [
    "CheckRunHealthResult",
    "ConfigurableClass",
    "ConfigurableClassData",
    "ExecuteRunArgs",
    "LaunchRunContext",
    "RunLauncher",
    "WorkerStatus",
    "PoolGranularity",
    "cron_string_iterator",
    "dst_safe_strftime",
    "dst_safe_strptime",
    "InProcessExecutor",
    "IN_PROC_CONFIG",
    "_core_in_process_executor_creation",
    "EngineEventData",
    "ExecuteRunWithPlanIterable",
    "PlanExecutionContextManager",
    "inner_plan_execution_iterator",
    "InstanceConcurrencyContext",
    "ReconstructableRepository",
    "DefinitionsLoadContext",
    "DefinitionsLoadType",
    "DagsterGrpcClient",
]
