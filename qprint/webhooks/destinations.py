"""Which webhook URLs may be called, and at which address.

Rules (docs/WEBHOOKS.md, "Safe by default"):

- ``https`` only, unless ``QPRINT["WEBHOOK_ALLOW_HTTP"]``; no user name or password in the URL;
- every address the host name resolves to must be public: private, loopback, link-local,
  multicast, reserved and unspecified addresses are refused unless the host name, the address or a
  network containing it is listed in ``QPRINT["WEBHOOK_ALLOWED_HOSTS"]``. An IPv6 address that
  carries an IPv4 one (IPv4-mapped ``::ffff:a.b.c.d``, IPv4-compatible ``::a.b.c.d``, NAT64
  ``64:ff9b::a.b.c.d``, 6to4 ``2002:AABB:CCDD::``) is judged by the IPv4 address it reaches;
  the local-use NAT64 prefix ``64:ff9b:1::/48`` (whose IPv4 part may sit anywhere) is refused.

A refusal says which rule refused, never what a name resolved to (a tenant must not learn the
addresses of internal names): the details go to the log of the node only.

The check runs when an endpoint is made (:func:`check_url`, which resolves the name) and again
before every attempt (:func:`resolve_checked`), after DNS resolution. The sender then connects to
the very address that was checked (``qprint.webhooks.sender`` pins it in the request, keeping the
``Host`` header and the TLS server name), so a DNS answer that changes between the check and the
connection (DNS rebinding) cannot redirect a delivery to an internal service.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from qprint.core import inputs
from qprint.core.conf import qprint_settings
from qprint.core.errors import Invalid
from qprint.core.text import has_control_character

logger = logging.getLogger("qprint.webhooks")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class Refused(Exception):
    """The destination may not be called: the message says which rule refused, in words a tenant
    may read; ``detail`` (logged, never answered) says what was seen."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail or message


#: The one answer for a host that is not a public address, whatever it resolved to (or not).
NOT_PUBLIC = (
    "the host does not resolve to public addresses only (an operator may allow a host in "
    "QPRINT['WEBHOOK_ALLOWED_HOSTS'])"
)
#: NAT64, well-known prefix (RFC 6052): the IPv4 address is the last 32 bits.
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
#: NAT64, local-use prefix (RFC 8215): the IPv4 part's place depends on the prefix length.
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
#: IPv4-compatible addresses (deprecated, RFC 4291): ``::a.b.c.d``.
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
#: IPv4-translated addresses (SIIT, RFC 2765): ``::ffff:0:a.b.c.d``.
_IPV4_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")


@dataclass(frozen=True)
class Destination:
    scheme: str
    host: str
    port: int
    #: The URL as the HTTP client parsed it (what an attempt sends to).
    url: httpx.URL


def parse(url: str) -> Destination:
    """The URL's scheme, host and port; :class:`Refused` when its form is not allowed, or when
    the HTTP client would not send to it (``urlsplit`` drops a tab or a newline and lets control
    characters and IDNA 2003 host names through; httpx refuses them)."""
    if has_control_character(url):
        raise Refused("the URL holds a control character")
    try:
        parts = urlsplit(url)
        port = parts.port
        client_url = httpx.URL(url)
    except (ValueError, httpx.InvalidURL):
        raise Refused("not a valid URL") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise Refused("the URL must start with https://")
    if scheme == "http" and not qprint_settings.WEBHOOK_ALLOW_HTTP:
        raise Refused("the URL must use https (QPRINT['WEBHOOK_ALLOW_HTTP'] is off)")
    if not parts.hostname:
        raise Refused("the URL has no host")
    if parts.username is not None or parts.password is not None:
        raise Refused("the URL must not carry a user name or password")
    return Destination(
        scheme, host_name(parts.hostname), port or (443 if scheme == "https" else 80), client_url
    )


def shown(url: str) -> str:
    """``url`` as a log line names it: its scheme, host and port, the rest cut to ``/…`` (many
    receivers take their own secret in the URL's path or query, and a log is read by more people
    than the tenant's webhook list)."""
    try:
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:
        return "(not a URL)"
    host = parts.hostname or ""
    rest = "/…" if parts.path.strip("/") or parts.query or parts.fragment else ""
    return f"{parts.scheme}://{f'[{host}]' if ':' in host else host}{port}{rest}"


def host_name(host: str) -> str:
    """``host`` as DNS asks for it (lower case, IDNA-encoded); :class:`Refused` when it cannot be
    a host name (an empty or over-long label, a character IDNA refuses, a lone surrogate)."""
    host = host.lower()
    try:
        ipaddress.ip_address(host)
        return host  # an address literal
    except ValueError:
        pass
    try:
        ascii_host = host.encode("idna").decode("ascii")
    except (UnicodeError, ValueError):
        raise Refused("the URL's host is not a valid host name") from None
    if len(ascii_host) > 253:
        raise Refused("the URL's host is not a valid host name")
    return ascii_host


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


def embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address reaches, when it carries one: IPv4-mapped, IPv4-compatible
    (not ``::`` nor ``::1``), IPv4-translated (SIIT), NAT64 (well-known prefix) or 6to4."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if (
        address in _NAT64
        or address in _IPV4_TRANSLATED
        or (address in _IPV4_COMPATIBLE and int(address) > 1)
    ):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def _is_public(address: IPAddress) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address in _NAT64_LOCAL:
        return False
    inner = embedded_ipv4(address)
    if inner is not None:
        return _is_public(inner)
    # Python counts some reserved ranges as global (IPv6's 200::/7, 4000::/3...), and site-local
    # fec0::/10 as neither: each is refused by name.
    return (
        address.is_global
        and not address.is_multicast
        and not address.is_reserved
        and not getattr(address, "is_site_local", False)
    )


def check_address(host: str, address: str) -> str:
    """``address`` if ``host`` may be called there; :class:`Refused` otherwise."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if _is_public(ip):
        return address
    names, networks = _allowed_entries()
    seen = [ip] + [inner for inner in [embedded_ipv4(ip)] if inner is not None]
    if host in names or any(a in network for a in seen for network in networks):
        return address
    raise Refused(NOT_PUBLIC, f"{host} resolves to {address}, which is not public")


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
    except (OSError, UnicodeError) as exc:
        raise Refused(NOT_PUBLIC, f"{destination.host} does not resolve ({exc})") from None
    if not addresses:
        raise Refused(NOT_PUBLIC, f"{destination.host} does not resolve")
    for address in addresses:
        check_address(destination.host, address)
    return addresses[0]


def check_url(url: str) -> str:
    """Refuse (:class:`~qprint.core.errors.Invalid`, 422) a URL that may not be an endpoint now."""
    url = inputs.required_text("url", url, 2000).strip()
    try:
        resolve_checked(parse(url))
    except Refused as exc:
        logger.info("webhook_url_refused url=%s reason=%s", shown(url), exc.detail)
        raise Invalid(message=f"'url' is refused: {exc}.") from None
    return url
