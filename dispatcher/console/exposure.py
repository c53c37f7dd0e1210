"""How the console meets the network (pure): where it may listen without TLS, which proxies it
believes, which `Host` names it answers to, and what a request served over TLS changes.

- **Bind.** A loopback address (127.0.0.0/8, ::1, `localhost`) is served over plain HTTP. Any
  other address needs TLS: the console's own (`--tls-cert`/`--tls-key`), or a proxy in front of
  it that terminates TLS (`--trusted-proxy`). Otherwise the console refuses to start, unless
  `--insecure-http` is given, and then it warns on every start.
- **Trusted proxy.** `X-Forwarded-Proto: https` is believed only from the listed addresses or
  networks; from anyone else it is ignored. A request is *secure* when served over the
  console's TLS or forwarded as https by a trusted proxy.
- **Secure requests** get cookies marked `Secure` and named with the `__Host-` prefix (the
  browser then refuses them over plain HTTP and from any other host or path), and
  `Strict-Transport-Security`.
- **Host check.** A request whose `Host` is not one of the console's names is refused (421)
  before anything else, so a page of another site whose name an attacker pointed at the console
  (DNS rebinding) gets nothing. The names: the loopback ones (`localhost`, `127.0.0.1`,
  `[::1]`), the bind address when it is a specific one, and `--allowed-host` (or
  `WAITLINE_CONSOLE_ALLOWED_HOSTS`, comma-separated): the names browsers and the proxy use.
  Any port.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass

from dispatcher.errors import ConfigError

HSTS = "max-age=31536000"
HOST_PREFIX = "__Host-"
_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
_WILDCARDS = frozenset({"", "0.0.0.0", "::"})

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def is_loopback(host: str) -> bool:
    """Whether binding `host` listens on loopback only (a name: every address it resolves to)."""
    if host.casefold() in _LOOPBACK_NAMES:
        return True
    if host in _WILDCARDS:
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        found = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except OSError:
        return False
    return bool(found) and all(ipaddress.ip_address(str(a).split("%")[0]).is_loopback
                               for a in found)


def parse_networks(entries: Iterable[str]) -> tuple[Network, ...]:
    """Trusted proxies: addresses or networks (`10.0.0.5`, `10.0.0.0/8`, `fd00::/8`)."""
    networks = []
    for entry in entries:
        try:
            networks.append(ipaddress.ip_network(entry.strip(), strict=False))
        except ValueError:
            raise ValueError(f"{entry!r} is not an IP address or network") from None
    return tuple(networks)


def bind_refusal(host: str, *, tls: bool, proxied: bool, insecure_http: bool) -> str | None:
    """Why binding `host` is refused (None: it is not); ConfigError's text."""
    if tls or proxied or insecure_http or is_loopback(host):
        return None
    return (f"the console would listen on {host or 'every address'} without TLS: give "
            "--tls-cert and --tls-key, or --trusted-proxy for the proxy that terminates TLS "
            "in front of it, or --insecure-http to serve plain HTTP anyway (it warns on every "
            "start)")


def check_bind(host: str, *, tls: bool, proxied: bool, insecure_http: bool) -> str | None:
    """ConfigError when binding `host` is refused; the warning to give on every start when it
    is served over plain HTTP beyond loopback, else None."""
    refusal = bind_refusal(host, tls=tls, proxied=proxied, insecure_http=insecure_http)
    if refusal is not None:
        raise ConfigError(refusal)
    if insecure_http and not (tls or proxied or is_loopback(host)):
        return (f"--insecure-http: the console serves plain HTTP on {host or 'every address'}; "
                "passwords, tokens and session cookies cross the network readable")
    return None


@dataclass(frozen=True)
class Exposure:
    """What a request's origin means: trusted proxies, and the Host names answered."""

    trusted_proxies: tuple[Network, ...]
    host_names: frozenset[str]

    @classmethod
    def of(cls, bind_host: str, trusted_proxies: Iterable[str],
           allowed_hosts: Iterable[str]) -> Exposure:
        names = set(_LOOPBACK_NAMES) | {_normal(name) for name in allowed_hosts}
        if bind_host not in _WILDCARDS:
            names.add(_normal(bind_host))
        return cls(parse_networks(trusted_proxies), frozenset(names))

    def host_allowed(self, header: str | None) -> bool:
        """Whether a request's `Host` header names this console (any port)."""
        if not header:
            return False
        return _normal(_without_port(header.strip())) in self.host_names

    def forwarded_https(self, remote: str | None, proto: str | None) -> bool:
        """Whether a trusted proxy forwarded this request from an https client."""
        if remote is None or proto is None or not self.trusted_proxies:
            return False
        first = proto.split(",")[0].strip().casefold()  # the proxy nearest the client
        if first != "https":
            return False
        try:
            address = ipaddress.ip_address(remote.split("%")[0])
        except ValueError:
            return False
        return any(address in network for network in self.trusted_proxies)


def cookie_name(name: str, secure: bool) -> str:
    """A cookie's name: `__Host-` prefixed on a secure request."""
    return HOST_PREFIX + name if secure else name


def _without_port(host: str) -> str:
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host
    name, sep, port = host.rpartition(":")
    return name if sep and port.isdigit() and ":" not in name else host


def _normal(name: str) -> str:
    return name.strip().strip("[]").rstrip(".").casefold()
