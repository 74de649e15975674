"""Runs killed at any instant: the next run is never blocked, and repairs everything, exactly once.

Every run here is the real ``dagster asset materialize`` CLI (on rocketlake's own code location, whose executor
reclaims dead runs' pool slots) on one Dagster instance configured as the docs recommend (``rocketlake/dagster/dagster.yaml``: pools on, limit 1 per consumer group), started as the
leader of a session of its own, so a kill takes the Dagster process and Spark's JVM with it (PySpark's
Python workers exit with the JVM). After each kill the same command runs again and must finish within
the normal run time plus ``RERUN_SLACK_S`` (or twice the normal time, if longer), leave exactly one row
per message the Java producer sent (delta-rs reads the table) and the consumer group's offsets where
mqadmin says they belong.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from dagster import DagsterInstance
from dagster._core.storage.dagster_run import DagsterRunStatus
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError
from pyarrow import fs

from rocketlake.dagster.run_guard import recorded_process
from rocketlake.delta.storage import delta_rs_options
from rocketlake.engine.config import LakeConfig
from tests.dagster_instance import recommended_home
from tests.integration.ingestion_support import materialize_command, unique, write_config

pytestmark = pytest.mark.stack
ROOT = Path(__file__).resolve().parents[2]
DAGSTER = str(Path(sys.executable).parent / "dagster")
# The random-instant trials: 2 in `make test` (CI: a table's first run and a later one), 50 in `make soak`; ROCKETLAKE_CRASH_TRIALS sets another count and
# ROCKETLAKE_CRASH_SEED replays the instants of a printed seed.
TRIALS = int(os.environ.get("ROCKETLAKE_CRASH_TRIALS", "2"))
KILL_WITHIN = 0.7  # of the calibration run's time: where the random instants are drawn
RERUN_SLACK_S = 60  # the stated bound: a re-run after a kill takes at most the normal run time plus this,


def rerun_bound(normal_s: float) -> float:
    """...or twice the normal time where that is longer: a busy CI machine stretches every run alike, and a
    blocked re-run (what this guards against) never finishes at all."""
    return normal_s + max(RERUN_SLACK_S, normal_s)


CRASH_POINTS = ROOT / "tests" / "crash_points"  # the sitecustomize that arms a named point (nothing in the product)


def armed(env: dict, point: str) -> dict:
    """``env`` with the named crash point armed in every Python process of the run (Spark's workers included)."""
    return dict(
        env,
        ROCKETLAKE_FAILPOINT=point,
        PYTHONPATH=os.pathsep.join(p for p in (str(CRASH_POINTS), env.get("PYTHONPATH")) if p),
    )


#: Most a run may print, and most a scanned file may hold, before the test fails instead of reading it: a full CI
#: run once lost a pytest worker to the kernel's OOM killer (16 GB) in this file, and the reader must never be what
#: runs out of memory.
READ_CAP = 64 * 1024 * 1024


def start_cli(env: dict, table: str, partition: str) -> subprocess.Popen:
    """The CLI, its output going to a file (``proc.output_path``): a pipe nobody reads while the test waits would
    stall a run that prints more than the pipe holds."""
    fd, name = tempfile.mkstemp(prefix="dagster-cli-", suffix=".log")
    with os.fdopen(fd, "w") as out:
        proc = subprocess.Popen(
            materialize_command(table, partition),
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
    proc.output_path = Path(name)
    return proc


def text_of(path: Path, what: str) -> str:
    """``path``'s text, or a failure that shows its two ends when it is larger than ``READ_CAP``."""
    size = path.stat().st_size
    if size > READ_CAP:
        with path.open("rb") as f:
            head = f.read(3000).decode("utf-8", "replace")
            f.seek(size - 3000)
            tail = f.read().decode("utf-8", "replace")
        pytest.fail(f"{what} holds {size} bytes (more than {READ_CAP}); it begins:\n{head}\n...\nand ends:\n{tail}")
    return path.read_text(errors="replace")


def output_of(proc: subprocess.Popen) -> str:
    try:
        return text_of(proc.output_path, "the run's output")
    finally:
        proc.output_path.unlink(missing_ok=True)


def materialize_cli(env: dict, table: str, partition: str, timeout: float = 600) -> tuple[int, str, float]:
    """Run the CLI to its end: (exit code, output, seconds)."""
    began = time.monotonic()
    proc = start_cli(env, table, partition)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        pytest.fail(
            f"the run of {table} {partition} was still running after {timeout:.0f}s:\n{output_of(proc)[-3000:]}"
        )
    return proc.returncode, output_of(proc), time.monotonic() - began


def scheduled_run(env: dict, table: str, partition: str, timeout: float = 600) -> tuple[int, str, float]:
    """A run of the table's job as its schedule launches it (tagged with the schedule's name: it starts where the
    group stands, not at the window's start), through the CLI: (exit code, output, seconds)."""
    tags = json.dumps({"dagster/partition": partition, "dagster/schedule_name": f"{table}_windows"})
    began = time.monotonic()
    proc = subprocess.run(
        [DAGSTER, "job", "execute", "-m", "rocketlake.definitions", "-j", f"{table}_job", "--tags", tags],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - began


def table_state(path: str) -> str:
    """What a kill left of a local table: nothing, a Delta log with no commit yet, or N commits."""
    log = Path(path) / "_delta_log"
    if not log.exists():
        return "absent"
    commits = len(list(log.glob("*.json")))
    return f"{commits} commits" if commits else "log without commit"


@pytest.fixture
def instance_home(tmp_path: Path) -> Path:
    return recommended_home(tmp_path / "dagster_home")  # the README's recommended instance


class Ingestion:
    """One table and consumer group of the ``produced`` topic, run through the CLI on one instance; its lake a local
    folder, or the bucket of an S3 server (``s3``: ``LocalS3``)."""

    def __init__(self, tmp_path: Path, cluster, produced, home: Path, s3=None, spark: dict | None = None, **extra):
        self.table, self.group = unique("t"), unique("g")
        self.produced, self.admin = produced, cluster.mqadmin()
        folder = tmp_path / self.table
        folder.mkdir()
        self.spec = {"topic": produced.topic, "consumer_group": self.group, "table": self.table, **extra}
        self.cluster, self.lake_root = cluster, tmp_path / "lake"
        self.spark = spark  # None: each run starts Spark of its own; else the `spark` block (a Connect server)
        config = write_config(folder / "rocketlake.yaml", cluster, self.lake_root, {"orders": self.spec}, spark)
        self.lake = LakeConfig(root=str(tmp_path / "lake"))
        self.events = folder / "spark_events"  # Spark's event log (on S3 only): what a history server shows
        if s3 is not None:
            self.lake = LakeConfig(**s3.lake_settings(unique("crash")))
            body = yaml.safe_load(config.read_text())
            body["lake"] = self.lake.model_dump(exclude_none=True)
            if spark is None:  # each run's own JVM logs its events here; a Connect server logs them where it was told
                self.events.mkdir()
                body["spark"]["conf"] = {
                    "spark.eventLog.enabled": "true",
                    "spark.eventLog.dir": self.events.as_uri(),
                    "spark.eventLog.compress": "false",
                }
            config.write_text(yaml.safe_dump(body))
        self.env = dict(os.environ, ROCKETLAKE_CONFIG=str(config), DAGSTER_HOME=str(home))
        self.path = self.lake.table_path(self.table)

    def as_member(self, instance_name: str) -> dict:
        """The environment of the same ingestion run by another member of its group, on the same Dagster instance:
        this deployment after its IP changed, say (the client id is ``ip@instance_name``)."""
        config = write_config(
            Path(self.env["ROCKETLAKE_CONFIG"]).with_name(f"{instance_name}.yaml"),
            self.cluster,
            self.lake_root,
            {"orders": {**self.spec, "instance_name": instance_name}},
            self.spark,
        )
        return dict(self.env, ROCKETLAKE_CONFIG=str(config))

    def delta(self) -> DeltaTable:
        return DeltaTable(self.path, storage_options=delta_rs_options(self.lake))

    def commits(self) -> int:
        """The table's Delta commits (0 when there is no table yet)."""
        try:
            return self.delta().version() + 1
        except TableNotFoundError:
            return 0

    def assert_rows_once(self, windows: list[str]) -> None:
        """The table holds each message of ``windows`` once, and nothing else."""
        expected = [m for w in windows for m in self.produced.in_window(w)]
        rows = self.delta().to_pyarrow_table(columns=["msg_id"]).to_pylist()
        assert Counter(r["msg_id"] for r in rows) == Counter(m["msgId"] for m in expected)

    def assert_landed_exactly_once(self, windows: list[str]) -> None:
        self.assert_rows_once(windows)
        expected = [m for w in windows for m in self.produced.in_window(w)]
        ends = Counter()
        for m in expected:
            ends[(m["brokerName"], m["queueId"])] = max(ends[(m["brokerName"], m["queueId"])], m["queueOffset"] + 1)
        assert self.committed() == dict(ends)

    def committed(self) -> dict:
        return {
            (q.broker_name, q.queue_id): q.consumer_offset
            for q in self.admin.consumer_progress(self.group, self.produced.topic)
            if q.topic == self.produced.topic and q.consumer_offset
        }


#: The named places a run can die at, in the order a run reaches them.
WORST_PLACES = ("during_pull", "during_write", "after_delta_commit", "before_offset_commit")
#: Where the S3 chain kills a run with a Spark of its own: in Spark's Python workers, which are the run's own only there.
SPARK_PLACES = WORST_PLACES[:2]
#: Where it kills a run whose session is on a Spark Connect server: in its own process, after the Delta commit and
#: before the offsets'. (The pulls and the writes are the server's Python workers' and JVM's, which a run's death
#: does not stop: a late commit of its slice is refused by Delta's conflict check once a later run replaced it, and
#: ``test_runs_killed_at_random_instants_never_block_the_next`` kills such runs at random instants.) These two
#: places are the same code in both modes: each half of the chain takes the places only it can reach.
CLIENT_PLACES = WORST_PLACES[2:]


@pytest.mark.parametrize("places", [SPARK_PLACES, CLIENT_PLACES], ids=["own_spark", "spark_connect"])
def test_killed_at_each_worst_place_in_turn_is_repaired_by_the_next(
    places, request, tmp_path, local_cluster, produced, instance_home, local_s3
):
    """One window's run killed at each named place in turn, each run after a kill (the next armed one, then a clean
    one) finding what the last left: its pool slot, files written without a commit, a commit whose offsets never
    moved. On the lake production runs on, S3 (the tests' S3 server), where a Delta commit is one object written:
    the other tests of this file keep their tables in a local folder. With a Spark of each run's own, killed in its
    Python workers (``SPARK_PLACES``); on the Spark Connect server started with the bucket's settings and keys, as the
    local runtime runs by default, killed in the run's own process (``CLIENT_PLACES``)."""
    server = request.getfixturevalue("s3_spark_connect") if places is CLIENT_PLACES else None
    ingestion = Ingestion(
        tmp_path,
        local_cluster,
        produced,
        instance_home,
        s3=local_s3,
        spark=server.settings() if server else None,
        max_messages_per_task=3,
    )  # small tasks: a kill mid-write finds some files written
    window, _ = produced.windows()
    outputs = []
    for point in places:
        code, output, _ = materialize_cli(armed(ingestion.env, point), ingestion.table, window)
        outputs.append(output)
        assert code == -signal.SIGKILL, f"{point}: {output[-2000:]}"
        if point != places[0]:
            assert "died without finishing" in output, point  # the killed run before held the group's slot
        assert ingestion.committed() == {}, point  # no offset moved before the data was recorded
        if point in ("during_pull", "during_write"):
            assert ingestion.commits() == 0, point  # no Delta commit: the table is as it was
        else:  # the window's rows, once each, whether this run committed them or replaced the last run's commit
            ingestion.assert_rows_once([window])

    code, output, _ = materialize_cli(ingestion.env, ingestion.table, window)
    outputs.append(output)
    assert code == 0, output[-3000:]
    assert "died without finishing" in output
    ingestion.assert_landed_exactly_once([window])
    # The S3 secret is in no run's output, Dagster event log or metadata, Spark event log (whose environment lists
    # the Hadoop settings, the S3A keys among them) or object of the table (the ledger is in its commits).
    secret = os.environ[ingestion.lake.s3.secret_key_env]
    assert all(secret not in text for text in outputs)
    with DagsterInstance.from_config(str(instance_home)) as instance:
        assert all(secret not in repr(instance.all_logs(run.run_id)) for run in instance.get_runs())
    if server is None:
        spark_events = {
            path: text_of(path, "Spark's event log") for path in ingestion.events.rglob("*") if path.is_file()
        }
    else:  # the server's event log, its log and its processes' command lines
        spark_events = server.readable()
    assert spark_events and any("s3a://" in text for text in spark_events.values())
    assert all(secret not in text for text in spark_events.values())
    filesystem = local_s3.filesystem()
    scanned = []
    for info in filesystem.get_file_info(fs.FileSelector(ingestion.path[len("s3a://") :], recursive=True)):
        if info.type == fs.FileType.File and "/_delta_log/" in info.path:
            assert info.size <= READ_CAP, f"{info.path} holds {info.size} bytes"
            with filesystem.open_input_stream(info.path) as stream:
                assert secret.encode() not in stream.read(), info.path
            scanned.append(info.path)
    # Every commit of the table was read (a verdict and its landing at least: a scan of nothing would pass).
    assert len([p for p in scanned if p.endswith(".json")]) >= ingestion.commits() >= 2, scanned


def test_a_broadcasting_member_killed_while_writing_its_offset_store_restarts_from_a_valid_store(
    tmp_path, local_cluster, produced, instance_home, spark_connect
):
    """SIGKILL between the store write's two renames (the old file moved to ``.bak``, the new one not in place):
    the store left behind is readable and one commit behind, and the re-run lands the window once and moves the
    store to the queues' ends; the brokers hold no offset of the group."""
    from rocketlake.engine.offset_store import LocalOffsetStore, store_path

    stores = tmp_path / "offsets"
    # The run's process dies; its session is on the long-lived Spark server, which goes on serving.
    ingestion = Ingestion(
        tmp_path,
        local_cluster,
        produced,
        instance_home,
        spark=spark_connect.settings(),
        message_model="BROADCASTING",
        client_ip="127.0.0.1",
        instance_name="eu9",
        local_offset_store_dir=str(stores),
    )
    store = store_path(stores, "127.0.0.1@eu9", ingestion.group)
    w1, w2 = produced.windows()

    def ends(windows):
        last = Counter()
        for m in (m for w in windows for m in produced.in_window(w)):
            last[(m["brokerName"], m["queueId"])] = max(last[(m["brokerName"], m["queueId"])], m["queueOffset"] + 1)
        return dict(last)

    def offsets(path=store):
        return {
            (mq.broker_name, mq.queue_id): o
            for mq, o in LocalOffsetStore(path).offsets.items()
            if mq.topic == produced.topic
        }

    code, output, _ = materialize_cli(ingestion.env, ingestion.table, w1)
    assert code == 0, output[-3000:]
    assert offsets() == ends([w1])

    code, output, _ = materialize_cli(armed(ingestion.env, "offset_store_between_renames"), ingestion.table, w2)
    assert code == -signal.SIGKILL, output[-2000:]
    assert not store.exists() and store.with_name("offsets.json.bak").exists()  # killed between the renames
    assert offsets() == ends([w1])  # what is left is a valid store, one commit behind

    code, output, _ = materialize_cli(ingestion.env, ingestion.table, w2)
    assert code == 0, output[-3000:]
    assert offsets() == ends([w1, w2])
    rows = DeltaTable(str(ingestion.path)).to_pyarrow_table(columns=["msg_id"]).to_pylist()
    assert Counter(r["msg_id"] for r in rows) == Counter(m["msgId"] for w in (w1, w2) for m in produced.in_window(w))
    assert ingestion.committed() == {}  # BROADCASTING commits nothing to the brokers


def test_runs_killed_at_random_instants_never_block_the_next(
    tmp_path, local_cluster, produced, instance_home, summary_line, spark_connect
):
    """``TRIALS`` kills at uniformly random instants of a run, half in a table's first run, half in a later one. The
    runs open their sessions on the long-lived Spark server, as on the local runtime: a run killed while the server
    works for it must leave nothing that lands later, and the re-run starts at once, while the server may still be
    reaping the dead run's work."""
    seed = int(os.environ.get("ROCKETLAKE_CRASH_SEED", time.time_ns() % 1_000_000))
    summary_line(
        f"crash trials: {TRIALS} at random instants, seed {seed} "
        f"(replay: ROCKETLAKE_CRASH_SEED={seed} ROCKETLAKE_CRASH_TRIALS={TRIALS} make soak)"
    )
    rng = random.Random(seed)
    w1, w2 = produced.windows()
    warm = spark_connect.settings()
    calibration = Ingestion(tmp_path, local_cluster, produced, instance_home, spark=warm)
    code, output, normal_s = materialize_cli(calibration.env, calibration.table, w1)
    assert code == 0, output[-3000:]
    calibration.assert_landed_exactly_once([w1])

    report = []
    for trial in range(TRIALS):
        # Even trials kill a table's first-ever run (no Delta commit yet); odd ones the next window's run.
        if trial % 2 == 0:
            ingestion = Ingestion(tmp_path, local_cluster, produced, instance_home, spark=warm)
            window, landed = w1, [w1]
        else:
            window, landed = w2, [w1, w2]
        # Within the first 70% of the calibration run's time: a trial's run is often quicker than that first, cold
        # run of the file, and a kill drawn after its end is no crash at all (2 of 4 trials were none in one CI run).
        kill_at = rng.uniform(0, KILL_WITHIN * normal_s)
        for _ in range(4):
            began = time.monotonic()
            proc = start_cli(ingestion.env, ingestion.table, window)
            try:
                proc.wait(timeout=kill_at)  # the random instant itself: the run goes on meanwhile
                killed = False
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                killed = True
            output = output_of(proc)
            if killed:
                break
            # The run ended before the instant (a warm run is quicker than the calibration): that was no crash.
            # Draw again within this run's own time; the window is landed now, so the kill hits its landing anew.
            kill_at = rng.uniform(0, KILL_WITHIN * (time.monotonic() - began))
        left = table_state(ingestion.path)

        code, rerun_output, rerun_s = materialize_cli(
            ingestion.env, ingestion.table, window, timeout=rerun_bound(normal_s)
        )
        context = f"seed {seed}, trial {trial}, killed at {kill_at:.1f}s of {normal_s:.1f}s"
        assert code == 0, f"{context}\n{output[-1500:]}\n--- re-run ---\n{rerun_output[-3000:]}"
        ingestion.assert_landed_exactly_once(landed)
        with DagsterInstance.from_config(str(instance_home)) as instance:
            # Nothing holds or waits for a slot once the re-run is done, and no dead run is left STARTED.
            assert instance.event_log_storage.get_concurrency_run_ids() == set(), context
            stuck = [
                r.run_id for r in instance.get_runs() if r.status == DagsterRunStatus.STARTED and recorded_process(r)
            ]
            assert stuck == [], context
        report.append(
            (trial, round(kill_at, 1), killed, left, "died without finishing" in rerun_output, round(rerun_s, 1))
        )
    print(
        f"\nseed {seed}; normal run {normal_s:.1f}s; (trial, kill at s, killed, table left, slot reclaimed, re-run s):"
    )
    print("\n".join(map(str, report)))
    assert all(r[2] for r in report), report  # every trial really was a crash


@pytest.fixture
def failing_downstream(produced) -> Iterator[Path]:
    """The raised flag of ``fail_every_third_while_flagged`` on the ``produced`` topic (a file the Spark server's
    Python workers see), lowered at the end whatever the test left. Raising a flag already up fails: another test
    of the session would be failing the same topic's messages."""
    from tests.unit.listeners import fail_flag

    flag = Path(fail_flag(produced.topic))
    flag.touch(exist_ok=False)
    try:
        yield flag
    finally:
        flag.unlink(missing_ok=True)


def test_runs_killed_during_or_after_send_back_land_every_message_once(
    tmp_path, local_cluster, produced, instance_home, spark_connect, failing_downstream
):
    """A listener fails every third message once. The run of each window is killed while it sends failures back
    (window 1) and after it sent them all, before the materialization (window 2); each re-run sends back again (window
    1's by the same deployment under another client id, as its schedule would run it). The copies come back, some
    twice, in the windows of the following minutes: landing those, every message is in the table exactly once, and
    the offsets are where they belong; so after window 1 is landed again once the listener no longer fails.

    The runs open their sessions on the long-lived Spark server: both points are in the run's own process (the
    send-back follows the landing, whose Spark work is done), and the listener, in the server's Python workers,
    finds its flag by the messages' topic."""
    from rocketlake.rocketmq.client import RocketMQClient
    from tests.integration.ingestion_support import minute_key, wait_until

    ingestion = Ingestion(
        tmp_path,
        local_cluster,
        produced,
        instance_home,
        spark=spark_connect.settings(),
        listener="tests.unit.listeners:fail_every_third_while_flagged",
        metadata_columns=["reconsume_times"],
    )
    first_retry_ms = int(time.time()) // 60 * 60_000
    failing = {
        w: [m for m in produced.in_window(w) if int(m["properties"]["seq"]) % 3 == 0] for w in produced.windows()
    }
    for window, point in zip(produced.windows(), ("during_send_back", "after_send_back")):
        before = ingestion.committed()
        code, output, _ = materialize_cli(armed(ingestion.env, point), ingestion.table, window)
        assert code == -signal.SIGKILL, output[-2000:]
        assert ingestion.committed() == before  # killed before the materialization: no offset moved
        if point == "during_send_back":
            # The window's next run is a scheduled one (it starts where the group stands) by the same deployment
            # under another client id (its IP changed): it must not trust the killed run's landing, whose
            # failures were only half sent back, and so must land the window again and send them all back.
            code, output, _ = scheduled_run(ingestion.as_member("moved"), ingestion.table, window)
        else:
            code, output, _ = materialize_cli(ingestion.env, ingestion.table, window)
        assert code == 0, output[-3000:]
        assert f"sent back {len(failing[window])} failed message(s)" in output, output[-3000:]
    # The failed messages are not in the table yet; the rest are, once each.
    rows = DeltaTable(str(ingestion.path)).to_pyarrow_table(columns=["origin_msg_id"]).to_pylist()
    failed_ids = {m["msgId"] for ms in failing.values() for m in ms}
    assert Counter(r["origin_msg_id"] for r in rows) == Counter(m for m in produced.by_msg_id if m not in failed_ids)

    # Wait for the broker to deliver every copy sent back into the retry topic (3 s delay on the test brokers): half
    # of window 1's failures by the killed run, all by its re-run, all of window 2's twice. Then land the minutes
    # they were stored in.
    copies = (
        len(failing[produced.windows()[0]]) // 2
        + len(failing[produced.windows()[0]])
        + 2 * len(failing[produced.windows()[1]])
    )
    with RocketMQClient(local_cluster.spec.namesrv_address) as client:
        deadline = time.monotonic() + 60
        while sum(client.get_max_offset(q) for q in client.queues(f"%RETRY%{ingestion.group}")) < copies:
            assert time.monotonic() < deadline, "the broker did not deliver the copies sent back"
            time.sleep(0.5)
    last_retry_ms = int(time.time()) // 60 * 60_000
    wait_until((last_retry_ms + 60_000) / 1000 + 3)
    span = f"{minute_key(first_retry_ms)}...{minute_key(last_retry_ms)}"
    proc = subprocess.run(
        [
            DAGSTER,
            "asset",
            "materialize",
            "-m",
            "rocketlake.definitions",
            "--select",
            ingestion.table,
            "--partition-range",
            span,
        ],
        cwd=ROOT,
        env=ingestion.env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    rows = DeltaTable(str(ingestion.path)).to_pyarrow_table(columns=["origin_msg_id", "reconsume_times"]).to_pylist()
    assert Counter(r["origin_msg_id"] for r in rows) == Counter(list(produced.by_msg_id))  # each exactly once
    assert {r["origin_msg_id"] for r in rows if r["reconsume_times"] == 1} == failed_ids
    ingestion.assert_landed_exactly_once(produced.windows())  # and the group's offsets on the topic are its ends

    # The downstream recovered; window 1 is landed again (a backfill): its originals now succeed, but their
    # redelivered copies are in the table already, from the later windows: the originals are duplicates.
    failing_downstream.unlink()
    code, output, _ = materialize_cli(ingestion.env, ingestion.table, produced.windows()[0])
    assert code == 0, output[-3000:]
    rows = DeltaTable(str(ingestion.path)).to_pyarrow_table(columns=["origin_msg_id", "reconsume_times"]).to_pylist()
    assert Counter(r["origin_msg_id"] for r in rows) == Counter(list(produced.by_msg_id))
    assert {r["origin_msg_id"] for r in rows if r["reconsume_times"] == 1} == failed_ids
