"""rocketlake: land Apache RocketMQ topics in Delta Lake tables, orchestrated by Dagster, run by PySpark.

Ingestion itself runs through Dagster (`dagster dev -w workspace.yaml`, or
`dagster asset materialize -m rocketlake.definitions --select <table> --partition <window>`); this command
starts and stops the local RocketMQ cluster used for development and tests, and runs the demo.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rocketlake.pipelines.config import ConfigError
from rocketlake.resources.jars import JarResolutionFailed, ToolMissing
from rocketlake.resources.local.process import LocalClusterError
from rocketlake.resources.local.spec import BrokerSpec, ClusterSpec, default_state_dir


def _cluster_spec(args: argparse.Namespace) -> ClusterSpec:
    ports = [int(p) for p in args.broker_ports.split(",")]
    names = [f"broker-{chr(ord('a') + i)}" for i in range(len(ports))]
    return ClusterSpec(
        state_dir=Path(args.state_dir).absolute(),
        store_root=Path(args.store_dir).absolute() if args.store_dir else None,
        namesrv_port=args.namesrv_port,
        brokers=tuple(BrokerSpec(n, p) for n, p in zip(names, ports)),
    )


def _local(args: argparse.Namespace) -> int:
    from rocketlake.resources.local.cluster import LocalCluster

    cluster = LocalCluster(_cluster_spec(args))
    if args.action == "up":
        print(f"starting the local RocketMQ cluster (state in {cluster.spec.state_dir}) ...", flush=True)
        status = cluster.up()
        print(status.render(cluster.spec.cluster_name))
    elif args.action == "down":
        stopped = cluster.down(wipe=args.wipe)
        print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
    else:
        status = cluster.status()
        print(status.render(cluster.spec.cluster_name))
        return 0 if status.ready else 3
    return 0


def _demo(args: argparse.Namespace) -> int:
    from rocketlake.demo import run_demo

    return run_demo(_cluster_spec(args), topic=args.topic, messages=args.messages, windows=args.windows)


EXAMPLES = """examples:
  rocketlake demo                 the whole product on its defaults (about four minutes)
  rocketlake local up             name server on 127.0.0.1:9876, brokers on :10911 and :10921
  rocketlake local status         what the name server reports (exit 3 when not ready)
  rocketlake local down --wipe    stop what `up` started (by pid) and delete the broker store
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rocketlake", description=__doc__, epilog=EXAMPLES,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def cluster_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--state-dir", default=str(default_state_dir()),
                       help="pids, configs and logs of the local cluster (default: $ROCKETLAKE_LOCAL_DIR or .rocketlake/local)")
        p.add_argument("--store-dir", default=None, help="broker store root (default: on /dev/shm when available)")
        p.add_argument("--namesrv-port", type=int, default=9876, help="name server port on 127.0.0.1 (default: 9876)")
        p.add_argument("--broker-ports", default="10911,10921",
                       help="comma-separated listen ports, one broker each, named broker-a, broker-b, ... "
                            "(each also uses port-2 and port+1; default: 10911,10921)")

    local = sub.add_parser(
        "local", help="a real RocketMQ name server and two brokers on 127.0.0.1",
        description="A real RocketMQ 5.3.3 name server and two brokers from Maven Central, as `java -cp` processes "
                    "on 127.0.0.1 with small heaps, recorded and stopped by pid.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="actions:\n"
               "  up      resolve the jars (cached), start the cluster, return once the name server lists every broker;\n"
               "          harmless when it is already up\n"
               "  down    stop exactly the processes `up` started (checked by pid and start time)\n"
               "  status  print what the name server reports; exit 0 when ready, 3 when not")
    local.add_argument("action", choices=["up", "down", "status"], help="up, down or status (see below)")
    local.add_argument("--wipe", action="store_true", help="with down: also delete the broker store")
    cluster_options(local)
    local.set_defaults(func=_local)

    demo = sub.add_parser(
        "demo", help="the main job on embedded defaults: local cluster, sample orders over several one-minute "
                     "windows, materialized through Dagster into Delta",
        description="Start the local cluster, produce JSON orders with the official Java client over several "
                    "one-minute windows of broker store time, wait until the last one closes, land them all through "
                    "Dagster in one run, and print rows per window and the group's committed offsets. Then `make ui` "
                    "shows the runs on the demo's Dagster instance.")
    demo.add_argument("--topic", default="rocketlake_demo_orders",
                      help="the topic of one ingestion in rocketlake.yaml (default: rocketlake_demo_orders)")
    demo.add_argument("--messages", type=int, default=300, help="orders to produce in all (default: 300)")
    demo.add_argument("--windows", type=int, default=3,
                      help="one-minute windows to spread the messages over (default: 3)")
    cluster_options(demo)
    demo.set_defaults(func=_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (LocalClusterError, ToolMissing, JarResolutionFailed, ConfigError) as e:
        print(f"rocketlake: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
