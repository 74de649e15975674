"""`rocketlake local up --proxy`: RocketMQ 5's proxy in cluster mode beside the local brokers, on 127.0.0.1.

Many 5.x deployments, and most hosted ones, expose only a proxy: clients speak the remoting protocol (or gRPC) to it,
it answers routes with its own address and forwards each request to the broker that holds the queue. The local one is
the official Maven Central artifact (``rocketmq-proxy``), started with ``java -cp`` like the brokers, with a config
file of its own in the state directory and a small heap.
"""

from __future__ import annotations

import json
import time

from rocketlake import jars
from rocketlake.local.cluster import LocalCluster
from rocketlake.local.process import (
    ROCKETMQ_TIMER_SLACK_NS,
    LocalClusterError,
    ManagedProcess,
    accepts_connections,
    jvm_base_flags,
    stop_all,
)
from rocketlake.local.spec import LOOPBACK

PROXY_HEAP = ["-Xms128m", "-Xmx384m", "-XX:MaxDirectMemorySize=128m", "-XX:+UseSerialGC"]
#: The proxy's remoting port by default (RocketMQ's own default is 8080, which web servers often hold).
PROXY_REMOTING_PORT = 18080
START_TIMEOUT_S = 120.0


def proxy_jar_set(version: str):
    return jars.JarSet(f"rocketmq-proxy-{version}", (jars.Artifact("org.apache.rocketmq", "rocketmq-proxy", version),))


class LocalProxy:
    """The proxy of ``cluster``, its remoting endpoint on ``remoting_port`` (gRPC on the next port up)."""

    def __init__(self, cluster: LocalCluster, remoting_port: int = PROXY_REMOTING_PORT):
        if cluster.spec.is_4x:
            raise LocalClusterError(f"RocketMQ {cluster.spec.version} has no proxy: it is RocketMQ 5's")
        if cluster.spec.acl is not None:
            raise LocalClusterError(
                "--proxy with --acl is not supported yet: the local proxy is started without the cluster's ACL "
                "settings; start the cluster without --acl to go through the proxy"
            )
        self.cluster = cluster
        self.remoting_port = remoting_port
        self.process = ManagedProcess("proxy", cluster.spec.state_dir)

    @property
    def address(self) -> str:
        """Where clients go instead of the name server: the proxy answers routes with itself."""
        return f"{LOOPBACK}:{self.remoting_port}"

    def config(self) -> dict:
        spec = self.cluster.spec
        return {
            "rocketMQClusterName": spec.cluster_name,
            "namesrvAddr": spec.namesrv_address,
            "proxyMode": "cluster",
            "remotingListenPort": self.remoting_port,
            "grpcServerPort": self.remoting_port + 1,
            # Routes answer with this address, not the machine's first interface.
            "localServeAddr": LOOPBACK,
        }

    def up(self, timeout: float = START_TIMEOUT_S) -> str:
        """Start the proxy unless it runs; return its remoting address once it answers a route request."""
        if self.process.pid() is None:
            spec = self.cluster.spec
            conf = spec.state_dir / "rmq-proxy.json"
            conf.write_text(json.dumps(self.config(), indent=2))
            env = {**self.cluster.java_env(), "RMQ_PROXY_HOME": str(spec.home)}
            self.process.start(
                [
                    self.cluster.java(),
                    *PROXY_HEAP,
                    *jvm_base_flags(spec.state_dir, spec.home, "rmq.proxy.logback.xml"),
                    "-cp",
                    jars.classpath(proxy_jar_set(spec.version)),
                    "org.apache.rocketmq.proxy.ProxyStartup",
                    "-pc",
                    str(conf),
                    "-pm",
                    "cluster",
                ],
                env,
                timer_slack_ns=ROCKETMQ_TIMER_SLACK_NS,
            )
        deadline = time.monotonic() + timeout
        while not self._answers():
            if self.process.pid() is None:
                raise LocalClusterError(
                    f"the proxy stopped while starting; its log: {self.process.log_file} "
                    f"(last lines: {self.process.log_file.read_text(errors='replace')[-2000:]})"
                )
            if time.monotonic() > deadline:
                raise LocalClusterError(f"the proxy did not answer on {self.address} within {timeout:g} s")
            time.sleep(0.25)  # polls the proxy itself, bounded by the deadline above
        return self.address

    def _answers(self) -> bool:
        """The proxy listens and routes a topic every broker serves (the default one, TBW102, exists on all)."""
        if not accepts_connections(self.remoting_port):
            return False
        from rocketlake.rocketmq.errors import RocketMQError
        from rocketlake.rocketmq.namesrv import NameServerClient

        try:
            NameServerClient(self.address).topic_route("TBW102")
        except (RocketMQError, OSError):
            return False
        return True

    def down(self) -> list[str]:
        return stop_all([self.process])
