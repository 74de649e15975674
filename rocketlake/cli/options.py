"""What several commands share: the local cluster's options, ``--config``, and the refusal they print."""

from __future__ import annotations

import argparse
from pathlib import Path

from rocketlake.local.spec import BrokerSpec, ClusterSpec, default_state_dir


class Refused(Exception):
    """A request refused before anything was started; the message is the one line to print."""


def cluster_options(p: argparse.ArgumentParser) -> None:
    """The local cluster's state directory, store and ports."""
    p.add_argument(
        "--state-dir",
        default=str(default_state_dir()),
        help="pids, configs and logs of the local cluster (default: $ROCKETLAKE_LOCAL_DIR or .rocketlake/local)",
    )
    p.add_argument("--store-dir", default=None, help="broker store root (default: on /dev/shm when available)")
    p.add_argument("--namesrv-port", type=int, default=9876, help="name server port on 127.0.0.1 (default: 9876)")
    p.add_argument(
        "--broker-ports",
        default="10911,10921",
        help="comma-separated listen ports, one broker each, named broker-a, broker-b, ... "
        "(each also uses port-2 and port+1; default: 10911,10921)",
    )


def config_option(p: argparse.ArgumentParser) -> None:
    """``--config``: the rocketlake.yaml a command reads."""
    p.add_argument(
        "--config", default=None, help="rocketlake.yaml to use (default: $ROCKETLAKE_CONFIG or ./rocketlake.yaml)"
    )


def cluster_spec(args: argparse.Namespace) -> ClusterSpec:
    """The local cluster the options name: TLS, slaves or controller mode as asked, or as the running one was started."""
    from dataclasses import replace

    from rocketlake.local.peers import ipv6_marker, tls_marker
    from rocketlake.local.process import ManagedProcess
    from rocketlake.local.spec import LOOPBACK, LOOPBACK_V6, TlsSpec, controller_marker

    ports = [int(p) for p in args.broker_ports.split(",")]
    names = [f"broker-{chr(ord('a') + i)}" for i in range(len(ports))]
    state_dir = Path(args.state_dir).absolute()
    running = ManagedProcess("namesrv", state_dir).pid() is not None
    # TLS when asked (`local up --tls`), and for every command while a cluster started that way runs.
    running_tls = tls_marker(state_dir).exists() and running
    ipv6 = getattr(args, "ipv6", False) or (ipv6_marker(state_dir).exists() and running)  # likewise
    spec = ClusterSpec(
        state_dir=state_dir,
        store_root=Path(args.store_dir).absolute() if args.store_dir else None,
        namesrv_port=args.namesrv_port,
        brokers=tuple(BrokerSpec(n, p) for n, p in zip(names, ports)),
        tls=TlsSpec() if getattr(args, "tls", False) or running_tls else None,
        host=LOOPBACK_V6 if ipv6 else LOOPBACK,
    )
    # Slaves when asked (`local up --slaves`, or `--controller`, which needs replicas), and for every command while
    # a cluster started that way runs; controller mode likewise.
    controller = getattr(args, "controller", False) or (controller_marker(state_dir).exists() and running)
    running_slaves = ManagedProcess(BrokerSpec(names[0], 0, 1).key, state_dir).pid() is not None
    if controller or getattr(args, "slaves", False) or running_slaves:
        spec = spec.with_slaves()
    return replace(spec, controller=True) if controller else spec
