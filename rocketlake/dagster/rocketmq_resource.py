"""The RocketMQ cluster as a Dagster resource.

ACL keys come from the environment (``EnvVar``) or Dagster secrets at launch time, never from the
code location's source; they are handed to the client and to Spark's readers and appear in no
log line, repr or metadata.
"""

from __future__ import annotations

from dagster import ConfigurableResource
from pydantic import Field, PrivateAttr

from rocketlake.engine.config import ClusterConfig
from rocketlake.rocketmq.acl import Credentials, KeysNotSet, credentials_from_environment
from rocketlake.rocketmq.client import RocketMQClient
from rocketlake.rocketmq.tls import TlsSettings


class MissingCredentials(ValueError):
    """The cluster signs its requests and a variable holding a key is not set (the sentence names it)."""


class RocketMQResource(ConfigurableResource):
    """A RocketMQ cluster for rocketlake's runs and sensors: its name servers, and its ACL keys and TLS if it has them.
    ``build_definitions`` makes one per cluster of the configuration (``rocketmq_<cluster>``).

    Examples:
        .. code-block:: python

            RocketMQResource(namesrv="10.0.0.1:9876;10.0.0.2:9876",
                             access_key=EnvVar("ROCKETMQ_ACCESS_KEY"), secret_key=EnvVar("ROCKETMQ_SECRET_KEY"))
    """

    namesrv: str = Field(description="Name server address(es), ';'-separated.")
    access_key: str | None = Field(default=None, description="ACL AccessKey; pass EnvVar(...), never a literal.")
    secret_key: str | None = Field(default=None, description="ACL SecretKey; pass EnvVar(...), never a literal.")
    access_key_env: str | None = Field(
        default=None,
        description="Instead of access_key: the environment variable "
        "holding it, read where it is needed (the run, a sensor, each Spark worker).",
    )
    secret_key_env: str | None = Field(
        default=None,
        description="Instead of secret_key: the environment variable "
        "holding it. The Spark tasks then get the variables' names, never the keys.",
    )
    cluster: str | None = Field(default=None, description="The cluster's name in the configuration, for messages.")
    tls: bool = Field(
        default=False,
        description="TLS to the name servers and brokers (servers with tls.server.mode enforcing or permissive).",
    )
    tls_ca_file: str | None = Field(
        default=None, description="PEM CA the servers' certificates chain to; default: the system's trust store."
    )
    tls_cert_file: str | None = Field(default=None, description="PEM client certificate, for servers that require one.")
    tls_key_file: str | None = Field(default=None, description="Its unencrypted PEM private key.")
    tls_verify_hostname: bool = Field(
        default=True, description="Check the server certificate's name (false: test clusters only)."
    )
    timeout_ms: int = Field(
        default=3000,
        ge=1,
        description="Timeout of every broker and name server call, unless "
        "an ingestion sets its own mqClientApiTimeout.",
    )
    namespace_v2: str | None = Field(
        default=None, description="RocketMQ's second namespace form: in every request's fields (see ClusterConfig)."
    )
    trace: bool = Field(default=False, description="Consume traces of what each window lands (see ClusterConfig).")
    trace_topic: str = Field(default="RMQ_SYS_TRACE_TOPIC", description="The trace topic.")
    trace_max_per_window: int = Field(default=10_000, ge=1, description="Most messages a window traces.")
    _clients: dict[int, RocketMQClient] = PrivateAttr(default_factory=dict)

    @classmethod
    def of_cluster(cls, name: str, cluster: ClusterConfig) -> RocketMQResource:
        """The resource of a configured cluster: how the definitions and the CLI both build their clients. Its ACL
        keys by the names of the variables holding them: each process that needs them (a run, a sensor, a Spark
        worker) reads them there."""
        settings: dict = {}
        if cluster.access_key_env:
            settings = {"access_key_env": cluster.access_key_env, "secret_key_env": cluster.secret_key_env}
        if cluster.tls is not None:
            settings |= {
                "tls": True,
                "tls_ca_file": cluster.tls.ca_file,
                "tls_cert_file": cluster.tls.cert_file,
                "tls_key_file": cluster.tls.key_file,
                "tls_verify_hostname": cluster.tls.verify_hostname,
            }
        if cluster.trace:
            settings |= {
                "trace": True,
                "trace_topic": cluster.trace_topic,
                "trace_max_per_window": cluster.trace_max_per_window,
            }
        if cluster.namespace_v2:
            settings["namespace_v2"] = cluster.namespace_v2
        return cls(namesrv=cluster.namesrv, cluster=name, **settings)

    def credentials(self) -> Credentials | None:
        if self.access_key_env or self.secret_key_env:
            try:
                return credentials_from_environment(self.access_key_env, self.secret_key_env)
            except KeysNotSet as e:
                raise MissingCredentials(
                    f"cluster {self.cluster or self.namesrv!r} signs its requests (ACL): set the environment "
                    f"variable{'s' if len(e.names) > 1 else ''} {' and '.join(e.names)} (its AccessKey and SecretKey)"
                ) from None
        if self.access_key and self.secret_key:
            return Credentials(self.access_key, self.secret_key)
        return None

    def tls_settings(self) -> TlsSettings | None:
        if not self.tls:
            return None
        return TlsSettings(self.tls_ca_file, self.tls_cert_file, self.tls_key_file, self.tls_verify_hostname)

    def client(self, timeout_ms: int | None = None) -> RocketMQClient:
        """The driver's client, one per timeout (an ingestion's ``mq_client_api_timeout``, else the resource's)."""
        timeout_ms = timeout_ms or self.timeout_ms
        if timeout_ms not in self._clients:
            self._clients[timeout_ms] = RocketMQClient(
                self.namesrv,
                credentials=self.credentials(),
                timeout=timeout_ms / 1000,
                tls=self.tls_settings(),
                namespace_v2=self.namespace_v2,
            )
        return self._clients[timeout_ms]

    def open_client(self, timeout_ms: int | None = None) -> RocketMQClient:
        """A client of its own for a short task (a sensor's tick), to close at its end (``with``); the run's
        clients (``client``) are cached for the process."""
        return RocketMQClient(
            self.namesrv,
            credentials=self.credentials(),
            timeout=(timeout_ms or self.timeout_ms) / 1000,
            tls=self.tls_settings(),
            namespace_v2=self.namespace_v2,
        )

    def source_options(self, timeout_ms: int | None = None) -> dict[str, str]:
        """Options for ``spark.read.format("rocketmq")``: the executors' clients get the driver's settings
        (credentials included: keep out of logs)."""
        options = {"namesrv": self.namesrv, "timeoutMs": str(timeout_ms or self.timeout_ms)}
        if self.access_key_env or self.secret_key_env:
            self.credentials()  # set here, or refused here, before any task needs them
            # The names only: each Spark worker reads the keys from its own environment.
            options |= {"accessKeyEnv": self.access_key_env, "secretKeyEnv": self.secret_key_env}
        elif self.access_key and self.secret_key:
            options |= {"accessKey": self.access_key, "secretKey": self.secret_key}
        tls = self.tls_settings()
        if tls is not None:
            options |= tls.options()
        if self.namespace_v2:
            options["namespaceV2"] = self.namespace_v2
        return options
