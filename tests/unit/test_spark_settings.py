"""Settings ``spark_session`` derives before it starts the JVM (pure: no Spark is started here)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rocketlake.spark.session import MALLOC_ARENA_MAX, cap_malloc_arenas
from tests.conftest import free_ports


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


def test_the_spark_connect_server_is_configured_as_a_runs_own_session(monkeypatch):
    import sys
    from pathlib import Path

    from rocketlake import jars
    from rocketlake.spark.session import CONNECT_SERVER_PROGRAM, DELTA_CONF, connect_endpoint, connect_server_command

    assert connect_endpoint("sc://10.0.0.5:15010/;token=x") == ("10.0.0.5", 15010)
    assert connect_endpoint("sc://spark-host") == ("spark-host", 15002)  # Spark Connect's default port
    resolved = {
        "delta": [Path("/jars/delta-spark.jar"), Path("/jars/delta-storage.jar")],
        "spark-avro": [Path("/jars/spark-avro_2.13.jar"), Path("/jars/scala-library-2.13.0.jar")],
    }
    monkeypatch.setattr(
        jars, "resolve", lambda jar_set: resolved["spark-avro" if jar_set.name.startswith("spark-avro") else "delta"]
    )
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    monkeypatch.setenv("SPARK_REMOTE", "sc://127.0.0.1:15010")  # a shell's, for its PySpark clients
    monkeypatch.setenv("SPARK_CONNECT_MODE_ENABLED", "1")  # PySpark's, where a Connect session was opened
    cmd, env = connect_server_command(
        "sc://127.0.0.1:15010", "local[2]", {"spark.jars": "/mine.jar", "spark.sql.shuffle.partitions": "4"}
    )
    assert not {"SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED"} & set(env)  # the server is a driver, not a client
    # rocketlake's driver program (Spark Connect's plugin, sessions sharing class loaders and Python workers).
    assert cmd[0].endswith("/bin/spark-submit") and cmd[-1] == str(CONNECT_SERVER_PROGRAM)
    assert CONNECT_SERVER_PROGRAM.is_file() and "--class" not in cmd and cmd[cmd.index("--master") + 1] == "local[2]"
    # Delta's jars and spark-avro's own (not the Scala library pyspark ships), then the user's.
    assert (
        cmd[cmd.index("--jars") + 1]
        == "/jars/delta-spark.jar,/jars/delta-storage.jar,/jars/spark-avro_2.13.jar,/mine.jar"
    )
    confs = server_confs(cmd)
    assert {**confs, **DELTA_CONF} == confs  # Delta's extension and catalog
    assert (
        confs["spark.connect.grpc.binding.address"] == "127.0.0.1"
        and confs["spark.connect.grpc.binding.port"] == "15010"
    )
    assert confs["spark.sql.shuffle.partitions"] == "4" and confs["spark.driver.host"] == "127.0.0.1"  # local default
    assert confs["spark.sql.artifact.isolation.enabled"] == "false"
    assert env["PYSPARK_PYTHON"] == env["PYSPARK_DRIVER_PYTHON"] == sys.executable
    assert env["MALLOC_ARENA_MAX"] == MALLOC_ARENA_MAX
    assert "--py-files" not in cmd


def test_the_spark_connect_server_of_an_s3_lake_gets_its_bucket_settings_and_keys_out_of_its_command_line(monkeypatch):
    """The server of an ``s3a://`` lake has S3A's jars, the bucket's settings and, in its environment only, the keys
    from the variables the configuration names: nothing in its command line (which ``ps`` shows) holds them."""
    from pathlib import Path

    from rocketlake import jars
    from rocketlake.delta.storage import StorageKeysMissing, server_settings
    from rocketlake.engine.config import LakeConfig
    from rocketlake.spark.session import connect_server_command

    secret = "s3cr3t-of-the-lake"
    resolved = {
        "delta": [Path("/jars/delta-spark.jar")],
        "spark": [Path("/jars/spark-avro_2.13.jar")],
        "s3a": [Path("/jars/hadoop-aws.jar"), Path("/jars/bundle.jar")],
    }
    monkeypatch.setattr(jars, "resolve", lambda jar_set: resolved[jar_set.name.split("-")[0]])
    lake = LakeConfig(
        root="s3a://lake/tables",
        s3={
            "endpoint": "http://127.0.0.1:7070",
            "path_style_access": True,
            "access_key_env": "LAKE_KEY",
            "secret_key_env": "LAKE_SECRET",
        },
    )
    monkeypatch.setenv("LAKE_KEY", "rocketlake")
    monkeypatch.setenv("LAKE_SECRET", secret)
    monkeypatch.setenv("AWS_SESSION_TOKEN", "not the lake's")
    cmd, env = connect_server_command(
        "sc://127.0.0.1:15010", "local[2]", {"spark.hadoop.fs.s3a.bucket.lake.endpoint": "http://elsewhere"}, lake=lake
    )
    assert (
        cmd[cmd.index("--jars") + 1]
        == "/jars/delta-spark.jar,/jars/spark-avro_2.13.jar,/jars/hadoop-aws.jar,/jars/bundle.jar"
    )
    confs = server_confs(cmd)
    assert {**confs, **server_settings(lake)} == confs  # the lake's settings win over spark.conf's
    assert env["AWS_ACCESS_KEY_ID"] == "rocketlake" and env["AWS_SECRET_ACCESS_KEY"] == secret
    assert "AWS_SESSION_TOKEN" not in env
    assert not any(secret in part for part in cmd)
    # Keys from another environment than the process's (`rocketlake local up --s3`: the local S3 server's).
    monkeypatch.delenv("LAKE_SECRET")
    with pytest.raises(StorageKeysMissing, match=r"\$LAKE_SECRET is not set"):
        connect_server_command("sc://127.0.0.1:15010", "local[2]", {}, lake=lake)
    _, env = connect_server_command(
        "sc://127.0.0.1:15010",
        "local[2]",
        {},
        lake=lake,
        environ={"LAKE_KEY": "rocketlake", "LAKE_SECRET": "from the local server"},
    )
    assert env["AWS_SECRET_ACCESS_KEY"] == "from the local server"
    # A local lake: no S3A jars, no S3 setting, no key.
    cmd, env = connect_server_command("sc://127.0.0.1:15010", "local[2]", {}, lake=LakeConfig(root="/tmp/lake"))
    assert "hadoop-aws" not in cmd[cmd.index("--jars") + 1] and not any("fs.s3a" in part for part in cmd)
    assert "AWS_ACCESS_KEY_ID" not in env


def test_the_spark_connect_server_keeps_its_compiled_code_unless_the_configuration_says_otherwise(monkeypatch):
    from rocketlake import jars
    from rocketlake.spark.session import connect_server_command

    monkeypatch.setattr(jars, "resolve", lambda jar_set: [])

    def confs(conf):
        return server_confs(connect_server_command("sc://127.0.0.1:15010", "local[2]", conf)[0])

    kept = confs({"spark.driver.extraJavaOptions": "-Dmine=1"})
    assert kept["spark.driver.extraJavaOptions"] == "-XX:ReservedCodeCacheSize=512m -Dmine=1"
    assert kept["spark.sql.codegen.cache.maxEntries"] == "1000"
    own = confs(
        {"spark.driver.extraJavaOptions": "-XX:ReservedCodeCacheSize=1g", "spark.sql.codegen.cache.maxEntries": "50"}
    )
    assert own["spark.driver.extraJavaOptions"] == "-XX:ReservedCodeCacheSize=1g"
    assert own["spark.sql.codegen.cache.maxEntries"] == "50"


def server_confs(cmd: list[str]) -> dict[str, str]:
    """The ``--conf key=value`` settings of a server's command."""
    return dict(c.split("=", 1) for i, c in enumerate(cmd) if i and cmd[i - 1] == "--conf")


def test_the_python_processes_spark_starts_get_the_worker_site_first_once(monkeypatch):
    from rocketlake.spark.session import WORKER_SITE, session_settings

    environ = {"PYTHONPATH": "/listeners"}
    session_settings("local[2]", {}, environ)
    session_settings("local[2]", {}, environ)  # a second session of the process adds nothing
    assert environ["PYTHONPATH"].split(os.pathsep) == [WORKER_SITE, "/listeners"]
    assert (Path(WORKER_SITE) / "sitecustomize.py").is_file()


def test_the_worker_site_drops_only_the_zips_of_an_installed_pyspark_and_runs_the_site_it_hides(tmp_path):
    from rocketlake.spark.session import WORKER_SITE

    def installed(root: Path, package: bool) -> tuple[str, str, Path]:
        """A PySpark at ``root``/site: pip's (the package, with its zips inside) or a distribution's (no package)."""
        home = root / "site" / "pyspark"
        (home / "python" / "lib").mkdir(parents=True)
        (home / "python" / "lib" / "pyspark.zip").write_bytes(b"")
        (home / "python" / "lib" / "py4j-0.10.9.9-src.zip").write_bytes(b"")
        if package:
            (home / "__init__.py").write_text("")
            (root / "site" / "py4j").mkdir()
            (root / "site" / "py4j" / "__init__.py").write_text("")
        lib = home / "python" / "lib"
        return str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip"), root / "site"

    hidden = tmp_path / "theirs"
    hidden.mkdir()
    (hidden / "sitecustomize.py").write_text("import sys\nsys.theirs_ran = True\n")
    for package in (True, False):
        zip_, py4j, site = installed(tmp_path / str(package), package)
        path = os.pathsep.join([zip_, py4j, WORKER_SITE, str(site), str(hidden)])
        out = subprocess.run(
            [sys.executable, "-c", "import sys, json; print(json.dumps([sys.path, getattr(sys, 'theirs_ran', 0)]))"],
            env={**os.environ, "PYTHONPATH": path},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        sys_path, theirs_ran = json.loads(out)
        assert (zip_ in sys_path, py4j in sys_path) == (not package, not package), sys_path
        assert str(site) in sys_path and theirs_ran


REFUSAL_PROBE = """
from rocketlake.spark.session import SparkSessionConflict, spark_session
try:
    spark_session("local[1]")
except SparkSessionConflict as refused:
    print(refused)
"""


def test_a_runs_own_spark_is_refused_where_the_environment_makes_pyspark_a_connect_client():
    """PySpark's builder opens a Spark Connect client, whatever master it is given, where SPARK_REMOTE is set (a
    shell's, for its PySpark clients) or a Connect session was opened (SPARK_CONNECT_MODE_ENABLED): a run whose
    configuration starts Spark of its own would silently land through that URL's server instead.

    Asked in a fresh interpreter: the refusal is for a process with no session yet, and another unit test in this
    worker may have left one active (then the run rightly uses it)."""
    (port,) = free_ports(1)  # nothing listens there: a session opened on it would fail otherwise, later
    from rocketlake.spark.session import CONNECT_CLIENT_VARIABLES

    clean = {k: v for k, v in os.environ.items() if k not in CONNECT_CLIENT_VARIABLES}

    def refusal(**extra: str) -> str:
        probe = subprocess.run(
            [sys.executable, "-c", REFUSAL_PROBE], env={**clean, **extra}, capture_output=True, text=True
        )
        assert probe.returncode == 0, probe.stderr  # another error than the refusal, shown
        return probe.stdout

    shown = refusal(SPARK_REMOTE=f"sc://127.0.0.1:{port}/;token=not-for-the-logs")
    assert "SPARK_REMOTE set in" in shown and "spark.remote" in shown, shown
    assert "not-for-the-logs" not in shown  # named, never shown: the URL may carry a token
    assert "SPARK_CONNECT_MODE_ENABLED set in" in refusal(SPARK_CONNECT_MODE_ENABLED="1")
