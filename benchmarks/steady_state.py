"""What a newcomer lives in after ``make demo`` then ``make ui``, measured over many one-minute windows.

    .venv/bin/python -m benchmarks.steady_state [--minutes 60] [--per-minute 40]

The README's two commands as a newcomer types them, on free ports and in a temporary project: ``rocketlake demo``
(its own name server, two brokers and Spark Connect server, the demo's instance with the recommended
``dagster.yaml``), then ``rocketlake ui`` (``dg dev``: the webserver and the daemon; the demo's schedules, the table's
window schedule and the downstream assets' followers; the lag, backlog and rebalance sensors; and the trickle of
``--per-minute`` orders from the Java producer). It runs ``--minutes`` minutes, sampling every second:

* **CPU seconds per process class** (from ``/proc``: the Dagster run processes (the forks of
  ``rocketlake.dagster.warm_runs``' fork server, or the code servers' ``spawn`` children), that fork server, the code servers,
  the daemon, the webserver, ``dg`` and ``rocketlake ui``, the Spark Connect server's JVM, its Python workers, the
  brokers, the name server, the Java producer), per window. A process that exits between two samples loses its last
  second at most.
* **a window's own runs**: per job, a run's process CPU and the Spark server's and its workers' CPU while the run
  was under way (a second shared by two runs is split between them), and the server's CPU while no run was: what
  a window costs beyond the deployment around it (brokers, sensors, the UI), which the classes above also count.
* **runs queued** per job, the most ever seen at once, each run's wait in the queue (enqueued to handed to the
  launcher), and the load average (1 min).
* **the peer**: a Java ``DefaultMQPushConsumer`` of a group of its own, consuming the same trickle from the same topic
  for the same minutes (its listener only acknowledges): what the Java client's own consumption costs a minute, beside
  rocketlake's landing of it in Delta through Dagster.

Then, from the instance: for each window closed after the first two minutes, the seconds from its close (its end
plus the grace) to the table's offsets committed (the progress observation its run logs after the commit), to
``<table>_by_region``'s materialization of it, and to the first ``<table>_customers`` materialization after the
table's; p50 and p95 of each; and every asset check evaluation that failed.

Goals (issue 46): p95 <= 40 s, never more than one run queued per job, every check green, a load average below the
core count, <= 3 CPU-s per window on the warm path.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

import yaml

from rocketlake.dagster.launch import RECOMMENDED_INSTANCE
from rocketlake.local.process import stat_fields
from tests.java_oracles import start_retry_consumer

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
TABLE = "orders_raw"
GRACE_S = 10  # the demo's window.grace_seconds
WARM_UP_S = 120  # windows closing in the first two minutes of the UI are left out (code servers, first sessions)
CLK_TCK = os.sysconf("SC_CLK_TCK")
PORTS = (29876, 29911, 29921, 29300, 29002)  # name server, brokers, the UI, Spark Connect (the benchmarks' own)
PEER = "the peer: Java push consumer"  # not rocketlake's: a DefaultMQPushConsumer of another group on the same topic
TOPIC = "rocketlake_demo_orders"
#: (class, what its command line holds), the first match wins
FORK_SERVER = (
    "run fork server"  # rocketlake.dagster.warm_runs' fork server, the daemon's child (its forks: see processes)
)
CLASSES = (
    # Dagster's code servers start each run as a multiprocessing child (spawn): nothing else here is one. With
    # rocketlake.dagster.warm_runs (the recommended instance), runs are forks of its fork server, told apart by their parent.
    ("run processes", ("spawn_main",)),
    # Its command line, not an instance's serialized settings (which name the module too, in the daemon's, the
    # webserver's and the code servers' command lines).
    (FORK_SERVER, ("-m rocketlake.dagster.warm_runs",)),
    ("daemon", ("dagster._daemon", "dagster-daemon")),
    ("webserver", ("dagster_webserver", "dagster-webserver")),
    ("dg dev + rocketlake ui", ("bin/dg dev", "dagster dev", "bin/rocketlake ui", "_cli.dev")),
    ("code servers", ("api grpc", "code-server start")),
    (
        "spark server (JVM)",
        ("connect_server.py",),
    ),  # the JVM and its driver program (rocketlake/spark/connect_server.py)
    ("spark python workers", ("pyspark.daemon", "pyspark/daemon", "pyspark.worker")),
    ("brokers", ("BrokerStartup",)),
    ("name server", ("NamesrvStartup",)),
    ("java producer", ("PeerServer",)),
    (PEER, ("RetryPeer",)),
)


def class_of(command: str) -> str | None:
    for name, marks in CLASSES:
        if any(m in command for m in marks):
            return name
    return None


def processes() -> dict[int, tuple[str, float]]:
    """Every process this benchmark counts: pid -> (class, CPU seconds so far)."""
    found, parents = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            command = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # it exited while being read
        kind = class_of(command)
        fields = stat_fields(int(entry)) if kind is not None else None
        if fields is not None:
            found[int(entry)] = (kind, (int(fields[11]) + int(fields[12])) / CLK_TCK)  # utime + stime
            parents[int(entry)] = int(fields[1])
    for pid, (kind, seconds) in found.items():  # the fork server's forks are runs (their CPU counts from the fork)
        if kind == FORK_SERVER and found.get(parents[pid], ("",))[0] != "daemon":
            found[pid] = ("run processes", seconds)
    return found


class Sampler:
    """CPU seconds per class, the most runs queued per job, the load averages: one sample a second."""

    def __init__(self, instance, warm_from: float):
        self.instance = instance
        self.last: dict[int, tuple[str, float]] = {}
        self.cpu: dict[str, float] = defaultdict(float)
        # The totals when the warm-up ended (the servers' start, the demo's first window and its followers): the
        # steady state is what comes after.
        self.warm_from = warm_from
        self.started = warm_from - WARM_UP_S
        self.at_warm: dict[str, float] | None = None
        # What the classes miss (processes too short-lived for a sample a second, or of no class): the machine's busy
        # time since sampling began less the classes' and this benchmark's own; now, and when the warm-up ended.
        self.machine_from, self.sampler_from = machine_busy(), time.process_time()
        self.unclassed = self.unclassed_at_warm = 0.0
        self.queued: dict[str, int] = defaultdict(int)  # over the whole run
        self.queued_warm: dict[str, int] = defaultdict(int)  # after the warm-up
        # Per job, when more than one of its runs was queued at once: the first such moment, and what queued them.
        self.crowded: dict[str, tuple[float, list[str]]] = {}
        self.loads: list[tuple[float, float]] = []  # (when, the 1-minute load average)
        # For a window's own cost by job (see own_costs): each run process's CPU, and the Spark server's and its
        # workers' CPU second by second (when the second ended, CPU seconds in it).
        self.run_cpu: dict[int, float] = defaultdict(float)
        self.spark_by_second: list[tuple[float, float]] = []

    def sample(self) -> None:
        from dagster import DagsterRunStatus, RunsFilter

        now = processes()
        spark = 0.0
        for pid, (kind, seconds) in now.items():
            before = self.last.get(pid)
            used = seconds - (before[1] if before and before[0] == kind else 0.0)
            self.cpu[kind] += used
            if kind == "run processes":
                self.run_cpu[pid] += used
            elif kind in SPARK_SIDE:
                spark += used
        self.spark_by_second.append((time.time(), spark))
        self.last = now
        busy = (machine_busy() - self.machine_from) - (time.process_time() - self.sampler_from)
        self.unclassed = busy - sum(self.cpu.values())
        if self.at_warm is None and time.time() >= self.warm_from:
            self.at_warm, self.unclassed_at_warm = dict(self.cpu), self.unclassed
        queued: dict[str, list] = defaultdict(list)
        for run in self.instance.get_runs(RunsFilter(statuses=[DagsterRunStatus.QUEUED])):
            queued[run.job_name].append(run)
        for job, runs in queued.items():
            self.queued[job] = max(self.queued[job], len(runs))
            if self.at_warm is not None:
                self.queued_warm[job] = max(self.queued_warm[job], len(runs))
            if len(runs) > 1 and job not in self.crowded:
                self.crowded[job] = (time.time(), [describe(run) for run in runs])
        self.loads.append((time.time(), float(Path("/proc/loadavg").read_text().split()[0])))


#: The classes whose CPU a run causes without being its process: charged to the runs under way (own_costs).
SPARK_SIDE = ("spark server (JVM)", "spark python workers")


def own_costs(instance, sampler: Sampler, since: float) -> tuple[dict[str, tuple[int, float, float]], float]:
    """A window's own cost, by job: for the runs started after ``since``, per job (runs, their processes' CPU
    seconds a run, the Spark server's and its workers' CPU seconds a run while they ran); and the server's and its
    workers' CPU seconds in no run since ``since``. A second of the server's in which two runs were under way is
    shared between them; the daemon's launches, the sensors and the brokers are not in it (the classes hold them)."""
    from dagster import RunsFilter

    from rocketlake.dagster.run_guard import recorded_process

    spans = []  # (job, start, end, the run's process CPU)
    for record in instance.get_run_records(RunsFilter(created_after=datetime.fromtimestamp(since, timezone.utc))):
        run = record.dagster_run
        process = recorded_process(run)  # the pid its launcher forked (or its run guard recorded)
        if record.start_time is None or record.end_time is None or process is None:
            continue
        spans.append((run.job_name, record.start_time, record.end_time, sampler.run_cpu.get(process.pid, 0.0)))
    spark: dict[str, float] = defaultdict(float)
    idle = 0.0
    for ended, used in sampler.spark_by_second:
        if ended - 1 < since:
            continue
        under_way = [job for job, start, end, _ in spans if ended > start and ended - 1 < end]
        for job in under_way:
            spark[job] += used / len(under_way)
        if not under_way:
            idle += used
    out = {}
    for job in sorted({span[0] for span in spans}):
        runs = [span for span in spans if span[0] == job]
        out[job] = (len(runs), sum(r[3] for r in runs) / len(runs), spark[job] / len(runs))
    return out, idle


def machine_busy() -> float:
    """CPU seconds the machine's cores have been busy since boot (``/proc/stat``: all but idle and I/O wait)."""
    user, nice, system, idle, iowait, irq, softirq, steal = map(int, Path("/proc/stat").read_text().split()[1:9])
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


def describe(run) -> str:
    """A queued run in a few words: its id, what launched it (schedule, sensor, backfill or by hand), its partition."""
    tags = run.tags
    origin = next(
        (
            f"{kind} {tags[key]}"
            for kind, key in (
                ("schedule", "dagster/schedule_name"),
                ("sensor", "dagster/sensor_name"),
                ("backfill", "dagster/backfill"),
            )
            if key in tags
        ),
        "launched by hand",
    )
    return f"{run.run_id[:8]} ({origin}, partition {tags.get('dagster/partition', '-')})"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def window_close(key: str) -> float:
    return datetime.strptime(key, "%Y-%m-%d-%H:%M").replace(tzinfo=timezone.utc).timestamp() + 60 + GRACE_S


def latencies(instance, since: float, until: float) -> dict[str, list[float]]:
    """Seconds from each window's close to: the table's offsets committed, by_region's materialization of it, the
    first customers materialization after the table's (windows closed in [since, until - 90 s))."""
    from dagster import AssetKey, AssetRecordsFilter, DagsterEventType

    def first_by_key(name: str) -> dict[str, tuple[float, str]]:
        found: dict[str, tuple[float, str]] = {}
        records = instance.fetch_materializations(AssetRecordsFilter(asset_key=AssetKey(name)), limit=10_000).records
        for r in records:
            key = r.partition_key
            if key is not None and (key not in found or r.timestamp < found[key][0]):
                found[key] = (r.timestamp, r.run_id)
        return found

    table = first_by_key(TABLE)
    by_region = first_by_key(f"{TABLE}_by_region")
    customers = sorted(
        r.timestamp
        for r in instance.fetch_materializations(
            AssetRecordsFilter(asset_key=AssetKey(f"{TABLE}_customers")), limit=10_000
        ).records
    )
    # Windows landed without a row changing (quiet windows: a ledger commit alone) give the followers nothing to do:
    # they are not followed (rocketlake.demo.follow), so they are no follower's latency.
    quiet = {
        r.partition_key
        for r in instance.fetch_materializations(AssetRecordsFilter(asset_key=AssetKey(TABLE)), limit=10_000).records
        if not getattr(r.asset_materialization.metadata.get("rocketlake/rows_changed"), "value", True)
    }
    out: dict[str, list[float]] = defaultdict(list)
    for key, (landed, run_id) in sorted(table.items()):
        close = window_close(key)
        if not since <= close < until - 90:
            continue
        committed = next(
            (
                e.timestamp
                for e in instance.all_logs(run_id, of_type=DagsterEventType.ASSET_OBSERVATION)
                if e.timestamp >= landed and e.dagster_event.asset_key == AssetKey(TABLE)
            ),
            None,
        )
        out[TABLE].append((committed or float("inf")) - close)
        if key in quiet:
            continue
        out[f"{TABLE}_by_region"].append(by_region.get(key, (float("inf"),))[0] - close)
        out[f"{TABLE}_customers"].append(next((t for t in customers if t >= landed), float("inf")) - close)
    return out


def queue_waits(instance, since: float) -> dict[str, list[float]]:
    """Per job, each run's seconds from enqueued to handed to the launcher (RUN_STARTING): the run queue's daemon
    dequeues every ``dequeue_interval_seconds`` while schedules tick on the minute (the launch sawtooth)."""
    from dagster import DagsterEventType, RunsFilter

    waits: dict[str, list[float]] = defaultdict(list)
    kinds = {DagsterEventType.RUN_ENQUEUED, DagsterEventType.RUN_STARTING}
    for record in instance.get_run_records(
        RunsFilter(created_after=datetime.fromtimestamp(since, timezone.utc)), limit=10_000
    ):
        marks = {
            e.dagster_event.event_type: e.timestamp for e in instance.all_logs(record.dagster_run.run_id, of_type=kinds)
        }
        if len(marks) == 2:
            waits[record.dagster_run.job_name].append(
                marks[DagsterEventType.RUN_STARTING] - marks[DagsterEventType.RUN_ENQUEUED]
            )
    return waits


def failed_checks(instance, since: float) -> dict[str, int]:
    from dagster import DagsterEventType, EventRecordsFilter

    failed: dict[str, int] = defaultdict(int)
    records = instance.get_event_records(
        EventRecordsFilter(event_type=DagsterEventType.ASSET_CHECK_EVALUATION), limit=10_000
    )
    for r in records:
        evaluation = r.event_log_entry.dagster_event.event_specific_data
        if r.event_log_entry.timestamp >= since and not evaluation.passed:
            failed[f"{evaluation.asset_key.to_user_string()}:{evaluation.check_name}"] += 1
    return failed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=int, default=60)
    parser.add_argument("--per-minute", type=int, default=40, help="orders a minute the trickle sends")
    parser.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting for the Spark Connect server on top of rocketlake.yaml's (repeatable): to compare two",
    )
    args = parser.parse_args()
    namesrv, broker_a, broker_b, web, connect = PORTS
    with tempfile.TemporaryDirectory(prefix="rocketlake-steady-", dir="/dev/shm") as tmp:
        project = Path(tmp)
        config = yaml.safe_load((ROOT / "rocketlake.yaml").read_text())
        config["clusters"]["local"]["namesrv"] = f"127.0.0.1:{namesrv}"
        config["spark"]["remote"] = f"sc://127.0.0.1:{connect}"
        config["spark"]["conf"] = {
            **config["spark"].get("conf", {}),
            **dict(kv.split("=", 1) for kv in args.spark_conf),
        }
        config["lake"]["root"] = str(project / "lake")
        (project / "rocketlake.yaml").write_text(yaml.safe_dump(config))
        home = project / "dagster"
        home.mkdir()
        (home / "dagster.yaml").write_text(RECOMMENDED_INSTANCE.read_text())
        cluster = [
            "--state-dir",
            str(project / "state"),
            "--namesrv-port",
            str(namesrv),
            "--broker-ports",
            f"{broker_a},{broker_b}",
        ]
        env = {k: v for k, v in os.environ.items() if k != "ROCKETLAKE_CONFIG"}
        env["DAGSTER_HOME"] = str(home)
        os.environ["DAGSTER_HOME"] = str(home)
        ui = peer = None
        try:
            print("rocketlake demo (one window) ...", flush=True)
            demo = subprocess.run(
                [str(BIN / "rocketlake"), "demo", "--windows", "1", "--messages", "40", *cluster],
                cwd=project,
                env=env,
                capture_output=True,
                text=True,
                timeout=900,
            )
            if demo.returncode != 0:
                raise RuntimeError(f"rocketlake demo failed:\n{demo.stdout[-3000:]}{demo.stderr[-3000:]}")
            peer = start_retry_consumer(
                f"127.0.0.1:{namesrv}",
                project / "state",
                "steady_state_peer",
                TOPIC,
                max_reconsume_times=16,
                fail_until={},
            )
            delivered = []
            threading.Thread(target=lambda: delivered.extend(peer.stdout), daemon=True).start()  # its pipe drained
            log = (project / "ui.log").open("w")
            ui = subprocess.Popen(
                [str(BIN / "rocketlake"), "ui", "--port", str(web), "--per-minute", str(args.per_minute), *cluster],
                cwd=project,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            started = time.time()
            print(f"rocketlake ui on :{web}, {args.per_minute} orders a minute, for {args.minutes} min ...", flush=True)
            from dagster import DagsterInstance

            with DagsterInstance.get() as instance:
                sampler = Sampler(instance, started + WARM_UP_S)
                end = started + 60 * args.minutes
                while time.time() < end:
                    if ui.poll() is not None:
                        raise RuntimeError(f"rocketlake ui exited ({ui.returncode}): see {project / 'ui.log'}")
                    sampler.sample()
                    time.sleep(1.0)  # the sampling period
                measured = latencies(instance, started + WARM_UP_S, end)
                checks = failed_checks(instance, started + WARM_UP_S)
                waits = queue_waits(instance, started + WARM_UP_S)
                own = own_costs(instance, sampler, started + WARM_UP_S)
        finally:
            if peer is not None:
                peer.stdin.close()  # it shuts down when its stdin closes
                peer.wait(timeout=30)
            if ui is not None and ui.poll() is None:
                os.killpg(ui.pid, signal.SIGINT)  # Ctrl-C, as a person ends `make ui`
                try:
                    ui.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(ui.pid, signal.SIGKILL)
            subprocess.run(
                [str(BIN / "rocketlake"), "local", "down", "--wipe", *cluster],
                cwd=project,
                env=env,
                capture_output=True,
                timeout=120,
            )
    report(args, sampler, measured, checks, len(delivered), waits, own)


def report(
    args,
    sampler: Sampler,
    measured: dict[str, list[float]],
    checks: dict[str, int],
    delivered: int,
    waits: dict[str, list[float]],
    own: tuple[dict[str, tuple[int, float, float]], float],
) -> None:
    windows = max(1, len(measured.get(TABLE, [])))
    cores = os.cpu_count() or 1
    print(
        f"\n{args.minutes} min of `make ui` after `make demo` ({args.per_minute} orders a minute), "
        f"{windows} windows measured (closed after the first {WARM_UP_S} s and 90 s before the end)"
    )
    print("from a window's close to ...          p50       p95       max   (s)")
    for name, values in measured.items():
        print(f"  {name:<34} {statistics.median(values):8.1f}  {percentile(values, 0.95):8.1f}  {max(values):8.1f}")
    if not measured:
        print("  (no window closed in the measured span: run longer)")
    print(
        "most runs queued at once, per job (whole run / after the warm-up): "
        + (
            ", ".join(f"{j} {n} / {sampler.queued_warm.get(j, 0)}" for j, n in sorted(sampler.queued.items()))
            or "none ever queued"
        )
    )
    for job, (when, runs) in sorted(sampler.crowded.items()):
        print(f"  {job}: {len(runs)} queued at {when - sampler.started:.0f} s: " + "; ".join(runs))
    print(
        "queue wait, enqueued -> handed to the launcher, per job (median, max s): "
        + (
            ", ".join(
                f"{j} {statistics.median(w):.1f} / {max(w):.1f} ({len(w)} runs)" for j, w in sorted(waits.items())
            )
            or "none"
        )
    )
    for label, loads in (
        ("whole run", [load for _, load in sampler.loads]),
        ("after the warm-up", [load for when, load in sampler.loads if when >= sampler.warm_from]),
    ):
        if loads:
            above = sum(load >= cores for load in loads) / len(loads)
            print(
                f"load average (1 min), {label}: median {statistics.median(loads):.2f}, max {max(loads):.2f} "
                f"on {cores} cores, {above:.1%} of samples at or above it"
            )
    at_warm = sampler.at_warm or {}
    # After the warm-up only: over the whole run the classes also count what the servers used before sampling began.
    unclassed_warm = sampler.unclassed - sampler.unclassed_at_warm
    ours = {kind: seconds for kind, seconds in sampler.cpu.items() if kind != PEER}
    warm_minutes = max(args.minutes - WARM_UP_S / 60, 1e-9)
    warm = {kind: seconds - at_warm.get(kind, 0.0) for kind, seconds in ours.items()}
    print(
        "CPU seconds per window (a minute), everything but the peer: "
        f"{sum(ours.values()) / args.minutes:.1f} over the whole run, "
        f"{sum(warm.values()) / warm_minutes:.1f} after the first {WARM_UP_S} s"
    )
    print(f"  {'':<26} {'all':>6} {'warm':>6}")
    for kind, seconds in sorted(ours.items(), key=lambda kv: -kv[1]):
        print(f"  {kind:<26} {seconds / args.minutes:6.1f} {warm[kind] / warm_minutes:6.1f}")
    print(
        f"  {'in no class (short-lived)':<26} {'':>6} {unclassed_warm / warm_minutes:6.1f}"
        "   (the machine's busy time less the classes, the peer and this benchmark's sampling)"
    )
    print(
        f"the peer (Java DefaultMQPushConsumer, {delivered} deliveries): "
        f"{sampler.cpu.get(PEER, 0.0) / args.minutes:.2f} CPU-s a minute"
    )
    print(
        "a window's own runs after the warm-up, CPU seconds a run: its process + the Spark server and its workers "
        "while it ran"
    )
    by_job, between = own
    for job, (runs, process, spark) in by_job.items():
        print(f"  {job:<34} {process:5.1f} + {spark:5.1f} = {process + spark:5.1f}   ({runs} runs)")
    print(f"  the Spark server and its workers while no run was under way: {between / warm_minutes:.1f} CPU-s a minute")
    print("asset checks failed: " + (", ".join(f"{k} x{n}" for k, n in sorted(checks.items())) or "none"))


if __name__ == "__main__":
    main()
