"""Certificates and keys for the tests of the Kafka security settings, made with the local
cluster's own certificate code (devstack/certs.py): a CA, a client certificate it signed with
its key in every PEM form a user may hand over (PKCS#8 and traditional, plain and encrypted),
an unrelated key, an expired client certificate with its key, and a file that is not PEM."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization

from devstack.certs import cert_pem, issue, key_pem, make_ca

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
    expired_cert: Path  # signed by the CA, expired yesterday
    expired_key: Path
    not_pem: Path


def write_material(folder: Path) -> Material:
    now = dt.datetime.now(dt.UTC)
    ca = make_ca("waitline test CA", now, days=30)
    client = issue(ca, "waitline-client", not_before=now - dt.timedelta(hours=1),
                   not_after=now + dt.timedelta(days=30), server=False)
    expired = issue(ca, "waitline-client", not_before=now - dt.timedelta(days=2),
                    not_after=now - dt.timedelta(days=1), server=False)
    other = issue(ca, "someone-else", not_before=now, not_after=now + dt.timedelta(days=1),
                  server=False)
    pem, traditional = serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL
    files = {
        "ca.pem": cert_pem(ca.cert),
        "client.pem": cert_pem(client.cert),
        "client.key": key_pem(client.key),
        "client-traditional.key": client.key.private_bytes(
            pem, traditional, serialization.NoEncryption()),
        "client-encrypted.key": client.key.private_bytes(
            pem, serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(KEY_PASSWORD.encode())),
        "other.key": key_pem(other.key),
        "expired.pem": cert_pem(expired.cert),
        "expired.key": key_pem(expired.key),
        "not-pem.txt": b"this is not a certificate\n",
    }
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return Material(ca=folder / "ca.pem", ca_pem=cert_pem(ca.cert).decode(),
                    cert=folder / "client.pem", key=folder / "client.key",
                    key_traditional=folder / "client-traditional.key",
                    key_encrypted=folder / "client-encrypted.key", other_key=folder / "other.key",
                    expired_cert=folder / "expired.pem", expired_key=folder / "expired.key",
                    not_pem=folder / "not-pem.txt")
