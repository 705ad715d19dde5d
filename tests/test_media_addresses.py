"""The address checker of image fetches (inference/media/addresses.py), and its setting."""

from __future__ import annotations

import pytest

from inference.media.addresses import is_allowed, is_public, parse_address
from labsettings.parsers import EVERY_NETWORK, parse_networks

PUBLIC = ["8.8.8.8", "1.1.1.1", "2001:4860:4860::8888", "::ffff:8.8.8.8", "64:ff9b::808:808",
          "2002:808:808::1"]  # fmt: skip
NOT_PUBLIC = {
    "127.0.0.1": "loopback",
    "127.1.2.3": "loopback",
    "10.0.0.1": "private",
    "172.16.5.4": "private",
    "192.168.1.1": "private",
    "100.64.0.1": "shared (carrier NAT)",
    "169.254.169.254": "link-local (cloud metadata)",
    "224.0.0.1": "multicast",
    "239.255.255.250": "multicast",
    "240.0.0.1": "reserved",
    "255.255.255.255": "broadcast",
    "0.0.0.0": "unspecified",
    "192.0.2.1": "documentation",
    "::1": "IPv6 loopback",
    "::": "IPv6 unspecified",
    "fe80::1": "IPv6 link-local",
    "fe80::1%eth0": "IPv6 link-local with a zone",
    "fc00::1": "IPv6 unique local",
    "fd12:3456::1": "IPv6 unique local",
    "ff02::1": "IPv6 multicast",
    "ff0e::1": "IPv6 global-scope multicast",
    "::ffff:127.0.0.1": "IPv4-mapped loopback",
    "::ffff:10.0.0.1": "IPv4-mapped private",
    "::ffff:169.254.169.254": "IPv4-mapped link-local",
    "::127.0.0.1": "IPv4-compatible (deprecated, reserved)",
    "2002:7f00:1::1": "6to4 of loopback",
    "2002:a9fe:a9fe::1": "6to4 of the metadata address",
    "64:ff9b::7f00:1": "NAT64 of loopback",
    "64:ff9b::a00:1": "NAT64 of private",
}


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_are_fetched_from(address):
    assert is_public(parse_address(address))
    assert is_allowed(parse_address(address), ())


@pytest.mark.parametrize("address", NOT_PUBLIC, ids=NOT_PUBLIC.values())
def test_every_other_address_is_refused_unless_allowed(address):
    parsed = parse_address(address)
    assert not is_public(parsed)
    assert not is_allowed(parsed, ())
    assert is_allowed(parsed, EVERY_NETWORK)


def test_an_allowed_network_opens_itself_and_what_maps_into_it():
    networks = parse_networks("127.0.0.1, 10.1.0.0/16")
    assert networks == ("127.0.0.1/32", "10.1.0.0/16")
    for allowed in ("127.0.0.1", "::ffff:127.0.0.1", "10.1.200.3", "::ffff:10.1.0.9"):
        assert is_allowed(parse_address(allowed), networks), allowed
    for refused in ("127.0.0.2", "10.2.0.1", "::1", "169.254.169.254"):
        assert not is_allowed(parse_address(refused), networks), refused


@pytest.mark.parametrize(
    "text, networks",
    [("", ()), ("off", ()), ("0", ()), ("on", EVERY_NETWORK), ("true", EVERY_NETWORK),
     ("fd00::/8,192.168.0.7/24", ("fd00::/8", "192.168.0.0/24"))],
)  # fmt: skip
def test_the_setting_is_a_switch_or_networks(text, networks):
    assert parse_networks(text) == networks


def test_a_bad_network_names_itself():
    with pytest.raises(ValueError, match="'10.0.0.0/33' is not an address or network"):
        parse_networks("10.0.0.0/8,10.0.0.0/33")
