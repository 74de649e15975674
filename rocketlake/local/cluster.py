"""`rocketlake local up | down | status`: a real name server and two brokers on 127.0.0.1.

The JVMs are the official Maven Central artifacts started with ``java -cp`` (no start scripts:
their 4-8 GB heaps do not fit here). Readiness is asked of the name server itself, the way
RocketMQ's own integration tests wait: a broker is ready once the name server lists it.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rocketlake import jars
from rocketlake.local import peers
from rocketlake.local.mqadmin import MQAdmin
from rocketlake.local.process import (
    BROKER_HEAP,
    NAMESRV_HEAP,
    ROCKETMQ_TIMER_SLACK_NS,
    LocalClusterError,
    ManagedProcess,
    accepts_connections,
    jvm_base_flags,
    port_in_use,
    stop_all,
)
from rocketlake.local.spec import BrokerSpec, ClusterSpec, controller_marker

START_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class BrokerStatus:
    name: str
    address: str
    pid: int | None
    registered_address: str | None  # what the name server says, None if it does not list the broker
    #: In controller mode, the id the controller gave it and the name server routes (0: the master of the moment),
    #: and the broker name it is a replica of.
    registered_id: int | None = None
    replica_of: str | None = None


@dataclass(frozen=True)
class ClusterStatus:
    namesrv_address: str
    namesrv_pid: int | None
    namesrv_reachable: bool
    brokers: tuple[BrokerStatus, ...]
    store: Path

    @property
    def ready(self) -> bool:
        registered = self.namesrv_reachable and all(b.registered_address == b.address for b in self.brokers)
        if not registered or all(b.replica_of is None for b in self.brokers):  # not controller mode
            return registered
        # Controller mode: a replica registers with id -1 until the controller gives it one; each name needs a master.
        masters = sorted(b.replica_of for b in self.brokers if b.registered_id == 0)
        return all(b.registered_id is not None and b.registered_id >= 0 for b in self.brokers) and masters == sorted(
            {b.replica_of for b in self.brokers}
        )

    def render(self, cluster_name: str) -> str:
        ns = "up" if self.namesrv_reachable else "down"
        lines = [
            f"name server {self.namesrv_address}: {ns} (pid {self.namesrv_pid or '-'})",
            f"cluster {cluster_name} (store {self.store}):",
        ]
        for b in self.brokers:
            state = "registered" if b.registered_address else ("running, not registered" if b.pid else "down")
            if b.registered_id is not None:
                role = (
                    "master"
                    if b.registered_id == 0
                    else "slave"
                    if b.registered_id > 0
                    else "no id from the controller yet"
                )
                state += f" as brokerId {b.registered_id} ({role})"
            lines.append(f"  {b.name:<10} {b.address:<17} {state} (pid {b.pid or '-'})")
        return "\n".join(lines)


class LocalCluster:
    def __init__(self, spec: ClusterSpec | None = None):
        self.spec = spec or ClusterSpec()
        self.namesrv = ManagedProcess("namesrv", self.spec.state_dir)
        self.broker_processes = {b.key: ManagedProcess(b.key, self.spec.state_dir) for b in self.spec.brokers}
        #: Extra environment per broker key for its next start (the chaos soak runs a broker on a clock shifted by
        #: libfaketime: ``tests/chaos``).
        self.broker_env: dict[str, dict[str, str]] = {}

    # -- classpath -----------------------------------------------------------------------------
    def classpath(self) -> str:
        return jars.classpath(jars.rocketmq_jar_set(self.spec.version))

    def java(self) -> str:
        return jars.require_tool("java", "run the local RocketMQ name server and brokers")

    def java_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["ROCKETMQ_HOME"] = str(self.spec.home)
        env.pop("JAVA_TOOL_OPTIONS", None)  # its banner would pollute the parsed tool output
        return env

    # -- up ------------------------------------------------------------------------------------
    def up(self, timeout: float = START_TIMEOUT_S, progress: Callable[[str], None] | None = None) -> ClusterStatus:
        """Start whatever is not running yet, and wait until every broker is registered; ``progress`` hears one
        line per process ready (the CLI and the demo print them)."""
        report = progress or (lambda line: None)
        started = time.monotonic()
        java = self.java()
        cp = self.classpath()
        marker = controller_marker(self.spec.state_dir)
        if self.namesrv.pid() is not None and self.spec.controller != marker.exists():
            raise LocalClusterError(
                f"the cluster of {self.spec.state_dir} runs {'without' if self.spec.controller else 'in'} controller "
                "mode: stop it first (rocketlake local down), then start it again as you want it"
            )
        self._prepare_dirs()
        if self.spec.controller:
            marker.write_text("controller mode\n")
        else:
            marker.unlink(missing_ok=True)
        deadline = time.monotonic() + timeout
        if self.namesrv.pid() is None:
            self._check_ports(
                "name server",
                (self.spec.namesrv_port,) + ((self.spec.controller_port,) if self.spec.controller else ()),
            )
            conf = self.spec.state_dir / "namesrv.properties"
            conf.write_text(self.spec.namesrv_properties())
            self.namesrv.start(
                [
                    java,
                    *NAMESRV_HEAP,
                    *self._flags("rmq.namesrv.logback.xml"),
                    "-cp",
                    cp,
                    "org.apache.rocketmq.namesrv.NamesrvStartup",
                    "-c",
                    str(conf),
                ],
                self.java_env(),
                timer_slack_ns=ROCKETMQ_TIMER_SLACK_NS,
            )
        self._wait(
            lambda: accepts_connections(self.spec.namesrv_port, self.spec.host),
            deadline,
            self.namesrv,
            f"the name server to listen on {self.spec.namesrv_address}",
        )
        report(f"  name server listening on {self.spec.namesrv_address} ({time.monotonic() - started:.0f}s)")
        for broker in self.spec.brokers:
            proc = self.broker_processes[broker.key]
            if proc.pid() is not None:
                continue
            self._check_ports(broker.key, broker.ports)
            conf = self.spec.state_dir / f"{broker.key}.conf"
            conf.write_text(self.spec.broker_properties(broker))
            proc.start(
                [
                    java,
                    *BROKER_HEAP,
                    *self._flags("rmq.broker.logback.xml"),
                    "-cp",
                    cp,
                    "org.apache.rocketmq.broker.BrokerStartup",
                    "-c",
                    str(conf),
                ],
                {**self.java_env(), **self.broker_env.get(broker.key, {})},
                timer_slack_ns=ROCKETMQ_TIMER_SLACK_NS,
            )
        for broker in self.spec.brokers:
            self._wait(
                lambda b=broker: self._registered(b),
                deadline,
                self.broker_processes[broker.key],
                f"{broker.key} to register {broker.address} with the name server",
            )
            report(f"  {broker.key} is up at {broker.address} ({time.monotonic() - started:.0f}s)")
        if self.spec.controller:
            for name in sorted({b.name for b in self.spec.brokers}):
                self._wait(
                    lambda n=name: self._replicated(n),
                    deadline,
                    self.namesrv,
                    f"the controller to elect a master of {name} with every replica in sync",
                )
                report(
                    f"  {name}'s master is {self.registered_ids(name)[0]}, its replicas in sync "
                    f"({time.monotonic() - started:.0f}s)"
                )
        return self.status()

    def _replicated(self, name: str) -> bool:
        """The name server routes a master of ``name`` and the controller counts every replica in its sync state
        set: only then can a replica take over from a master that dies (unclean elections are off)."""
        master = self.registered_ids(name).get(0)
        if master is None:
            return False
        try:
            state = self.mqadmin().sync_state_set(self.spec.controller_address, name)
        except LocalClusterError:  # e.g. while the controller has no leader yet: ask again
            return False
        return state.master == master and {b.address for b in self.spec.brokers if b.name == name} <= set(
            a for a, alive in state.in_sync.items() if alive
        )

    def _flags(self, logback: str) -> list[str]:
        flags = jvm_base_flags(self.spec.state_dir, self.spec.home, logback, ipv4_only=":" not in self.spec.host)
        if self.spec.tls is not None:
            flags = [f for f in flags if not f.startswith("-Dtls.server.mode=")]
            flags += self.spec.tls.server_flags(self.spec.tls_dir)
        if self.spec.is_4x:
            # 4.9 reads its disk-full threshold from a system property, uncapped (5.x clamps it to 0.9).
            flags.append("-Drocketmq.broker.diskSpaceWarningLevelRatio=0.98")
        return flags

    def _prepare_dirs(self) -> None:
        for d in (self.spec.state_dir, self.spec.home, self.spec.log_dir, self.spec.state_dir / "namesrv"):
            d.mkdir(parents=True, exist_ok=True)
        marker = peers.tls_marker(self.spec.state_dir)
        if self.spec.tls is not None:
            from rocketlake.local.certificates import local_certificates

            local_certificates(self.spec.tls_dir)  # made once, kept with the state
            marker.write_text("enforcing\n")  # the Java peers of this state directory speak TLS
        else:
            marker.unlink(missing_ok=True)
        ipv6 = peers.ipv6_marker(self.spec.state_dir)
        if ":" in self.spec.host:
            ipv6.write_text(f"{self.spec.host}\n")  # the Java peers of this state directory use both stacks
        else:
            ipv6.unlink(missing_ok=True)
        for relative, text in self.spec.home_files().items():
            (self.spec.home / relative).parent.mkdir(parents=True, exist_ok=True)
            (self.spec.home / relative).write_text(text)
        store = self.spec.store
        try:
            store.mkdir(parents=True, exist_ok=True)
            probe = store / ".write-probe"
            probe.write_bytes(b"x")
            probe.unlink()
        except OSError as e:
            raise LocalClusterError(
                f"the broker store {store} is not writable ({e.strerror}); choose another with --store-dir"
            ) from e
        usage = shutil.disk_usage(store)
        if (usage.total - usage.free) / usage.total > 0.85:
            raise LocalClusterError(
                f"the file system of the broker store {store} is {100 * (usage.total - usage.free) // usage.total}% "
                "full; RocketMQ refuses writes above 90%. Free space or choose another --store-dir."
            )

    def _check_ports(self, role: str, ports: tuple[int, ...]) -> None:
        taken = [p for p in ports if port_in_use(p, self.spec.host)]
        if taken:
            raise LocalClusterError(
                f"cannot start the {role}: port {', '.join(map(str, taken))} on {self.spec.host} is already in use by "
                "another process. Stop it, or choose other ports (rocketlake local up --namesrv-port/--broker-port)."
            )

    def _wait(self, ready, deadline: float, proc: ManagedProcess, what: str) -> None:
        while not ready():
            if proc.pid() is None:
                raise LocalClusterError(
                    f"the {proc.role} process exited while waiting for {what}. Last lines of {proc.log_file}:\n"
                    f"{proc.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise LocalClusterError(
                    f"timed out waiting for {what}. Last lines of {proc.log_file}:\n{proc.log_tail()}"
                )
            time.sleep(0.25)  # readiness poll of an external process; each poll asks the name server

    def _registered(self, broker: BrokerSpec) -> bool:
        if self.spec.controller:  # the controller gives the ids: the replica is listed under its name, any id
            return broker.address in self.registered_ids(broker.name).values()
        return self._registered_addresses().get(broker.key) == broker.address

    def _broker_addrs(self) -> dict[str, dict[int, str]]:
        """Broker name -> brokerId -> address, for this cluster's names as the name server reports them ({} when it
        does not answer)."""
        from rocketlake.rocketmq.errors import RocketMQError
        from rocketlake.rocketmq.namesrv import NameServerClient

        try:
            info = NameServerClient(self.spec.namesrv_address, timeout=2.0, tls=self.spec.tls_settings()).cluster_info()
        except RocketMQError:
            return {}
        names = set(info.cluster_addr_table.get(self.spec.cluster_name, ()))
        return {name: dict(data.broker_addrs) for name, data in info.broker_addr_table.items() if name in names}

    def registered_ids(self, name: str) -> dict[int, str]:
        """brokerId -> address of the brokers named ``name``, as the name server routes them (0: the master)."""
        return self._broker_addrs().get(name, {})

    def _registered_addresses(self) -> dict[str, str]:
        """Broker key (``BrokerSpec.key``) -> address, as the name server reports it ({} when unreachable)."""
        return {
            BrokerSpec(name, 0, broker_id).key: address
            for name, ids in self._broker_addrs().items()
            for broker_id, address in ids.items()
        }

    # -- status / down -------------------------------------------------------------------------
    def status(self) -> ClusterStatus:
        reachable = accepts_connections(self.spec.namesrv_port, self.spec.host)
        if self.spec.controller:  # ids come from the controller: each replica is found by its address
            ids = {
                address: broker_id
                for addresses in (self._broker_addrs() if reachable else {}).values()
                for broker_id, address in addresses.items()
            }
            brokers = tuple(
                BrokerStatus(
                    b.key,
                    b.address,
                    self.broker_processes[b.key].pid(),
                    b.address if b.address in ids else None,
                    ids.get(b.address),
                    b.name,
                )
                for b in self.spec.brokers
            )
        else:
            registered = self._registered_addresses() if reachable else {}
            brokers = tuple(
                BrokerStatus(b.key, b.address, self.broker_processes[b.key].pid(), registered.get(b.key))
                for b in self.spec.brokers
            )
        return ClusterStatus(
            namesrv_address=self.spec.namesrv_address,
            namesrv_pid=self.namesrv.pid(),
            namesrv_reachable=reachable,
            brokers=brokers,
            store=self.spec.store,
        )

    # -- topics --------------------------------------------------------------------------------
    def mqadmin(self) -> "MQAdmin":
        return MQAdmin(self.spec.namesrv_address, self.spec.state_dir, self.spec.version)

    def create_topic(
        self,
        topic: str,
        queues: int,
        brokers: tuple[str, ...] | None = None,
        timeout: float = 60.0,
        attributes: dict[str, str] | None = None,
    ) -> None:
        """Create ``topic`` with ``queues`` read/write queues on each chosen broker (default: all), and ``attributes``
        (5.x: ``{"message.type": "FIFO"}``), and return once the name server routes it that way, so the next call can
        use it."""
        chosen = [self.spec.broker(name) for name in (brokers or [b.name for b in self.spec.masters])]
        admin = self.mqadmin()
        for broker in chosen:
            admin.update_topic(topic, broker.address, queues, attributes)
        # And on their slaves, which would otherwise copy the topic from their master within a minute: until then a
        # slave answers pulls of it TOPIC_NOT_EXIST.
        for broker in self.spec.brokers:
            if not broker.is_master and broker.name in {b.name for b in chosen}:
                admin.update_topic(topic, broker.address, queues, attributes)
        wanted = {b.name: queues for b in chosen}
        deadline = time.monotonic() + timeout
        while {k: v for k, v in self._routed_queue_counts(topic).items() if k in wanted} != wanted:
            if time.monotonic() > deadline:
                raise LocalClusterError(
                    f"topic {topic} was created but the name server still routes "
                    f"{self._routed_queue_counts(topic)} instead of {wanted}"
                )
            time.sleep(0.2)  # the broker registers the new topic with the name server asynchronously

    def _routed_queue_counts(self, topic: str) -> dict[str, int]:
        from rocketlake.rocketmq.errors import RocketMQError
        from rocketlake.rocketmq.namesrv import NameServerClient

        try:
            route = NameServerClient(self.spec.namesrv_address, timeout=2.0, tls=self.spec.tls_settings()).topic_route(
                topic
            )
        except RocketMQError:
            return {}
        return {q.broker_name: q.write_queue_nums for q in route.queue_datas}

    def down(self, *, wipe: bool = False) -> list[str]:
        """Stop exactly the processes this state directory started: brokers first, then the name server."""
        # Brokers first (they deregister from the name server), then the name server. A store about to be wiped
        # need not be flushed and unmapped, which takes a broker about 10 s: those brokers are killed.
        stopped = stop_all(list(self.broker_processes.values()), sig=signal.SIGKILL if wipe else signal.SIGTERM)
        stopped += stop_all([self.namesrv])
        peers.close_servers(self.spec.state_dir)  # this process's Java peer / mqadmin JVM for the state directory
        if wipe:
            shutil.rmtree(self.spec.store, ignore_errors=True)
        return stopped
