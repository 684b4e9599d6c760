"""Callback addresses: IANA's special-purpose ranges, written out, and IPv4 inside IPv6."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv6Address, ip_address

import pytest

from pdfqueue.domain.addresses import (
    REFUSED_IPV4,
    REFUSED_IPV6,
    embedded_ipv4,
    host_refusal,
    is_loopback,
    refusal,
)


def v4(text: str) -> int:
    return int(IPv4Address(text))


def carriers(inner: str) -> dict[str, str]:
    """Every IPv6 spelling that carries the IPv4 address `inner`."""
    n = v4(inner)
    hi, lo = n >> 16, n & 0xFFFF
    teredo_client = ~n & 0xFFFFFFFF
    return {
        "mapped": f"::ffff:{inner}",
        "mapped, hex": f"::ffff:{hi:x}:{lo:x}",
        "compatible": f"::{inner}",
        "SIIT translated": f"::ffff:0:{inner}",
        "NAT64": f"64:ff9b::{inner}",
        "NAT64, hex": f"64:ff9b::{hi:x}:{lo:x}",
        "6to4": f"2002:{hi:x}:{lo:x}::1",
        "6to4, any host": f"2002:{hi:x}:{lo:x}:ffff:ffff:ffff:ffff:ffff",
        "Teredo client": (f"2001:0:808:808:0:0:{teredo_client >> 16:x}:{teredo_client & 0xFFFF:x}"),
        "Teredo server": f"2001:0:{hi:x}:{lo:x}:8000:63bf:3fff:fdd2",
    }


REFUSED = ["169.254.169.254", "127.0.0.1", "10.0.0.1"]
FORMS = [(inner, form, text) for inner in REFUSED for form, text in carriers(inner).items()]


@pytest.mark.parametrize(("inner", "form", "text"), FORMS, ids=[f"{i} {f}" for i, f, _ in FORMS])
def test_every_ipv6_form_of_a_refused_ipv4_address_is_refused(
    inner: str, form: str, text: str
) -> None:
    address = IPv6Address(text)
    if form != "Teredo server":
        assert IPv4Address(inner) in embedded_ipv4(address)
    refused = refusal(address)
    assert refused is not None, text
    assert refused.culprit == IPv4Address(inner)


PUBLIC_FORMS = {f: t for f, t in carriers("8.8.8.8").items() if f != "Teredo server"}
"""(The Teredo server form's client half is 192.0.2.45, documentation space.)"""


@pytest.mark.parametrize(("form", "text"), PUBLIC_FORMS.items())
def test_the_same_forms_of_a_public_address_pass(form: str, text: str) -> None:
    """NAT64 is how an IPv6-only cluster reaches the IPv4 internet: it must keep working."""
    assert refusal(IPv6Address(text)) is None, form


def test_local_use_nat64_is_refused_whatever_it_carries() -> None:
    """64:ff9b:1::/48 (RFC 8215) may put the IPv4 address at several offsets: refused."""
    for text in ("64:ff9b:1::808:808", "64:ff9b:1:808:8:800::", "64:ff9b:1::a9fe:a9fe"):
        assert refusal(IPv6Address(text)) is not None


IPV4_SPECIAL = {
    "0.0.0.0": True,
    "0.1.2.3": True,
    "10.255.0.1": True,
    "100.64.0.1": True,
    "100.127.255.254": True,
    "127.0.0.1": True,
    "127.255.255.254": True,
    "169.254.169.254": True,
    "172.16.0.1": True,
    "172.31.255.254": True,
    "192.0.0.8": True,
    "192.0.0.170": True,
    "192.0.2.1": True,
    "192.88.99.1": True,
    "192.168.1.1": True,
    "198.18.0.1": True,
    "198.19.255.254": True,
    "198.51.100.1": True,
    "203.0.113.1": True,
    "224.0.0.1": True,
    "239.255.255.250": True,
    "240.0.0.1": True,
    "255.255.255.255": True,
    # public, some next to a special range, some that older Pythons count as private
    "8.8.8.8": False,
    "100.63.255.255": False,
    "100.128.0.0": False,
    "172.15.255.255": False,
    "172.32.0.0": False,
    "192.31.196.1": False,  # AS112, globally reachable per IANA
    "192.52.193.1": False,  # AMT, globally reachable per IANA
    "192.175.48.1": False,  # AS112 direct delegation
    "198.17.255.255": False,
    "198.20.0.0": False,
    "223.255.255.255": False,
}


@pytest.mark.parametrize(("text", "refused"), IPV4_SPECIAL.items())
def test_ipv4_special_purpose_ranges(text: str, refused: bool) -> None:
    assert (refusal(IPv4Address(text)) is not None) is refused


IPV6_SPECIAL = {
    "::": True,
    "::1": True,
    "100::1": True,  # discard-only
    "2001::1": True,  # Teredo whose server half is 0.0.0.0
    "2001:2::1": True,  # benchmarking
    "2001:10::1": True,  # ORCHID
    "2001:20::1": True,  # ORCHIDv2
    "2001:db8::1": True,
    "3fff::1": True,  # documentation, RFC 9637
    "5f00::1": True,  # SRv6 SIDs
    "fc00::1": True,
    "fd00:ec2::254": True,  # AWS's IPv6 metadata endpoint
    "fe80::1": True,
    "fe80::1%eth0": True,
    "fec0::1": True,
    "ff02::1": True,
    "2001:4860:4860::8888": False,
    "2606:4700:4700::1111": False,
    "2620:4f:8000::1": False,  # AS112 direct delegation, globally reachable
}


@pytest.mark.parametrize(("text", "refused"), IPV6_SPECIAL.items())
def test_ipv6_special_purpose_ranges(text: str, refused: bool) -> None:
    assert (refusal(ip_address(text)) is not None) is refused


def test_the_tables_do_not_come_from_python() -> None:
    """Written out, so a Python patch release cannot change them: each entry a network."""
    assert len(REFUSED_IPV4) >= 15
    assert all(net.version == 4 for net in REFUSED_IPV4)
    assert all(net.version == 6 for net in REFUSED_IPV6)


def test_loopback_for_the_development_http_case() -> None:
    for text in ("127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1", "::ffff:127.255.0.1"):
        assert is_loopback(ip_address(text)), text
    translated_or_routed = ("64:ff9b::7f00:1", "64:ff9b:1::7f00:1", "::ffff:0:7f00:1", "::7f00:1")
    for text in ("8.8.8.8", "10.0.0.1", "::2", "::ffff:10.0.0.1", *translated_or_routed):
        assert not is_loopback(ip_address(text)), text


@pytest.mark.parametrize(
    "host",
    [
        "127.1",
        "0x7f.0.0.1",
        "0x7f000001",
        "2130706433",
        "0177.0.0.1",
        "017700000001",
        "127.0.0.1.",
        "169.254.169.254.",
        "0251.0376.0251.0376",
        "10.1",
        "\uff11\uff12\uff17.\uff10.\uff10.\uff11",  # fullwidth digits, IDNA folds them
        "127\u30020\u30020\u30021",  # ideographic full stops
        "example.123",
        "a..b",
        "x" * 64 + ".example",  # a label over 63 characters
    ],
)
def test_hosts_that_only_look_like_names_are_refused(host: str) -> None:
    assert host_refusal(host) is not None


@pytest.mark.parametrize(
    "host", ["example.com", "example.com.", "hooks.acme.example", "bücher.example", "8.8.8.8"]
)
def test_ordinary_hosts_pass_to_resolution(host: str) -> None:
    assert host_refusal(host) is None
