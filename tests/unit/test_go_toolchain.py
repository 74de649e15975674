"""The Go toolchain for the local S3 server's build: which Go is new enough, where the proxy is, and a module zip
unpacked only when its SHA-256 is the pinned one (zips made here, no download)."""

from __future__ import annotations

import hashlib
import os
import zipfile

import pytest

from rocketlake.local.go_toolchain import PINNED, proxy_url, release, unpack
from rocketlake.local.process import LocalClusterError

pytestmark = pytest.mark.unit
TOP = f"golang.org/toolchain@v0.0.1-{PINNED}.linux-amd64"


def test_the_release_is_read_from_go_version():
    assert release("go version go1.26.8 linux/amd64") == (1, 26)
    assert release("go version go1.19.8 linux/amd64") == (1, 19)
    assert release("go version devel go1.27-abc linux/amd64") == (1, 27)
    assert release("bash: go: command not found") is None


def test_the_proxy_is_the_first_url_of_goproxy():
    assert proxy_url(None) == "https://proxy.golang.org"
    assert proxy_url("https://goproxy.example/,direct") == "https://goproxy.example"
    assert proxy_url("direct|http://127.0.0.1:3000|off") == "http://127.0.0.1:3000"
    with pytest.raises(LocalClusterError, match="GOPROXY='direct' names no proxy URL"):
        proxy_url("direct")


def module_zip(path, files: dict[str, bytes]):
    with zipfile.ZipFile(path, "w") as zipped:
        for name, data in files.items():
            zipped.writestr(f"{TOP}/{name}", data)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_checked_zip_is_unpacked_with_its_programs_executable(tmp_path):
    archive = tmp_path / "go.zip"
    digest = module_zip(
        archive,
        {
            "bin/go": b"#!go",
            "pkg/tool/linux_amd64/compile": b"cc",
            "src/fmt/print.go": b"pkg",
            "lib/wasm/go_js_wasm_exec": b"sh",
        },
    )
    target = tmp_path / "go"
    unpack(archive, digest, target)
    assert (target / "bin/go").read_bytes() == b"#!go"
    assert os.access(target / "bin/go", os.X_OK) and os.access(target / "pkg/tool/linux_amd64/compile", os.X_OK)
    assert os.access(target / "lib/wasm/go_js_wasm_exec", os.X_OK)
    assert not os.access(target / "src/fmt/print.go", os.X_OK)
    assert not (tmp_path / "go.partial").exists()


def test_a_zip_whose_digest_differs_is_not_unpacked(tmp_path):
    archive = tmp_path / "go.zip"
    module_zip(archive, {"bin/go": b"#!go"})
    with pytest.raises(LocalClusterError, match=r"has SHA-256 [0-9a-f]{64}, not the pinned 0{64}: not used"):
        unpack(archive, "0" * 64, tmp_path / "go")
    assert not (tmp_path / "go").exists()


def test_a_zip_reaching_outside_its_folder_is_refused(tmp_path):
    archive = tmp_path / "go.zip"
    digest = module_zip(archive, {"../../escaped": b"x"})
    with pytest.raises(LocalClusterError, match="holds a path outside its folder"):
        unpack(archive, digest, tmp_path / "go")
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "go").exists()
