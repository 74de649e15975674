"""Where tables live (a local path or S3) and the Spark that writes them."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from rocketlake.engine.config.common import _Strict, _template

# One definition of each, the wire's: a config value is the name the Java client and the broker use.

#: The lake of a project that names none: beside the local cluster's state, relative to the project directory.
DEFAULT_LAKE_ROOT = ".rocketlake/lake"


class S3Config(_Strict):
    """How Spark (Hadoop's S3A) and delta-rs reach an S3 lake (``lake.root: s3a://bucket/prefix``)."""

    endpoint: str | None = Field(
        default=None,
        description="The S3 endpoint URL, e.g. http://127.0.0.1:7070 for an "
        "S3-compatible store; none for AWS's endpoint of the region.",
    )
    region: str = Field(
        default="us-east-1", description="The bucket's region (S3-compatible stores take any, usually us-east-1)."
    )
    path_style_access: bool = Field(
        default=False,
        description="Path-style requests (endpoint/bucket/key), which most "
        "S3-compatible stores need; AWS prefers virtual-hosted style.",
    )
    access_key_env: str | None = Field(
        default=None,
        description="Environment variable holding the access key id; "
        "none for the default credential chains (instance profile, AWS_* variables).",
    )
    secret_key_env: str | None = Field(default=None, description="Environment variable holding the secret access key.")

    @field_validator("endpoint")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is None or _template(value):
            return value
        if not re.fullmatch(r"https?://[^/\s]+/?", value):
            raise ValueError("is not an endpoint URL (http:// or https://, a host and an optional port, no path)")
        return value.rstrip("/")

    @model_validator(mode="after")
    def _both_keys(self) -> "S3Config":
        if (self.access_key_env is None) != (self.secret_key_env is None):
            raise ValueError("access_key_env and secret_key_env go together (S3 needs both)")
        return self


class LakeConfig(_Strict):
    root: str = Field(
        default=DEFAULT_LAKE_ROOT,
        description="Tables live at <root>/<table> (<root>/<database>/<name> for a catalog table database.name): "
        "a local path, or s3a://bucket/prefix for S3 (with lake.s3).",
    )
    s3: S3Config | None = Field(
        default=None, description="The S3 endpoint, region, path style and keys' variables of an s3a:// root."
    )

    @field_validator("root")
    @classmethod
    def _scheme(cls, value: str) -> str:
        if _template(value):
            return value
        scheme = value.split("://", 1)[0] + "://" if "://" in value else ""
        if scheme in ("s3://", "s3n://"):
            raise ValueError(
                f"uses {scheme}, which Spark's Hadoop has no filesystem for: write s3a://"
                f"{value[len(scheme) :]} (Hadoop's S3A connector; delta-rs reads it too)"
            )
        if scheme not in ("", "file://", "s3a://"):
            raise ValueError(
                f"uses {scheme}, which rocketlake does not support yet: a local path or s3a://bucket/"
                "prefix (ADLS and GCS: see the storage guide)"
            )
        if scheme == "s3a://" and not value[len(scheme) :].split("/", 1)[0]:
            raise ValueError("names no bucket: s3a://bucket/prefix")
        return value

    @model_validator(mode="after")
    def _s3_for_s3(self) -> "LakeConfig":
        if self.s3 is not None and not self.root.startswith("s3a://") and not _template(self.root):
            raise ValueError("s3 settings are for an s3a:// root; this root is not on S3")
        return self

    def table_path(self, table: str) -> str:
        """Where ``table`` lives: ``<root>/<table>``, and ``<root>/<database>/<name>`` for a catalog table."""
        folder = table.replace(".", "/")
        if "://" in self.root or self.root.startswith("/"):
            return f"{self.root.rstrip('/')}/{folder}"
        return str((Path.cwd() / self.root / folder).absolute())


class SparkConfig(_Strict):
    master: str = Field(
        default="local[*]",
        description="Spark master URL of the runs' own sessions (local[N], "
        "spark://, k8s://, yarn), or of the Spark Connect server `rocketlake spark-server` starts.",
    )
    conf: dict[str, str] = Field(
        default_factory=dict,
        description="Extra Spark configuration, applied last. With "
        "`remote`, the server starts with it and each run's session sets its SQL settings.",
    )
    remote: str | None = Field(
        default=None,
        description="A Spark Connect server's URL (sc://host:port): each run "
        "opens a session on that long-lived server instead of starting Spark of its own (about "
        "15 s less per run). Start it with `rocketlake spark-server` on the same configuration: "
        "it takes the lake's S3 settings and keys from it too.",
    )

    @field_validator("remote")
    @classmethod
    def _remote(cls, value: str | None) -> str | None:
        if value is None or _template(value):
            return value
        parts = urlsplit(value)
        try:
            port = parts.port
        except ValueError:
            port = -1
        if parts.scheme != "sc" or not parts.hostname or port == -1:
            raise ValueError("is not a Spark Connect URL: sc://host:port (e.g. sc://127.0.0.1:15002)")
        return value
