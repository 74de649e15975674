"""A code server's ticks share one Dagster instance per instance reference (``dagster.tick_instance``)."""

from __future__ import annotations

from dagster import SensorEvaluationContext, build_sensor_context, instance_for_test

from rocketlake.dagster.tick_instance import tick_instance


def tick(ref) -> SensorEvaluationContext:
    """A sensor's tick as a code server evaluates it: its context holds the instance's reference, not an instance."""
    return SensorEvaluationContext(
        instance_ref=ref, last_tick_completion_time=None, last_run_key=None, cursor=None, repository_name=None
    )


def test_ticks_on_one_instance_share_the_instance_built_from_its_reference():
    with instance_for_test() as instance, instance_for_test() as other:
        first, second = tick(instance.get_ref()), tick(instance.get_ref())
        shared = tick_instance(first)
        assert tick_instance(second) is shared  # built once, not per tick as context.instance is
        assert first.instance is not shared  # Dagster's own builds its instance anew
        assert shared.get_ref() == instance.get_ref()  # the same storage
        assert tick_instance(tick(other.get_ref())) is not shared  # another instance's ticks get theirs


def test_a_context_built_with_an_instance_keeps_it():
    with instance_for_test() as instance:
        assert tick_instance(build_sensor_context(instance=instance)) is instance
