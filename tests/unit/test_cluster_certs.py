"""The secured cluster's TLS material (devstack/certs.py): who signs what, the names and uses
each certificate carries, the bad material, file modes, and real TLS handshakes in memory with
Python's `ssl` (the same files the brokers and the clients read)."""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID

from devstack.certs import ClusterTls, ensure_tls, write_tls

pytestmark = pytest.mark.unit

NODES = (1, 2, 3)
NOW = dt.datetime.now(dt.UTC)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> ClusterTls:
    material = ClusterTls(tmp_path_factory.mktemp("tls") / "tls")
    write_tls(material, NODES, NOW)
    return material


def _cert(path: Path) -> x509.Certificate:
    """The first certificate of a PEM file (a keystore or chain starts with its own)."""
    return x509.load_pem_x509_certificates(path.read_bytes())[0]


def _uses(cert: x509.Certificate) -> set[x509.ObjectIdentifier]:
    return set(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)


def test_the_ca_signs_every_node_and_the_client_and_is_a_ca(tls: ClusterTls) -> None:
    ca = _cert(tls.ca_cert)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    ca.verify_directly_issued_by(ca)
    for path in (*map(tls.node_keystore, NODES), tls.client_cert, tls.expired_client_cert):
        _cert(path).verify_directly_issued_by(ca)


def test_the_other_ca_signs_nothing_of_the_clusters(tls: ClusterTls) -> None:
    other = _cert(tls.other_ca_cert)
    assert other.subject != _cert(tls.ca_cert).subject
    for path in (*map(tls.node_keystore, NODES), tls.client_cert):
        with pytest.raises((InvalidSignature, ValueError)):
            _cert(path).verify_directly_issued_by(other)


def test_node_certificates_name_loopback_and_serve_both_ways(tls: ClusterTls) -> None:
    for node_id in NODES:
        cert = _cert(tls.node_keystore(node_id))
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
        assert names.get_values_for_type(x509.DNSName) == ["localhost"]
        assert _uses(cert) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
        assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert _uses(_cert(tls.client_cert)) == {ExtendedKeyUsageOID.CLIENT_AUTH}


def test_the_expired_client_certificate_is_expired_and_the_others_are_not(
    tls: ClusterTls,
) -> None:
    expired = _cert(tls.expired_client_cert)
    assert expired.not_valid_after_utc < NOW
    for path in (tls.ca_cert, tls.client_cert, *map(tls.node_keystore, NODES)):
        cert = _cert(path)
        assert cert.not_valid_before_utc < NOW < cert.not_valid_after_utc


def test_each_keystore_holds_the_key_of_its_own_certificate(tls: ClusterTls) -> None:
    pairs = [(tls.node_keystore(n), tls.node_keystore(n)) for n in NODES]
    pairs += [(tls.client_key, tls.client_cert), (tls.client_keystore, tls.client_keystore),
              (tls.expired_client_key, tls.expired_client_cert)]
    for key_path, cert_path in pairs:
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        assert key.public_key() == _cert(cert_path).public_key()


def test_key_files_are_the_owners_alone_and_certificates_readable(tls: ClusterTls) -> None:
    for path in tls.key_files(NODES):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    for path in (tls.ca_cert, tls.client_cert, tls.expired_client_cert, tls.other_ca_cert):
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path
    assert stat.S_IMODE(tls.folder.stat().st_mode) == 0o700


def _handshake(server: ssl.SSLContext, client: ssl.SSLContext) -> None:
    """A TLS handshake between two contexts through memory buffers (no socket); raises what
    either side raises."""
    to_server, to_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    server_end = server.wrap_bio(to_server, to_client, server_side=True)
    client_end = client.wrap_bio(to_client, to_server, server_hostname="127.0.0.1")
    done = {server_end: False, client_end: False}
    for _ in range(10):
        for end in (client_end, server_end):
            if not done[end]:
                try:
                    end.do_handshake()
                    done[end] = True
                except ssl.SSLWantReadError:
                    pass
        if all(done.values()):
            # TLS 1.3: the server judges the client's certificate after its own handshake
            # ends; a rejection reaches the client with the first read.
            server_end.write(b"ok")
            client_end.read(2)
            return
    raise AssertionError("the handshake did not finish")


def _server(tls: ClusterTls, *, client_auth: bool) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tls.node_keystore(1))
    if client_auth:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(tls.ca_cert)
    return context


def test_a_client_trusting_the_ca_verifies_a_node_by_its_ip(tls: ClusterTls) -> None:
    _handshake(_server(tls, client_auth=False), ssl.create_default_context(cafile=tls.ca_cert))


def test_a_client_trusting_the_other_ca_refuses_the_node(tls: ClusterTls) -> None:
    with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
        _handshake(_server(tls, client_auth=False),
                   ssl.create_default_context(cafile=tls.other_ca_cert))


def test_the_mtls_client_is_accepted_and_the_expired_one_refused(tls: ClusterTls) -> None:
    client = ssl.create_default_context(cafile=tls.ca_cert)
    client.load_cert_chain(tls.client_cert, tls.client_key)
    _handshake(_server(tls, client_auth=True), client)

    expired = ssl.create_default_context(cafile=tls.ca_cert)
    expired.load_cert_chain(tls.expired_client_cert, tls.expired_client_key)
    with pytest.raises(ssl.SSLError, match="certificate has expired"):
        _handshake(_server(tls, client_auth=True), expired)


def test_ensure_keeps_a_valid_set_and_renews_one_about_to_end(tmp_path: Path) -> None:
    tls = ClusterTls(tmp_path / "tls")
    assert ensure_tls(tls, NODES, NOW)
    first_ca = tls.ca_cert.read_bytes()
    assert not ensure_tls(tls, NODES, NOW + dt.timedelta(days=30))
    assert tls.ca_cert.read_bytes() == first_ca
    tls.client_key.unlink()  # an incomplete set is made again
    assert ensure_tls(tls, NODES, NOW)
    assert tls.ca_cert.read_bytes() != first_ca
    renewed = tls.ca_cert.read_bytes()
    assert ensure_tls(tls, NODES, NOW + dt.timedelta(days=365))
    assert tls.ca_cert.read_bytes() != renewed
