"""The chaos soak: the daemon-driven pipeline under faults drawn from a printed seed, judged on its real end state.

What Jepsen and RocketMQ's OpenChaos do, on this machine: state the invariants, inject the faults, check the
invariants on what the brokers and the table hold at the end, never on what the pipeline says about itself.

The pipeline is a deployment as the README's production shape runs it, minus PostgreSQL: a Dagster instance with
``dagster-daemon`` (the window schedule of one-minute windows, the lag sensor with its ``caught_up`` check and
catch-up runs, the rebalance and dead-run sensors), a ``rocketlake member`` process, runs opening their sessions on
one Spark Connect server. The Java producer sends a batch every few seconds; the listener fails the messages tagged
``flaky`` once and those tagged ``poison`` always (``tests.unit.listeners:fail_by_tag``), so runs send back and
dead-letter all along.

Faults (``FAULTS``), each at a time the seed draws, held for a drawn while, then undone:

- ``broker_kill``: broker-a (a master without a slave) SIGKILLed, started again on its store;
- ``broker_pause``: broker-b SIGSTOPped past every client timeout, then SIGCONT;
- ``run_kill``: the next run the daemon starts SIGKILLed at a random instant of its work;
- ``send_back_kill``: the next run with failures to send back killed half way through them;
- ``member_restart``: the deployment's host restarted under another IP: the member process and the run in flight
  killed, the member started under another client id;
- ``spark_restart``: the Spark Connect server stopped and started again under a run in flight (only where the soak
  owns the server);
- ``clock_step``: broker-b restarted on a clock 30 s behind (libfaketime), and back.

Invariants (``Soak.verdict``):

1. every message the brokers stored on the topic is in the table exactly once (its copy, if it came back), or, if
   tagged ``poison``, in ``<table>_dlq`` exactly once;
2. every queue's committed offset, on the topic, the group's retry topic and its dead-letter topic, is at its end;
3. no queue's oldest message not passed by the group (on the topic and the dead-letter topic) was ever older than
   ``STUCK_BOUND_S`` plus the longest hold;
4. each fault shows red in the UI, a ``fresh``, ``caught_up`` or ``broker_clock`` check failed after it began
   or, for a fault under a run in flight (a run killed, a host or the Spark server restarted), that run failed; and every check, the dead-letter table's ``caught_up`` too, is green at
   the end.

``make chaos`` runs 60 minutes with every fault; ``tests/chaos/test_short_soak.py`` (``make chaos-short``) runs a
short version with two faults. ``python -m tests.chaos.soak --seed N`` replays a printed schedule.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tests.faketime import faketime_env
from tests.integration.ingestion_support import wait_until

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
CRASH_POINTS = ROOT / "tests" / "crash_points"

FAULTS = ("broker_kill", "broker_pause", "run_kill", "send_back_kill", "member_restart", "spark_restart", "clock_step")
#: Seconds between two batches of the producer, and the batch: most orders pass, one fails once, one always.
PRODUCE_EVERY_S = 5.0
BATCH_TAGS = ("good",) * 6 + ("flaky",)
POISON_EVERY = 3  # batches
#: How far a queue may trail beyond a fault's hold: a window (60 s) + grace + slack + a scheduled and a catch-up
#: run's lead (the lag sensor asks at its next minute's tick), with room for a 2-core machine's slow run.
STUCK_BOUND_S = 300.0
GRACE_S, SLACK_S = 2, 45
#: The listener gives up on a message after this many redeliveries: poison reaches the DLQ after one round trip.
MAX_RECONSUME = 1
CHECKS = ("fresh", "caught_up", "broker_clock")
DLQ_CHECK = "caught_up"
#: A broker on a stepped clock is held at least this long: the lag sensor reads the clocks once a minute, and the
#: restart of the stepped broker takes some of the hold.
CLOCK_HOLD_S = 100.0


@dataclass
class Fault:
    kind: str
    at: float  # seconds after the soak starts producing
    hold: float  # seconds until it is undone (a kill of a run: until the soak gives up waiting for one)
    began: float | None = None
    ended: float | None = None
    detail: str = ""
    victim_run: str | None = None

    def describe(self) -> str:
        return f"{self.kind} at +{self.at:.0f}s for {self.hold:.0f}s"


def draw_faults(seed: int, minutes: float, kinds: tuple[str, ...] = FAULTS) -> list[Fault]:
    """Every kind once (then again, in a drawn order, while time is left): the first after three quiet windows,
    each in a slot of its own of at least six minutes, so each fault's recovery shows before the next begins; the
    last one undone at least five minutes before the producer stops."""
    rng = random.Random(seed)
    slot = 6 * 60.0
    first, last = 3 * 60.0, minutes * 60.0 - 5 * 60.0
    faults, at = [], first
    order = list(kinds)
    rng.shuffle(order)
    while at + 60 <= last:
        kind = order[len(faults) % len(order)]
        hold = rng.uniform(45, 120) if kind in ("broker_kill", "broker_pause", "clock_step") else 0.0
        hold = max(hold, CLOCK_HOLD_S) if kind == "clock_step" else hold
        faults.append(Fault(kind, at + rng.uniform(0, 60), hold))
        at += slot
    return faults


def short_faults(seed: int) -> list[Fault]:
    """The suite's version: a run killed in its send-back, then broker-a killed for a minute, inside four minutes."""
    rng = random.Random(seed)
    return [Fault("send_back_kill", rng.uniform(40, 60), 0.0), Fault("broker_kill", rng.uniform(80, 100), 60.0)]


@dataclass
class Observed:
    """What the monitor saw: the oldest message not passed, per queue, at worst (seconds)."""

    worst_age: dict[str, float] = field(default_factory=dict)
    ticks: int = 0
    errors: int = 0
    out_of_route: int = 0  # ticks the topic's route lacked a broker (the name server drops a stopped one at once)


class Soak:
    """One deployment, its producer, monitor and faults. ``cluster``: a running ``LocalCluster`` whose broker-a and
    broker-b it may kill; ``spark``: the ``spark:`` section of its configuration (a Connect server's settings);
    ``spark_server``: that server's ``LocalSparkServer`` when the soak may restart it."""

    failed = False  # an invariant violated at the end: the work folder is kept

    def __init__(
        self,
        workdir: Path,
        cluster,
        spark: dict,
        faults: list[Fault],
        *,
        seed: int,
        minutes: float,
        spark_server=None,
        log=print,
    ):
        from tests.dagster_instance import recommended_home
        from tests.integration.ingestion_support import unique

        self.workdir, self.cluster, self.spark, self.faults = workdir, cluster, spark, faults
        self.seed, self.minutes, self.spark_server, self.log = seed, minutes, spark_server, log
        self.topic, self.group, self.table = unique("chaos"), unique("g"), unique("t")
        self.lake = workdir / "lake"
        self.home = recommended_home(workdir / "dagster_home")
        self.config = workdir / "rocketlake.yaml"
        self.arm_file = workdir / "send-back.armed"
        self.members = 0
        self.member: subprocess.Popen | None = None
        self.daemon: subprocess.Popen | None = None
        self.sent = 0
        self.send_errors: list[str] = []
        self.observed = Observed()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.started = self.set_up_at = 0.0

    # -- the deployment --------------------------------------------------------------------------------------------
    @property
    def client_id(self) -> str:
        return f"127.0.0.1@chaos{self.members}"

    def _write_config(self) -> None:
        from tests.integration.ingestion_support import write_config

        write_config(
            self.config,
            self.cluster,
            self.lake,
            {
                "orders": {
                    "topic": self.topic,
                    "consumer_group": self.group,
                    "table": self.table,
                    "client_ip": "127.0.0.1",
                    "instance_name": f"chaos{self.members}",
                    "listener": "tests.unit.listeners:fail_by_tag",
                    "max_reconsume_times": MAX_RECONSUME,
                    "consume_message_batch_max_size": 1,
                    "metadata_columns": ["origin_msg_id", "reconsume_times"],
                    "window": {
                        "cron": "* * * * *",
                        "timezone": "UTC",
                        "grace_seconds": GRACE_S,
                        "freshness_slack_seconds": SLACK_S,
                        "start": self._window_start(),
                    },
                }
            },
            self.spark,
        )

    def _window_start(self) -> str:
        from datetime import datetime, timezone

        # The first window is the minute the soak begins in: no older window to catch up, none left out.
        return datetime.fromtimestamp(int(self.set_up_at) // 60 * 60, tz=timezone.utc).isoformat()

    @property
    def env(self) -> dict[str, str]:
        return dict(
            os.environ,
            ROCKETLAKE_CONFIG=str(self.config),
            DAGSTER_HOME=str(self.home),
            PYTHONPATH=os.pathsep.join(p for p in (str(CRASH_POINTS), str(ROOT), os.environ.get("PYTHONPATH")) if p),
            ROCKETLAKE_FAILPOINT="during_send_back",
            ROCKETLAKE_FAILPOINT_ONCE=str(self.arm_file),
        )

    def _dagster(self, *args: str) -> None:
        result = subprocess.run(
            [str(BIN / "dagster"), *args, "-m", "rocketlake.definitions"],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        if result.returncode != 0:
            raise RuntimeError(f"dagster {' '.join(args)}: {result.stdout[-2000:]}{result.stderr[-2000:]}")

    def _start_member(self) -> None:
        log = (self.workdir / f"member{self.members}.log").open("w")
        self.member = subprocess.Popen(
            [str(BIN / "rocketlake"), "member", "orders", "--config", str(self.config)],
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def _start_daemon(self) -> None:
        """The daemon as ``rocketlake local up --stack`` runs it, on a code server of its own."""
        from tests.integration.deployment_support import start_daemon

        self.daemon = start_daemon(self)

    def _restart_code_server(self) -> None:
        """The code server reads the configuration when it starts: a host restarted under another IP starts it
        again (the daemon finds it again at its next refresh of the workspace, within a minute)."""
        self.daemon.code_server.stop()
        self.daemon.code_server.start(self.env, cwd=ROOT)

    def setup(self) -> None:
        self.set_up_at = time.time()
        self.cluster.create_topic(self.topic, 4)  # 4 queues on each broker
        self._write_config()
        self._dagster("schedule", "start", f"{self.table}_windows")
        self._dagster("sensor", "start", "rocketlake_test_rebalance")
        self._start_member()
        self._start_daemon()
        self.log(
            f"chaos: seed {self.seed}, topic {self.topic}, group {self.group}, table {self.table}, "
            f"work in {self.workdir}"
        )
        for f in self.faults:
            self.log(f"chaos: planned {f.describe()}")
        self.started = time.time()  # the faults' clock, and the producer's: from a deployment that runs

    # -- producer and monitor --------------------------------------------------------------------------------------
    def _produce(self) -> None:
        from rocketlake.local.peers import produce

        batch = 0
        while not self._stop.is_set():
            tags = BATCH_TAGS + (("poison",) if batch % POISON_EVERY == 0 else ())
            messages = [
                {
                    "topic": self.topic,
                    "tags": tag,
                    "keys": [f"b{batch}-{i}"],
                    "properties": {"seq": str(i)},
                    "body": json.dumps({"order_id": f"b{batch}-{i}", "amount": i}),
                }
                for i, tag in enumerate(tags)
            ]
            try:
                self.sent += len(produce(self.cluster.spec.namesrv_address, self.cluster.spec.state_dir, messages))
            except Exception as e:  # a broker down: the batch may be partly stored; the end state tells
                self.send_errors.append(f"batch {batch}: {str(e).splitlines()[0][:200]}")
            batch += 1
            self._stop.wait(PRODUCE_EVERY_S)

    def _monitor(self) -> None:
        from rocketlake.rocketmq.client import RocketMQClient
        from rocketlake.rocketmq.errors import TopicNotExist

        brokers = {b.name for b in self.cluster.spec.brokers}
        while not self._stop.wait(10.0):
            try:
                with RocketMQClient(self.cluster.spec.namesrv_address, timeout=3.0) as client:
                    # The dead-letter topic's queues too (once the broker created it): they are caught up alike.
                    for topic, prefix in ((self.topic, ""), (f"%DLQ%{self.group}", "%DLQ%:")):
                        try:
                            queues = client.queues(topic)
                        except TopicNotExist:
                            continue
                        if not prefix and {q.broker_name for q in queues} != brokers:
                            self.observed.out_of_route += 1
                        for q in queues:
                            age = self._oldest_not_passed_age(client, q)
                            if age is not None:
                                key = f"{prefix}{q.broker_name}:{q.queue_id}"
                                self.observed.worst_age[key] = max(self.observed.worst_age.get(key, 0.0), age)
                self.observed.ticks += 1
            except Exception:  # a broker down or paused: its queues are judged once it answers again
                self.observed.errors += 1

    def _oldest_not_passed_age(self, client, q) -> float | None:
        try:
            committed = client.query_consumer_offset(self.group, q)
            end = client.get_max_offset(q)
        except Exception:
            return None
        if committed is None or committed < 0 or committed >= end:
            return 0.0
        found = client.pull(q, committed, 1, consumer_group=self.group).messages
        return time.time() - found[0].store_timestamp / 1000 if found else None

    # -- faults ----------------------------------------------------------------------------------------------------
    def _broker(self, key: str):
        return self.cluster.broker_processes[key]

    def _kill_broker(self, key: str) -> None:
        """SIGKILL a broker and return once it is gone (every thread: until then it holds its port, and the
        cluster's ``up`` would take it for running and start nothing)."""
        from rocketlake.local.process import stop_all

        stop_all([self._broker(key)], sig=signal.SIGKILL)

    def _next_started_run(self, since: float, timeout: float = 240.0):
        """The first run of the table's job started after ``since``, with the process it recorded."""
        from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

        from rocketlake.dagster.run_guard import recorded_process

        deadline = time.monotonic() + timeout
        with DagsterInstance.from_config(str(self.home)) as instance:
            while time.monotonic() < deadline and not self._stop.is_set():
                for run in instance.get_runs(RunsFilter(statuses=[DagsterRunStatus.STARTED])):
                    record = instance.get_run_record_by_id(run.run_id)
                    process = recorded_process(run)
                    if process is not None and record.start_time and record.start_time >= since:
                        return run, process
                time.sleep(0.2)  # polls the instance's run storage, which the daemon writes
        return None, None

    def _apply(self, fault: Fault, rng: random.Random) -> None:
        kind = fault.kind
        if kind == "broker_kill":
            self._kill_broker("broker-a")
        elif kind == "broker_pause":
            os.kill(self._broker("broker-b").pid(), signal.SIGSTOP)
        elif kind == "clock_step":
            self._kill_broker("broker-b")
            self.cluster.broker_env["broker-b"] = faketime_env("-30s")
            self.cluster.up()
        elif kind == "member_restart":
            # The deployment's host restarted under another IP: the member and the run in flight there die with
            # it; the dead-run sensor fails that run, and the new member's runs land what it left.
            run, process = self._run_in_flight(fault, rng)
            if run is not None:
                self._kill_run(fault, run, process)
            self.member.kill()
            self.member.wait()
            self.members += 1
            self._write_config()  # the runs read it when they start: the next one is the new member's
            self._restart_code_server()  # the sensors, when it starts
            self._start_member()
            fault.detail = f"{fault.detail}; member now {self.client_id}".lstrip("; ")
        elif kind == "spark_restart":
            if self.spark_server is None:
                fault.detail = "skipped: the soak does not own the Spark server"
                return
            # Under a run in flight, whose session goes with the server: that run fails, the next one lands it.
            run, _ = self._run_in_flight(fault, rng)
            self.spark_server.down()
            self.spark_server.up()
            if run is not None:
                fault.victim_run, fault.detail = run.run_id, f"restarted under run {run.run_id[:8]}"
        elif kind == "send_back_kill":
            self.arm_file.write_text("during_send_back\n")
            fault.detail = "armed: the next run with failures to send back dies half way through"
        elif kind == "run_kill":
            run, process = self._run_in_flight(fault, rng)
            if run is not None:
                self._kill_run(fault, run, process)

    def _run_in_flight(self, fault: Fault, rng: random.Random):
        """The next run the daemon starts, and its process, at a random instant of its work (most runs take 15-40
        s); (None, None) when none starts in time."""
        run, process = self._next_started_run(time.time())
        if run is None:
            fault.detail = "no run started in time"
            return None, None
        time.sleep(rng.uniform(0, 15))
        return run, process

    @staticmethod
    def _kill_run(fault: Fault, run, process) -> None:
        try:
            os.kill(process.pid, signal.SIGKILL)
            fault.victim_run, fault.detail = run.run_id, f"killed run {run.run_id[:8]} (pid {process.pid})"
        except ProcessLookupError:
            fault.detail = f"run {run.run_id[:8]} ended before the kill"

    def _undo(self, fault: Fault) -> None:
        kind = fault.kind
        if kind == "broker_kill":
            self.cluster.up()
        elif kind == "broker_pause":
            os.kill(self._broker("broker-b").pid(), signal.SIGCONT)
        elif kind == "clock_step":
            self._kill_broker("broker-b")
            self.cluster.broker_env.pop("broker-b", None)
            self.cluster.up()

    def _failed_run_since(self, since: float) -> str | None:
        """The first run to fail after ``since``: the run that took an armed send-back may have started before the
        arm (it reads the arm when it reaches its send-back), so it is found by when it failed."""
        from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

        with DagsterInstance.from_config(str(self.home)) as instance:
            failed = [
                (record.end_time, run.run_id)
                for run in instance.get_runs(RunsFilter(statuses=[DagsterRunStatus.FAILURE]))
                if (record := instance.get_run_record_by_id(run.run_id)).end_time and record.end_time >= since
            ]
        return min(failed)[1] if failed else None

    def _inject_all(self) -> None:
        rng = random.Random(self.seed + 1)
        t0 = self.started
        for fault in self.faults:
            wait_until(t0 + fault.at)
            fault.began = time.time()
            self.log(f"chaos: +{fault.began - t0:.0f}s {fault.kind} begins")
            self._apply(fault, rng)
            if fault.kind == "send_back_kill":
                deadline = time.time() + 240  # until a run has taken the arm (it dies), at most four windows
                while self.arm_file.exists() and time.time() < deadline:
                    time.sleep(1.0)  # polls a file the run's process removes
                fault.detail += "; taken" if not self.arm_file.exists() else "; no run reached it in 240 s"
                self.arm_file.unlink(missing_ok=True)
            else:
                wait_until(fault.began + fault.hold)
            self._undo(fault)
            fault.ended = time.time()
            self.log(f"chaos: +{fault.ended - t0:.0f}s {fault.kind} undone {fault.detail}")

    # -- the run of it ---------------------------------------------------------------------------------------------
    def run(self, drain_timeout: float = 600.0) -> list[str]:
        """Set up, produce for ``minutes`` under the faults, stop producing, wait for the pipeline to drain; the
        invariants' violations (none: the soak passed)."""
        self.setup()
        self._threads = [
            threading.Thread(target=self._produce, daemon=True),
            threading.Thread(target=self._monitor, daemon=True),
        ]
        for t in self._threads:
            t.start()
        self._inject_all()
        wait_until(self.started + self.minutes * 60)
        self._stop_producing()
        self.log(
            f"chaos: stopped producing after {self.sent} message(s) stored ({len(self.send_errors)} batch "
            f"error(s)); draining"
        )
        truth = self.stored_messages()
        deadline = time.time() + drain_timeout
        while True:
            problems = self.verdict(truth)
            if not problems or time.time() > deadline:
                return problems
            time.sleep(5.0)  # the daemon's next ticks land what is left (a verdict reads the tables and brokers)

    def _stop_producing(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=60)

    def stored_messages(self) -> list[dict]:
        """What the brokers hold on the topic, read by the Java consumer from each queue's first offset to its end."""
        from rocketlake.rocketmq.client import RocketMQClient
        from tests.java_oracles import consume

        with RocketMQClient(self.cluster.spec.namesrv_address) as client:
            ranges = {
                (q.broker_name, q.queue_id): (client.get_min_offset(q), client.get_max_offset(q))
                for q in client.queues(self.topic)
            }
        return [
            m
            for m in consume(self.cluster.spec.namesrv_address, self.cluster.spec.state_dir, self.topic, ranges)
            if "msgId" in m
        ]

    def verdict(self, truth: list[dict]) -> list[str]:
        from deltalake import DeltaTable

        from rocketlake.rocketmq.client import RocketMQClient
        from rocketlake.rocketmq.errors import TopicNotExist

        problems: list[str] = []
        poison = Counter(m["msgId"] for m in truth if m["tags"] == "poison")
        passed = Counter(m["msgId"] for m in truth if m["tags"] != "poison")

        rows_of: dict[str, list[dict]] = {}

        def origins(path: Path) -> Counter:
            # No commit yet: no table. A run that creates the table makes its log folder before its first commit
            # (and one killed in between leaves it so), which delta-rs refuses to open.
            if not any((path / "_delta_log").glob("[0-9]*.json")):
                return Counter()
            rows = (
                DeltaTable(str(path))
                .to_pyarrow_table(
                    columns=["origin_msg_id", "topic", "broker_name", "queue_id", "queue_offset", "window_start"]
                )
                .to_pylist()
            )
            for r in rows:
                rows_of.setdefault(r["origin_msg_id"], []).append(r)
            return Counter(r["origin_msg_id"] for r in rows)

        stored = {m["msgId"]: m for m in truth}

        def where(msg_id: str) -> str:
            """A message as the broker stored it, and each row that holds it: what a post-mortem starts from."""
            m = stored.get(msg_id, {})
            copies = "; ".join(
                f"{r['topic']} {r['broker_name']}:{r['queue_id']}@{r['queue_offset']} in window "
                f"{r['window_start']:%H:%M}"
                for r in rows_of.get(msg_id, [])
            )
            return (
                f"{msg_id} ({m.get('brokerName')}:{m.get('queueId')}@{m.get('queueOffset')}, stored "
                f"{m.get('storeTimestamp')}, tags {m.get('tags')}) rows: {copies or 'none'}"
            )

        for what, expected, landed in (
            ("table", passed, origins(self.lake / self.table)),
            ("dead-letter table", poison, origins(self.lake / f"{self.table}_dlq")),
        ):
            # By multiplicity, not "more than once": a producer that timed out on a paused broker and sent again
            # stored one message twice (two offsets, one msgId), and each stored copy must land once.
            missing = expected - landed
            twice = {k: n for k, n in landed.items() if k in expected and n > expected[k]}
            extra = Counter({k: n for k, n in landed.items() if k not in expected})
            if missing or twice or extra:
                named = [*missing, *twice, *extra][:12]
                problems.append(
                    f"1. the {what}: {sum(missing.values())} missing, {len(twice)} landed more often than stored, "
                    f"{sum(extra.values())} not expected there (of {sum(expected.values())}):\n    "
                    + "\n    ".join(where(k) for k in named)
                )
        with RocketMQClient(self.cluster.spec.namesrv_address) as client:
            # The dead-letter table is landed by the same group from %DLQ%<group>: its offsets too.
            for topic in (self.topic, f"%RETRY%{self.group}", f"%DLQ%{self.group}"):
                behind = []
                try:
                    queues = client.queues(topic)
                except TopicNotExist:  # no message was ever dead-lettered
                    continue
                for q in queues:
                    committed, end = client.query_consumer_offset(self.group, q), client.get_max_offset(q)
                    if end > (committed or 0):
                        behind.append(f"{q.broker_name}:{q.queue_id} {committed}/{end}")
                if behind:
                    problems.append(f"2. {topic}: committed offsets short of the ends on {', '.join(behind)}")
        bound = STUCK_BOUND_S + max((f.hold for f in self.faults), default=0.0)
        stuck = {q: round(a) for q, a in self.observed.worst_age.items() if a > bound}
        if stuck:
            problems.append(f"3. queues trailed past the bound of {bound:.0f}s: {stuck}")
        problems += self._checks_problems()
        return problems

    def check_history(self) -> dict[str, list[tuple[float, bool]]]:
        """Each lag check's evaluations, oldest first: (time, passed)."""
        from dagster import AssetCheckKey, AssetKey, DagsterInstance
        from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus

        out = {}
        # The dead-letter table's queues trail and catch up on their own (its ``caught_up`` check).
        keys = {name: AssetCheckKey(AssetKey(self.table), name) for name in CHECKS}
        keys[f"{self.table}_dlq {DLQ_CHECK}"] = AssetCheckKey(AssetKey(f"{self.table}_dlq"), DLQ_CHECK)
        with DagsterInstance.from_config(str(self.home)) as instance:
            for name, key in keys.items():
                records = instance.event_log_storage.get_asset_check_execution_history(key, limit=1000)
                out[name] = sorted(
                    (r.create_timestamp, r.status == AssetCheckExecutionRecordStatus.SUCCEEDED)
                    for r in records
                    if r.status in (AssetCheckExecutionRecordStatus.SUCCEEDED, AssetCheckExecutionRecordStatus.FAILED)
                )
        return out

    def _checks_problems(self) -> list[str]:
        from dagster import DagsterInstance, DagsterRunStatus

        history = self.check_history()
        problems = []
        for name, evaluations in history.items():
            if not evaluations or not evaluations[-1][1]:
                problems.append(f"4. check {name} is not green at the end ({len(evaluations)} evaluation(s))")
        red = sorted(t for evaluations in history.values() for t, ok in evaluations if not ok)
        with DagsterInstance.from_config(str(self.home)) as instance:
            for f in self.faults:
                if f.began is None or f.detail.startswith("skipped"):
                    continue
                reach = (f.ended or time.time()) + STUCK_BOUND_S
                shown = any(f.began <= t <= reach for t in red)
                if f.kind == "send_back_kill" and f.detail.endswith("taken"):
                    # the run that took the arm died; the rocketlake_dead_runs sensor failed it
                    f.victim_run = self._failed_run_since(f.began)
                if not shown and f.victim_run:
                    run = instance.get_run_by_id(f.victim_run)
                    shown = run is not None and run.status == DagsterRunStatus.FAILURE
                if not shown:
                    problems.append(f"4. {f.describe()} showed no red check and no failed run")
        return problems

    def report(self) -> str:
        history = self.check_history()
        lines = [
            f"seed {self.seed}: {self.sent} message(s) stored by the producer, {len(self.send_errors)} batch "
            f"error(s); monitor ticks {self.observed.ticks} ({self.observed.errors} with a broker not answering, "
            f"{self.observed.out_of_route} with one out of the route)",
            f"worst age of a queue's oldest message not passed: "
            f"{max(self.observed.worst_age.values(), default=0):.0f}s",
        ]
        for f in self.faults:
            lines.append(f"  {f.describe()}: {f.detail or 'done'}")
        for name, evaluations in history.items():
            reds = [t - self.started for t, ok in evaluations if not ok]
            lines.append(
                f"  check {name}: {len(evaluations)} evaluation(s), red at "
                f"{', '.join(f'+{t:.0f}s' for t in reds) or 'none'}"
            )
        return "\n".join(lines)

    def close(self) -> None:
        from tests.integration.deployment_support import stop_daemon

        self._stop.set()
        for key in ("broker-a", "broker-b"):
            pid = self._broker(key).pid()
            if pid is not None:
                try:
                    os.kill(pid, signal.SIGCONT)  # a paused broker must not outlive the soak stopped
                except ProcessLookupError:
                    pass
        if self.cluster.broker_env.pop("broker-b", None) is not None:
            self._kill_broker("broker-b")
        stop_daemon(self.daemon)
        if self.member is not None and self.member.poll() is None:
            self.member.kill()
            self.member.wait()


def main(argv: list[str] | None = None) -> int:
    import dataclasses

    from rocketlake.local.cluster import LocalCluster
    from rocketlake.local.spark_server import LocalSparkServer
    from tests.conftest import SHORT_DELAY_LEVELS, free_ports, make_spec

    parser = argparse.ArgumentParser(description="The chaos soak (tests/chaos/soak.py).")
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--faults", default=",".join(FAULTS), help="kinds to draw from, comma-separated")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs, lake, instance)")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 30)
    kinds = tuple(k for k in args.faults.split(",") if k)
    unknown = set(kinds) - set(FAULTS)
    if unknown:
        parser.error(f"--faults: {sorted(unknown)} are not among {list(FAULTS)}")
    print(f"chaos: seed {seed} (replay: make chaos SEED={seed})", flush=True)
    workdir = Path(tempfile.mkdtemp(prefix="rocketlake-chaos-"))
    (spark_port,) = free_ports(1)
    cluster = LocalCluster(
        dataclasses.replace(make_spec(workdir / "cluster"), extra_broker_properties=SHORT_DELAY_LEVELS)
    )
    server = LocalSparkServer(workdir / "spark", port=spark_port, env={"PYTHONPATH": str(ROOT)})  # the listener
    soak = None
    try:
        cluster.up()
        server.up()
        soak = Soak(
            workdir,
            cluster,
            {"master": "local[2]", "remote": server.url},
            draw_faults(seed, args.minutes, kinds),
            seed=seed,
            minutes=args.minutes,
            spark_server=server,
            log=lambda line: print(line, flush=True),
        )
        problems = soak.run()
        soak.failed = bool(problems)
        print(soak.report())
        for p in problems:
            print("VIOLATED", p)
        print(f"chaos: {'PASSED' if not problems else 'FAILED'} (seed {seed})")
        return 1 if problems else 0
    finally:
        if soak is not None:
            soak.close()
        server.down()
        cluster.down(wipe=True)
        if args.keep or (soak is not None and soak.failed):
            print(f"chaos: the work folder is kept for a post-mortem: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
