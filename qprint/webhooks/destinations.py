"""Which webhook URLs may be called, and at which address.

Rules (docs/WEBHOOKS.md, "Safe by default"):

- ``https`` only, unless ``QPRINT["WEBHOOK_ALLOW_HTTP"]``; no user name or password in the URL;
- every address the host name resolves to must be public: private, loopback, link-local,
  multicast, reserved and unspecified addresses are refused unless the host name, the address or a
  network containing it is listed in ``QPRINT["WEBHOOK_ALLOWED_HOSTS"]``.

The check runs when an endpoint is made (:func:`check_url`, which resolves the name) and again
before every attempt (:func:`resolve_checked`), after DNS resolution. The sender then connects to
the very address that was checked (``qprint.webhooks.sender`` pins it in the request, keeping the
``Host`` header and the TLS server name), so a DNS answer that changes between the check and the
connection (DNS rebinding) cannot redirect a delivery to an internal service.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from qprint.core.conf import qprint_settings
from qprint.core.errors import Invalid

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class Refused(Exception):
    """The destination may not be called (the message says why)."""


@dataclass(frozen=True)
class Destination:
    scheme: str
    host: str
    port: int


def parse(url: str) -> Destination:
    """The URL's scheme, host and port; :class:`Refused` when its form is not allowed."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise Refused(f"not a valid URL ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise Refused("the URL must start with https://")
    if scheme == "http" and not qprint_settings.WEBHOOK_ALLOW_HTTP:
        raise Refused("the URL must use https (QPRINT['WEBHOOK_ALLOW_HTTP'] is off)")
    if not parts.hostname:
        raise Refused("the URL has no host")
    if parts.username is not None or parts.password is not None:
        raise Refused("the URL must not carry a user name or password")
    return Destination(scheme, parts.hostname.lower(), port or (443 if scheme == "https" else 80))


def resolve(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (tests replace this to play DNS)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(info[4][0] for info in infos))


def _allowed_entries() -> tuple[set[str], list[ipaddress.IPv4Network | ipaddress.IPv6Network]]:
    names: set[str] = set()
    networks = []
    for entry in qprint_settings.WEBHOOK_ALLOWED_HOSTS or ():
        text = str(entry).strip().lower()
        if not text:
            continue
        try:
            networks.append(ipaddress.ip_network(text, strict=False))
        except ValueError:
            names.add(text)
    return names, networks


def _is_public(address: IPAddress) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_global and not address.is_multicast


def check_address(host: str, address: str) -> str:
    """``address`` if ``host`` may be called there; :class:`Refused` otherwise."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if _is_public(ip):
        return address
    names, networks = _allowed_entries()
    if host in names or any(ip in network for network in networks):
        return address
    raise Refused(
        f"{host} resolves to {address}, a private, loopback or link-local address "
        "(list it in QPRINT['WEBHOOK_ALLOWED_HOSTS'] to allow it)"
    )


def resolve_checked(destination: Destination) -> str:
    """The address to connect to: the first one the name resolves to, once every address it
    resolves to passed :func:`check_address` (a name with one internal address is refused)."""
    try:
        ipaddress.ip_address(destination.host)
        addresses = [destination.host]  # an address literal: nothing to resolve
    except ValueError:
        addresses = None
    try:
        addresses = addresses or resolve(destination.host, destination.port)
    except OSError as exc:
        raise Refused(f"{destination.host} does not resolve ({exc})") from None
    if not addresses:
        raise Refused(f"{destination.host} does not resolve")
    for address in addresses:
        check_address(destination.host, address)
    return addresses[0]


def check_url(url: str) -> str:
    """Refuse (:class:`~qprint.core.errors.Invalid`, 422) a URL that may not be an endpoint now."""
    if not isinstance(url, str) or not url.strip():
        raise Invalid(message="'url' is required.")
    url = url.strip()
    if len(url) > 2000:
        raise Invalid(message="'url' is longer than 2000 characters.")
    try:
        resolve_checked(parse(url))
    except Refused as exc:
        raise Invalid(message=f"'url' is refused: {exc}.") from None
    return url
