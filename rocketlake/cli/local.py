"""``rocketlake local``: the local runtime's processes (RocketMQ's name server and brokers, and on request the S3
server, PostgreSQL, Spark's standalone cluster and Connect server, the Dagster daemon, webserver and code server),
started on 127.0.0.1, recorded and stopped by pid."""

from __future__ import annotations

import argparse
import os
import shlex
from pathlib import Path

from rocketlake.cli.options import Refused, cluster_options, cluster_spec


def _spark_cluster(args: argparse.Namespace):
    """The standalone Spark cluster `--spark` names: the one `up` recorded in the state directory, if any."""
    from rocketlake.local.spark_cluster import LocalSparkCluster, SparkClusterSpec

    state_dir = Path(args.state_dir).absolute() / "spark"
    saved = SparkClusterSpec.saved(state_dir)
    if saved is not None and args.action != "up":
        return LocalSparkCluster(saved)
    ui = args.spark_ui_port
    return LocalSparkCluster(
        SparkClusterSpec(
            state_dir,
            master_port=args.spark_port,
            master_ui_port=ui,
            worker_ui_ports=tuple(ui + 1 + i for i in range(args.spark_workers)),
        )
    )


def _local_config(args: argparse.Namespace, default: str) -> Path:
    """The rocketlake.yaml a `local` command reads: --config, else $ROCKETLAKE_CONFIG, else ``default``."""
    return Path(args.config or os.environ.get("ROCKETLAKE_CONFIG") or default)


def _local_connect_server(args: argparse.Namespace):
    """The Spark Connect server of the configuration's ``spark.remote`` when it is on this machine (the local
    runtime's runs open their sessions there), on its master and settings; on ``down`` and ``status``, the one ``up``
    recorded in the state directory, whatever the configuration says now. None when there is nothing to start."""
    from rocketlake.engine.config import load_config
    from rocketlake.local.spark_server import STATE_SUBDIR, LocalSparkServer, server_for

    state_dir = Path(args.state_dir).absolute()
    if args.action != "up":
        recorded = LocalSparkServer(state_dir / STATE_SUBDIR)
        return recorded if recorded.process.pid() is not None or args.action == "down" else None
    source = _local_config(args, "deploy/rocketlake.yaml" if args.stack else "rocketlake.yaml")
    if not source.is_file():
        return None  # no configuration here (a cluster for another project): nothing asks for a server
    config = load_config(source)
    return server_for(config.spark, state_dir, config.lake, metastore=bool(config.catalog_tables))


def _proxy(cluster, args: argparse.Namespace):
    from rocketlake.local.proxy import LocalProxy

    return None if cluster.spec.is_4x else LocalProxy(cluster, remoting_port=args.proxy_port)


def _postgres(args: argparse.Namespace):
    from rocketlake.local.postgres import LocalPostgres

    return LocalPostgres(Path(args.state_dir).absolute() / "postgres", port=args.postgres_port)


def _s3(args: argparse.Namespace):
    from rocketlake.local.s3 import LocalS3

    return LocalS3(Path(args.state_dir).absolute() / "s3", port=args.s3_port)


def _registry(args: argparse.Namespace):
    from rocketlake.local.schema_registry import LocalSchemaRegistry

    return LocalSchemaRegistry(Path(args.state_dir).absolute() / "registry", port=args.registry_port)


def _dagster(args: argparse.Namespace, postgres):
    from rocketlake.local.dagster_stack import LocalDagster

    config = _local_config(args, "deploy/rocketlake.yaml")
    return LocalDagster(
        Path(args.state_dir).absolute() / "dagster",
        config,
        postgres,
        webserver_port=args.dagster_port,
        code_server_port=args.code_server_port,
    )


def _create_topics(cluster, config_path: Path) -> None:
    """Topics of the configuration's ingestions on this local cluster, created when missing (4 queues a broker)."""
    from rocketlake.engine.config import load_config
    from rocketlake.rocketmq.client import RocketMQClient
    from rocketlake.rocketmq.errors import TopicNotExist

    config = load_config(config_path)
    client = RocketMQClient(cluster.spec.namesrv_address, tls=cluster.spec.tls_settings())
    try:
        for ingestion in config.ingestions.values():
            if config.clusters[ingestion.cluster].namesrv != cluster.spec.namesrv_address:
                continue
            for topic in ingestion.topic_names:  # a pattern's topics are the user's to create
                try:
                    client.queues(topic)
                except TopicNotExist:
                    cluster.create_topic(topic, 4)
                    print(f"  created topic {topic} (4 queues on each broker)", flush=True)
    finally:
        client.close()


def _wipe_local_landings(namesrv: str) -> list[str]:
    """Delete what the project landed, in its default places (relative to the working directory, as the
    configuration resolves them), from the cluster at ``namesrv`` whose store ``--wipe`` deletes: those tables'
    ledgers would refuse the new, empty store (``LedgerAheadOfBroker``), so the next ``make demo`` could not land.
    Tables landed from another cluster stay; the local Dagster instance goes only with the last table of the lake.
    A lake the configuration puts anywhere else is never touched."""
    import shutil

    from rocketlake.dagster.launch import LOCAL_DAGSTER_HOME
    from rocketlake.engine.config import DEFAULT_LAKE_ROOT
    from rocketlake.local.landings import landed_from

    lake = Path(DEFAULT_LAKE_ROOT)
    wiped = []
    for table in landed_from(lake, namesrv):
        shutil.rmtree(table)
        wiped.append(str(table))
    if wiped and not any(lake.iterdir()):
        lake.rmdir()
        if LOCAL_DAGSTER_HOME.is_dir():
            shutil.rmtree(LOCAL_DAGSTER_HOME)
            wiped.append(str(LOCAL_DAGSTER_HOME))
    return wiped


def _local(args: argparse.Namespace) -> int:
    from rocketlake.local.cluster import LocalCluster

    cluster = LocalCluster(cluster_spec(args))
    spark = _spark_cluster(args) if args.spark or args.stack else None
    connect = _local_connect_server(args) if args.action != "env" else None
    postgres = _postgres(args) if args.postgres or args.stack else None
    s3 = _s3(args) if args.s3 or args.action == "down" else None  # down stops it whenever it runs
    registry = _registry(args) if args.registry or args.action in ("down", "status") else None  # likewise
    dagster = _dagster(args, postgres) if args.stack else None
    proxy = _proxy(cluster, args) if args.proxy or args.action in ("down", "status") else None
    if args.action == "up":
        print(f"starting the local RocketMQ cluster (state in {cluster.spec.state_dir}) ...", flush=True)
        status = cluster.up(progress=lambda line: print(line, flush=True))
        print(status.render(cluster.spec.cluster_name))
        if cluster.spec.tls is not None:
            import yaml

            tls = cluster.spec.tls_settings()
            block = {"namesrv": cluster.spec.namesrv_address, "tls": {"ca_file": tls.ca_file}}
            print(
                f"TLS enforced (CA in {cluster.spec.tls_dir}); use it with "
                f"{yaml.safe_dump({'clusters': {'local': block}}, default_flow_style=True).strip()} in rocketlake.yaml"
            )
        if proxy is not None:
            print("starting RocketMQ's proxy (cluster mode) ...", flush=True)
            address = proxy.up()
            print(f"  proxy answers at {address} (remoting; gRPC on port {proxy.remoting_port + 1})")
            print(f'use it with clusters: {{local: {{namesrv: "{address}"}}}} in rocketlake.yaml')
        if spark is not None:
            print(f"starting a Spark standalone master and {spark.spec.workers} workers ...", flush=True)
            print(spark.up(progress=lambda line: print(line, flush=True)).render())
            print(f'use it with spark: {{master: "{spark.spec.master_url}"}} in rocketlake.yaml')
        if connect is not None:  # after the standalone cluster: its master may be the server's
            print("starting the Spark Connect server the runs open their sessions on (spark.remote) ...", flush=True)
            # An S3 lake's keys, from the variables its configuration names: the local S3 server's, when it is
            # started here, as `local env --s3` gives them to a shell.
            environ = {**os.environ, **s3.credentials_env()} if s3 is not None else None
            connect.up(progress=lambda line: print(line, flush=True), environ=environ)
        if postgres is not None:
            print("starting PostgreSQL for Dagster's storage ...", flush=True)
            postgres.up(progress=lambda line: print(line, flush=True))
            print(postgres.status())
            print(
                f"deploy/dagster.yaml reads {', '.join(sorted(postgres.dagster_env()))}; "
                f"`rocketlake local env --postgres` prints them for a shell"
            )
        if s3 is not None:
            print("starting the S3-compatible object store for the lake ...", flush=True)
            s3.up(progress=lambda line: print(line, flush=True))
            print(s3.status())
            import yaml

            print(
                f"use it with {yaml.safe_dump({'lake': s3.lake_settings()}, default_flow_style=True).strip()} "
                "in rocketlake.yaml; `rocketlake local env --s3` prints the keys' variables for a shell"
            )
        if registry is not None:
            print("starting the schema registry (Confluent's REST API) ...", flush=True)
            registry.up(progress=lambda line: print(line, flush=True))
            print(f'use it with body: {{framing: confluent, registry_url: "{registry.url}"}} in rocketlake.yaml')
        if dagster is not None:
            _create_topics(cluster, dagster.config)
            print(f"starting dagster-daemon and dagster-webserver on {dagster.config} ...", flush=True)
            dagster.up(progress=lambda line: print(line, flush=True))
            print(dagster.status())
    elif args.action == "env":
        # For `eval "$(rocketlake local env --postgres --s3)"`: the secrets go to the shell, not to a log.
        if postgres is None and s3 is None:
            raise Refused(
                "local env prints the DAGSTER_PG_* variables (--postgres) or the local S3 server's keys "
                "(--s3): add one of them"
            )
        variables = {
            **(postgres.dagster_env() if postgres is not None else {}),
            **(s3.credentials_env() if s3 is not None else {}),
        }
        for key, value in sorted(variables.items()):
            print(f"export {key}={shlex.quote(value)}")
    elif args.action == "down":
        stopped = (
            (dagster.down() if dagster is not None else [])
            + (postgres.down(wipe=args.wipe) if postgres is not None else [])
            + (s3.down(wipe=args.wipe) if s3 is not None else [])
            + (registry.down() if registry is not None else [])
            + (connect.down() if connect is not None else [])
            + (spark.down() if spark is not None else [])
            + (proxy.down() if proxy is not None else [])
            + cluster.down(wipe=args.wipe)
        )
        print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
        if args.wipe:
            wiped = _wipe_local_landings(cluster.spec.namesrv_address)
            if wiped:
                print("deleted what was landed from the wiped store: " + ", ".join(wiped))
    else:
        status = cluster.status()
        print(status.render(cluster.spec.cluster_name))
        ready = status.ready
        if spark is not None:
            spark_status = spark.status()
            print(spark_status.render())
            ready = ready and spark_status.ready
        if proxy is not None and (args.proxy or proxy.process.pid() is not None):
            print(
                f"proxy {proxy.address}: {'up' if proxy.process.pid() else 'down'} (pid {proxy.process.pid() or '-'})"
            )
            ready = ready and proxy.process.pid() is not None
        if connect is not None:
            print(connect.status())
            ready = ready and connect.process.pid() is not None
        if postgres is not None:
            print(postgres.status())
            ready = ready and postgres.process.pid() is not None
        if s3 is not None:
            print(s3.status())
            ready = ready and s3.process.pid() is not None
        if registry is not None and (args.registry or registry.process.pid() is not None):
            print(registry.status())
            ready = ready and registry.process.pid() is not None
        if dagster is not None:
            print(dagster.status())
            ready = ready and dagster.daemon.pid() is not None and dagster.webserver.pid() is not None
        return 0 if ready else 3
    return 0


def add_parser(sub) -> None:
    """``rocketlake local`` and its options, under the subcommands ``sub``."""
    local = sub.add_parser(
        "local",
        help="a real RocketMQ name server and two brokers on 127.0.0.1",
        description="A real RocketMQ 5.3.3 name server and two brokers from Maven Central, as `java -cp` processes "
        "on 127.0.0.1 with small heaps, recorded and stopped by pid.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="actions:\n"
        "  up      resolve the jars (cached), start the cluster, return once the name server lists every broker;\n"
        "          harmless when it is already up\n"
        "  down    stop exactly the processes `up` started (checked by pid and start time)\n"
        "  status  print what the name server reports; exit 0 when ready, 3 when not\n"
        "  env     with --postgres: print `export DAGSTER_PG_...=...` lines for deploy/dagster.yaml",
    )
    local.add_argument("action", choices=["up", "down", "status", "env"], help="up, down, status or env (see below)")
    local.add_argument(
        "--wipe",
        action="store_true",
        help="with down: also delete the broker store, and the tables and Dagster runs landed from it "
        "in the project's default places (.rocketlake/lake, .rocketlake/dagster)",
    )
    local.add_argument(
        "--spark",
        action="store_true",
        help="also a Spark standalone master and workers from the installed pyspark (state in <state-dir>/spark)",
    )
    local.add_argument("--spark-port", type=int, default=7077, help="with --spark: the master's port (default: 7077)")
    local.add_argument(
        "--spark-ui-port",
        type=int,
        default=8080,
        help="with --spark: the master's web UI port; workers take the next ones (default: 8080)",
    )
    local.add_argument("--spark-workers", type=int, default=2, help="with --spark: how many workers (default: 2)")
    local.add_argument(
        "--postgres",
        action="store_true",
        help="also a PostgreSQL server for Dagster's storage (Debian's postgresql; data in "
        "<state-dir>/postgres, or /var/tmp/rocketlake-postgres when run as root)",
    )
    local.add_argument(
        "--postgres-port", type=int, default=5432, help="with --postgres: its port on 127.0.0.1 (default: 5432)"
    )
    local.add_argument(
        "--slaves",
        action="store_true",
        help="each broker a master with a slave (classic replication: brokerId 1, brokerRole SLAVE, "
        "listening 5 ports above its master); runs pull from a slave while its master is down",
    )
    local.add_argument(
        "--controller",
        action="store_true",
        help="5.x controller mode (automatic master/slave switch): a controller in the name server, "
        "2 above its port, and each broker two replicas (as --slaves) whose master it elects, and "
        "replaces when it dies",
    )
    local.add_argument(
        "--tls",
        action="store_true",
        help="the name server and brokers take TLS only (tls.server.mode=enforcing), with certificates "
        "of a CA of their own kept in <state-dir>/tls",
    )
    local.add_argument(
        "--ipv6",
        action="store_true",
        help="the name server and brokers listen on IPv6's loopback (::1) instead of 127.0.0.1; clients name the "
        "name server [::1]:<port>",
    )
    local.add_argument(
        "--proxy",
        action="store_true",
        help="also RocketMQ 5's proxy in cluster mode, its remoting endpoint on --proxy-port: name it as a "
        "cluster's namesrv to go through it, as deployments that expose only a proxy do",
    )
    local.add_argument(
        "--proxy-port",
        type=int,
        default=18080,
        help="with --proxy: its remoting port; gRPC on the next (default: 18080)",
    )
    local.add_argument(
        "--s3",
        action="store_true",
        help="also an S3-compatible object store for the lake (versitygw, built once from its Go "
        "module), with a bucket 'lake'; state in <state-dir>/s3",
    )
    local.add_argument(
        "--registry",
        action="store_true",
        help="also a schema registry with Confluent's REST API (Apicurio Registry, built once with Maven), for "
        "bodies framed by a registry (body.framing: confluent); schemas kept in memory until down",
    )
    local.add_argument(
        "--registry-port", type=int, default=8081, help="with --registry: its port on 127.0.0.1 (default: 8081)"
    )
    local.add_argument("--s3-port", type=int, default=7070, help="with --s3: its port on 127.0.0.1 (default: 7070)")
    local.add_argument(
        "--stack",
        action="store_true",
        help="the whole stack as production runs it: brokers, --spark, --postgres, and dagster-daemon "
        "plus dagster-webserver on deploy/dagster.yaml with every schedule on",
    )
    local.add_argument(
        "--dagster-port",
        type=int,
        default=3000,
        help="with --stack: dagster-webserver's port on 127.0.0.1 (default: 3000)",
    )
    local.add_argument(
        "--code-server-port",
        type=int,
        default=4266,
        help="with --stack: the port on 127.0.0.1 of the Dagster code server the daemon and the "
        "webserver load the code location from (default: 4266)",
    )
    local.add_argument(
        "--config",
        default=None,
        help="the rocketlake.yaml whose spark.remote, when on this machine, `up` starts a Spark Connect "
        "server for (default: $ROCKETLAKE_CONFIG or ./rocketlake.yaml); with --stack, also the one "
        "Dagster loads (default: $ROCKETLAKE_CONFIG or deploy/rocketlake.yaml)",
    )
    cluster_options(local)
    local.set_defaults(func=_local)
