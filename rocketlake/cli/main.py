"""rocketlake: land Apache RocketMQ topics in Delta Lake tables, orchestrated by Dagster, run by PySpark.

Ingestion runs through Dagster (`dagster dev -w workspace.yaml`, the schedules, or `rocketlake backfill`, which
checks the windows first and launches one Dagster run); `rocketlake offsets show` prints a group's progress
and lag per queue; this command also starts and stops the local RocketMQ
cluster used for development and tests, and runs the demo.
"""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import contextmanager
from pathlib import Path

from rocketlake.cli import local as local_command
from rocketlake.cli.options import Refused, cluster_options, cluster_spec, config_option
from rocketlake.cli.send import DEFAULT_BODY
from rocketlake.delta.storage import StorageKeysMissing
from rocketlake.engine.config import ConfigError
from rocketlake.engine.identity import client_id
from rocketlake.jars import JarResolutionFailed, ToolMissing
from rocketlake.local.process import LocalClusterError
from rocketlake.member import deployment_reads
from rocketlake.rocketmq.errors import (
    BrokerError,
    ClosedBeforeAnswer,
    ConnectionFailed,
    ConnectionTurnedAway,
    RocketMQError,
)


def _ui(args: argparse.Namespace) -> int:
    from rocketlake.demo.ui import run_ui

    return run_ui(cluster_spec(args), port=args.port, topic=args.topic, per_minute=args.per_minute)


def _demo(args: argparse.Namespace) -> int:
    from rocketlake.demo.run import run_demo

    return run_demo(
        cluster_spec(args),
        topic=args.topic,
        messages=args.messages,
        windows=args.windows,
        s3_port=args.s3_port if args.s3 else None,
    )


def _ingestion(args: argparse.Namespace):
    """(the whole configuration, the ingestion ``args.ingestion`` names in it)."""
    from rocketlake.dagster.partitions import check_crons
    from rocketlake.dagster.topic_tables import with_topic_tables
    from rocketlake.engine.config import config_path, load_config

    config, _ = with_topic_tables(load_config(args.config))  # a table per topic: an ingestion each, by its table
    check_crons(config, str(config_path(args.config)))
    if args.ingestion not in config.ingestions:
        raise Refused(
            f"no ingestion {args.ingestion!r} in the configuration; there are: " + ", ".join(sorted(config.ingestions))
        )
    return config, config.ingestions[args.ingestion]


def _backfill(args: argparse.Namespace) -> int:
    from datetime import datetime, timezone

    from rocketlake.dagster.partitions import WindowKeyError, launchable_windows

    config, ingestion = _ingestion(args)
    try:
        keys = launchable_windows(ingestion.window, args.start, args.end, datetime.now(timezone.utc))
    except WindowKeyError as e:
        raise Refused(f"ingestion {args.ingestion}: {e}") from None
    from dagster import DagsterInstance

    from rocketlake.dagster.ingestion import consumer_group_pool
    from rocketlake.dagster.launch import dagster_home, run_windows
    from rocketlake.dagster.pool_limit import PoolNotLimited, check_pool_limited

    dagster_home()
    with DagsterInstance.get() as instance:  # the instance the run will use: refused before a run is even created
        try:
            check_pool_limited(instance, consumer_group_pool(ingestion.consumer_group), ingestion.consumer_group)
        except PoolNotLimited as e:
            raise Refused(f"ingestion {args.ingestion}: {e}") from None
    print(
        f"landing {len(keys)} window(s) of {args.ingestion} ({keys[0]} .. {keys[-1]}) into {ingestion.table} "
        "in one Dagster run ...",
        flush=True,
    )
    if args.config:
        import os

        os.environ["ROCKETLAKE_CONFIG"] = str(Path(args.config).absolute())  # the run's code location reads it

    result = run_windows(ingestion.table, keys)
    print(f"run {result.run_id}: {'success' if result.success else 'FAILED (see the events above)'}")
    return 0 if result.success else 1


def _client(config, ingestion):
    """A client of the ingestion's cluster, built as a run builds its own (``RocketMQResource.of_cluster``): its ACL
    keys from the environment variables the file names, its TLS, the ingestion's timeout."""
    from rocketlake.dagster.rocketmq_resource import MissingCredentials, RocketMQResource

    resource = RocketMQResource.of_cluster(ingestion.cluster, config.clusters[ingestion.cluster])
    try:
        return resource.open_client(ingestion.mq_client_api_timeout)
    except MissingCredentials as e:
        raise Refused(str(e)) from None


@contextmanager
def _group_of(config, ingestion):
    """The ingestion's group on its cluster (``broker_access.group_broker``); the errors people meet become one
    line with what to do, and the client is closed at the end."""
    from rocketlake.engine.broker_access import group_broker
    from rocketlake.rocketmq.errors import RequestTimeout, TopicNotExist

    namesrv = config.clusters[ingestion.cluster].namesrv
    client = _client(config, ingestion)
    try:
        yield group_broker(client, ingestion)
    except BrokerError as e:
        if e.hint is None:
            raise
        raise Refused(f"cluster {ingestion.cluster!r} ({namesrv}) refused the request: {e}") from None
    except (ConnectionFailed, RequestTimeout) as e:
        if isinstance(e, (ConnectionTurnedAway, ClosedBeforeAnswer)):  # TLS failed, or the server wants TLS
            raise Refused(f"cluster {ingestion.cluster!r} ({namesrv}) turned the connection away: {e}") from None
        raise Refused(
            f"cannot reach RocketMQ ({e}): check that the name server {namesrv} of cluster "
            f"{ingestion.cluster!r} and its brokers are up (`rocketlake local status` for the local one)"
        ) from None
    except TopicNotExist as e:
        raise Refused(f"{ingestion.topic_label} on cluster {ingestion.cluster!r} ({namesrv}): {e}") from None
    finally:
        client.close()


def _offsets(args: argparse.Namespace) -> int:
    if args.action == "reset":
        return _offsets_reset(args)
    if args.to_time or args.dry_run:
        raise Refused("--to-time and --dry-run go with `offsets reset`")
    import time

    from rocketlake.delta.ledger_log import recent_entries
    from rocketlake.delta.storage import delta_rs_options
    from rocketlake.engine.assignment import membership, owners
    from rocketlake.engine.broker_access import MemberBroker
    from rocketlake.engine.completeness import landed_queues
    from rocketlake.engine.config import MessageModel
    from rocketlake.engine.progress import group_progress, last_landed, render

    config, ingestion = _ingestion(args)
    cluster = config.clusters[ingestion.cluster]
    with _group_of(config, ingestion) as group:
        rows = group_progress(group)
        members = membership(group.client, ingestion) if ingestion.message_model is MessageModel.CLUSTERING else []
        owned = owners(ingestion, [r.queue for r in rows], members)
    entries = recent_entries(config.lake.table_path(ingestion.table), storage_options=delta_rs_options(config.lake))
    last_windows = last_landed(landed_queues(entries, ingestion.consumer_group))
    where = (
        f"member {client_id(ingestion)}'s local offset store {group.store.path}"
        if isinstance(group, MemberBroker)
        else "offsets committed on the brokers; lag as mqadmin consumerProgress's Diff"
    )
    print(
        f"group {ingestion.consumer_group} ({ingestion.message_model.value}) on {ingestion.topic_label}, "
        f"cluster {ingestion.cluster} ({cluster.namesrv}); {where}; lag s = age of the oldest message not passed:"
    )
    print(render(rows, int(time.time() * 1000), last_windows, owned))
    if all(r.committed is None for r in rows):
        print(f"group {ingestion.consumer_group} has committed no offset on this topic yet")
    return 0


def _reset_time_ms(value: str, timezone_name: str) -> int:
    """Epoch milliseconds, or an ISO-8601 time (without an offset: in the window's time zone)."""
    from datetime import datetime
    from zoneinfo import ZoneInfo

    if value.isdigit():
        return int(value)
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise Refused(
            f"--to-time {value!r} is neither epoch milliseconds nor an ISO-8601 time (e.g. 2026-11-01T10:17:30+01:00)"
        ) from None
    return int((parsed if parsed.tzinfo else parsed.replace(tzinfo=ZoneInfo(timezone_name))).timestamp() * 1000)


def _offsets_reset(args: argparse.Namespace) -> int:
    from rocketlake.engine.offsets import plan_reset_to_time

    if not args.to_time:
        raise Refused("offsets reset needs --to-time TIME")
    config, ingestion = _ingestion(args)
    to_ms = _reset_time_ms(args.to_time, ingestion.window.timezone)
    with _group_of(config, ingestion) as group:
        committed, plan = plan_reset_to_time(group, to_ms)
        print(
            f"reset of group {ingestion.consumer_group} on {ingestion.topic_label} to the first message stored at or "
            f"after {to_ms} ms{' (dry run: nothing changes)' if args.dry_run else ''}:"
        )
        for move in plan.moves:
            print(f"  {move.queue.key}: {'-' if move.before is None else move.before} -> {move.after}")
        for mq in plan.unchanged:
            print(f"  {mq.key}: {committed[mq]} (unchanged)")
        for move in plan.backward:
            print(f"  {move.queue.key}: {move.before} -> {move.after} REFUSED (backward)")
        if plan.backward:
            raise Refused(
                f"{len(plan.backward)} queue(s) would move backward; offsets only move forward (the ledger "
                f"would move them forward again); to land earlier windows again, use `rocketlake backfill "
                f"{args.ingestion} FROM TO`. Nothing was changed"
            )
        if args.dry_run:
            return 0
        in_flight = deployment_reads.runs_in_flight(ingestion.consumer_group)
        if in_flight:
            raise Refused(
                f"run(s) {', '.join(sorted(in_flight))} of group {ingestion.consumer_group} are in flight "
                "(they hold or wait for its pool slot); reset once they end. Nothing was changed"
            )
        for move in plan.moves:
            group.commit_offset(move.queue, move.after)
        print(f"moved {len(plan.moves)} queue(s)")
        return 0


def _member(args: argparse.Namespace) -> int:
    import signal
    import threading

    from rocketlake.dagster.launch import dagster_home
    from rocketlake.member.process import Member

    config, ingestion = _ingestion(args)
    # The deployment's Dagster instance, as its runs find it, from the start: an instance_name left at DEFAULT
    # names the member after it, and that name must not change when a reset first asks Dagster about runs. Its
    # storage is created now, once: requests and scrapes come on several threads, and two creating a fresh
    # SQLite instance at once collide ("table instance_info already exists").
    dagster_home()
    from dagster import DagsterInstance

    try:
        DagsterInstance.get().dispose()
    except Exception as e:  # e.g. DAGSTER_HOME names no folder yet: the member still beats; what needs it says why
        _print_line(f"the Dagster instance is not usable yet ({type(e).__name__}: {e}); resets and rates need it")
    if not 0 <= args.metrics_port <= 65535:
        raise Refused(f"--metrics-port {args.metrics_port}: a port is 1 to 65535 (0: no metrics endpoint)")
    client = _client(config, ingestion)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    endpoint = None
    try:
        if args.metrics_port:
            endpoint = _metrics_endpoint(args, config, ingestion, _print_line)
        Member(
            client,
            ingestion,
            log=_print_line,
            landed=lambda: deployment_reads.landed_ends(config, ingestion),
            in_flight=lambda: deployment_reads.runs_in_flight(ingestion.consumer_group),
            rates=lambda: deployment_reads.recent_rates(config, args.ingestion),
        ).run(stop)
    except RocketMQError as e:  # only a refusal (TLS, ACL) ends a member: Member.run beats again after the others
        raise Refused(
            f"cluster {ingestion.cluster!r} ({config.clusters[ingestion.cluster].namesrv}) turned the member away: {e}"
        ) from None
    finally:
        if endpoint is not None:
            endpoint.stop()
        client.close()
    return 0


def _print_line(line: str) -> None:
    print(line, flush=True)


def _metrics_endpoint(args: argparse.Namespace, config, ingestion, log):
    """The member's Prometheus endpoint (``rocketlake.member.metrics``), with a client of its own: a scrape waiting
    on a broker never delays a heartbeat."""
    from rocketlake.member.metrics import member_collector, serve

    metrics_client = _client(config, ingestion)
    collector = member_collector(
        config, args.ingestion, metrics_client, lambda: deployment_reads.landed_ends(config, ingestion), log
    )
    try:
        endpoint = serve(
            collector, args.metrics_port, args.metrics_address, on_stop=(collector.close, metrics_client.close)
        )
    except OSError as e:
        collector.close()
        metrics_client.close()
        raise Refused(f"cannot serve the metrics on {args.metrics_address}:{args.metrics_port}: {e}") from None
    host, port = endpoint.address
    log(f"metrics of {args.ingestion} in Prometheus' text format at http://{host}:{port}/metrics")
    return endpoint


def _send(args: argparse.Namespace) -> int:
    from datetime import datetime, timezone

    from rocketlake.cli.send import ensure_topic, minute_key, numbered_messages
    from rocketlake.rocketmq.client import RocketMQClient

    if args.count < 1:
        raise Refused(f"--count {args.count}: give at least 1 message")
    if args.create is not None and args.create < 1:
        raise Refused(f"--create {args.create}: give at least 1 queue on each broker")
    with RocketMQClient(args.namesrv) as client:
        if args.create is not None and ensure_topic(client, args.topic, args.create):
            print(f"created topic {args.topic}: {args.create} queue(s) on each broker")
        first = datetime.now(timezone.utc)
        for message in numbered_messages(args.topic, args.count, args.body, args.tags, args.keys):
            sent = client.send(message)
            print(f"{sent.queue.broker_name} queue {sent.queue.queue_id} offset {sent.queue_offset} {sent.status.name}")
        last = datetime.now(timezone.utc)
    print(
        f"sent {args.count} message(s) to {args.topic}; one-minute window keys (UTC): {minute_key(first)} to {minute_key(last)}"
    )
    return 0


def _spark_server(args: argparse.Namespace) -> int:
    from rocketlake.delta.storage import bucket_of, on_s3
    from rocketlake.engine.config import config_path, load_config
    from rocketlake.spark.session import connect_server_command

    config = load_config(args.config)
    if config.spark.remote is None:
        raise Refused(
            f"{config_path(args.config)}: spark.remote is not set; set it to the URL the server is to "
            "listen on (e.g. sc://127.0.0.1:15002), and the runs will open their sessions there"
        )
    # An S3 lake: its bucket's settings, and its keys (from the variables the configuration names) in the server's
    # environment, never on its command line.
    cmd, env = connect_server_command(config.spark.remote, config.spark.master, config.spark.conf, lake=config.lake)
    s3 = f", the S3 bucket {bucket_of(config.lake.root)}" if on_s3(config.lake.root) else ""
    print(
        f"rocketlake: Spark Connect server on {config.spark.remote} (master {config.spark.master}, Delta{s3}), "
        "until SIGTERM or Ctrl-C",
        flush=True,
    )
    os.execve(cmd[0], cmd, env)  # the JVM takes this pid: a supervisor stops it like any server


EXAMPLES = """examples:
  rocketlake demo                 the whole product on its defaults (about four minutes)
  rocketlake ui                   the Dagster UI; after the demo, with orders flowing and windows landing
  rocketlake local up             name server on 127.0.0.1:9876, brokers on :10911 and :10921
  rocketlake local status         what the name server reports (exit 3 when not ready)
  rocketlake local down --wipe    stop what `up` started (by pid), delete the broker store and what was landed
                                  from it in the project's default places (.rocketlake/lake, .rocketlake/dagster)
  rocketlake local up --spark     the same, and a Spark standalone master (spark://127.0.0.1:7077) with two workers
  rocketlake local up --spark --postgres
                                  ... and PostgreSQL on 127.0.0.1:5432 for Dagster's storage (deploy/dagster.yaml)
  rocketlake local up --stack     all of it, plus dagster-daemon and dagster-webserver (:3000) with the schedules
                                  on, loading deploy/rocketlake.yaml; `rocketlake local down --stack` stops it all
  rocketlake backfill orders 2026-11-01-10:00 2026-11-01-11:59
                                  land two hours of one-minute windows of ingestion orders in one run
  rocketlake offsets show orders  per queue: broker min/max, the group's committed offset, lag in messages
                                  and in seconds, and a total
  rocketlake offsets reset orders --to-time 2026-11-01T10:00:00Z --dry-run
                                  what skipping to a time would move, queue by queue
  rocketlake member orders        be a member of the group while this runs (heartbeats, as a push consumer)
  rocketlake member orders --metrics-port 9464
                                  ... and serve its metrics to Prometheus at http://127.0.0.1:9464/metrics
  rocketlake spark-server         the long-lived Spark Connect server the runs open sessions on (spark.remote)
  rocketlake send events --count 10 --create 4
                                  ten test messages to topic events on the local cluster, created first when
                                  missing (4 queues on each broker)
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rocketlake", description=__doc__, epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    local_command.add_parser(sub)

    demo = sub.add_parser(
        "demo",
        help="the main job on embedded defaults: local cluster, sample orders over several one-minute "
        "windows, materialized through Dagster into Delta",
        description="Start the local cluster, produce JSON orders with the official Java client over several "
        "one-minute windows of broker store time, wait until the last one closes, land them all through "
        "Dagster in one run, and print rows per window and the group's committed offsets. Then `make ui` "
        "shows the runs on the demo's Dagster instance.",
    )
    demo.add_argument(
        "--topic",
        default="rocketlake_demo_orders",
        help="the topic of one ingestion in rocketlake.yaml (default: rocketlake_demo_orders)",
    )
    demo.add_argument("--messages", type=int, default=300, help="orders to produce in all (default: 300)")
    demo.add_argument(
        "--s3",
        action="store_true",
        help="land in the local S3 server's bucket (started like `rocketlake local up --s3`) instead of the local lake",
    )
    demo.add_argument("--s3-port", type=int, default=7070, help="with --s3: the server's port (default: 7070)")
    demo.add_argument(
        "--windows", type=int, default=3, help="one-minute windows to spread the messages over (default: 3)"
    )
    cluster_options(demo)
    demo.set_defaults(func=_demo)

    ui = sub.add_parser(
        "ui",
        help="the Dagster UI (dg dev) on the local instance; after `rocketlake demo`, with orders flowing",
        description="Open the Dagster UI with `dg dev` on the local instance. After `rocketlake demo` it loads the "
        "demo's configuration with its schedules running and sends a trickle of orders to the demo "
        "topic while it is open, so windows land each minute; otherwise it loads workspace.yaml.",
    )
    ui.add_argument("--port", type=int, default=3000, help="the UI's port on 127.0.0.1 (default: 3000)")
    ui.add_argument(
        "--topic",
        default="rocketlake_demo_orders",
        help="the demo topic the trickle goes to (default: rocketlake_demo_orders)",
    )
    ui.add_argument(
        "--per-minute", type=int, default=40, help="orders a minute while the UI is open; 0 sends none (default: 40)"
    )
    cluster_options(ui)
    ui.set_defaults(func=_ui)

    backfill = sub.add_parser(
        "backfill",
        help="land a range of closed windows of one ingestion in one Dagster run",
        description="Check the windows first, then land them in one Dagster run (one Spark job, one Delta commit), "
        "as `dagster asset materialize --partition-range` would, on $DAGSTER_HOME (default: the local "
        "instance .rocketlake/dagster). A value that is not a window key or a time, a time before the "
        "first window, or a window not closed yet is refused in one line, before any run is created.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="FROM and TO are window keys (2026-11-01-10:00 for minute or hourly windows, 2026-11-01 for daily ones)\n"
        "or ISO-8601 times (2026-11-01T10:17:30+01:00; without an offset, in the window's time zone):\n"
        "every window from the one holding FROM to the one holding TO is landed.",
    )
    backfill.add_argument("ingestion", help="the ingestion's name in rocketlake.yaml")
    backfill.add_argument("start", metavar="FROM", help="first window: a window key or a time")
    backfill.add_argument("end", metavar="TO", nargs="?", default=None, help="last window (default: FROM's)")
    config_option(backfill)
    backfill.set_defaults(func=_backfill)

    offsets = sub.add_parser(
        "offsets",
        help="the consumer group's offsets and lag per queue, read from the brokers",
        description="Per subscribed queue (the topic's, and %RETRY%<group> in CLUSTERING once it exists): the "
        "broker's min and max offset, the group's committed offset, the lag in messages (max - "
        "committed, as mqadmin consumerProgress's Diff) and in seconds (how long ago the oldest "
        "message the group has not passed was stored); then a total line.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="reset, as RocketMQ's resetOffsetByTime: each queue's offset moves to its first message stored at or\n"
        "after --to-time, forward only (skipping messages; landing them again is `rocketlake backfill`), and\n"
        "not while a run of the group holds or waits for its pool slot. In BROADCASTING the member's local\n"
        "store moves. --dry-run prints the moves and changes nothing.",
    )
    offsets.add_argument(
        "action",
        choices=["show", "reset"],
        help="show: print the table; reset: move the offsets to --to-time (see below)",
    )
    offsets.add_argument("ingestion", help="the ingestion's name in rocketlake.yaml")
    offsets.add_argument(
        "--to-time",
        default=None,
        help="reset: the time to move to (epoch ms or ISO-8601; without an offset, in the window's "
        "time zone): each queue moves to its first message stored at or after it",
    )
    offsets.add_argument("--dry-run", action="store_true", help="reset: print what would move, change nothing")
    config_option(offsets)
    offsets.set_defaults(func=_offsets)

    member = sub.add_parser(
        "member",
        help="be a member of the ingestion's consumer group while this process runs",
        description="Heartbeat every 30 s to every broker of the topic with the ingestion's consumer data, under "
        "the deployment's client id (client_ip@instance_name, the id its runs lock queues with), so the "
        "brokers' consumer list and `mqadmin consumerConnection` show this deployment as a member; print "
        "the members whenever they change; unregister from every broker on SIGTERM or Ctrl-C.",
    )
    member.add_argument("ingestion", help="the ingestion's name in rocketlake.yaml")
    member.add_argument(
        "--metrics-port",
        type=int,
        default=0,
        metavar="PORT",
        help="serve the ingestion's metrics in Prometheus' text format at http://ADDRESS:PORT/metrics "
        "(per-queue offsets and lag, what was landed, failures, run durations); default 0: none",
    )
    member.add_argument(
        "--metrics-address",
        default="127.0.0.1",
        metavar="ADDRESS",
        help="the address the metrics endpoint listens on (default: 127.0.0.1; 0.0.0.0: every interface)",
    )
    config_option(member)
    member.set_defaults(func=_member)

    server = sub.add_parser(
        "spark-server",
        help="run the Spark Connect server of spark.remote, for runs without a Spark start each",
        description="Run a Spark Connect server in the foreground, bound to spark.remote's host and port, on "
        "spark.master with spark.conf, Delta and its jars, and this environment's Python for its workers "
        "(so rocketlake's reader is there), and for a lake on s3a:// its bucket's settings and its keys "
        "(from the variables lake.s3 names, into the server's environment): each Dagster run then opens "
        "a session on it instead of starting a JVM of its own. Restart it after upgrading rocketlake.",
    )
    config_option(server)
    server.set_defaults(func=_spark_server)

    send = sub.add_parser(
        "send",
        help="send test messages to a topic",
        description="Send test messages to a topic as a producer does (SEND_MESSAGE_V2, round robin over its "
        "writable queues), printing where each was stored and the one-minute window keys around them: to try "
        "an ingestion on a cluster without TLS or ACL, such as the local one. Not a producer for production "
        "traffic (no retry on another broker).",
    )
    send.add_argument("topic", help="the topic to send to")
    send.add_argument("--count", type=int, default=1, help="how many messages (default: 1)")
    send.add_argument(
        "--body",
        default=DEFAULT_BODY,
        help="each message's body; {i} becomes its number, from 0 (default: %(default)s)",
    )
    send.add_argument("--tags", default=None, help="the messages' tag (default: none)")
    send.add_argument("--keys", default=None, help="each message's key; {i} becomes its number (default: none)")
    send.add_argument(
        "--namesrv", default="127.0.0.1:9876", help="the name server (default: the local cluster's, 127.0.0.1:9876)"
    )
    send.add_argument(
        "--create",
        type=int,
        metavar="QUEUES",
        default=None,
        help="create the topic first when the name server does not route it, with QUEUES queues on each broker",
    )
    send.set_defaults(func=_send)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (LocalClusterError, ToolMissing, JarResolutionFailed, ConfigError, StorageKeysMissing, Refused) as e:
        print(f"rocketlake: error: {e}", file=sys.stderr)
        return 2
    except RocketMQError as e:  # a cluster that refuses us (TLS, ACL), is not there, or answers an error: one sentence
        print(f"rocketlake: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
