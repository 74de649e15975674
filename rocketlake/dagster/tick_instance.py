"""The Dagster instance a sensor's or schedule's tick reads: one per code server and instance, kept between ticks.

Dagster builds each tick's ``context.instance`` anew from the instance's reference (``DagsterInstance.from_ref``): its
storages' classes, and on SQLite (the local runtime's instance) an event log whose every database, at its first
connection, checks its schema against Alembic's migration scripts, parsed from source each time. rocketlake's sensors
tick every 15 to 60 s: in ``make ui``'s steady state, building those instances was about a fifth of the code server's
CPU (``py-spy`` on it, benchmarks/README.md). A code server serves one instance, so its ticks share one built from the
same reference, as the daemon keeps one for its life. A context built with an instance of its own (a test's
``build_sensor_context(instance=...)``) keeps it.
"""

from __future__ import annotations

import threading

from dagster import DagsterInstance, ScheduleEvaluationContext, SensorEvaluationContext, serialize_value

_instances: dict[str, DagsterInstance] = {}
_lock = threading.Lock()


def tick_instance(context: SensorEvaluationContext | ScheduleEvaluationContext) -> DagsterInstance:
    """The instance ``context``'s tick reads: built once per reference in this process, then shared."""
    ref = context.instance_ref
    if ref is None:
        return context.instance
    key = serialize_value(ref)
    with _lock:  # a code server evaluates ticks on several threads
        instance = _instances.get(key)
        if instance is None:
            instance = _instances[key] = DagsterInstance.from_ref(ref)
    return instance
