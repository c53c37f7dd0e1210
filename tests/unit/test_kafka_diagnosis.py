"""The classifier of failed Kafka connections, as a table: what the attempt showed (the
configured protocol, the error chain of aiokafka, Python's ssl or Java's client, what a probe
found the listener to speak) → the cause and the setting to change."""

from __future__ import annotations

from typing import Any

import pytest

from dispatcher.kafka.diagnosis import Evidence, Listener, diagnose

pytestmark = pytest.mark.unit

ADDRESS = "127.0.0.1:9093"
AUTH = ("SaslAuthenticationFailedError", "Authentication failed during authentication due to "
        "invalid credentials with SASL mechanism SCRAM-SHA-512")
JAVA_AUTH = ("SaslAuthenticationException", "Authentication failed during authentication due "
             "to invalid credentials with SASL mechanism SCRAM-SHA-512")
UNTRUSTED = ("SSLCertVerificationError", "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify "
             "failed: unable to get local issuer certificate (_ssl.c:1006)")
JAVA_UNTRUSTED = ("SSLHandshakeException", "PKIX path building failed: "
                  "sun.security.provider.certpath.SunCertPathBuilderException: unable to find "
                  "valid certification path to requested target")
CLOSED = ("KafkaConnectionError", f"Connection at {ADDRESS} closed")
TIMEOUT = ("TimeoutError", "")

# (name, protocol, errors, listener, timed out, what the line says, the setting it names)
TABLE = [
    ("wrong scram password", "SASL_SSL", [AUTH], None, False,
     "refused the SASL login of user 'waitline' (SCRAM-SHA-512): wrong password or unknown user",
     "WAITLINE_SASL_USERNAME and WAITLINE_SASL_PASSWORD"),
    ("wrong password, Java's words", "SASL_SSL",
     [("SaslAuthenticationException", "SASL handshake failed"), JAVA_AUTH], None, False,
     "wrong password or unknown user", "WAITLINE_SASL_PASSWORD"),
    ("mechanism not enabled", "SASL_SSL",
     [("UnsupportedSaslMechanismError", "Kafka broker does not support SCRAM-SHA-512 sasl "
       "mechanism. Enabled mechanisms are: ['PLAIN']")], None, False,
     "does not enable SASL mechanism SCRAM-SHA-512", "WAITLINE_SASL_MECHANISM"),
    ("CA does not sign the broker", "SASL_SSL", [UNTRUSTED], None, False,
     "the broker's certificate at 127.0.0.1:9093 is not signed by the CA in /etc/ca.pem",
     "WAITLINE_SSL_CAFILE (or WAITLINE_SSL_CA_PEM)"),
    ("CA does not sign the broker, Java's words", "SSL",
     [("SslAuthenticationException", "SSL handshake failed"), JAVA_UNTRUSTED], None, False,
     "is not signed by the CA in /etc/ca.pem", "WAITLINE_SSL_CAFILE"),
    ("self-signed broker, system CAs", "SSL",
     [("SSLCertVerificationError", "certificate verify failed: self-signed certificate in "
       "certificate chain")], None, False,
     "is not signed by a CA of this machine's trust store (no CA configured)",
     "WAITLINE_SSL_CAFILE"),
    ("host name not in the certificate", "SSL",
     [("SSLCertVerificationError", "certificate verify failed: IP address mismatch, "
       "certificate is not valid for '127.0.0.1'.")], None, False,
     "does not name 127.0.0.1", "WAITLINE_SSL_CHECK_HOSTNAME=false"),
    ("client certificate expired", "SSL",
     [CLOSED, ("SSLError", "[SSL: SSLV3_ALERT_CERTIFICATE_EXPIRED] sslv3 alert certificate "
                           "expired (_ssl.c:2580)")], None, False,
     "refused the client certificate: it has expired", "WAITLINE_SSL_CERTFILE"),
    ("client certificate refused", "SSL",
     [CLOSED, ("SSLError", "[SSL: SSLV3_ALERT_CERTIFICATE_UNKNOWN] sslv3 alert certificate "
                           "unknown (_ssl.c:2580)")], None, False,
     "refused the TLS client authentication", "WAITLINE_SSL_CERTFILE and WAITLINE_SSL_KEYFILE"),
    ("no client certificate for an mTLS listener", "SSL",
     [CLOSED, ("SSLError", "[SSL: TLSV13_ALERT_CERTIFICATE_REQUIRED] tlsv13 alert certificate "
                           "required")], None, False,
     "refused the TLS client authentication", "WAITLINE_SSL_CERTFILE"),
    ("plaintext client, TLS listener (closed)", "PLAINTEXT", [CLOSED], Listener.TLS, False,
     "speaks TLS but WAITLINE_SECURITY_PROTOCOL=PLAINTEXT does not (set it to SSL or SASL_SSL)",
     "WAITLINE_SECURITY_PROTOCOL"),
    ("sasl-plaintext client, TLS listener (timeout)", "SASL_PLAINTEXT", [TIMEOUT], Listener.TLS,
     True, "speaks TLS but WAITLINE_SECURITY_PROTOCOL=SASL_PLAINTEXT does not (set it to "
     "SASL_SSL)", "WAITLINE_SECURITY_PROTOCOL"),
    ("TLS client, plaintext listener", "SSL",
     [("SSLEOFError", "EOF occurred in violation of protocol (_ssl.c:1006)")],
     Listener.PLAINTEXT, False,
     "does not speak TLS but WAITLINE_SECURITY_PROTOCOL=SSL does (a PLAINTEXT or "
     "SASL_PLAINTEXT listener)",
     "WAITLINE_SECURITY_PROTOCOL"),
    ("TLS client, plaintext listener, not probed", "SASL_SSL",
     [("SSLError", "[SSL: WRONG_VERSION_NUMBER] wrong version number (_ssl.c:1006)")], None,
     False, "does not speak TLS but WAITLINE_SECURITY_PROTOCOL=SASL_SSL does (a PLAINTEXT or",
     "WAITLINE_SECURITY_PROTOCOL"),
    ("TLS client, plaintext listener, Java's words", "SSL",
     [("SslAuthenticationException", "SSL handshake failed"),
      ("SSLException", "Unrecognized SSL message, plaintext connection?")], None, False,
     "does not speak TLS", "WAITLINE_SECURITY_PROTOCOL"),
    ("SASL client, listener without SASL", "SASL_SSL",
     [("IllegalSaslStateError", "[Error 34] IllegalSaslStateError")], Listener.TLS, False,
     "does not use SASL but WAITLINE_SECURITY_PROTOCOL=SASL_SSL does (set it to SSL?)",
     "WAITLINE_SECURITY_PROTOCOL"),
    ("client without SASL, SASL listener", "SSL", [CLOSED], Listener.TLS, False,
     "closed the connection before answering (a SASL listener? then set "
     "WAITLINE_SECURITY_PROTOCOL=SASL_SSL", "WAITLINE_SECURITY_PROTOCOL"),
    ("nothing listening", "SASL_SSL",
     [("OSError", "Multiple exceptions: [Errno 111] Connect call failed ('127.0.0.1', 9093)")],
     None, False, "cannot reach Kafka at 127.0.0.1:9093: nothing listens there",
     "WAITLINE_BOOTSTRAP_SERVERS"),
    ("unknown host", "PLAINTEXT", [("gaierror", "[Errno -2] Name or service not known")], None,
     False, "cannot reach Kafka at 127.0.0.1:9093: the host 127.0.0.1 does not resolve",
     "WAITLINE_BOOTSTRAP_SERVERS"),
    ("not allowed to read metadata", "SASL_SSL",
     [("ClusterAuthorizationFailedError", "[Error 31] ClusterAuthorizationFailedError")], None,
     False, "does not allow user 'waitline'", "the user's ACLs"),
    ("silence", "PLAINTEXT", [TIMEOUT], None, True,
     "cannot reach Kafka at 127.0.0.1:9093: no answer within 10 s",
     "WAITLINE_BOOTSTRAP_SERVERS and WAITLINE_SECURITY_PROTOCOL"),
    ("anything else", "PLAINTEXT", [("KafkaError", "something new")], None, False,
     "cannot reach Kafka at 127.0.0.1:9093 (KafkaError: something new)",
     "WAITLINE_BOOTSTRAP_SERVERS"),
]


@pytest.mark.parametrize("row", TABLE, ids=[row[0] for row in TABLE])
def test_a_failed_connection_is_one_cause_and_the_setting_to_change(row: tuple[Any, ...]) -> None:
    _name, protocol, errors, listener, timed_out, cause, setting = row
    sasl = protocol.startswith("SASL")
    evidence = Evidence(address=ADDRESS, protocol=protocol, errors=tuple(errors),
                        mechanism="SCRAM-SHA-512" if sasl else None,
                        username="waitline" if sasl else None, listener=listener,
                        timeout_s=10.0 if timed_out else None,
                        trust=None if "system CAs" in row[0] else "the CA in /etc/ca.pem")
    diagnosis = diagnose(evidence)
    assert cause in diagnosis.cause
    assert diagnosis.unreachable == cause.startswith("cannot reach Kafka at 127.0.0.1:9093:")
    assert setting in diagnosis.setting
    line = diagnosis.line()
    assert "\n" not in line
    assert line.endswith(f"; check {diagnosis.setting}")
