"""What a local RocketMQ cluster looks like: ports, directories, and the files each JVM reads.

A pure description: rendering the name server and broker configuration does no I/O, so the
values that matter on a small machine (loopback addresses, small store files, no forced disk
cleaning) are visible in one place and testable without starting anything.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from rocketlake.jars import ROCKETMQ_VERSION

if TYPE_CHECKING:
    from rocketlake.rocketmq.tls import TlsSettings

LOOPBACK = "127.0.0.1"
#: IPv6's loopback: a cluster on it (``ClusterSpec(host=LOOPBACK_V6)``) is what a dual-stack or IPv6-only deployment
#: looks like to a client: v6 addresses in the route and the messages' v6 born and store hosts.
LOOPBACK_V6 = "::1"
#: Where a slave listens, above its master's port (the master uses port-2, port and port+1).
SLAVE_PORT_OFFSET = 5


@dataclass(frozen=True)
class BrokerSpec:
    name: str
    port: int
    #: 0: the master of ``name``; 1 and up: a slave of it (classic master/slave replication, ``brokerRole=SLAVE``).
    broker_id: int = 0
    #: The address it listens on and registers; its cluster's (:attr:`ClusterSpec.host`).
    host: str = LOOPBACK

    @property
    def address(self) -> str:
        # As the broker registers itself (brokerIP1 + ":" + port): an IPv6 address unbracketed, as Java's clients
        # split it (at the last colon).
        return f"{self.host}:{self.port}"

    @property
    def is_master(self) -> bool:
        return self.broker_id == 0

    @property
    def key(self) -> str:
        """What names this broker's process, configuration and store: its name, ``-s<id>`` for a slave."""
        return self.name if self.is_master else f"{self.name}-s{self.broker_id}"

    @property
    def ports(self) -> tuple[int, ...]:
        # The broker also opens listenPort-2 (the "fast" server) and listenPort+1 (HA).
        return (self.port - 2, self.port, self.port + 1)


@dataclass(frozen=True)
class AclSpec:
    """One account the brokers accept, allowed everything: requests must carry its ACL 1.0 signature.

    4.9 reads it from ``$ROCKETMQ_HOME/conf/plain_acl.yml`` (``aclEnable``, the plain ACL module);
    5.3 dropped that module and checks the same signatures with its authentication 2.0
    (``authenticationEnabled``), the account being created as a super user at startup. Both
    refuse requests that are unsigned or signed with another secret; 5.3 checks authentication
    only (no per-topic authorization). ``repr()`` hides the secret.
    """

    access_key: str
    secret_key: str = field(repr=False)

    def __post_init__(self) -> None:
        # 4.9 refuses keys of 6 characters or fewer; the charset keeps the values safe unescaped in a
        # properties file, YAML and JSON. The message never shows the secret.
        for name, value in (("access key", self.access_key), ("secret key", self.secret_key)):
            if not _ACL_KEY.fullmatch(value):
                raise ValueError(f"the ACL {name} must be 7+ characters of A-Z a-z 0-9 _ . -")


_ACL_KEY = re.compile(r"[A-Za-z0-9_.-]{7,}")


@dataclass(frozen=True)
class TlsSpec:
    """The name server and brokers take TLS only (``tls.server.mode=enforcing``), with certificates of the local
    runtime's CA kept in ``<state>/tls`` (``local.certificates``): clients must speak TLS and trust that
    CA. With ``require_client_certificate`` the servers also demand a client certificate the CA signed
    (``tls.server.need.client.auth=require``). The brokers, clients of the name server, check its certificate too.
    """

    require_client_certificate: bool = False

    def server_flags(self, folder: Path) -> list[str]:
        """The JVM system properties (TlsSystemConfig reads nothing else; broker.conf keys have no TLS effect).
        ``tls.test.mode.enable`` defaults to true, which ignores the certificate files for a self-signed one."""
        flags = [
            "-Dtls.server.mode=enforcing",
            "-Dtls.test.mode.enable=false",
            f"-Dtls.server.certPath={folder / 'server.pem'}",
            f"-Dtls.server.keyPath={folder / 'server.key'}",
            # the broker as a client of the name server (TLS on by itself in enforcing mode)
            "-Dtls.client.authServer=true",
            f"-Dtls.client.trustCertPath={folder / 'ca.pem'}",
        ]
        if self.require_client_certificate:
            flags += [
                "-Dtls.server.need.client.auth=require",
                "-Dtls.server.authClient=true",
                f"-Dtls.server.trustCertPath={folder / 'ca.pem'}",
                f"-Dtls.client.certPath={folder / 'client.pem'}",
                f"-Dtls.client.keyPath={folder / 'client.key'}",
            ]
        return flags


def controller_marker(state_dir: Path) -> Path:
    """Present while the cluster of ``state_dir`` runs in controller mode (``LocalCluster.up`` keeps it), so that
    every later command sees it that way."""
    return state_dir / "controller-mode"


def default_state_dir() -> Path:
    return Path(os.environ.get("ROCKETLAKE_LOCAL_DIR", ".rocketlake/local")).absolute()


def default_store_root(state_dir: Path) -> Path:
    """On tmpfs when there is one: a broker refuses writes once its disk is 90 % full."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        digest = hashlib.sha1(str(state_dir).encode()).hexdigest()[:10]
        return shm / f"rocketlake-{os.getuid()}-{digest}"
    return state_dir / "store"


@dataclass(frozen=True)
class ClusterSpec:
    """A name server and two master brokers of one cluster, all on 127.0.0.1.

    Two brokers, because queue ids repeat across brokers: everything downstream must key queues
    by (topic, brokerName, queueId), and only a second broker proves it does.
    """

    state_dir: Path = field(default_factory=default_state_dir)
    store_root: Path | None = None
    namesrv_port: int = 9876
    brokers: tuple[BrokerSpec, ...] = (BrokerSpec("broker-a", 10911), BrokerSpec("broker-b", 10921))
    cluster_name: str = "DefaultCluster"
    version: str = ROCKETMQ_VERSION
    #: Brokers accept only requests signed for this account (None: no ACL, the default).
    acl: AclSpec | None = None
    #: The name server and brokers enforce TLS (None: plain TCP, the default).
    tls: TlsSpec | None = None
    #: Broker properties rendered last, overriding the defaults (e.g. :data:`SHORT_RETENTION`).
    extra_broker_properties: tuple[tuple[str, object], ...] = ()
    #: 5.x controller mode (automatic master/slave switch): the name server embeds a controller (DLedger, one
    #: peer, on :attr:`controller_port`), and the brokers of a name are replicas whose master the controller elects
    #: and replaces when it dies. Their ``broker_id`` then names a process, not a role: the controller assigns the
    #: ids the name server routes (0 for the master of the moment).
    controller: bool = False
    #: The loopback address every server of the cluster listens on: 127.0.0.1, or ::1 (:data:`LOOPBACK_V6`).
    host: str = LOOPBACK

    def __post_init__(self) -> None:
        if self.host not in (LOOPBACK, LOOPBACK_V6):
            raise ValueError(f"a local cluster listens on {LOOPBACK} or {LOOPBACK_V6}, not {self.host!r}")
        # The brokers listen where their cluster does (frozen: set once, here).
        object.__setattr__(self, "brokers", tuple(replace(b, host=self.host) for b in self.brokers))
        if self.controller and self.is_4x:
            raise ValueError(
                f"controller mode is RocketMQ 5's (the brokers' enableControllerMode); {self.version} has none"
            )

    @property
    def store(self) -> Path:
        return self.store_root or default_store_root(self.state_dir)

    @property
    def namesrv_address(self) -> str:
        return f"{self.bracketed_host}:{self.namesrv_port}"

    @property
    def bracketed_host(self) -> str:
        """The host as a client names it beside a port: ``[::1]`` for IPv6 (RFC 3986), as Java and rocketlake parse."""
        return f"[{self.host}]" if ":" in self.host else self.host

    @property
    def controller_port(self) -> int:
        """The embedded controller's port, two above the name server's (9878, as in RocketMQ's quick start)."""
        return self.namesrv_port + 2

    @property
    def controller_address(self) -> str:
        return f"{self.bracketed_host}:{self.controller_port}"

    @property
    def home(self) -> Path:
        """ROCKETMQ_HOME: the startup classes refuse to run without one; 5.x needs nothing in it."""
        return self.state_dir / "home"

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def tls_dir(self) -> Path:
        return self.state_dir / "tls"

    def tls_settings(self) -> "TlsSettings | None":
        """What a client of this cluster needs: TLS trusting the local CA (and its client certificate when the
        servers require one); None for a plain cluster."""
        if self.tls is None:
            return None
        from rocketlake.rocketmq.tls import TlsSettings

        folder = self.tls_dir
        if self.tls.require_client_certificate:
            return TlsSettings(str(folder / "ca.pem"), str(folder / "client.pem"), str(folder / "client.key"))
        return TlsSettings(str(folder / "ca.pem"))

    def broker(self, name: str) -> BrokerSpec:
        """The master named ``name`` (or the broker whose ``key`` it is)."""
        for b in self.brokers:
            if (b.name == name and b.is_master) or b.key == name:
                return b
        raise KeyError(f"no broker named {name!r} in this cluster; brokers: {[b.key for b in self.brokers]}")

    @property
    def masters(self) -> tuple[BrokerSpec, ...]:
        return tuple(b for b in self.brokers if b.is_master)

    def with_slaves(self, offset: int = SLAVE_PORT_OFFSET) -> ClusterSpec:
        """Each master with a slave of its own (``broker_id`` 1) ``offset`` ports above it."""
        slaves = tuple(BrokerSpec(b.name, b.port + offset, 1) for b in self.masters)
        return replace(self, brokers=(*self.masters, *slaves))

    @property
    def is_4x(self) -> bool:
        return self.version.startswith("4.")

    def namesrv_properties(self) -> str:
        return _properties(
            self._for_version(
                {
                    "listenPort": self.namesrv_port,
                    "bindAddress": self.host,
                    "kvConfigPath": self.state_dir / "namesrv" / "kvConfig.json",
                    **(self._controller_properties() if self.controller else {}),
                }
            )
        )

    def _controller_properties(self) -> dict[str, object]:
        """The controller inside the name server (NamesrvStartup reads ControllerConfig from the same file), as
        RocketMQ's quick start (conf/controller/quick-start/namesrv.conf) configures it, its store kept with the
        cluster's."""
        return {
            "enableControllerInNamesrv": "true",
            "controllerType": "DLedger",
            "controllerDLegerGroup": "rocketlake",
            "controllerDLegerPeers": f"n0-{self.controller_address}",
            "controllerDLegerSelfId": "n0",
            "controllerStorePath": self.store / "controller",
            # Small DLedger files, as the brokers' (1 GiB by default).
            "mappedFileSize": 16 * 1024 * 1024,
            # How often the controller looks for brokers whose heartbeats stopped (``controllerHeartBeatTimeoutMills``
            # on the broker, 10 s): a hung master is replaced within about 12 s. A killed one is at once, its
            # connection closing.
            "scanNotActiveBrokerInterval": 2000,
        }

    def _for_version(self, values: dict[str, object]) -> dict[str, object]:
        # 4.9 has no bindAddress (it binds every interface), no controller and no timer wheel.
        if self.is_4x:
            return {k: v for k, v in values.items() if k not in _5X_ONLY_KEYS}
        return values

    def home_files(self) -> dict[str, str]:
        """Files to write under ROCKETMQ_HOME, by path relative to it."""
        return {**self.logback_files(), **self.acl_files()}

    def acl_files(self) -> dict[str, str]:
        """``conf/tools.yml``, the account mqadmin (and the Java peers, PeerAcl.java) sign with, and on 4.9
        ``conf/plain_acl.yml``, where the broker's PlainPermissionManager reads accounts."""
        if self.acl is None:
            return {}
        tools = {"conf/tools.yml": f"accessKey: {self.acl.access_key}\nsecretKey: {self.acl.secret_key}\n"}
        if not self.is_4x:
            return tools
        return {
            **tools,
            "conf/plain_acl.yml": (
                "accounts:\n"
                f"  - accessKey: {json.dumps(self.acl.access_key)}\n"
                f"    secretKey: {json.dumps(self.acl.secret_key)}\n"
                '    whiteRemoteAddress: ""\n'  # no address is trusted without a signature
                "    admin: true\n"
            ),
        }

    def acl_properties(self) -> dict[str, object]:
        """Broker properties that turn the ACL of :attr:`acl` on (none without one)."""
        if self.acl is None:
            return {}
        if self.is_4x:
            return {"aclEnable": "true"}
        user = json.dumps({"username": self.acl.access_key, "password": self.acl.secret_key}, separators=(",", ":"))
        return {
            "authenticationEnabled": "true",
            "authenticationProvider": "org.apache.rocketmq.auth.authentication.provider.DefaultAuthenticationProvider",
            # Users live in RocksDB under <storePathRootDir>/config/users. The init user is created only
            # if absent: a changed secret takes effect on a wiped store.
            "authenticationMetadataProvider": "org.apache.rocketmq.auth.authentication.provider.LocalAuthenticationMetadataProvider",
            "initAuthenticationUser": user,
        }

    def logback_files(self) -> dict[str, str]:
        """conf/ files a 4.9 JVM exits without (5.x ships its logback configs inside the jars)."""
        if not self.is_4x:
            return {}
        return {f"conf/logback_{role}.xml": _LOGBACK_4X.format(role=role) for role in ("namesrv", "broker", "tools")}

    def broker_properties(self, broker: BrokerSpec) -> str:
        store = self.store / broker.key
        return _properties(
            self._for_version(
                {
                    "brokerClusterName": self.cluster_name,
                    "brokerName": broker.name,
                    "brokerId": broker.broker_id,
                    # A slave copies its master's commit log over the HA port the master registers with the name server.
                    "brokerRole": "ASYNC_MASTER" if broker.is_master else "SLAVE",
                    "flushDiskType": "ASYNC_FLUSH",
                    "namesrvAddr": self.namesrv_address,
                    # Without these the broker advertises its first non-loopback address.
                    "brokerIP1": self.host,
                    "brokerIP2": self.host,
                    "bindAddress": self.host,
                    "listenPort": broker.port,
                    "haListenPort": broker.port + 1,
                    "storePathRootDir": store,
                    "storePathCommitLog": store / "commitlog",
                    # Small mapped files: they are sparse, but a 1 GiB commit log is pointless on a laptop.
                    "mappedFileSizeCommitLog": 64 * 1024 * 1024,
                    "mappedFileSizeConsumeQueue": 600_000,
                    "mappedFileSizeTimerLog": 16 * 1024 * 1024,
                    "maxHashSlotNum": 50_000,
                    "maxIndexNum": 200_000,
                    "autoCreateTopicEnable": "true",
                    "autoCreateSubscriptionGroup": "true",
                    "enablePropertyFilter": "true",
                    # Keep data for a week and never delete unexpired files: tests read what they wrote.
                    "fileReservedTime": 168,
                    "diskMaxUsedSpaceRatio": 95,
                    "cleanFileForciblyEnable": "false",
                    # Two cores shared with Spark and Dagster: GC pauses must not turn into "broker busy".
                    "waitTimeMillsInSendQueue": 3000,
                    "osPageCacheBusyTimeOutMills": 5000,
                    "enableControllerMode": "false",
                    "transientStorePoolEnable": "false",
                    "warmMapedFileEnable": "false",
                    "traceTopicEnable": "false",
                    # Timer messages (TIMER_DELIVER_MS): their services wake up hundreds of times a second while the broker
                    # is idle, and rocketlake never sends one (retries' delay levels are another service).
                    "timerWheelEnable": "false",
                    # With slaves: a slave serves pulls (5.x refuses them without it) and a master whose readers fall behind
                    # what it keeps in memory suggests they read from the slave (``suggestWhichBrokerId``).
                    **({"slaveReadEnable": "true"} if len(self.masters) < len(self.brokers) else {}),
                    **(self._controlled_broker_properties() if self.controller else {}),
                    **self.acl_properties(),
                    **dict(self.extra_broker_properties),
                }
            )
        )

    def _controlled_broker_properties(self) -> dict[str, object]:
        """A replica in controller mode (conf/controller/quick-start/broker-n0.conf): it starts as a slave with no
        id, the controller makes one replica of the name master and gives each its id; a message is acknowledged
        once every replica in sync has it (``allAckInSyncStateSet``), so a promoted slave has what was sent."""
        return {
            "enableControllerMode": "true",
            "controllerAddr": self.controller_address,
            "brokerId": -1,
            "brokerRole": "SLAVE",
            "allAckInSyncStateSet": "true",
        }


#: Brokers that delete messages on demand, for tests of deleted messages. Names and semantics from
#: MessageStoreConfig and DefaultMessageStore.CleanCommitLogService (5.3.3, same names in 4.9.8):
#: the commit log is deleted a whole mapped file at a time, never the file being written, and a file
#: is expired once ``lastModified + fileReservedTime hours <= now`` (MappedFileQueue.deleteExpiredFileByTime),
#: so 0 hours expires every file but the last. Deletion runs only when the hour is in ``deleteWhen``,
#: the disk is fuller than diskMaxUsedSpaceRatio, or after the admin request DELETE_EXPIRED_COMMITLOG
#: (code 329, ``mqadmin deleteExpiredCommitLog``), which arms 20 rounds; "99" matches no hour, so
#: only that request deletes. The clean services first run 60 s after the broker starts, then every
#: ``cleanResourceInterval`` ms; each round deletes at most ``deleteFileBatchMax`` files; the consume
#: queues' min offsets are corrected to the commit log's new min offset by the queue clean service
#: (ConsumeQueue.correctMinOffset), on the same interval. Small files make a few hundred messages span
#: several commit-log files, so most of them can be deleted while the newest file survives.
SHORT_RETENTION: tuple[tuple[str, object], ...] = (
    ("mappedFileSizeCommitLog", 16 * 1024),
    ("fileReservedTime", 0),
    ("deleteWhen", "99"),
    ("cleanResourceInterval", 1000),
    ("deleteFileBatchMax", 1000),
    ("deleteCommitLogFilesInterval", 0),
    ("deleteConsumeQueueFilesInterval", 0),
)

_5X_ONLY_KEYS = {"bindAddress", "enableControllerMode", "mappedFileSizeTimerLog", "timerWheelEnable"}

_LOGBACK_4X = """<configuration>
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>${{user.home}}/logs/rocketmqlogs/{role}.log</file>
    <encoder><pattern>%d{{yyyy-MM-dd HH:mm:ss.SSS}} %-5level [%thread] %logger{{0}} - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="FILE"/></root>
</configuration>
"""


def _properties(values: dict[str, object]) -> str:
    # No comments and no trailing spaces: the broker silently ignores values it cannot parse.
    return "".join(f"{k}={v}\n" for k, v in values.items())
