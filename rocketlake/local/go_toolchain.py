"""The Go toolchain that builds the local S3 server: the machine's ``go`` when it is new enough, else a pinned
release taken from the Go module proxy, as the go command itself takes one (``GOTOOLCHAIN``).

Go publishes every release as the module ``golang.org/toolchain`` (``v0.0.1-go1.26.8.linux-amd64``): a zip of the
whole distribution, served by the proxy like any module. A machine set up by ``.ci/run`` has no Go at all (Debian
12's ``golang`` package is 1.19, older than versitygw's go.mod asks), so the setup takes that zip instead of asking a
person to install Go. The zip is checked against the SHA-256 pinned here before anything in it runs, unpacked into
rocketlake's cache (``~/.cache/rocketlake/go/<version>``) and kept for the next builds.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import shutil
import subprocess
import tempfile
import urllib.request
import zipfile
from collections.abc import Callable
from pathlib import Path

from rocketlake.jars import built_once, cache_dir
from rocketlake.local.process import LocalClusterError

#: The oldest Go that builds the S3 server (its go.mod: ``go 1.25.0``).
MINIMUM = (1, 25)
#: The release taken from the proxy when the machine's Go is missing or older, and its zip's SHA-256 per platform.
PINNED = "go1.26.8"
PINNED_SHA256 = {
    "linux-amd64": "30c2b1bf7dcc88d3eb0a1364e47ddd9128edb3110a30e8a0ef61cd5856b31de7",
}
DEFAULT_PROXY = "https://proxy.golang.org"
DOWNLOAD_TIMEOUT_S = 600.0


def release(version_output: str) -> tuple[int, int] | None:
    """(major, minor) from ``go version``'s answer (``go version go1.26.8 linux/amd64``), or None."""
    found = re.search(r"\bgo(\d+)\.(\d+)", version_output)
    return (int(found.group(1)), int(found.group(2))) if found else None


def machine_go() -> str | None:
    """The ``go`` on PATH if it is ``MINIMUM`` or newer (run with ``GOTOOLCHAIN=local``: its own version)."""
    go = shutil.which("go")
    if go is None:
        return None
    try:
        answer = subprocess.run(
            [go, "version"], env=dict(os.environ, GOTOOLCHAIN="local"), capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = release(answer)
    return go if found is not None and found >= MINIMUM else None


def platform_name() -> str:
    machine = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    return f"{platform.system().lower()}-{machine}"


def proxy_url(goproxy: str | None) -> str:
    """The first URL of ``GOPROXY`` (a list separated by commas or pipes, ``direct`` and ``off`` among its words)."""
    for entry in re.split(r"[,|]", goproxy or DEFAULT_PROXY):
        if entry.startswith(("https://", "http://")):
            return entry.rstrip("/")
    raise LocalClusterError(
        f"GOPROXY={goproxy!r} names no proxy URL to take Go {PINNED} from; set GOPROXY to one "
        f"(the default is {DEFAULT_PROXY}) or install Go {MINIMUM[0]}.{MINIMUM[1]} or newer"
    )


def unpack(archive: Path, expected_sha256: str, target: Path) -> None:
    """Check the module zip, then unpack its files (under ``<module>@<version>/``) into ``target`` with the programs executable (a module
    zip keeps no file modes: the go command sets them on first use the same way)."""
    digest = hashlib.sha256()
    with archive.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != expected_sha256:
        raise LocalClusterError(
            f"the Go toolchain {archive.name} has SHA-256 {digest.hexdigest()}, not the pinned "
            f"{expected_sha256}: not used"
        )
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    with zipfile.ZipFile(archive) as zipped:
        for member in zipped.infolist():
            # <module>@<version>/<file>: the module path (golang.org/toolchain) has a slash of its own
            _, _, inner = member.filename.partition("@")[2].partition("/")
            if not inner or member.is_dir():
                continue
            path = (partial / inner).resolve()
            if not path.is_relative_to(partial.resolve()):
                raise LocalClusterError(
                    f"the Go toolchain {archive.name} holds a path outside its folder: {member.filename}"
                )
            path.parent.mkdir(parents=True, exist_ok=True)
            with zipped.open(member) as source, path.open("wb") as out:
                shutil.copyfileobj(source, out)
            if inner.startswith(("bin/", "pkg/tool/")) or re.fullmatch(r"lib/.*exec.*", inner):
                path.chmod(0o755)
    partial.replace(target)  # whole or not at all


def go_command(progress: Callable[[str], None] | None = None) -> str:
    """A ``go`` of at least ``MINIMUM``: the machine's, else ``PINNED`` from the module proxy (taken once)."""
    found = machine_go()
    if found is not None:
        return found
    name = platform_name()
    expected = PINNED_SHA256.get(name)
    if expected is None:
        raise LocalClusterError(
            f"the local S3 server is built with Go {MINIMUM[0]}.{MINIMUM[1]} or newer; this "
            f"machine has none on PATH, and rocketlake pins Go {PINNED} only for "
            f"{', '.join(PINNED_SHA256)}, not {name}: install Go and try again"
        )
    home = cache_dir() / "go" / f"{PINNED}.{name}"
    go = home / "bin" / "go"

    def take() -> None:
        url = f"{proxy_url(os.environ.get('GOPROXY'))}/golang.org/toolchain/@v/v0.0.1-{PINNED}.{name}.zip"
        (progress or (lambda line: None))(f"  taking Go {PINNED} from the Go module proxy (once): {url}")
        with tempfile.TemporaryDirectory(dir=home.parent) as tmp:
            archive = Path(tmp) / f"{PINNED}.{name}.zip"
            try:
                with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as answer, archive.open("wb") as out:
                    shutil.copyfileobj(answer, out)
            except OSError as e:
                raise LocalClusterError(
                    f"taking Go {PINNED} from {url} failed ({e}); install Go "
                    f"{MINIMUM[0]}.{MINIMUM[1]} or newer, or set GOPROXY to a proxy that "
                    "serves golang.org/toolchain"
                ) from e
            unpack(archive, expected, home)

    built_once(home.parent, go, take)  # the lock beside the toolchain's folder, which unpack makes whole
    return str(go)
