"""Why a Kafka client could not connect, from what the attempt showed: one cause and the setting
to change (pure; the pre-flight check, dispatcher.kafka.preflight, gathers the evidence).

The evidence is the configured protocol and mechanism, the address tried, the error chain's
class names and messages (aiokafka's and Python's ssl module's, or the Java client's when the
Spark job reports them), and, when the error alone is ambiguous (a timeout, a closed connection),
what a probe found the listener to speak. `diagnose` returns a `Diagnosis` whose `line()` is the
one line a command prints; the rules are tried in order, most specific first.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from dispatcher.kafka.config import SASL_PROTOCOLS, TLS_PROTOCOLS, KafkaSecurity

PROTOCOL = "WAITLINE_SECURITY_PROTOCOL"
BOOTSTRAP = "WAITLINE_BOOTSTRAP_SERVERS"
CREDENTIALS = "WAITLINE_SASL_USERNAME and WAITLINE_SASL_PASSWORD"
MECHANISM = "WAITLINE_SASL_MECHANISM"
CA = "WAITLINE_SSL_CAFILE (or WAITLINE_SSL_CA_PEM)"
CLIENT_CERT = "WAITLINE_SSL_CERTFILE and WAITLINE_SSL_KEYFILE"


class Listener(StrEnum):
    """What a listener was found to speak, by a probe independent of the configuration."""

    TLS = "tls"
    PLAINTEXT = "plaintext"


@dataclass(frozen=True)
class Evidence:
    """What one failed connection attempt showed."""

    address: str
    protocol: str
    errors: tuple[tuple[str, str], ...]  # the error chain: (class name, message), outermost first
    mechanism: str | None = None
    username: str | None = None
    listener: Listener | None = None  # None: not probed, or it answered neither way
    timeout_s: float | None = None  # set when the attempt timed out
    trust: str | None = None  # the CA the client trusts, as a reader knows it; None: the system's

    @property
    def text(self) -> str:
        """The chain's class names and messages, one searchable text."""
        return " | ".join(f"{name}: {message}" for name, message in self.errors)


@dataclass(frozen=True)
class Diagnosis:
    cause: str
    setting: str  # what to change: variable names, or what outside Waitline
    unreachable: bool = False  # no listener answered at all (down, or a wrong address)

    def line(self) -> str:
        return f"{self.cause}; check {self.setting}"


Rule = Callable[[Evidence], Diagnosis | None]


def _matches(pattern: str) -> Callable[[Evidence], bool]:
    compiled = re.compile(pattern, re.IGNORECASE)
    return lambda evidence: compiled.search(evidence.text) is not None


_AUTH_FAILED = _matches(r"SaslAuthenticationFailed|SaslAuthenticationException|"
                        r"Authentication failed|invalid credentials")
_MECHANISM_OFF = _matches(r"UnsupportedSaslMechanism|does not support .* sasl mechanism|"
                          r"Unsupported SASL mechanism")
_ILLEGAL_SASL = _matches(r"IllegalSaslState")
_CLIENT_CERT_EXPIRED = _matches(r"ALERT_CERTIFICATE_EXPIRED|alert certificate expired")
_CLIENT_CERT_REFUSED = _matches(
    r"ALERT_(BAD_CERTIFICATE|UNKNOWN_CA|CERTIFICATE_UNKNOWN|CERTIFICATE_REQUIRED|"
    r"HANDSHAKE_FAILURE|ACCESS_DENIED)|alert (bad certificate|unknown ca|certificate unknown|"
    r"certificate required)|Received fatal alert: (bad_certificate|certificate_unknown)")
_SERVER_CERT_EXPIRED = _matches(r"certificate has expired|CertificateExpiredException|"
                                r"validity check failed")
_HOSTNAME = _matches(r"Hostname mismatch|IP address mismatch|doesn't match|"
                     r"No subject alternative (DNS )?names? matching|No name matching")
_UNTRUSTED = _matches(r"unable to get local issuer certificate|self[- ]signed certificate|"
                      r"PKIX path building failed|unable to find valid certification path|"
                      r"certificate verify failed|unable to verify the first certificate")
_NOT_TLS = _matches(r"WRONG_VERSION_NUMBER|record layer failure|packet length too long|"
                    r"Unrecognized SSL message|unexpected eof while reading|EOF occurred in "
                    r"violation of protocol|SSLEOFError|Remote host terminated the handshake")
_REFUSED = _matches(r"Connection refused|ConnectionRefusedError|Connect call failed")
_UNRESOLVED = _matches(r"Name or service not known|nodename nor servname|gaierror|"
                       r"No address associated|UnknownHostException|Temporary failure in name "
                       r"resolution|No resolvable bootstrap urls")
_NOT_ALLOWED = _matches(r"(Topic|Cluster|Group|TransactionalId)AuthorizationFailed|"
                        r"AuthorizationException|Not authorized")
_CLOSED = _matches(r"closed|broken|reset|Disconnected|EOF")


def _uses_tls(evidence: Evidence) -> bool:
    return evidence.protocol in TLS_PROTOCOLS


def _uses_sasl(evidence: Evidence) -> bool:
    return evidence.protocol in SASL_PROTOCOLS


def _wrong_credentials(evidence: Evidence) -> Diagnosis | None:
    if not _AUTH_FAILED(evidence):
        return None
    return Diagnosis(f"Kafka at {evidence.address} refused the SASL login of user "
                     f"{evidence.username!r} ({evidence.mechanism}): wrong password or unknown "
                     "user", CREDENTIALS)


def _mechanism_not_enabled(evidence: Evidence) -> Diagnosis | None:
    if not _MECHANISM_OFF(evidence):
        return None
    return Diagnosis(f"the listener at {evidence.address} does not enable SASL mechanism "
                     f"{evidence.mechanism}", MECHANISM)


def _tls_against_plaintext(evidence: Evidence) -> Diagnosis | None:
    if not _uses_tls(evidence):
        return None
    if evidence.listener is Listener.PLAINTEXT or (
            evidence.listener is None and _NOT_TLS(evidence) and not _UNTRUSTED(evidence)):
        return Diagnosis(f"the listener at {evidence.address} does not speak TLS but "
                         f"{PROTOCOL}={evidence.protocol} does (a PLAINTEXT or SASL_PLAINTEXT "
                         "listener)", PROTOCOL)
    return None


def _plaintext_against_tls(evidence: Evidence) -> Diagnosis | None:
    if _uses_tls(evidence) or evidence.listener is not Listener.TLS:
        return None
    secured = "SASL_SSL" if _uses_sasl(evidence) else "SSL or SASL_SSL"
    return Diagnosis(f"the listener at {evidence.address} speaks TLS but "
                     f"{PROTOCOL}={evidence.protocol} does not (set it to {secured})", PROTOCOL)


def _client_certificate_refused(evidence: Evidence) -> Diagnosis | None:
    if not _uses_tls(evidence):
        return None
    if _CLIENT_CERT_EXPIRED(evidence):
        return Diagnosis(f"the broker at {evidence.address} refused the client certificate: "
                         "it has expired", CLIENT_CERT)
    if _CLIENT_CERT_REFUSED(evidence):
        return Diagnosis(f"the broker at {evidence.address} refused the TLS client "
                         "authentication (no client certificate, or one signed by a CA it does "
                         "not trust)", CLIENT_CERT)
    return None


def _server_certificate_refused(evidence: Evidence) -> Diagnosis | None:
    if not _uses_tls(evidence):
        return None
    if _HOSTNAME(evidence):
        host = evidence.address.rsplit(":", 1)[0]
        return Diagnosis(f"the broker's certificate at {evidence.address} does not name "
                         f"{host}", f"{BOOTSTRAP} (the host name the certificate names), or "
                         "WAITLINE_SSL_CHECK_HOSTNAME=false")
    if _SERVER_CERT_EXPIRED(evidence):
        return Diagnosis(f"the broker's certificate at {evidence.address} has expired",
                         "the broker's keystore (not a client setting)")
    if _UNTRUSTED(evidence):
        trusted = evidence.trust or "a CA of this machine's trust store (no CA configured)"
        return Diagnosis(f"the broker's certificate at {evidence.address} is not signed by "
                         f"{trusted}", CA)
    return None


def trusted_ca(security: KafkaSecurity) -> str | None:
    """The CA a client of `security` trusts, as an operator knows it; None: the system's."""
    if security.ca_file:
        return f"the CA in {security.ca_file}"
    if security.ca_pem:
        return "the CA in WAITLINE_SSL_CA_PEM"
    return None


def _sasl_mismatch(evidence: Evidence) -> Diagnosis | None:
    if _ILLEGAL_SASL(evidence) and _uses_sasl(evidence):
        plain = "SSL" if _uses_tls(evidence) else "PLAINTEXT"
        return Diagnosis(f"the listener at {evidence.address} does not use SASL but "
                         f"{PROTOCOL}={evidence.protocol} does (set it to {plain}?)", PROTOCOL)
    # A listener probed as speaking the client's protocol that still closes on it: SASL.
    expected = Listener.TLS if _uses_tls(evidence) else Listener.PLAINTEXT
    if (not _uses_sasl(evidence) and evidence.listener is expected
            and _CLOSED(evidence) and evidence.timeout_s is None):
        sasl = "SASL_SSL" if _uses_tls(evidence) else "SASL_PLAINTEXT"
        return Diagnosis(f"the broker at {evidence.address} closed the connection before "
                         f"answering (a SASL listener? then set {PROTOCOL}={sasl} and the "
                         "SASL settings)", PROTOCOL)
    return None


def _unreachable(evidence: Evidence) -> Diagnosis | None:
    if _UNRESOLVED(evidence):
        host = evidence.address.rsplit(":", 1)[0]
        return Diagnosis(f"cannot reach Kafka at {evidence.address}: the host {host} does not "
                         "resolve", BOOTSTRAP, unreachable=True)
    if _REFUSED(evidence):
        return Diagnosis(f"cannot reach Kafka at {evidence.address}: nothing listens there",
                         BOOTSTRAP, unreachable=True)
    return None


def _not_authorized(evidence: Evidence) -> Diagnosis | None:
    if not _NOT_ALLOWED(evidence):
        return None
    who = f"user {evidence.username!r}" if evidence.username else "this client"
    return Diagnosis(f"Kafka at {evidence.address} does not allow {who} to read the "
                     "cluster's metadata", "the user's ACLs on the cluster")


def _timed_out(evidence: Evidence) -> Diagnosis | None:
    if evidence.timeout_s is None:
        return None
    return Diagnosis(f"cannot reach Kafka at {evidence.address}: no answer within "
                     f"{evidence.timeout_s:g} s (a firewall, or a listener that expects another "
                     "protocol)", f"{BOOTSTRAP} and {PROTOCOL}", unreachable=True)


RULES: tuple[Rule, ...] = (
    _unreachable,
    _wrong_credentials,
    _mechanism_not_enabled,
    _client_certificate_refused,
    _server_certificate_refused,
    _tls_against_plaintext,
    _plaintext_against_tls,
    _sasl_mismatch,
    _not_authorized,
    _timed_out,
)


def classify(evidence: Evidence) -> Diagnosis | None:
    """The cause of a failed connection and the setting to change; None when no rule knows
    the evidence."""
    for rule in RULES:
        found = rule(evidence)
        if found is not None:
            return found
    return None


def diagnose(evidence: Evidence) -> Diagnosis:
    """`classify`, or a generic diagnosis quoting the last error when no rule knows it."""
    found = classify(evidence)
    if found is not None:
        return found
    name, message = evidence.errors[-1] if evidence.errors else ("error", "unknown")
    detail = f"{name}: {message}" if message else name
    return Diagnosis(f"cannot reach Kafka at {evidence.address} ({detail})",
                     f"{BOOTSTRAP} and {PROTOCOL}")


_JAVA_EXCEPTION = re.compile(
    r"^(?:Caused by: |: )?((?:[a-z_$][\w$]*\.)+[A-Z][\w$]*(?:Exception|Error)): ?(.*)$",
    re.MULTILINE)


def java_error_chain(text: str) -> tuple[tuple[str, str], ...]:
    """The exceptions a Java stack trace names (`x.y.SomeException: message` lines and their
    `Caused by:`), outermost first, class names without their package."""
    return tuple((match.group(1).rsplit(".", 1)[-1], match.group(2).strip())
                 for match in _JAVA_EXCEPTION.finditer(text))
