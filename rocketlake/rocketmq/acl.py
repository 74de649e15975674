"""RocketMQ ACL 1.0 request signing (the Java ``AclClientRPCHook``).

Algorithm (apache/rocketmq ``acl/src/main/java/org/apache/rocketmq/acl/common/``):

1. ``AclClientRPCHook#doBeforeRequest`` adds ``AccessKey`` and, if set, ``SecurityToken`` to
   the request's extFields.
2. ``#parseRequestContent`` copies the extFields into a ``TreeMap`` (keys in Java ``String``
   order, i.e. UTF-16 code-unit order).
3. ``AclUtils#combineRequestContent`` concatenates the *values* in that order, skipping the
   key ``Signature``, encodes the result as UTF-8 and appends the raw body bytes.
4. ``AclSigner#calSignature``: ``base64(HmacSHA1(key=secretKey as UTF-8, data))``, stored
   in extFields as ``Signature``.

The broker recomputes the same string from the extFields it decoded, so the header
encoding (JSON or binary) does not matter.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass

from .errors import InvalidArgument
from .frame import RemotingCommand

__all__ = [
    "ACCESS_KEY",
    "SECURITY_TOKEN",
    "SIGNATURE",
    "AclClientRPCHook",
    "Credentials",
    "KeysNotSet",
    "credentials_from_environment",
    "sign",
    "signing_content",
]

# SessionCredentials.java
ACCESS_KEY = "AccessKey"
SECURITY_TOKEN = "SecurityToken"
SIGNATURE = "Signature"


@dataclass(frozen=True, slots=True, repr=False)
class Credentials:
    """An ACL key pair (plus optional STS token). ``repr()`` never shows the secrets.

    Picklable on purpose: Spark workers need it to sign their own requests.
    """

    access_key: str
    secret_key: str
    security_token: str | None = None

    def __post_init__(self) -> None:
        if not self.access_key or not self.secret_key:
            raise InvalidArgument("ACL credentials need both a non-empty access key and secret key")

    def __repr__(self) -> str:
        token = "None" if self.security_token is None else "'***'"
        return f"Credentials(access_key={self.access_key!r}, secret_key='***', security_token={token})"


def _java_string_order(key: str) -> bytes:
    # TreeMap<String, ...> sorts by UTF-16 code units; big-endian UTF-16 bytes sort the same way.
    return key.encode("utf-16-be", "surrogatepass")


def signing_content(ext_fields: Mapping[str, str], body: bytes = b"") -> bytes:
    """The bytes that get signed: values of ``ext_fields`` sorted by key, minus ``Signature``, then ``body``."""
    values = "".join(ext_fields[k] for k in sorted(ext_fields, key=_java_string_order) if k != SIGNATURE)
    return values.encode("utf-8") + body


def sign(content: bytes, secret_key: str) -> str:
    """``AclSigner#calSignature``: base64 of HmacSHA1 keyed with the UTF-8 secret."""
    digest = hmac.new(secret_key.encode("utf-8"), content, hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


@dataclass(frozen=True, slots=True)
class AclClientRPCHook:
    """RPC hook for :meth:`Connection.invoke` that signs each request with ``credentials``."""

    credentials: Credentials

    def before_request(self, address: str, request: RemotingCommand) -> None:
        fields = request.ext_fields
        fields[ACCESS_KEY] = self.credentials.access_key
        if self.credentials.security_token is not None:
            fields[SECURITY_TOKEN] = self.credentials.security_token
        fields[SIGNATURE] = sign(signing_content(fields, request.body), self.credentials.secret_key)


class KeysNotSet(ValueError):
    """The ACL keys are to be read from environment variables and ``names`` of them are not set; the callers say
    where they must be set (a Dagster run's process, a Spark worker)."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        super().__init__(f"the environment variable{'s' if len(names) > 1 else ''} {' and '.join(names)} not set")


def credentials_from_environment(
    access_key_env: str | None, secret_key_env: str | None, environ: Mapping[str, str] | None = None
) -> Credentials:
    """The ACL keys read from the environment variables named (the one place they are read: a run, a sensor, the
    CLI, each Spark worker); :class:`KeysNotSet` names the variables that are not set."""
    environ = os.environ if environ is None else environ
    missing = [str(name) for name in (access_key_env, secret_key_env) if not name or not environ.get(name)]
    if missing:
        raise KeysNotSet(missing)
    return Credentials(environ[access_key_env], environ[secret_key_env])
