"""Who this consumer is: its client id, as the Java client builds it, and what hangs on it.

Kept out of the configuration, which is only a contract: an identity reads the host's address and the Dagster
instance's home (``DAGSTER_HOME``) from where it runs, so the same file is another member on another host.
"""

from __future__ import annotations

import hashlib
import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from rocketlake.rocketmq.heartbeat import MessageModel

if TYPE_CHECKING:  # a Spark task computes no identity, and its workers import neither pydantic nor the config
    from rocketlake.engine.config import IngestionConfig


def deployment_instance_name(environ: Mapping[str, str] | None = None) -> str:
    """The instance name of a consumer whose ``instance_name`` is ``DEFAULT``: its Dagster instance's (a digest of
    ``DAGSTER_HOME``: the same for a deployment's member process and every run it launches, different for another
    deployment on the host), or, for a process without a Dagster instance, its pid, as the Java client's."""
    environ = os.environ if environ is None else environ
    home = environ.get("DAGSTER_HOME")
    if not home:
        return str(os.getpid())
    return "dagster-" + hashlib.sha1(os.path.realpath(os.path.expanduser(home)).encode()).hexdigest()[:10]


def local_ip() -> str:
    """This host's address as its name resolves (ClientConfig's clientIP); loopback when it does not resolve."""
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def client_id(cfg: IngestionConfig) -> str:
    """The member's client id, built as ClientConfig.buildMQClientId does: ``ip@instanceName[@unitName]``.

    As the Java client does for CLUSTERING (``changeInstanceNameToPID``), an ``instance_name`` left at ``DEFAULT``
    is replaced by a name of this consumer (``deployment_instance_name``), so two deployments on one host with one
    configuration are two members. A rocketlake consumer is a deployment, not one process: its ``rocketlake member``
    process and its runs share the name, so the runs find themselves among the members and take over their own
    broker locks at once.
    """
    ip = cfg.client_ip or local_ip()
    name = cfg.instance_name
    if name == "DEFAULT" and cfg.message_model is MessageModel.CLUSTERING:
        name = deployment_instance_name()
    return f"{ip}@{name}" + (f"@{cfg.unit_name}" if cfg.unit_name else "")


def offset_store_path(cfg: IngestionConfig) -> Path:
    """BROADCASTING: this member's offset store, ``<local_offset_store_dir>/<client id>/<group>/offsets.json``."""
    from rocketlake.engine.offset_store import store_path

    return store_path(cfg.local_offset_store_dir, client_id(cfg), cfg.consumer_group)
