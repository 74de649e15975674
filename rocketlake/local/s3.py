"""`rocketlake local up --s3`: an S3-compatible object store on 127.0.0.1 for the lake, no system service.

The server is versitygw (github.com/versity/versitygw, Apache-2.0), built once from its Go module (``go install``,
cached in ``~/.cache/rocketlake/bin``) with the machine's Go, or without one with a pinned Go from the Go module proxy
(``local.go_toolchain``), and run with its POSIX backend: a
bucket is a directory under ``<state>/s3/data``, an object a file, its metadata in extended attributes. It speaks
the S3 API Hadoop's S3A connector and delta-rs use (path-style requests, SigV4, multipart uploads, ListObjectsV2,
bulk deletes, and ``If-None-Match: *`` conditional writes, which delta-rs commits with). Like the other local
processes it is started in a session of its own, recorded and stopped by pid.

The keys: the access key is ``rocketlake``; the secret is ``$ROCKETLAKE_S3_SECRET_KEY``, or one generated at the
first ``up`` and kept in ``<state>/s3/secret`` (mode 0600); it is never printed. ``credentials_env()`` gives the
variables a configuration names (``lake.s3.access_key_env``, ``lake.s3.secret_key_env``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rocketlake.jars import built_once, cache_dir
from rocketlake.local.go_toolchain import go_command
from rocketlake.local.process import (
    LocalClusterError,
    ManagedProcess,
    accepts_connections,
    kept_secret,
    port_in_use,
    stop_all,
    wait_for,
)

LOOPBACK = "127.0.0.1"
#: The module and release built (``go install <module>/cmd/versitygw@<version>``); its go.mod asks for Go 1.25.
VERSITYGW_MODULE = "github.com/versity/versitygw"
VERSITYGW_VERSION = "v1.8.0"
REGION = "us-east-1"
ACCESS_KEY = "rocketlake"
SECRET_ENV = "ROCKETLAKE_S3_SECRET_KEY"
#: The names the local runtime's configuration gives the keys' variables (``rocketlake local env --s3`` sets them).
ACCESS_KEY_ENV = "ROCKETLAKE_S3_ACCESS_KEY"
DEFAULT_BUCKET = "lake"
START_TIMEOUT_S = 60.0
BUILD_TIMEOUT_S = 900.0


def server_binary(progress: Callable[[str], None] | None = None) -> Path:
    """versitygw's binary, built with ``go install`` the first time on this machine (a few minutes on two cores)."""
    home = cache_dir() / "bin" / f"versitygw-{VERSITYGW_VERSION}"
    binary = home / "versitygw"
    if binary.exists():
        return binary
    go = go_command(progress)  # the machine's Go, or a pinned one from the Go module proxy

    def build() -> None:
        (progress or (lambda line: None))(f"  building versitygw {VERSITYGW_VERSION} from its Go module (once)")
        partial = home / "partial"
        shutil.rmtree(partial, ignore_errors=True)
        env = dict(os.environ, GOBIN=str(partial), CGO_ENABLED="0", GOFLAGS="-trimpath", GOTOOLCHAIN="local")
        result = subprocess.run(
            [go, "install", f"{VERSITYGW_MODULE}/cmd/versitygw@{VERSITYGW_VERSION}"],
            env=env,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
        )
        if result.returncode != 0 or not (partial / "versitygw").exists():
            raise LocalClusterError(
                f"building versitygw {VERSITYGW_VERSION} failed (exit {result.returncode}):\n"
                f"{(result.stdout + result.stderr)[-2000:]}"
            )
        (partial / "versitygw").replace(binary)  # whole or not at all
        shutil.rmtree(partial, ignore_errors=True)

    built_once(home, binary, build)
    return binary


@dataclass(frozen=True)
class LocalS3:
    state_dir: Path  # <state>/s3: pid file, log, secret, the buckets under data/
    port: int = 7070

    @property
    def process(self) -> ManagedProcess:
        return ManagedProcess("s3", self.state_dir)

    @property
    def data_dir(self) -> Path:
        return self.state_dir / "data"

    @property
    def endpoint(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def secret_key(self) -> str:
        return kept_secret(SECRET_ENV, self.state_dir / "secret")

    def credentials_env(self) -> dict[str, str]:
        """The variables the local configuration's ``lake.s3`` names, with this server's keys."""
        return {ACCESS_KEY_ENV: ACCESS_KEY, SECRET_ENV: self.secret_key()}

    def lake_settings(self, prefix: str = "") -> dict:
        """The ``lake`` section of a configuration whose tables live in this server's bucket (under ``prefix``)."""
        return {
            "root": f"s3a://{DEFAULT_BUCKET}/{prefix}".rstrip("/"),
            "s3": {
                "endpoint": self.endpoint,
                "path_style_access": True,
                "access_key_env": ACCESS_KEY_ENV,
                "secret_key_env": SECRET_ENV,
            },
        }

    def filesystem(self):
        """pyarrow's S3 filesystem on this server (bucket creation, listings, reads in tests)."""
        from pyarrow import fs

        return fs.S3FileSystem(
            access_key=ACCESS_KEY,
            secret_key=self.secret_key(),
            region=REGION,
            scheme="http",
            endpoint_override=f"{LOOPBACK}:{self.port}",
            allow_bucket_creation=True,
            allow_bucket_deletion=True,
        )

    def create_bucket(self, bucket: str = DEFAULT_BUCKET) -> None:
        from pyarrow import fs

        s3 = self.filesystem()
        if s3.get_file_info(bucket).type == fs.FileType.NotFound:
            s3.create_dir(bucket)

    def up(
        self,
        buckets: tuple[str, ...] = (DEFAULT_BUCKET,),
        timeout: float = START_TIMEOUT_S,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        report = progress or (lambda line: None)
        started = time.monotonic()
        binary = server_binary(report)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.process.pid() is None:
            if port_in_use(self.port):
                raise LocalClusterError(
                    f"cannot start the S3 server: port {self.port} on {LOOPBACK} is in use by "
                    "another process; stop it, or choose another port (--s3-port)"
                )
            env = dict(os.environ, ROOT_ACCESS_KEY=ACCESS_KEY, ROOT_SECRET_KEY=self.secret_key())
            self.process.start(
                [str(binary), "--port", f"{LOOPBACK}:{self.port}", "--region", REGION, "posix", str(self.data_dir)], env
            )
        wait_for(
            lambda: accepts_connections(self.port),
            time.monotonic() + timeout,
            [self.process],
            f"the S3 server on {LOOPBACK}:{self.port}",
            interval=0.2,
        )
        for bucket in buckets:
            self.create_bucket(bucket)
        report(
            f"  s3 (versitygw {VERSITYGW_VERSION}) on {self.endpoint}, bucket(s) {', '.join(buckets)} "
            f"({time.monotonic() - started:.0f}s)"
        )

    def status(self) -> str:
        pid = self.process.pid()
        return f"s3 {self.endpoint}: {'up' if pid else 'down'} (pid {pid or '-'}, data {self.data_dir})"

    def down(self, wipe: bool = False) -> list[str]:
        stopped = stop_all([self.process])
        if wipe:
            shutil.rmtree(self.data_dir, ignore_errors=True)
        return stopped
