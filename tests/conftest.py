"""Fixtures on the real thing: a local RocketMQ cluster, the Java producer peer, Spark with Delta.

The cluster runs on free ports with its own state and store, so a demo cluster on the default
ports keeps running undisturbed while the tests run.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from rocketlake.jars import ROCKETMQ_4_VERSION, ROCKETMQ_VERSION
from rocketlake.local.cluster import LocalCluster
from rocketlake.local.peers import SentMessage, produce
from rocketlake.local.process import port_in_use
from rocketlake.local.spec import BrokerSpec, ClusterSpec, default_store_root
from tests.cpu_use import tree_cpu_seconds
from tests.spark_jvm import SparkJvmOptions

if TYPE_CHECKING:
    from rocketlake.local.spark_server import LocalSparkServer

_rng = random.Random()

# --------------------------------------------------------------------------------------------
# Tiers: what a test needs to run. Every test has exactly one; the suite runs them cheapest first, so a broken
# pure-logic test fails in the first minute, and prints the wall time each tier took at the end.

#: marker -> what a test of that tier needs (registered in pyproject.toml, in this order)
TIERS = {
    "unit": "pure logic: plain data, no process or service of its own",
    "broker": "a real name server and brokers, or the Java RocketMQ client (no Spark)",
    "engine": "the engine on real brokers, Spark and Delta, without Dagster",
    "dagster": "Dagster runs (in process) on real brokers, Spark and Delta",
    "stack": "the whole stack: CLI processes, daemons, PostgreSQL, a browser, runs killed",
}
TIER = pytest.StashKey[str]()
_tier_seconds: dict[str, float] = {tier: 0.0 for tier in TIERS}
_tier_outcomes: dict[str, dict[str, int]] = {tier: {} for tier in TIERS}
_session_started: list[float] = []
_cpu_at_start: list[tuple[float, float, float]] = []


def machine_cpu_seconds() -> tuple[float, float, float]:
    """(busy, total, stolen) CPU seconds of the whole machine since boot, from /proc/stat (all cores): whether a run
    was bound by the CPU or by waiting (for a minute to close, a broker, a run) is the ratio of the first two over the
    run. Stolen time (the hypervisor ran another guest on our cores) counts as busy: it is reported on its own, since
    it makes one full run slower than the next on the same code (vmstat showed 11-20% stolen while one ran)."""
    import os

    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    tick = os.sysconf("SC_CLK_TCK")
    steal = fields[7] if len(fields) > 7 else 0
    return (sum(fields[:8]) - idle) / tick, sum(fields[:8]) / tick, steal / tick


_summary_lines: list[str] = []
_slow_fixtures: list[tuple[float, str]] = []  # (seconds, "fixture (scope) for test"): where setup time goes
_file_cost: dict[str, list[float]] = {}  # test file -> [seconds held, CPU seconds of its worker's process tree]
#: files listed in the summary by what they cost, the costliest first
COSTLIEST_FILES = 20
#: a fixture's setup at least this long is listed in the summary
SLOW_FIXTURE_S = 15.0


@pytest.fixture
def summary_line(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """``summary_line(text)``: a line the run's summary prints whether the test passes or fails (a seed to replay).
    It travels with the test's reports, so it reaches the summary from a pytest-xdist worker too."""
    return lambda text: request.node.user_properties.append(("summary", text))


#: The quick compiler alone for the name servers, brokers and proxies the suite starts (``JAVA_OPT_EXT``, which the
#: local runtime appends as RocketMQ's start scripts do): their tests send tens to thousands of messages, never
#: enough for the optimising compiler to pay back its CPU; a cluster's start and first messages cost a third less. (With
#: the quick compiler alone the JVM's code cache would shrink to 48 MB: tests/spark_jvm.py.)
ROCKETMQ_TEST_JVM_OPTS = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=128m"


def pytest_sessionstart(session: pytest.Session) -> None:
    import os
    import time

    from tests import memory_guard

    _session_started.append(time.time())
    _cpu_at_start.append(machine_cpu_seconds())
    os.environ.setdefault("JAVA_OPT_EXT", ROCKETMQ_TEST_JVM_OPTS)  # every RocketMQ JVM the tests start, in any process
    capture = session.config.pluginmanager.getplugin("capturemanager")
    saved = getattr(getattr(getattr(capture, "_global_capturing", None), "err", None), "targetfd_save", None)
    memory_guard.start(saved)  # in the controller and in every pytest-xdist worker


#: the test being set up, run or torn down (a session fixture's own request names the session, not the test)
running_test: list[pytest.Item | None] = [None]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem) -> Iterator[None]:
    from tests import memory_guard

    memory_guard.current_test[0] = item.nodeid
    running_test[0] = item
    yield
    running_test[0] = None
    memory_guard.current_test[0] = "(between tests)"


class FixtureTimer:
    """Times each fixture's setup: pytest's durations charge a session fixture to the test that first used it, where
    it looks like that test's own setup. A slow one rides on that test's reports to the summary (from a worker too).
    A plugin of its own (``pytest_configure``): a conftest's hooks see only the fixtures of nodes below it, and a
    session fixture's node is the session."""

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef: pytest.FixtureDef, request: pytest.FixtureRequest) -> Iterator[None]:
        import time

        started = time.monotonic()
        yield
        seconds = time.monotonic() - started
        item = running_test[0]
        if seconds >= SLOW_FIXTURE_S and item is not None:
            item.user_properties.append(
                ("fixture", (round(seconds, 1), f"{fixturedef.argname} ({fixturedef.scope}) for {item.nodeid}"))
            )


class CpuMeter:
    """The CPU each test cost (tests/cpu_use.py), setup and teardown included; it rides on the test's teardown report
    to the summary, which adds it up by file (the unit pytest-xdist's loadfile hands out)."""

    started = pytest.StashKey[float]()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if item.stash.get(TIER, "unit") != "unit":
            item.stash[self.started] = tree_cpu_seconds()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Iterator[None]:
        yield
        if self.started in item.stash:
            item.user_properties.append(("cpu", tree_cpu_seconds() - item.stash[self.started]))


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(FixtureTimer(), "rocketlake-fixture-timer")
    config.pluginmanager.register(CpuMeter(), "rocketlake-cpu-meter")
    # The Java oracles (tests/java_peers) compile with the package's peers into every PeerServer from the first.
    import tests.java_oracles  # noqa: F401


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        marked = [m.name for m in item.iter_markers() if m.name in TIERS]  # the closest marker first
        if not marked:
            if item.path.parent.name != "unit":
                raise pytest.UsageError(f"{item.nodeid} has no tier marker: mark it with one of {', '.join(TIERS)}")
            item.add_marker(pytest.mark.unit)
            marked = ["unit"]
        item.stash[TIER] = marked[0]
        item.user_properties.append(("tier", marked[0]))  # for the summary, in whichever process reports it
        if marked[0] != "unit":
            item.add_marker(pytest.mark.integration)  # the umbrella of every tier that starts something real
    _check_shared_cluster_files(items)
    order = list(TIERS)
    if _distributed(config):
        # pytest-xdist hands out whole files in this order: the longest first (after the pure-logic tier), so that
        # no worker starts a long file while the other runs out of work.
        items.sort(key=lambda item: (item.stash[TIER] != "unit", _longest_first(item), order.index(item.stash[TIER])))
    else:
        items.sort(key=lambda item: order.index(item.stash[TIER]))  # stable: files keep their order in a tier
    if not config.option.collectonly and any(item.stash[TIER] in SPARK_TIERS for item in items):
        _spark_jvm.start()  # built (once per JDK and PySpark) while the cheaper tiers run


#: The files that take longest (minutes, measured by `make test`'s durations), handed out first. pytest-xdist's
#: loadfile keeps this order only with `--no-loadscope-reorder` (otherwise it sorts files by test count), which
#: `make test` passes. The shared-cluster files (SHARED_CLUSTER_FILES) go as one unit where the first of them comes:
#: the chaos soak's real minutes pass first, beside the longest file. The five after it need
#: the session's cluster but not the shared minutes, which it starts sending: by the time a worker reaches a file
#: that lands them (test_crash_recovery, test_ingestion) they are closed. A worker is handed a file as soon as two
#: of its tests are left, so one worker can take two or three one-test files in a row: with fewer of them ahead,
#: the other worker's first file of all could be test_crash_recovery, whose first test then waited three minutes.
LONGEST = (
    "test_short_soak.py",
    "test_deployed_stack.py",
    "test_consumer_group_daemon.py",
    "test_retry_and_dead_letters.py",
    "test_topic_changes.py",
    "test_consumer_group.py",
    "test_crash_recovery.py",
    "test_ingestion.py",
    "test_deleted_messages.py",
    "test_rocketmq_security.py",
    "test_ui.py",
)


#: Session clusters that only some files use: the disruptable one (brokers killed, restarted, files deleted) and the
#: 4.9 line's. An idle broker costs 2.5 CPU-s a minute (its store's and request services' polling threads), so each
#: such cluster in each worker took a sixth of a core for the rest of the session. Under `make test` (pytest-xdist's
#: loadfile, with the scheduler below) the files that use them are one unit, run by one worker one after the other,
#: which stops the two clusters once the last of them is done (``pytest_runtest_teardown``); every other file is a
#: unit of its own, as loadfile makes it. (xdist's own loadgroup cannot do it: it marks a group in the test ids,
#: which pytest 9 no longer lets a plugin change.)
SHARED_CLUSTER_GROUP = "shared-clusters"
#: fixtures through which a test reaches those clusters
SHARED_CLUSTER_FIXTURES = frozenset(
    {"disruptable_cluster", "disruptable", "disruptable_4x", "local_cluster_4x", "rocketmq_cluster"}
)
#: the files that use them, relative to the repository as test ids are (the scheduler sees test ids only, so they are
#: named here; collection checks the list)
SHARED_CLUSTER_FILES = frozenset(
    {
        "tests/chaos/test_short_soak.py",
        "tests/integration/test_topic_changes.py",
        "tests/integration/test_deleted_messages.py",
        "tests/integration/test_engine_runs.py",
        "tests/integration/test_lag_broker_down.py",
        "tests/integration/test_send_back_fallback.py",
        "tests/integration/test_broker_clock.py",
        "tests/integration/test_member.py",
        "tests/integration/test_on_4x.py",
        "tests/integration/test_rocketmq_broker_restart.py",  # asks for "disruptable" or "disruptable_4x" by name
        "tests/integration/test_java_peer_server.py",
        "tests/integration/test_rocketmq_membership.py",
        "tests/integration/test_rocketmq_offsets.py",
        "tests/integration/test_rocketmq_pull_outcomes.py",
        "tests/integration/test_rocketmq_pull_vs_java.py",
        "tests/integration/test_rocketmq_range_reader.py",
        "tests/integration/test_rocketmq_search_offset.py",
        "tests/integration/test_rocketmq_send.py",
    }
)
#: the session fixtures of those clusters running in this process (stopped early by the group's last test)
_shared_clusters: dict[str, LocalCluster] = {}


def in_shared_cluster_group(item: pytest.Item) -> bool:
    return item.nodeid.split("::", 1)[0] in SHARED_CLUSTER_FILES


def _check_shared_cluster_files(items: list[pytest.Item]) -> None:
    unlisted = sorted(
        {
            item.nodeid.split("::", 1)[0]
            for item in items
            if set(getattr(item, "fixturenames", ())) & SHARED_CLUSTER_FIXTURES and not in_shared_cluster_group(item)
        }
    )
    if unlisted:
        raise pytest.UsageError(
            f"{', '.join(unlisted)} use(s) a shared session cluster ({', '.join(sorted(SHARED_CLUSTER_FIXTURES))}): "
            "add it to SHARED_CLUSTER_FILES in tests/conftest.py, so that one worker runs every such file"
        )


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hooks: unknown without it (-p no:xdist)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """loadfile, with the SHARED_CLUSTER_FILES as one unit (handed out where the first of them comes)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedClusterScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return SHARED_CLUSTER_GROUP if path in SHARED_CLUSTER_FILES else path

    return SharedClusterScheduling(config, log)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """Tells each worker that the shared-cluster files come to it as one unit (see SHARED_CLUSTER_GROUP)."""
    node.workerinput["shared_cluster_group"] = node.config.getvalue("dist") == "loadfile"


def _stops_shared_clusters_early(config: pytest.Config) -> bool:
    """Only where the group's tests run together in one process: a worker of the scheduler above."""
    return bool(getattr(config, "workerinput", {}).get("shared_cluster_group"))


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """After the shared-cluster group's last test in this worker (the next is another unit's, or none), its clusters
    stop, not wiped (the session's end does that). No test of the group comes after it in this worker: the scheduler
    hands the group out whole, and collection checks that every file using those clusters is in it."""
    if not _stops_shared_clusters_early(item.config) or not in_shared_cluster_group(item):
        return
    if nextitem is not None and in_shared_cluster_group(nextitem):
        return
    stopped = sorted(_shared_clusters)
    for cluster in _shared_clusters.values():
        cluster.down()
    _shared_clusters.clear()
    if stopped:
        item.user_properties.append(("summary", f"stopped after {item.nodeid}: {', '.join(stopped)}"))


def _longest_first(item: pytest.Item) -> int:
    name = item.path.name
    return LONGEST.index(name) if name in LONGEST else len(LONGEST)


def _distributed(config: pytest.Config) -> bool:
    """True in pytest-xdist's controller and in its workers: the workers collect, and the order they collect in is
    the order files are handed out."""
    if hasattr(config, "workerinput"):
        return True
    return getattr(config.option, "dist", "no") != "no" and bool(getattr(config.option, "numprocesses", None))


def tier_of(item: pytest.Item) -> str:
    return item.stash[TIER]


@pytest.fixture(autouse=True)
def _no_dagster_state_storage_left_over() -> Iterator[None]:
    """Each test starts with no Dagster instance's state storage as the current one.

    A DagsterInstance makes its state storage the current one (a context variable) while it is entered; an instance
    exited from another context (a step retried in process does that) leaves it set, and once that instance is
    collected, the next test's first use of a Definitions fails with "Attempted to resolve undefined DagsterInstance
    weakref". Clearing it here keeps a test's outcome independent of the tests before it."""
    yield
    from dagster._core.storage.defs_state.base import _current_storage  # no public API resets it

    _current_storage.set(None)


#: tiers whose tests start Spark driver JVMs, in this process or in the processes they start
SPARK_TIERS = ("engine", "dagster", "stack")
#: tiers whose tests drive Spark in the test's own process (the stack tier's runs are processes of their own)
IN_PROCESS_SPARK_TIERS = ("engine", "dagster")
_spark_jvm = SparkJvmOptions()


@pytest.fixture(scope="session")
def spark_jvm_options(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Quick-starting Spark driver JVMs (tests/spark_jvm.py) for every driver the session starts from now on, with
    their scratch space (``SPARK_LOCAL_DIRS``) in the session's temporary folder: a JVM the tests SIGKILL skips
    Spark's shutdown hook and leaves its ``spark-*`` folder behind (its ``userFiles`` copy of the jars, 750 MB with
    S3A's), which in ``/tmp`` piled up across runs until the disk was full; here it goes with the session."""
    import os
    import shutil

    scratch = tmp_path_factory.mktemp("spark-local")
    os.environ["SPARK_LOCAL_DIRS"] = str(scratch)
    yield _spark_jvm.apply()
    shutil.rmtree(scratch, ignore_errors=True)


@pytest.fixture(autouse=True)
def _spark_jvm_for_spark_tiers(request: pytest.FixtureRequest) -> None:
    tier = request.node.stash.get(TIER, None)
    if tier in SPARK_TIERS:
        request.getfixturevalue("spark_jvm_options")
    if tier in IN_PROCESS_SPARK_TIERS and request.node.get_closest_marker("spark_connect") is None:
        request.getfixturevalue("spark")  # the worker's one session, started with every jar any of its tests needs


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    properties = dict(p for p in report.user_properties if p[0] == "tier")
    tier = properties.get("tier")
    if tier is None:
        return
    if report.when == "teardown":
        _summary_lines.extend(text for key, text in report.user_properties if key == "summary")
        _slow_fixtures.extend(tuple(value) for key, value in report.user_properties if key == "fixture")
    if tier != "unit":  # the pure-logic tier is not metered: reading /proc twice a test would be a tenth of its CPU
        cost = _file_cost.setdefault(report.nodeid.split("::", 1)[0], [0.0, 0.0])
        cost[0] += report.duration
        cost[1] += sum(value for key, value in report.user_properties if key == "cpu")
    _tier_seconds[tier] += report.duration  # setup + call + teardown, session fixtures charged where first used
    if report.when == "call" or (report.when == "setup" and not report.passed):
        outcomes = _tier_outcomes[tier]
        outcomes[report.outcome] = outcomes.get(report.outcome, 0) + 1


@pytest.hookimpl(trylast=True)  # after the slowest durations: the last thing before pytest's closing line
def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    import os
    import time

    if not any(_tier_outcomes.values()):
        return  # nothing ran (--collect-only)
    write = terminalreporter.write_line
    terminalreporter.section("time per tier")
    for tier in TIERS:
        outcomes = _tier_outcomes[tier]
        if outcomes:
            counts = ", ".join(f"{n} {outcome}" for outcome, n in sorted(outcomes.items()))
            write(f"{tier:<8} {_tier_seconds[tier] / 60:6.1f} min  {counts}  ({TIERS[tier]})")
    session_s = time.time() - _session_started[0]
    workers = getattr(config.option, "numprocesses", None)
    write(
        f"{'tests':<8} {session_s / 60:6.1f} min (wall time"
        + (f"; the tiers add up their tests' times, in {workers} workers at once)" if workers else ")")
    )
    busy, total, stolen = (now - then for now, then in zip(machine_cpu_seconds(), _cpu_at_start[0]))
    write(
        f"{'cpu':<8} {busy / 60:6.1f} core-min busy of {total / 60:.1f} ({busy / total:.0%}; the whole machine), "
        f"{stolen / 60:.1f} of them stolen by the hypervisor"
    )
    for line in _summary_lines:
        write(line)
    if _file_cost:
        write(
            f"the {COSTLIEST_FILES} costliest files: minutes a worker held, CPU core-minutes its processes used "
            "(tests/cpu_use.py), by CPU"
        )
        for path, (held, cpu) in sorted(_file_cost.items(), key=lambda kv: -kv[1][1])[:COSTLIEST_FILES]:
            write(f"  {held / 60:5.1f} {cpu / 60:5.1f}  {path}")
    if _slow_fixtures:
        write(
            f"fixture setups of {SLOW_FIXTURE_S:.0f} s or more, the slowest first "
            "(the cost is nested: a fixture's includes the fixtures it asked for):"
        )
        for seconds, what in sorted(_slow_fixtures, reverse=True)[:15]:
            write(f"  {seconds:7.1f}s {what}")
    started = os.environ.get("ROCKETLAKE_CI_STARTED")  # set by .ci/run: setup is charged to the total, not the tests
    if started:
        total_s = time.time() - float(started)
        write(f"{'setup':<8} {(total_s - session_s) / 60:6.1f} min")
        write(f"{'total':<8} {total_s / 60:6.1f} min (.ci/run from its start)")


_PORTS_FROM = 12_000


def _ephemeral_ports_start() -> int:
    """Where the kernel's ephemeral ports begin: every outgoing connection (a client of a broker, Spark, Dagster) takes
    one of those, so a server port chosen among them can be taken between the check and the bind."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def free_ports(count: int, *, block: int = 1) -> list[int]:
    """``count`` ports p, each with p-2 .. p+block-1 free too (a broker uses p-2, p and p+1)."""
    chosen: list[int] = []
    taken: set[int] = set()
    for _ in range(10_000):
        p = _rng.randrange(_PORTS_FROM, _ephemeral_ports_start() - block)
        span = set(range(p - 2, p + block))
        if span & taken or any(port_in_use(q) for q in span):
            continue
        chosen.append(p)
        taken |= span
        if len(chosen) == count:
            return chosen
    raise RuntimeError("no free loopback ports found")


def make_spec(state_dir: Path, store_root: Path | None = None, version: str = ROCKETMQ_VERSION) -> ClusterSpec:
    namesrv, a, b = free_ports(3, block=2)
    return ClusterSpec(
        state_dir=state_dir,
        store_root=store_root or default_store_root(state_dir),
        namesrv_port=namesrv,
        brokers=(BrokerSpec("broker-a", a), BrokerSpec("broker-b", b)),
        version=version,
    )


def _running_cluster(tmp_path_factory: pytest.TempPathFactory, version: str, **spec_changes) -> Iterator[LocalCluster]:
    """A cluster on free ports, stopped and wiped at the end; ``spec_changes`` replace ClusterSpec fields."""
    spec = dataclasses.replace(
        make_spec(tmp_path_factory.mktemp(f"rocketmq-{version}"), version=version), **spec_changes
    )
    cluster = LocalCluster(spec)
    try:
        cluster.up()
        yield cluster
    finally:
        cluster.down(wipe=True)


#: Retry delays of the test brokers: level n waits n seconds (RocketMQ's default goes from 1 s to 2 h), so a message
#: sent back comes back in seconds, and each level is still told apart from the next.
SHORT_DELAY_LEVELS = (("messageDelayLevel", " ".join(f"{n}s" for n in range(1, 19))),)


@pytest.fixture(scope="session")
def local_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A 5.x name server and two brokers for the whole test session, stopped and wiped at the end."""
    yield from _running_cluster(tmp_path_factory, ROCKETMQ_VERSION, extra_broker_properties=SHORT_DELAY_LEVELS)


@pytest.fixture(scope="session")
def local_cluster_4x(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The same on the 4.9 line, which many users still run (stopped early under `make test`: SHARED_CLUSTER_GROUP)."""
    yield from _shared_cluster("local_cluster_4x", _running_cluster(tmp_path_factory, ROCKETMQ_4_VERSION))


def _shared_cluster(name: str, running: Iterator[LocalCluster]) -> Iterator[LocalCluster]:
    """``running`` (a ``_running_cluster``), recorded as a SHARED_CLUSTER_GROUP cluster while it runs."""
    for cluster in running:
        _shared_clusters[name] = cluster
        try:
            yield cluster
        finally:
            _shared_clusters.pop(name, None)


_topic_counter = itertools.count()


@pytest.fixture
def create_topic(local_cluster: LocalCluster) -> Callable[..., str]:
    """``create_topic(queues=4, brokers=None, prefix="t")`` -> a fresh topic routed on the chosen brokers."""

    def create(queues: int = 4, brokers: tuple[str, ...] | None = None, prefix: str = "t") -> str:
        topic = f"{prefix}_{next(_topic_counter)}_{uuid.uuid4().hex[:8]}"
        local_cluster.create_topic(topic, queues, brokers)
        return topic

    return create


@pytest.fixture
def java_producer(local_cluster: LocalCluster) -> Callable[..., list[SentMessage]]:
    """``java_producer(messages=[...], args=[...])``: send with the official Java client, get its answers."""

    def send(messages: list[dict] | None = None, args: list[str] = ()) -> list[SentMessage]:
        return produce(
            local_cluster.spec.namesrv_address,
            local_cluster.spec.state_dir,
            messages,
            args=list(args),
            version=local_cluster.spec.version,
        )

    return send


@pytest.fixture(scope="session")
def spark(spark_jvm_options):
    """The worker's Spark session, with Hadoop's S3A connector on its class path: a session's jars are fixed when it
    starts, and any test of the worker may land in an S3 lake (``local_s3``)."""
    from rocketlake.spark.session import spark_session

    session = spark_session("local[2]", s3a=True)
    yield session
    session.stop()


@dataclasses.dataclass(frozen=True)
class SparkConnect:
    """A long-lived Spark Connect server, as ``rocketlake local up`` runs one, and its event log."""

    url: str
    events: Path  # Spark's event log of every session the server ran: what its history server would show
    server: "LocalSparkServer"

    def settings(self) -> dict:
        """The ``spark`` block of a rocketlake.yaml whose runs open their sessions on this server."""
        return {"master": "local[2]", "remote": self.url}

    def readable(self) -> dict[str, str]:
        """What a person or a log shipper reads of the server, by where: every file of its event log, its log file,
        and the command line of each of its processes (the JVM and its Python workers) as ``ps`` shows it to any
        user of the machine. Each place holds something: a scan of nothing would pass."""
        import subprocess

        process = self.server.process
        pid = process.pid()
        assert pid is not None, "the server is not running"
        # Spark 4 rolls its event log: events_<n>_<app> files, beside an empty appstatus_<app> marker.
        found = {
            f"the server's event log {p.name}": p.read_text(errors="replace")
            for p in self.events.rglob("*")
            if p.is_file() and p.stat().st_size
        }
        assert found, f"no event in {self.events}"
        found["the server's log"] = process.log_file.read_text(errors="replace")
        # Its processes: the session it leads (ManagedProcess starts it in a session of its own).
        ps = subprocess.run(
            ["ps", "-ww", "-o", "args=", "-s", str(pid)], capture_output=True, text=True, check=True
        ).stdout
        assert "connect_server.py" in ps, ps
        found["the server's processes (ps)"] = ps
        assert found["the server's log"], f"{process.log_file} is empty"
        return found


def connect_server(folder: Path, lake=None, environ: dict[str, str] | None = None) -> Iterator[SparkConnect]:
    """A Spark Connect server on a free port with its event log in ``folder``, for ``lake`` (none: no S3 bucket's
    settings), with ``environ`` added to this process's environment, until the generator is closed. Its Python
    workers import the tests' listeners (``tests.unit.listeners``), as a user's server has their project's."""
    import os

    from rocketlake.local.spark_server import LocalSparkServer

    events = folder / "events"
    events.mkdir()
    (port,) = free_ports(1)
    server = LocalSparkServer(
        folder,
        port=port,
        lake=lake,
        conf={
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": events.as_uri(),
            "spark.eventLog.compress": "false",
        },
        env={
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH")) if p
            )
        },
    )
    server.up(environ=dict(os.environ, **(environ or {})))  # passed here, a secret is in no field of the server's
    try:
        yield SparkConnect(server.url, events, server)
    finally:
        assert server.down() == ["spark-connect"]  # it ran until the end, serving every test given it


@pytest.fixture(scope="session")
def spark_connect(tmp_path_factory: pytest.TempPathFactory, spark_jvm_options) -> Iterator[SparkConnect]:
    """One Spark Connect server for the worker's runs in processes of their own (the stack tier's CLI and daemon
    runs): a run opens a session on it instead of starting a JVM, as runs do by default on the local runtime."""
    yield from connect_server(tmp_path_factory.mktemp("spark-connect"))


@pytest.fixture(scope="module")
def s3_spark_connect(tmp_path_factory: pytest.TempPathFactory, spark_jvm_options, local_s3) -> Iterator[SparkConnect]:
    """A Spark Connect server started with the settings of ``local_s3``'s bucket ``lake`` and its keys (from the
    variables ``LocalS3.lake_settings()`` names), as ``rocketlake spark-server`` starts the server of an S3 lake: it
    serves any lake under that bucket. One per module that needs it: the worker's shared server has no S3 bucket."""
    from rocketlake.engine.config import LakeConfig

    yield from connect_server(tmp_path_factory.mktemp("s3-spark-connect"), LakeConfig(**local_s3.lake_settings()))


@pytest.fixture(scope="session")
def local_s3(tmp_path_factory: pytest.TempPathFactory):
    """An S3-compatible server (versitygw, ``rocketlake local up --s3``) on a free port with a bucket ``lake``, for
    the whole session; its keys are in the environment under the names ``LocalS3.lake_settings()`` gives."""
    import os

    from rocketlake.local.s3 import LocalS3

    (port,) = free_ports(1)
    server = LocalS3(tmp_path_factory.mktemp("s3"), port=port)
    server.up()
    os.environ.update(server.credentials_env())
    try:
        yield server
    finally:
        assert server.down(wipe=True) == ["s3"]


# --------------------------------------------------------------------------------------------
# Either cluster: the same test runs against the 5.x and the 4.9 line.

#: pytest id -> name of the session fixture that runs that line's cluster
CLUSTER_FIXTURES = {
    f"rocketmq-{ROCKETMQ_VERSION}": "local_cluster",
    f"rocketmq-{ROCKETMQ_4_VERSION}": "local_cluster_4x",
}


@pytest.fixture(params=list(CLUSTER_FIXTURES))
def rocketmq_cluster(request: pytest.FixtureRequest) -> LocalCluster:
    """``local_cluster`` and ``local_cluster_4x`` in turn: a test using it runs once per RocketMQ line."""
    return request.getfixturevalue(CLUSTER_FIXTURES[request.param])


@pytest.fixture
def rocketmq_client(rocketmq_cluster: LocalCluster):
    """Our client for the cluster of ``rocketmq_cluster`` (route cache is per test)."""
    from rocketlake.rocketmq.client import RocketMQClient

    return RocketMQClient(rocketmq_cluster.spec.namesrv_address, timeout=10.0)


@pytest.fixture
def new_topic(rocketmq_client) -> Callable[..., str]:
    """``new_topic(queues=4, brokers=None, prefix="t")`` on the ``rocketmq_cluster``, created with
    UPDATE_AND_CREATE_TOPIC (milliseconds, where ``create_topic``'s mqadmin takes seconds) and
    routed by the name server before it returns."""

    def create(queues: int = 4, brokers: tuple[str, ...] | None = None, prefix: str = "t") -> str:
        topic = f"{prefix}_{next(_topic_counter)}_{uuid.uuid4().hex[:8]}"
        rocketmq_client.create_topic(topic, queues, brokers=brokers)
        return topic

    return create


class JavaPeers:
    """The official Java client programs (rocketlake/local/peers.py) bound to one cluster."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.namesrv = cluster.spec.namesrv_address
        self.state_dir = cluster.spec.state_dir
        self.version = cluster.spec.version

    @property
    def is_4x(self) -> bool:
        return self.cluster.spec.is_4x

    def produce(self, messages: list[dict] | None = None, args: list[str] = ()) -> list[SentMessage]:
        return produce(self.namesrv, self.state_dir, messages, args=list(args), version=self.version)

    def consume(self, topic: str, ranges: dict[tuple[str, int], tuple[int, int]], **options) -> list[dict]:
        from tests.java_oracles import consume

        return consume(self.namesrv, self.state_dir, topic, ranges, version=self.version, **options)

    def admin(self, commands: list[dict]) -> list[dict]:
        from rocketlake.local.peers import admin

        answers = admin(self.namesrv, self.state_dir, commands, version=self.version)
        assert len(answers) == len(commands), answers
        return answers

    def mqadmin(self):
        return self.cluster.mqadmin()


@pytest.fixture
def java_peers(rocketmq_cluster: LocalCluster) -> JavaPeers:
    return JavaPeers(rocketmq_cluster)


def pull_range(client, mq, start: int, end: int, *, group: str = "rocketlake_test_reader", **options) -> list:
    """Every ``(message, pull_result)`` of ``mq`` in ``[start, end)``, pulled with ``client``.

    Fails if the queue ends before ``end`` (NO_NEW_MSG / OFFSET_ILLEGAL while offsets are missing).
    """
    from rocketlake.rocketmq.pull import PullStatus

    out = []
    offset = start
    while offset < end:
        result = client.pull(mq, offset, 32, consumer_group=group, **options)
        if result.status in (PullStatus.NO_NEW_MSG, PullStatus.OFFSET_ILLEGAL):
            raise AssertionError(f"{mq} ended at {offset} ({result}), expected messages up to {end}")
        out.extend((m, result) for m in result.messages if m.queue_offset < end)
        assert result.next_begin_offset > offset, result
        offset = result.next_begin_offset
    return out


@pytest.fixture(name="pull_range")
def pull_range_fixture() -> Callable[..., list]:
    """:func:`pull_range` as a fixture, for test modules that cannot import conftest."""
    return pull_range


# --------------------------------------------------------------------------------------------
# The disruptable cluster: the tests that stop or kill brokers, delete commit-log files or change topics
# (test_topic_changes, test_deleted_messages, test_rocketmq_broker_restart) share one 5.x name server and two
# brokers, in turn, instead of starting one each. Whoever disturbs it hands it over usable (``hand_over``): every
# broker running again, registered with the name server and answering at its address; topics are unique per test.

import time  # noqa: E402 - this block's own imports

from rocketlake.local.process import LocalClusterError  # noqa: E402
from rocketlake.local.spec import SHORT_RETENTION  # noqa: E402

#: Hours a commit-log file is kept on the disruptable brokers (the spec's default): nothing expires there unless a
#: test says so at runtime (test_deleted_messages sets fileReservedTime to 0 around its deletion and back), so
#: the clean rounds a DELETE_EXPIRED_COMMITLOG arms (20, one a second, still running when that test is over) or a
#: full /dev/shm never delete what a later test wrote.
KEEP_FILES_HOURS = 168

#: Largest message body the disruptable brokers take: well below SHORT_RETENTION's 16 KiB commit-log files. A
#: message that fits no file is answered PUT_OK by 5.3.3 and not stored (CommitLog.asyncPutMessage: END_OF_FILE on
#: the new file too); with this limit the broker refuses it (MESSAGE_ILLEGAL). The tests here send a few hundred bytes.
DISRUPTABLE_MAX_BODY = 8 * 1024

#: The session cluster's short delay levels, SHORT_RETENTION's small commit-log files and clean settings (rendered
#: last, later keys win), files kept until a test expires them, and the body limit.
DISRUPTABLE_PROPERTIES: tuple[tuple[str, object], ...] = (
    *SHORT_DELAY_LEVELS,
    *SHORT_RETENTION,
    ("fileReservedTime", KEEP_FILES_HOURS),
    ("maxMessageSize", DISRUPTABLE_MAX_BODY),
)

HAND_OVER_TIMEOUT_S = 120.0


def _answering(cluster: LocalCluster) -> bool:
    """Whether every broker answers a request at its address: the name server may still list a broker killed a
    moment ago, so a registration alone does not tell that the restarted process serves."""
    from rocketlake.rocketmq.broker import BrokerClient
    from rocketlake.rocketmq.errors import BrokerError, RocketMQError

    for broker in cluster.spec.brokers:
        try:
            # The topic named after the broker exists on each (brokerTopicEnable); a refusal is an answer too.
            BrokerClient(broker.address, broker_name=broker.name, timeout=2.0).get_max_offset(broker.name, 0)
        except BrokerError:
            continue
        except RocketMQError:  # connection refused or reset, no answer in time
            return False
    return True


def hand_over(cluster: LocalCluster, timeout: float = HAND_OVER_TIMEOUT_S) -> LocalCluster:
    """``cluster`` as the next test needs it: whatever broker a test stopped or killed started again (same ports,
    same store), every broker registered with the name server at its address and answering requests there."""
    cluster.up(timeout=timeout)  # starts only what is not running; returns once the name server lists every broker
    deadline = time.monotonic() + timeout
    while not _answering(cluster):
        if time.monotonic() > deadline:
            raise LocalClusterError(
                f"the brokers do not answer after {timeout:g} s:\n{cluster.status().render(cluster.spec.cluster_name)}"
            )
        time.sleep(0.25)  # polls the brokers themselves
    return cluster


@pytest.fixture(scope="session")
def disruptable_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A 5.x name server and brokers broker-a, broker-b (DISRUPTABLE_PROPERTIES) that tests may stop, kill, expand
    topics on and delete commit-log files of: started on first use, stopped and wiped at the end of the session.
    Use it through ``disruptable`` (or ``hand_over`` before and after, from a wider fixture). Stopped early under
    `make test` (SHARED_CLUSTER_GROUP)."""
    yield from _shared_cluster(
        "disruptable_cluster",
        _running_cluster(tmp_path_factory, ROCKETMQ_VERSION, extra_broker_properties=DISRUPTABLE_PROPERTIES),
    )


@pytest.fixture
def disruptable(disruptable_cluster: LocalCluster) -> Iterator[LocalCluster]:
    """The disruptable cluster for one test: usable when the test starts, and made usable again when it ends
    (whatever broker the test left stopped, even by failing, is started again and waited for)."""
    yield hand_over(disruptable_cluster)
    hand_over(disruptable_cluster)


@pytest.fixture
def disruptable_4x(local_cluster_4x: LocalCluster) -> Iterator[LocalCluster]:
    """The 4.9 line's session cluster, lent to a test that kills a broker and restarts it, and handed back usable.

    Not a cluster of its own: nothing runs on ``local_cluster_4x`` in the background (the shared minutes go to
    ``local_cluster``), its tests run one at a time on topics and groups of their own, and a killed broker loses only
    what it had not flushed of the test that killed it (consumer offsets of the last 5 s): messages are in the page
    cache of its mapped files, and the restarted broker recovers them from its store on /dev/shm.
    """
    yield hand_over(local_cluster_4x)
    hand_over(local_cluster_4x)
