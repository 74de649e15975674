"""`rocketlake local up --registry`: a schema registry that speaks Confluent's REST API, on 127.0.0.1.

The registry is Apicurio Registry (Apache-2.0), whose ``/apis/ccompat/v7`` answers as Confluent's Schema Registry
does (subjects, versions, ``/schemas/ids/<id>``) for Avro, Protobuf and JSON Schema. Its releases publish the
application's classes to Maven Central but no runnable jar, so the first ``up`` on a machine builds one with Maven
(the Quarkus build of ``registry_build/pom.xml``, cached in ``~/.cache/rocketlake/registry``: about a minute and
230 MB of downloads the first time, seconds after). It keeps its schemas in memory (H2, the release's default):
what a test or a demo registers lasts until ``down``. Like the other local processes it is started in a session of
its own, recorded and stopped by pid.

A configuration's ``body.registry_url`` names :attr:`LocalSchemaRegistry.url` (the ccompat base, as Confluent's
serializers take a registry's base URL).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rocketlake.jars import built_once, cache_dir, require_tool
from rocketlake.local.process import LocalClusterError, ManagedProcess, port_in_use, stop_all, wait_for

LOOPBACK = "127.0.0.1"
APICURIO_VERSION = "2.4.2.Final"
#: The Confluent-compatible API's base path.
CCOMPAT = "/apis/ccompat/v7"
BUILD_DIR = Path(__file__).parent / "registry_build"
RUNNER = "apicurio-registry-runner-1.0-runner.jar"
HEAP = "-Xmx256m"
START_TIMEOUT_S = 90.0
BUILD_TIMEOUT_S = 900.0


def registry_runner(progress: Callable[[str], None] | None = None) -> Path:
    """The registry's runnable jar (its libraries beside it in ``lib/``), built the first time on this machine."""
    home = cache_dir() / "registry" / f"apicurio-{APICURIO_VERSION}"
    runner = home / "target" / RUNNER
    marker = home / ".complete"

    def build() -> None:
        mvn = require_tool("mvn", "build the local schema registry")
        (progress or (lambda line: None))(
            f"  building Apicurio Registry {APICURIO_VERSION} with Maven (once per machine, about a minute)"
        )
        for name in ("pom.xml", "settings.xml"):
            shutil.copyfile(BUILD_DIR / name, home / name)
        # settings.xml sends every repository the release's POMs name (Confluent's, JitPack, Eclipse) to Central.
        result = subprocess.run(
            [mvn, "-B", "-q", "-s", str(home / "settings.xml"), "-f", str(home / "pom.xml"), "clean", "package"],
            cwd=home,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
        )
        if result.returncode != 0 or not runner.exists():
            tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
            raise LocalClusterError(
                f"building Apicurio Registry {APICURIO_VERSION} failed (exit {result.returncode}). Is Maven Central "
                f"reachable? Last lines of Maven's output:\n{tail}"
            )
        marker.write_text(f"{APICURIO_VERSION}\n")

    built_once(home, marker, build)
    return runner


@dataclass(frozen=True)
class LocalSchemaRegistry:
    state_dir: Path  # <state>/registry: pid file, log
    port: int = 8081

    @property
    def process(self) -> ManagedProcess:
        return ManagedProcess("registry", self.state_dir)

    @property
    def url(self) -> str:
        """The Confluent-compatible API's base URL: what ``body.registry_url`` names."""
        return f"http://{LOOPBACK}:{self.port}{CCOMPAT}"

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{LOOPBACK}:{self.port}/health/ready", timeout=2) as answer:
                return answer.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def up(self, timeout: float = START_TIMEOUT_S, progress: Callable[[str], None] | None = None) -> None:
        report = progress or (lambda line: None)
        started = time.monotonic()
        runner = registry_runner(report)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if self.process.pid() is None:
            if port_in_use(self.port):
                raise LocalClusterError(
                    f"cannot start the schema registry: port {self.port} on {LOOPBACK} is in use by another process; "
                    "stop it, or choose another port (--registry-port)"
                )
            java = require_tool("java", "run the local schema registry")
            self.process.start(
                [
                    java,
                    HEAP,
                    f"-Dquarkus.http.host={LOOPBACK}",
                    f"-Dquarkus.http.port={self.port}",
                    "-jar",
                    str(runner),
                ],
                dict(os.environ),
                cwd=self.state_dir,
            )
        wait_for(
            self.ready,
            time.monotonic() + timeout,
            [self.process],
            f"the schema registry on {LOOPBACK}:{self.port}",
            interval=0.2,
        )
        (self.state_dir / "url").write_text(self.url + "\n")  # for `status` and `down`, asked without --registry-port
        report(f"  schema registry (Apicurio {APICURIO_VERSION}) on {self.url} ({time.monotonic() - started:.0f}s)")

    def register(self, subject: str, schema: str, schema_type: str = "AVRO") -> int:
        """Register ``schema`` (``AVRO``, ``PROTOBUF`` or ``JSON``) under ``subject`` as a serializer that
        auto-registers does; the id its frames then carry (the same schema, the same id)."""
        body = {"schema": schema} | ({} if schema_type == "AVRO" else {"schemaType": schema_type})
        request = urllib.request.Request(
            f"{self.url}/subjects/{subject}/versions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            return int(json.load(answer)["id"])

    def status(self) -> str:
        pid = self.process.pid()
        recorded = self.state_dir / "url"
        url = recorded.read_text().strip() if pid and recorded.exists() else self.url
        return f"schema registry {url}: {'up' if pid else 'down'} (pid {pid or '-'})"

    def down(self) -> list[str]:
        return stop_all([self.process])
