"""Settings ``spark_session`` derives before it starts the JVM (pure: no Spark is started here)."""

from rocketlake.resources.spark import MALLOC_ARENA_MAX, cap_malloc_arenas


def test_malloc_arenas_are_capped_for_the_jvm_and_the_executors():
    settings, environ = {}, {}
    cap_malloc_arenas(settings, environ)
    assert environ == {"MALLOC_ARENA_MAX": MALLOC_ARENA_MAX}
    assert settings == {"spark.executorEnv.MALLOC_ARENA_MAX": MALLOC_ARENA_MAX}


def test_a_malloc_arena_cap_the_user_set_is_kept():
    settings, environ = {}, {"MALLOC_ARENA_MAX": "4"}
    cap_malloc_arenas(settings, environ)
    assert environ["MALLOC_ARENA_MAX"] == "4" and settings["spark.executorEnv.MALLOC_ARENA_MAX"] == "4"
    settings, environ = {"spark.executorEnv.MALLOC_ARENA_MAX": "8"}, {}
    cap_malloc_arenas(settings, environ)
    assert settings["spark.executorEnv.MALLOC_ARENA_MAX"] == "8" and environ["MALLOC_ARENA_MAX"] == MALLOC_ARENA_MAX
