"""Java artifacts from Maven Central, resolved once with Maven and cached.

Spark gets Delta's jars as files (``spark.jars``) and the local RocketMQ runtime gets a classpath
directory; both come from here. Resolution writes a throw-away POM and runs Maven's
``dependency:copy-dependencies``, so the transitive closure is exactly what Maven would give a
Java project. A set that resolved once is reused without Maven or network: the ``.complete``
marker is written only after every jar landed, so an interrupted download is redone, never used.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# Pinned so every machine resolves the same jars the tests were run with.
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.6.1"


class ToolMissing(RuntimeError):
    """A program rocketlake needs (java, javac, mvn) is not on PATH."""


class JarResolutionFailed(RuntimeError):
    """Maven could not resolve a jar set; the message carries the tail of Maven's output."""


@dataclass(frozen=True)
class Artifact:
    group: str
    artifact: str
    version: str

    @property
    def coordinates(self) -> str:
        return f"{self.group}:{self.artifact}:{self.version}"


@dataclass(frozen=True)
class JarSet:
    """A named set of root artifacts whose runtime closure is cached as one directory."""

    name: str
    artifacts: tuple[Artifact, ...]

    def pom(self) -> str:
        deps = "\n".join(
            f"    <dependency><groupId>{a.group}</groupId><artifactId>{a.artifact}</artifactId>"
            f"<version>{a.version}</version></dependency>"
            for a in self.artifacts
        )
        return (
            '<project xmlns="http://maven.apache.org/POM/4.0.0">\n'
            "  <modelVersion>4.0.0</modelVersion>\n"
            f"  <groupId>rocketlake.jars</groupId><artifactId>{self.name}</artifactId>"
            "<version>1</version><packaging>pom</packaging>\n"
            f"  <dependencies>\n{deps}\n  </dependencies>\n</project>\n"
        )


ROCKETMQ_VERSION = "5.3.3"
# The newest 4.9 release whose name server and broker are on Maven Central (4.9.8 published only
# the client and tools), for the suite that proves the client against 4.x brokers.
ROCKETMQ_4_VERSION = "4.9.7"


def rocketmq_jar_set(version: str = ROCKETMQ_VERSION) -> JarSet:
    """Name server, broker, admin tools and the Java client of one RocketMQ release."""
    g = "org.apache.rocketmq"
    return JarSet(
        f"rocketmq-{version}",
        tuple(
            Artifact(g, a, version)
            for a in ("rocketmq-namesrv", "rocketmq-broker", "rocketmq-tools", "rocketmq-client")
        ),
    )


def delta_jar_set() -> JarSet:
    """delta-spark's jars for the installed pyspark and delta-spark (Scala 2.13, Spark 4.x).

    The artifact name carries Spark's major.minor since Delta 4.x (``delta-spark_4.2_2.13``);
    Spark's own jars are ``provided`` in Delta's POM, so the runtime closure holds only Delta's.
    """
    from importlib.metadata import version

    import pyspark

    spark_major_minor = ".".join(pyspark.__version__.split(".")[:2])
    delta_version = version("delta-spark")
    return JarSet(
        f"delta-{delta_version}-spark{spark_major_minor}",
        (Artifact("io.delta", f"delta-spark_{spark_major_minor}_2.13", delta_version),),
    )


def spark_avro_jar_set() -> JarSet:
    """spark-avro (``from_avro``, for Avro bodies) of the installed pyspark's release: Spark ships Avro itself, not
    its Spark functions."""
    import pyspark

    return JarSet(
        f"spark-avro-{pyspark.__version__}", (Artifact("org.apache.spark", "spark-avro_2.13", pyspark.__version__),)
    )


def beside_spark(resolved: list[Path]) -> list[Path]:
    """The jars of ``resolved`` that pyspark does not ship (by artifact name, whatever the version): Spark's own
    Scala library and tags stay the ones it runs with."""
    import re

    import pyspark

    def artifact(name: str) -> str:
        return re.sub(r"-\d[\w.\-]*\.jar$", "", name)

    shipped = {artifact(p.name) for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return [p for p in resolved if artifact(p.name) not in shipped]


def spark_hadoop_version() -> str:
    """The Hadoop release the installed pyspark ships (its ``hadoop-client-api-<version>.jar``)."""
    import pyspark

    found = sorted((Path(pyspark.__file__).parent / "jars").glob("hadoop-client-api-*.jar"))
    if not found:
        raise JarResolutionFailed(
            f"pyspark {pyspark.__version__} ships no hadoop-client-api jar: cannot tell which hadoop-aws matches it"
        )
    return found[-1].name[len("hadoop-client-api-") : -len(".jar")]


def s3a_jar_set() -> JarSet:
    """Hadoop's S3A connector for the installed pyspark's Hadoop: ``hadoop-aws`` of the same release, with the AWS
    SDK bundle its POM names (a 650 MB jar: the one SDK artifact Hadoop supports; downloaded once per machine)."""
    hadoop = spark_hadoop_version()
    return JarSet(f"s3a-hadoop{hadoop}", (Artifact("org.apache.hadoop", "hadoop-aws", hadoop),))


def cache_dir() -> Path:
    """``$ROCKETLAKE_CACHE_DIR``, else ``~/.cache/rocketlake``: shared by CLI, tests and CI runs."""
    configured = os.environ.get("ROCKETLAKE_CACHE_DIR")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "rocketlake"


def built_once(home: Path, done: Path, build: Callable[[], None]) -> None:
    """Run ``build`` (which makes ``done``) unless ``done`` exists: once per machine, into the cache folder ``home``.
    Tests, the CLI and Spark may ask at once: one process builds under a lock in ``home``, the others wait for it and
    find ``done``. ``build`` makes ``done`` last, whole or not at all, so a failed or killed build is made again."""
    if done.exists():
        return
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            build()


def require_tool(name: str, purpose: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise ToolMissing(
            f"'{name}' is not on PATH; rocketlake needs it to {purpose}. Install it (e.g. apt-get install "
            f"{'maven' if name == 'mvn' else 'openjdk-17-jdk-headless'}) and try again."
        )
    return path


def resolve(jar_set: JarSet) -> list[Path]:
    """Return the jar files of ``jar_set``, running Maven only the first time on this machine."""
    home = cache_dir() / "jars" / jar_set.name
    lib = home / "lib"
    marker = home / ".complete"

    def download() -> None:
        mvn = require_tool("mvn", f"download {jar_set.name} from Maven Central")
        (home / "pom.xml").write_text(jar_set.pom())
        if lib.exists():
            shutil.rmtree(lib)
        # -U: a "not found" Maven cached from an earlier outage must not stick.
        cmd = [
            mvn,
            "-B",
            "-q",
            "-U",
            "-f",
            str(home / "pom.xml"),
            f"{DEPENDENCY_PLUGIN}:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={lib}",
        ]
        # The first resolution downloads tens of megabytes: say so, or a person watches a silent minute.
        print(
            f"resolving {jar_set.name} from Maven Central into {lib} (once per machine) ...",
            file=sys.stderr,
            flush=True,
        )
        started = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
            raise JarResolutionFailed(
                f"Maven could not resolve {', '.join(a.coordinates for a in jar_set.artifacts)} "
                f"(exit {proc.returncode}). Is Maven Central reachable? Last lines of Maven's output:\n{tail}"
            )
        jars = sorted(p.name for p in lib.glob("*.jar"))
        if not jars:
            raise JarResolutionFailed(f"Maven resolved {jar_set.name} but wrote no jar into {lib}")
        marker.write_text("\n".join(jars) + "\n")
        print(
            f"resolved {len(jars)} jar(s) of {jar_set.name} in {time.monotonic() - started:.0f}s",
            file=sys.stderr,
            flush=True,
        )

    built_once(home, marker, download)
    return _listed_jars(lib, marker)


def _listed_jars(lib: Path, marker: Path) -> list[Path]:
    jars = [lib / name for name in marker.read_text().split()]
    missing = [j.name for j in jars if not j.exists()]
    if missing:
        raise JarResolutionFailed(
            f"the jar cache {lib} lost {', '.join(missing[:3])}; delete {marker.parent} and run again to re-resolve"
        )
    return jars


def classpath(jar_set: JarSet) -> str:
    """A java ``-cp`` value for the set: its lib directory wildcard, after resolving it."""
    jars = resolve(jar_set)
    return str(jars[0].parent / "*")
