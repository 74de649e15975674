"""A RocketMQ cluster: its name servers, ACL keys' variables and TLS."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import Field, field_validator, model_validator

from rocketlake.engine.config.common import _Strict, _template

# One definition of each, the wire's: a config value is the name the Java client and the broker use.
from rocketlake.rocketmq.tls import TlsSettings


class TlsConfig(_Strict):
    """TLS to every name server and broker of the cluster (the Java client's ``useTLS``), for servers started with
    ``tls.server.mode`` ``enforcing`` (or ``permissive``). The files are PEM and must be readable where the code
    location, the runs and the Spark tasks run."""

    ca_file: str | None = Field(
        default=None,
        description="CA certificate(s) the servers' certificates chain to "
        "(their tls.server.certPath); default: the system's trust store.",
    )
    cert_file: str | None = Field(
        default=None,
        description="Client certificate, for servers that require one (tls.server.need.client.auth=require).",
    )
    key_file: str | None = Field(default=None, description="The client certificate's private key (PEM, unencrypted).")
    verify_hostname: bool = Field(
        default=True,
        description="Check that the server's certificate names the address connected to; false only for test clusters.",
    )

    @model_validator(mode="after")
    def _files(self) -> "TlsConfig":
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together (a client certificate needs its key)")
        for key in ("ca_file", "cert_file", "key_file"):
            value = getattr(self, key)
            if value is not None and not _template(value) and not Path(value).is_file():
                raise ValueError(f"{key}: {value!r} is not a readable file")
        return self

    def settings(self) -> TlsSettings:
        return TlsSettings(self.ca_file, self.cert_file, self.key_file, self.verify_hostname)


class ClusterConfig(_Strict):
    namesrv: str = Field(description="Name server address(es), ';'-separated, host:port each.")
    access_key_env: str | None = Field(default=None, description="Environment variable holding the ACL AccessKey.")
    secret_key_env: str | None = Field(default=None, description="Environment variable holding the ACL SecretKey.")
    tls: TlsConfig | None = Field(default=None, description="TLS to the name servers and brokers; absent: in clear.")
    namespace: str | None = Field(
        default=None,
        description="The cluster's namespace, as RocketMQ's clients set it (ClientConfig.setNamespace): every "
        "ingestion's topics and group are the namespace's (`ns%orders`, `ns%group`, so `%RETRY%ns%group` and "
        "`%DLQ%ns%group`); tables, asset keys and patterns use the names without it.",
    )
    namespace_v2: str | None = Field(
        default=None,
        description="RocketMQ's second namespace form, as the 5.x Java client's setNamespaceV2 sends it: the "
        "namespace in every request's fields (`ns`, with `nsd=true`), topic and group names left as written, for "
        "servers that scope resources by it (hosted proxies; the open-source broker and proxy ignore the fields).",
    )

    trace: bool = Field(
        default=False,
        description="Consume traces in the trace topic for the messages each window lands, as the Java client's "
        "enableMsgTrace writes them: `mqadmin queryMsgTraceById` and the dashboard show the group as a consumer.",
    )
    trace_topic: str = Field(
        default="RMQ_SYS_TRACE_TOPIC",
        description="The trace topic (the brokers' own with traceTopicEnable=true, or one the cluster's tracing uses).",
    )
    trace_max_per_window: int = Field(
        default=10_000,
        ge=1,
        description="Most messages a window traces, evenly spread over its offsets when it lands more (a trace costs "
        "about 300 bytes sent per traced message).",
    )

    @field_validator("namespace", "namespace_v2")
    @classmethod
    def _namespace(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", value):
            raise ValueError("must be 1 to 64 letters, digits, '_' or '-' (what RocketMQ's namespaces allow)")
        return value

    @field_validator("namesrv")
    @classmethod
    def _addresses(cls, value: str) -> str:
        if _template(value):
            return value
        for addr in filter(None, (a.strip() for a in value.split(";"))):
            host, sep, port = addr.rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"{addr!r} is not host:port")
        if not value.strip(" ;"):
            raise ValueError("needs at least one host:port")
        return value

    @model_validator(mode="after")
    def _both_keys(self) -> "ClusterConfig":
        if (self.access_key_env is None) != (self.secret_key_env is None):
            raise ValueError("access_key_env and secret_key_env go together (ACL needs both)")
        return self
