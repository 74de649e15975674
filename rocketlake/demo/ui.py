"""``rocketlake ui`` (``make ui``): the Dagster UI, through ``dg dev``, on the local instance.

After ``rocketlake demo`` it loads the demo's configuration and code location (its schedules running: each new
window lands as it closes, and the downstream aggregate follows) and keeps a trickle of orders flowing into the
demo topic while the UI is open, so a newcomer sees windows land each minute, the lag rise and fall and the checks
stay green, instead of a table that goes stale. Without the demo's configuration it loads the project's
(``$ROCKETLAKE_CONFIG`` or ``rocketlake.yaml``) through ``workspace.yaml``, schedules as they are, and sends nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

from rocketlake.dagster.launch import dagster_home
from rocketlake.dagster.warm_runs import FORK_SERVER_MODULE
from rocketlake.demo.run import DEMO_CONFIG, DEMO_MODULE, sample_orders
from rocketlake.engine.config import CONFIG_ENV, load_config
from rocketlake.local.peers import close_servers, produce
from rocketlake.local.process import command_line, descendants, end_processes, group_members
from rocketlake.local.spark_server import server_for
from rocketlake.local.spec import ClusterSpec


class Trickle(threading.Thread):
    """``per_batch`` orders every ``every_s`` seconds into ``topic``, with the Java producer, until stopped."""

    def __init__(self, spec: ClusterSpec, topic: str, per_batch: int, every_s: float):
        super().__init__(name="rocketlake-trickle", daemon=True)
        self.spec, self.topic, self.per_batch, self.every_s = spec, topic, per_batch, every_s
        self.stopped = threading.Event()
        self.sent = 0

    def run(self) -> None:
        while not self.stopped.is_set():
            try:
                produce(
                    self.spec.namesrv_address,
                    self.spec.state_dir,
                    sample_orders(self.topic, self.per_batch, seed=11, first=100_000 + self.sent),
                )
                self.sent += self.per_batch
            except Exception as e:  # the cluster went down: the UI stays, the trickle says why it stopped
                print(f"rocketlake ui: the trickle into {self.topic} stopped: {e}", file=sys.stderr, flush=True)
                return
            self.stopped.wait(self.every_s)

    def stop(self) -> None:
        self.stopped.set()


def run_ui(spec: ClusterSpec, port: int, topic: str, per_minute: int) -> int:
    home = dagster_home().absolute()
    env = dict(os.environ, DAGSTER_HOME=str(home))
    dg = str(Path(sys.executable).parent / "dg")
    trickle = None
    if not os.environ.get(CONFIG_ENV) and DEMO_CONFIG.exists():
        env[CONFIG_ENV] = str(DEMO_CONFIG.absolute())
        connect = server_for(load_config(DEMO_CONFIG).spark, spec.state_dir)
        if connect is not None:  # the demo started it; after a reboot, start it again
            connect.up(progress=lambda line: print(f"rocketlake ui:{line}", flush=True))
        command = [dg, "dev", "-m", DEMO_MODULE, "-p", str(port)]
        if any(i.topic == topic for i in load_config(DEMO_CONFIG).ingestions.values()) and per_minute > 0:
            trickle = Trickle(spec, topic, per_batch=max(1, per_minute // 4), every_s=15)
            trickle.start()
            print(
                f"rocketlake ui: sending about {per_minute} orders a minute to {topic} while the UI is open; "
                "the schedule lands each window once it closes",
                flush=True,
            )
    else:
        env.setdefault(CONFIG_ENV, "rocketlake.yaml")
        command = [dg, "dev", "-w", "workspace.yaml", "-p", str(port)]
    print(f"rocketlake ui: http://127.0.0.1:{port} (DAGSTER_HOME={home}, {CONFIG_ENV}={env[CONFIG_ENV]})", flush=True)
    dev = subprocess.Popen(command, env=env)
    try:
        return dev.wait()
    except KeyboardInterrupt:
        # Ctrl-C reached the whole process group: dg dev, its webserver and daemon, the runs the daemon launched
        # and the trickle's Java producer each stop on it. Wait for dg dev to be done with its children; then end
        # whatever it started that is still there (a code server waiting for a run in flight, the run itself), so
        # that nothing outlives the command. The snapshot is taken first: dg dev's exit hands its children to init.
        # Only those in this session: a Spark Connect server started above lives in a session of its own, and
        # outlives `make ui` as it outlives the demo (`rocketlake local down` stops it).
        # The trickle first: between two sends it would start a Java producer again (its peer server died of the
        # Ctrl-C too), after the snapshot below, and the exit would wait for it.
        if trickle:
            trickle.stop()
        close_servers(timeout=1.0)
        started = descendants(os.getpid(), session=os.getsid(0))
        stop_within(dev, STOP_WITHIN_S)
        end_processes({**started, **warm_runs_left()}, grace=END_GRACE_S)
        return 0
    finally:
        if trickle:
            trickle.stop()


def warm_runs_left() -> dict[int, str]:
    """The runs of the warm launcher (rocketlake.dagster.warm_runs) still in this process group, and what they
    started (their compute logs' ``tail``): forked twice, they are nobody's descendants, so the snapshot above misses
    them. Most stop on the Ctrl-C themselves; CI found one still running 10 s after it, with the two ``tail`` processes
    of its compute logs (started, like the run, about when the Ctrl-C came: a ``tail`` that got it would have gone)."""
    left: dict[int, str] = {}
    for pid, started in group_members(os.getpgid(0)).items():
        if pid != os.getpid() and FORK_SERVER_MODULE in command_line(pid):
            left[pid] = started
            left.update(descendants(pid))
    return left


STOP_WITHIN_S = 4.0  # what dg dev gets to stop its children on Ctrl-C; then they are ended (at most 7 s in all)
END_GRACE_S = 1.0  # between SIGTERM and SIGKILL for what dg dev left running


def stop_within(process: subprocess.Popen, seconds: float) -> None:
    """Wait up to ``seconds`` for ``process`` (already interrupted) to exit; then SIGTERM it, then SIGKILL it."""
    for ending in (None, process.terminate, process.kill):
        if ending is not None:
            ending()
        try:
            process.wait(timeout=seconds if ending is None else 1.0)
            return
        except subprocess.TimeoutExpired:
            continue
        except KeyboardInterrupt:  # a second Ctrl-C: the person is in a hurry
            continue
