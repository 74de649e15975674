"""The chaos soak's short version runs in ``make test`` (and CI), handed out first so that its real minutes pass
while the other worker runs the long files; ``ROCKETLAKE_CHAOS=0`` leaves it out of a local run."""

import os

import pytest

collect_ignore_glob = ["test_*.py"] if os.environ.get("ROCKETLAKE_CHAOS") == "0" else []


@pytest.fixture(autouse=True)
def _shared_minutes_meanwhile(request: pytest.FixtureRequest) -> None:
    """The soak runs on a cluster of its own for minutes: the worker's shared cluster starts now and the shared
    minutes are sent meanwhile, if a selected test needs them (in ``make test``), instead of when that test comes."""
    from tests.integration.conftest import start_shared_minutes

    start_shared_minutes(request)
