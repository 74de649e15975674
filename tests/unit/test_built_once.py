"""``jars.built_once``: what the local runtime builds or downloads into its cache (Maven's jars, the S3 server, the
schema registry, a Go toolchain) is made once, and made again only when an earlier build did not finish."""

from __future__ import annotations

import pytest

from rocketlake.jars import built_once


def test_a_build_runs_once_and_a_failed_one_runs_again(tmp_path):
    home, done = tmp_path / "thing", tmp_path / "thing" / "done"
    builds = []

    def failing() -> None:
        builds.append("failed")
        raise RuntimeError("the download broke")

    with pytest.raises(RuntimeError, match="the download broke"):
        built_once(home, done, failing)
    assert not done.exists()

    def build() -> None:
        builds.append("built")
        done.write_text("ok")

    built_once(home, done, build)
    built_once(home, done, build)  # done: nothing to do
    assert builds == ["failed", "built"]
    assert (home / ".lock").exists()  # where concurrent builders wait for each other
