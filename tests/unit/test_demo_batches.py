"""When the demo sends a window's batch of orders: whole inside one minute of broker time.

A full run failed once (the UI test) because the demo's first batch started in the last second of a minute: its
orders landed in two windows, and the demo asked Dagster for the second only.
"""

from __future__ import annotations

import pytest

from rocketlake.demo.run import SEND_MARGIN_S, batch_start

pytestmark = pytest.mark.unit
MINUTE = 1_764_590_400  # 2025-12-01 12:00:00 UTC, a minute's start


@pytest.mark.parametrize("into_minute", [0, 1.5, 30, 60 - SEND_MARGIN_S])
def test_the_first_batch_goes_at_once_while_the_margin_is_left(into_minute):
    assert batch_start(MINUTE + into_minute, first=True) == MINUTE + into_minute


@pytest.mark.parametrize("into_minute", [60 - SEND_MARGIN_S + 0.5, 59.9])
def test_the_first_batch_waits_for_the_next_minute_when_less_is_left(into_minute):
    assert batch_start(MINUTE + into_minute, first=True) == MINUTE + 61


@pytest.mark.parametrize("into_minute", [0, 30, 59.9])
def test_every_later_batch_starts_a_second_into_a_minute_of_its_own(into_minute):
    assert batch_start(MINUTE + into_minute, first=False) == MINUTE + 61
