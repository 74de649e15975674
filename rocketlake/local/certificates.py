"""A certificate authority of the local runtime's own, for name servers and brokers with TLS on (``local up --tls``).

The CA signs one server certificate, for the loopback address the local servers listen on (``127.0.0.1`` and
``localhost`` in its subjectAltName, so clients can check the name), and one client certificate, for servers that
require one. Keys are PKCS#8 PEM without a password: what Netty's ``SslContextBuilder`` reads from
``tls.server.keyPath``. Made with the ``cryptography`` package; a test can issue more (an expired certificate, one
from another CA) with :func:`issue` and :func:`new_authority`.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["Authority", "Issued", "LocalCertificates", "issue", "local_certificates", "new_authority"]

LOOPBACK_NAMES = ("127.0.0.1", "localhost")
VALIDITY = timedelta(days=365)


@dataclass(frozen=True)
class Authority:
    cert_file: Path
    key_file: Path


@dataclass(frozen=True)
class Issued:
    cert_file: Path
    key_file: Path


@dataclass(frozen=True)
class LocalCertificates:
    """What ``local_certificates`` left in its folder."""

    ca: Authority
    server: Issued
    client: Issued


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    os.chmod(path, 0o600)


def new_authority(folder: Path, name: str = "rocketlake local CA") -> Authority:
    folder.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.now(timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    authority = Authority(folder / "ca.pem", folder / "ca.key")
    authority.cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, authority.key_file)
    return authority


def issue(
    authority: Authority,
    folder: Path,
    name: str,
    *,
    client: bool = False,
    names: tuple[str, ...] = LOOPBACK_NAMES,
    not_before: datetime | None = None,
    not_after: datetime | None = None,
) -> Issued:
    """A certificate ``name`` signed by ``authority``, for a server (``names`` in its subjectAltName) or a client."""
    ca_cert = x509.load_pem_x509_certificate(authority.cert_file.read_bytes())
    ca_key = serialization.load_pem_private_key(authority.key_file.read_bytes(), password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.now(timezone.utc)
    alt = [x509.IPAddress(ipaddress.ip_address(n)) if _is_ip(n) else x509.DNSName(n) for n in names]
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before or now - timedelta(minutes=5))
        .not_valid_after(not_after or now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH]),
            critical=False,
        )
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    if not client:
        builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    folder.mkdir(parents=True, exist_ok=True)
    issued = Issued(folder / f"{name}.pem", folder / f"{name}.key")
    issued.cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, issued.key_file)
    return issued


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


def local_certificates(folder: Path) -> LocalCertificates:
    """The local runtime's CA, server and client certificates in ``folder``, made the first time and kept."""
    made = LocalCertificates(
        Authority(folder / "ca.pem", folder / "ca.key"),
        Issued(folder / "server.pem", folder / "server.key"),
        Issued(folder / "client.pem", folder / "client.key"),
    )
    if all(p.exists() for p in (made.ca.cert_file, made.server.cert_file, made.client.cert_file)):
        return made
    authority = new_authority(folder)
    return LocalCertificates(
        authority, issue(authority, folder, "server"), issue(authority, folder, "client", client=True)
    )
