"""Certificates and keys for the tests of the Kafka security settings (cryptography, no shell).

`write_material(folder)` writes a CA, a client certificate it signed with its key (PKCS#8 and
traditional, plain and encrypted), a second, unrelated key, and an expired client certificate.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

KEY_PASSWORD = "key-pass-word"


@dataclass(frozen=True)
class Material:
    ca: Path
    ca_pem: str
    cert: Path
    key: Path  # PKCS#8, unencrypted
    key_traditional: Path  # "BEGIN EC PRIVATE KEY", unencrypted
    key_encrypted: Path  # PKCS#8, encrypted with KEY_PASSWORD
    other_key: Path  # a key that does not belong to `cert`
    expired_cert: Path  # signed by the CA with `key`, expired yesterday
    not_pem: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _certificate(subject: str, key: ec.EllipticCurvePrivateKey, issuer: str,
                 issuer_key: ec.EllipticCurvePrivateKey, *, ca: bool,
                 not_after: dt.datetime) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    return (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(_name(issuer))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=2)).not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
            .sign(issuer_key, hashes.SHA256()))


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key(key: ec.EllipticCurvePrivateKey, fmt: serialization.PrivateFormat,
         password: str | None = None) -> bytes:
    encryption: serialization.KeySerializationEncryption = (
        serialization.NoEncryption() if password is None
        else serialization.BestAvailableEncryption(password.encode()))
    return key.private_bytes(serialization.Encoding.PEM, fmt, encryption)


def write_material(folder: Path) -> Material:
    ca_key = ec.generate_private_key(ec.SECP256R1())
    client_key = ec.generate_private_key(ec.SECP256R1())
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=30)
    ca = _certificate("waitline test CA", ca_key, "waitline test CA", ca_key, ca=True,
                      not_after=later)
    client = _certificate("waitline-client", client_key, "waitline test CA", ca_key, ca=False,
                          not_after=later)
    expired = _certificate("waitline-client", client_key, "waitline test CA", ca_key, ca=False,
                           not_after=dt.datetime.now(dt.UTC) - dt.timedelta(days=1))
    pkcs8 = serialization.PrivateFormat.PKCS8
    traditional = serialization.PrivateFormat.TraditionalOpenSSL
    files = {
        "ca.pem": _pem(ca),
        "client.pem": _pem(client),
        "client.key": _key(client_key, pkcs8),
        "client-traditional.key": _key(client_key, traditional),
        "client-encrypted.key": _key(client_key, pkcs8, KEY_PASSWORD),
        "other.key": _key(ec.generate_private_key(ec.SECP256R1()), pkcs8),
        "expired.pem": _pem(expired),
        "not-pem.txt": b"this is not a certificate\n",
    }
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return Material(ca=folder / "ca.pem", ca_pem=_pem(ca).decode(), cert=folder / "client.pem",
                    key=folder / "client.key", key_traditional=folder / "client-traditional.key",
                    key_encrypted=folder / "client-encrypted.key", other_key=folder / "other.key",
                    expired_cert=folder / "expired.pem", not_pem=folder / "not-pem.txt")
