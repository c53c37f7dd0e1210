"""The secured cluster's TLS material, made at start with `cryptography` (no openssl, no keytool).

A private CA signs one certificate per node (SAN 127.0.0.1 and localhost; server and client use,
since the nodes are each other's clients on the inter-broker and controller listeners) and one
client certificate for the mTLS listener. Everything is PEM: Kafka reads PEM keystores and
truststores natively (`ssl.keystore.type=PEM`), Python's `ssl` reads the same files. Two pieces
of bad material come with it for the bad-configuration tests: a client certificate of the CA
that has already expired, and a second CA that signs nothing of the cluster's.

Keys are EC P-256 (instant to make, cheap handshakes) in unencrypted PKCS#8, in files of mode
0600; certificates are world-readable. `ensure_tls` makes the set when it is missing or ends
within a day, and leaves a valid one alone, so a restarted cluster keeps its CA.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from devstack.processes import write_private

VALID_DAYS = 365
_BACKDATE = dt.timedelta(hours=1)  # tolerate a little clock skew between issuer and reader
_RENEW_BEFORE = dt.timedelta(days=1)


@dataclass(frozen=True)
class Issuer:
    """A CA: its certificate and the key that signs with it."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey


@dataclass(frozen=True)
class Issued:
    """A certificate and its private key."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Waitline local stack"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def make_ca(common_name: str, now: dt.datetime, days: int = VALID_DAYS) -> Issuer:
    """A self-signed CA that may sign end-entity certificates only (path length 0)."""
    key = _new_key()
    public = key.public_key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name)).issuer_name(_name(common_name))
        .public_key(public).serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE).not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
            key_encipherment=False, data_encipherment=False, key_agreement=False,
            encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Issuer(cert, key)


def issue(ca: Issuer, common_name: str, *, not_before: dt.datetime, not_after: dt.datetime,
          server: bool, hosts: Iterable[str] = ()) -> Issued:
    """An end-entity certificate signed by `ca`: client use always, server use too when
    `server`; `hosts` become its SANs (IP addresses as IP entries, names as DNS entries)."""
    key = _new_key()
    public = key.public_key()
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
    if server:
        usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name)).issuer_name(ca.cert.subject)
        .public_key(public).serial_number(x509.random_serial_number())
        .not_valid_before(not_before).not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=False, crl_sign=False, content_commitment=False,
            key_encipherment=False, data_encipherment=False, key_agreement=False,
            encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()),
                       critical=False)
    )
    names = [_general_name(host) for host in hosts]
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return Issued(builder.sign(ca.key, hashes.SHA256()), key)


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def cert_pem(*certs: x509.Certificate) -> bytes:
    return b"".join(cert.public_bytes(serialization.Encoding.PEM) for cert in certs)


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _write_public(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.chmod(0o644)
    tmp.replace(path)


@dataclass(frozen=True)
class ClusterTls:
    """Where the cluster's TLS files are, all PEM, in one folder."""

    folder: Path

    @property
    def ca_cert(self) -> Path:
        """The cluster's CA: every client's truststore (`WAITLINE_SSL_CAFILE`)."""
        return self.folder / "ca.pem"

    @property
    def ca_key(self) -> Path:
        return self.folder / "ca.key"

    def node_keystore(self, node_id: int) -> Path:
        """A node's private key and certificate chain in one file (Kafka's PEM keystore)."""
        return self.folder / f"node-{node_id}.pem"

    @property
    def client_cert(self) -> Path:
        """The mTLS client's certificate chain (`WAITLINE_SSL_CERTFILE`)."""
        return self.folder / "client.pem"

    @property
    def client_key(self) -> Path:
        """The mTLS client's private key (`WAITLINE_SSL_KEYFILE`)."""
        return self.folder / "client.key"

    @property
    def client_keystore(self) -> Path:
        """The client's key and chain in one file, as a Java client's PEM keystore reads it."""
        return self.folder / "client-keystore.pem"

    @property
    def expired_client_cert(self) -> Path:
        """A client certificate of the cluster's CA that expired yesterday (bad material)."""
        return self.folder / "expired-client.pem"

    @property
    def expired_client_key(self) -> Path:
        return self.folder / "expired-client.key"

    @property
    def other_ca_cert(self) -> Path:
        """A second CA that signs nothing of the cluster's (bad material: a wrong truststore)."""
        return self.folder / "other-ca.pem"

    def key_files(self, node_ids: Iterable[int]) -> list[Path]:
        """Every file holding a private key (each mode 0600)."""
        return [self.ca_key, *(self.node_keystore(n) for n in node_ids), self.client_key,
                self.client_keystore, self.expired_client_key]

    def valid_until(self) -> dt.datetime | None:
        """When the CA's certificate ends; None when there is none."""
        try:
            ca = x509.load_pem_x509_certificate(self.ca_cert.read_bytes())
        except (FileNotFoundError, ValueError):
            return None
        return ca.not_valid_after_utc


def write_tls(tls: ClusterTls, node_ids: Iterable[int], now: dt.datetime) -> None:
    """Make the whole set anew: CA, node keystores, client, expired client, other CA."""
    tls.folder.mkdir(parents=True, exist_ok=True)
    tls.folder.chmod(0o700)
    ca = make_ca("Waitline local cluster CA", now)
    not_after = now + dt.timedelta(days=VALID_DAYS)
    for node_id in node_ids:
        node = issue(ca, f"node-{node_id}", not_before=now - _BACKDATE, not_after=not_after,
                     server=True, hosts=("127.0.0.1", "localhost"))
        write_private(tls.node_keystore(node_id), key_pem(node.key) + cert_pem(node.cert, ca.cert))
    client = issue(ca, "waitline-client", not_before=now - _BACKDATE, not_after=not_after,
                   server=False)
    write_private(tls.client_key, key_pem(client.key))
    write_private(tls.client_keystore, key_pem(client.key) + cert_pem(client.cert, ca.cert))
    _write_public(tls.client_cert, cert_pem(client.cert, ca.cert))
    expired = issue(ca, "waitline-client-expired", not_before=now - dt.timedelta(days=2),
                    not_after=now - dt.timedelta(days=1), server=False)
    write_private(tls.expired_client_key, key_pem(expired.key))
    _write_public(tls.expired_client_cert, cert_pem(expired.cert, ca.cert))
    _write_public(tls.other_ca_cert, cert_pem(make_ca("Waitline stranger CA", now).cert))
    write_private(tls.ca_key, key_pem(ca.key))
    _write_public(tls.ca_cert, cert_pem(ca.cert))  # last: its presence says the set is whole


def ensure_tls(tls: ClusterTls, node_ids: Iterable[int],
               now: dt.datetime | None = None) -> bool:
    """Make the set when it is missing or ends within a day; True when it was made."""
    now = now or dt.datetime.now(dt.UTC)
    node_ids = list(node_ids)
    until = tls.valid_until()
    whole = all(path.exists() for path in (tls.client_cert, tls.expired_client_cert,
                                           tls.other_ca_cert, *tls.key_files(node_ids)))
    if until is not None and whole and until - now > _RENEW_BEFORE:
        return False
    write_tls(tls, node_ids, now)
    return True
