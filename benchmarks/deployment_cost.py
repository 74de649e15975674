"""What a code location costs as it grows: 1, 10 and 100 ingestions, each its own topic of 8 queues.

For each size, on a dedicated local cluster (a name server and two brokers, 4 queues of each topic on each):

* **load**: seconds for a fresh Python process to load ``rocketlake.definitions`` (what a code server does at
  start and at every reload), median of ``--loads``; the imports alone are printed first, so the part that grows
  with the ingestions is visible;
* **sensor requests**: every sensor of the location evaluated once, in process, on real brokers, counting the
  remoting requests it sends (by request code) and the connections it opens; per minute, each sensor's count times
  60 over its ``minimum_interval_seconds``;
* **daemon CPU**: ``dagster-daemon run`` on the location with every sensor started (``dagster sensor start
  --start-all``), CPU seconds per minute of the daemon's process tree and of the code server it loads from over
  ``--minutes`` after a minute of warm-up. The instance never launches a run (``max_concurrent_runs: 0``): what is
  measured is the sensors and the daemon's own loop. ``--location server`` (the default, as ``rocketlake local up
  --stack`` runs it): a long-lived ``dagster code-server start`` loaded through a ``grpc_server`` workspace;
  ``--location module``: ``dagster-daemon run -m``, which starts a code server of its own and replaces it every
  minute; ``--location both`` measures each, one after the other.

    .venv/bin/python -m benchmarks.deployment_cost [--sizes 1,10,100] [--minutes 2] [--loads 3] [--location both]
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from benchmarks.common import _processes, _subtrees, bench_cluster, free_port
from rocketlake.local.code_server import LocalCodeServer
from rocketlake.local.process import ManagedProcess
from rocketlake.rocketmq.client import RocketMQClient
from rocketlake.rocketmq.codes import RequestCode

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
QUEUES_PER_BROKER = 4  # two brokers: 8 queues a topic


def write_config(path: Path, namesrv: str, lake: Path, count: int) -> Path:
    body = {
        "clusters": {"bench": {"namesrv": namesrv}},
        "lake": {"root": str(lake)},
        "spark": {"master": "local[2]"},
        "ingestions": {
            f"ingestion_{i}": {
                "cluster": "bench",
                "topic": f"cost_topic_{i}",
                "consumer_group": f"cost_group_{i}",
                "table": f"cost_table_{i}",
                "consume_from_where": "CONSUME_FROM_FIRST_OFFSET",
                "window": {"cron": "* * * * *", "timezone": "UTC", "grace_seconds": 2, "start": "2026-11-01T00:00:00Z"},
                "body": {"format": "raw"},
            }
            for i in range(count)
        },
    }
    path.write_text(yaml.safe_dump(body))
    return path


_LOAD = (
    "import time; began = time.perf_counter(); from rocketlake.definitions import defs; "
    "print(time.perf_counter() - began)"
)
_IMPORT = (
    "import time; began = time.perf_counter(); import dagster, rocketlake.dagster.definitions; "
    "print(time.perf_counter() - began)"
)


def load_seconds(config: Path, loads: int) -> float:
    return _median_seconds(_LOAD, loads, ROCKETLAKE_CONFIG=str(config))


def import_seconds(loads: int) -> float:
    return _median_seconds(_IMPORT, loads)


def _median_seconds(code: str, times: int, **env: str) -> float:
    """The median of what ``code`` prints, each time in a fresh Python process."""
    measured = []
    for _ in range(times):
        proc = subprocess.run(
            [sys.executable, "-c", code],
            cwd=ROOT,
            env=dict(os.environ, **env),
            capture_output=True,
            text=True,
            timeout=600,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"{code!r} failed:\n{proc.stderr[-3000:]}")
        measured.append(float(proc.stdout.strip().splitlines()[-1]))
    return statistics.median(measured)


class RequestCounter:
    """Counts the remoting requests every connection of this process sends, and the connections it opens."""

    def __init__(self) -> None:
        from rocketlake.rocketmq import connection

        self._connection = connection
        self.requests: collections.Counter[int] = collections.Counter()
        self.opened = 0

    def __enter__(self) -> "RequestCounter":
        cls, channel = self._connection.Connection, self._connection._Channel
        self._prepare, self._start = cls._prepare, channel.start
        counter = self

        def prepare(conn, request, rpc_hook, *, oneway):
            counter.requests[request.code] += 1
            return counter._prepare(conn, request, rpc_hook, oneway=oneway)

        def start(chan):  # once per socket connected
            counter.opened += 1
            return counter._start(chan)

        cls._prepare, channel.start = prepare, start
        return self

    def __exit__(self, *exc) -> None:
        self._connection.Connection._prepare = self._prepare
        self._connection._Channel.start = self._start


def sensor_requests(config: Path) -> dict:
    """Each sensor evaluated once: requests and connections per tick, and per minute at its interval."""
    from dagster import build_sensor_context, instance_for_test

    from rocketlake.dagster.definitions import build_definitions
    from rocketlake.engine.config import load_config

    defs = build_definitions(load_config(config))
    repo = defs.get_repository_def()
    per_minute = collections.Counter()
    per_tick = collections.Counter()
    opened_per_minute = 0.0
    sensors = collections.Counter()
    with instance_for_test() as instance:
        resources = repo.get_top_level_resources()
        for sensor in repo.sensor_defs:
            kind = sensor.name.rsplit("_", 1)[-1] if sensor.name != "rocketlake_dead_runs" else "dead_runs"
            with RequestCounter() as counter:
                sensor.evaluate_tick(
                    build_sensor_context(
                        instance=instance, resources=resources, definitions=defs, sensor_name=sensor.name
                    )
                )
            interval = sensor.minimum_interval_seconds or 30
            sensors[kind] += 1
            per_tick[kind] += sum(counter.requests.values())
            for code, n in counter.requests.items():
                per_minute[code] += n * 60 / interval
            opened_per_minute += counter.opened * 60 / interval
    return {
        "sensors": dict(sensors),
        "per_tick": dict(per_tick),
        "per_minute": per_minute,
        "opened_per_minute": opened_per_minute,
    }


def daemon_cpu_per_minute(config: Path, minutes: float, location: str) -> float:
    """CPU seconds a minute of the daemon's tree, and of its code server's with ``location`` "server"."""
    home = Path(tempfile.mkdtemp(prefix="cost-home-"))
    server = None
    try:
        settings = yaml.safe_load((ROOT / "rocketlake" / "dagster.yaml").read_text()) or {}
        # Sensors only: no run is ever launched (a queue of no concurrent runs).
        settings.setdefault("concurrency", {})["runs"] = {"max_concurrent_runs": 0}
        (home / "dagster.yaml").write_text(yaml.safe_dump(settings))
        env = dict(os.environ, DAGSTER_HOME=str(home), ROCKETLAKE_CONFIG=str(config))
        workspace = ["-m", "rocketlake.definitions"]
        if location == "server":
            server = LocalCodeServer(home / "code-server", free_port())
            server.start(env, cwd=ROOT)
            workspace = ["-w", str(server.workspace)]
        started = subprocess.run(
            [str(BIN / "dagster"), "sensor", "start", "--start-all", *workspace],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if started.returncode != 0:
            raise RuntimeError(f"starting the sensors failed:\n{started.stderr[-3000:]}")
        daemon = ManagedProcess("dagster-daemon", home)
        pid = daemon.start([str(BIN / "dagster-daemon"), "run", *workspace], env, cwd=ROOT)
        roots = [pid] + ([server.process.pid()] if server is not None else [])
        try:
            time.sleep(60)  # the code server's start and the first ticks
            before = sum(_tree_cpu(r) for r in roots)
            time.sleep(minutes * 60)
            after = sum(_tree_cpu(r) for r in roots)
            if daemon.pid() is None:
                raise RuntimeError(f"the daemon ended; its log ends with:\n{daemon.log_tail()}")
        finally:
            daemon.stop()
        return (after - before) / minutes
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(home, ignore_errors=True)


def _tree_cpu(root: int) -> float:
    """CPU seconds of ``root`` and its live descendants (with their reaped children's)."""
    processes = _processes()
    return sum(processes[pid].cpu_seconds for pid in _subtrees(processes, [root]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1,10,100")
    parser.add_argument("--minutes", type=float, default=2.0)
    parser.add_argument("--loads", type=int, default=3)
    parser.add_argument(
        "--location",
        choices=("server", "module", "both"),
        default="server",
        help="how the daemon loads the code location (see above)",
    )
    args = parser.parse_args()
    locations = ("server", "module") if args.location == "both" else (args.location,)
    sizes = [int(s) for s in args.sizes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="deployment-cost-"))
    names = {code.value: code.name for code in RequestCode}
    try:
        with bench_cluster(work / "state", Path("/dev/shm") if Path("/dev/shm").is_dir() else None) as cluster:
            namesrv = cluster.spec.namesrv_address
            with RocketMQClient(namesrv) as client:
                for i in range(max(sizes)):
                    client.create_topic(f"cost_topic_{i}", QUEUES_PER_BROKER)
            print(
                f"importing dagster and rocketlake alone: {import_seconds(args.loads):.2f} s (median of "
                f"{args.loads}); a location's load below includes it",
                flush=True,
            )
            rows = []
            for size in sizes:
                config = write_config(work / f"rocketlake-{size}.yaml", namesrv, work / "lake", size)
                load = load_seconds(config, args.loads)
                requests = sensor_requests(config)
                cpus = {where: daemon_cpu_per_minute(config, args.minutes, where) for where in locations}
                total = sum(requests["per_minute"].values())
                rows.append((size, load, requests, cpus, total))
                top = ", ".join(f"{names.get(code, code)} {n:.0f}" for code, n in requests["per_minute"].most_common(4))
                print(
                    f"{size} ingestion(s): load {load:.2f} s; sensors {requests['sensors']}; requests per tick "
                    f"{requests['per_tick']}; {total:.0f} broker/name server requests a minute ({top}); "
                    f"{requests['opened_per_minute']:.0f} sockets connected a minute; daemon "
                    + ", ".join(f"{c:.1f} CPU s a minute (location: {w})" for w, c in cpus.items()),
                    flush=True,
                )
            heads = " | ".join(f"daemon CPU s / min ({w})" for w in locations)
            print(
                "\n| ingestions | queues | load s | sensors | requests / min | per queue | sockets connected / min "
                f"| {heads} |"
            )
            print("|---|---|---|---|---|---|---|" + "---|" * len(locations))
            for size, load, requests, cpus, total in rows:
                queues = size * 2 * QUEUES_PER_BROKER
                print(
                    f"| {size} | {queues} | {load:.2f} | {sum(requests['sensors'].values())} | {total:,.0f} | "
                    f"{total / queues:.1f} | {requests['opened_per_minute']:,.0f} | "
                    + " | ".join(f"{cpus[w]:.1f}" for w in locations)
                    + " |"
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
