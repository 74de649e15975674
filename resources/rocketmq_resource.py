"""The RocketMQ cluster as a Dagster resource.

ACL keys come from the environment (``EnvVar``) or Dagster secrets at launch time, never from the
code location's source; they are handed to the client and to Spark's readers and appear in no
log line, repr or metadata.
"""

from __future__ import annotations

from dagster import ConfigurableResource
from pydantic import Field, PrivateAttr

from rocketlake.resources.rocketmq.acl import Credentials
from rocketlake.resources.rocketmq.client import RocketMQClient


class RocketMQResource(ConfigurableResource):
    """Examples:
        .. code-block:: python

            RocketMQResource(namesrv="10.0.0.1:9876;10.0.0.2:9876",
                             access_key=EnvVar("ROCKETMQ_ACCESS_KEY"), secret_key=EnvVar("ROCKETMQ_SECRET_KEY"))
    """

    namesrv: str = Field(description="Name server address(es), ';'-separated.")
    access_key: str | None = Field(default=None, description="ACL AccessKey; pass EnvVar(...), never a literal.")
    secret_key: str | None = Field(default=None, description="ACL SecretKey; pass EnvVar(...), never a literal.")
    timeout_ms: int = Field(default=3000, ge=1, description="Timeout of every broker and name server call, unless "
                                                          "an ingestion sets its own mqClientApiTimeout.")
    _clients: dict[int, RocketMQClient] = PrivateAttr(default_factory=dict)

    def credentials(self) -> Credentials | None:
        if self.access_key and self.secret_key:
            return Credentials(self.access_key, self.secret_key)
        return None

    def client(self, timeout_ms: int | None = None) -> RocketMQClient:
        """The driver's client, one per timeout (an ingestion's ``mq_client_api_timeout``, else the resource's)."""
        timeout_ms = timeout_ms or self.timeout_ms
        if timeout_ms not in self._clients:
            self._clients[timeout_ms] = RocketMQClient(self.namesrv, credentials=self.credentials(),
                                                       timeout=timeout_ms / 1000)
        return self._clients[timeout_ms]

    def open_client(self, timeout_ms: int | None = None) -> RocketMQClient:
        """A client of its own for a short task (a sensor's tick), to close at its end (``with``); the run's
        clients (``client``) are cached for the process."""
        return RocketMQClient(self.namesrv, credentials=self.credentials(), timeout=(timeout_ms or self.timeout_ms) / 1000)

    def source_options(self, timeout_ms: int | None = None) -> dict[str, str]:
        """Options for ``spark.read.format("rocketmq")``: the executors' clients get the driver's settings
        (credentials included: keep out of logs)."""
        options = {"namesrv": self.namesrv, "timeoutMs": str(timeout_ms or self.timeout_ms)}
        if self.access_key and self.secret_key:
            options |= {"accessKey": self.access_key, "secretKey": self.secret_key}
        return options
