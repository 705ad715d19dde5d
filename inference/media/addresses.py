"""Which addresses the web process may fetch an image from: public ones, and those the
operator opens (MLXLAB_MEDIA_ALLOW_PRIVATE).

A client's URL must not make the server reach what only the server can reach: its own
loopback services, the LAN, a cloud's metadata endpoint (169.254.169.254). An IPv6
address that carries an IPv4 one (mapped, 6to4, NAT64) is judged by the IPv4 address.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# RFC 6052's well-known NAT64 prefix: its last 32 bits are the IPv4 address reached.
NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def parse_address(text: str) -> Address:
    """An address as getaddrinfo writes it (an IPv6 zone, `%eth0`, dropped)."""
    return ipaddress.ip_address(text.split("%", 1)[0])


def embedded_ipv4(address: Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one stands for, if it stands for one."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def is_public(address: Address) -> bool:
    """Globally routable unicast: not private, loopback, link-local, multicast, reserved,
    unspecified or shared (100.64.0.0/10)."""
    address = embedded_ipv4(address) or address
    return address.is_global and not (
        address.is_multicast
        or address.is_reserved
        or address.is_unspecified
        or address.is_loopback
        or address.is_link_local
    )


def is_allowed(address: Address, networks: Iterable[str]) -> bool:
    """Public, or within one of `networks` (the operator's MLXLAB_MEDIA_ALLOW_PRIVATE)."""
    if is_public(address):
        return True
    candidates = {address, embedded_ipv4(address)} - {None}
    return any(
        candidate in network
        for network in map(ipaddress.ip_network, networks)
        for candidate in candidates
        if candidate.version == network.version
    )
