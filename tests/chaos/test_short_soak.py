"""The chaos soak's short version (``tests/chaos/soak.py``; ``make chaos`` runs the 60-minute one), in ``make test``
and CI (``make chaos-short`` runs it alone).

Three minutes of the daemon-driven pipeline, fed by the Java producer, with two faults drawn from a printed seed: a
run killed half way through sending its failures back, then broker-a killed and restarted a minute later. At the
end, on the real brokers and table: every stored message in the table or the dead-letter table exactly once, every
committed offset at its queue's end, no queue trailing past the bound, each fault shown red and every check green.
``ROCKETLAKE_CHAOS_SEED=<seed>`` replays a run.
"""

from __future__ import annotations

import os
import random

import pytest

from tests.chaos.soak import Soak, short_faults

pytestmark = pytest.mark.stack

#: At least this long producing (on, while a fault lasts): broker-a, killed at 80-100 s for 60 s, is back 20-40 s
#: before the end when a run takes the armed send-back at once.
MINUTES = 3.0


def test_a_short_soak_with_a_killed_send_back_and_a_killed_broker_keeps_every_invariant(
    tmp_path, disruptable, spark_connect
):
    seed = int(os.environ.get("ROCKETLAKE_CHAOS_SEED") or random.SystemRandom().randrange(1 << 30))
    print(f"chaos seed {seed} (replay: ROCKETLAKE_CHAOS_SEED={seed})")
    soak = Soak(tmp_path, disruptable, spark_connect.settings(), short_faults(seed), seed=seed, minutes=MINUTES)
    try:
        problems = soak.run(drain_timeout=480)
        report = soak.report()
        print(report)
    finally:
        soak.close()
    assert not problems, "\n".join(problems) + "\n" + report
    # Both faults happened as drawn: a run took the armed send-back and died; broker-a was down and came back.
    assert [f.kind for f in soak.faults] == ["send_back_kill", "broker_kill"]
    assert soak.faults[0].victim_run is not None, report
    assert all(f.began is not None and f.ended is not None for f in soak.faults), report
