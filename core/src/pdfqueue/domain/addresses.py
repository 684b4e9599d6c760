"""Which IP addresses pdfqueue may call out to: public ones only, IPv4 inside IPv6 included.

The ranges are written here, from IANA's IPv4 and IPv6 Special-Purpose Address Registries
(and the IPv6 global unicast space, 2000::/3), instead of taken from `ipaddress`'s
`is_global`/`is_private`, whose tables changed between Python patch releases (3.11.9,
3.12.4, 3.13.0 moved several ranges) and count the NAT64 prefix as global. An IPv6 address
that carries an IPv4 address (IPv4-mapped, IPv4-compatible, SIIT, NAT64, 6to4, Teredo) is
judged by that IPv4 address too: `::ffff:169.254.169.254` is the metadata server.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network

Address = IPv4Address | IPv6Address


def _nets4(*cidrs: str) -> tuple[IPv4Network, ...]:
    return tuple(IPv4Network(c) for c in cidrs)


def _nets6(*cidrs: str) -> tuple[IPv6Network, ...]:
    return tuple(IPv6Network(c) for c in cidrs)


REFUSED_IPV4 = _nets4(
    "0.0.0.0/8",  # "this network" (RFC 791); 0.0.0.0 reaches the local host
    "10.0.0.0/8",  # private (RFC 1918)
    "100.64.0.0/10",  # shared address space, carrier-grade NAT (RFC 6598)
    "127.0.0.0/8",  # loopback (RFC 1122)
    "169.254.0.0/16",  # link-local, cloud metadata at 169.254.169.254 (RFC 3927)
    "172.16.0.0/12",  # private (RFC 1918)
    "192.0.0.0/24",  # IETF protocol assignments (RFC 6890), DS-Lite, NAT64 discovery
    "192.0.2.0/24",  # documentation TEST-NET-1 (RFC 5737)
    "192.88.99.0/24",  # deprecated 6to4 relay anycast (RFC 7526)
    "192.168.0.0/16",  # private (RFC 1918)
    "198.18.0.0/15",  # benchmarking (RFC 2544)
    "198.51.100.0/24",  # documentation TEST-NET-2 (RFC 5737)
    "203.0.113.0/24",  # documentation TEST-NET-3 (RFC 5737)
    "224.0.0.0/4",  # multicast (RFC 5771)
    "240.0.0.0/4",  # reserved (RFC 1112), 255.255.255.255 broadcast included
)
"""IPv4 ranges never called: IANA's special-purpose registry, except the few entries it
marks globally reachable (AS112 192.31.196.0/24 and 192.175.48.0/24, AMT 192.52.193.0/24)."""

GLOBAL_UNICAST_V6 = IPv6Network("2000::/3")
"""IPv6 addresses outside it (loopback ::1, unspecified ::, discard-only 100::/64, unique
local fc00::/7, link-local fe80::/10, site-local fec0::/10, multicast ff00::/8, SRv6 SIDs
5f00::/16, ...) are never called, unless they only carry an IPv4 address (below)."""
REFUSED_IPV6 = _nets6(
    "2001::/23",  # IETF protocol assignments (RFC 2928): benchmarking, ORCHID, ...
    "2001:db8::/32",  # documentation (RFC 3849)
    "3fff::/20",  # documentation (RFC 9637)
)
"""Special-purpose ranges inside 2000::/3 (Teredo 2001::/32 and 6to4 2002::/16 are judged
by the IPv4 addresses they carry instead)."""

MAPPED = IPv6Network("::ffff:0:0/96")  # IPv4-mapped (RFC 4291)
TRANSLATED = IPv6Network("::ffff:0:0:0/96")  # SIIT IPv4-translated (RFC 2765)
COMPATIBLE = IPv6Network("::/96")  # IPv4-compatible, deprecated (RFC 4291)
NAT64 = IPv6Network("64:ff9b::/96")  # NAT64 well-known prefix (RFC 6052)
NAT64_LOCAL = IPv6Network("64:ff9b:1::/48")  # local-use NAT64 (RFC 8215): refused outright
SIX_TO_FOUR = IPv6Network("2002::/16")  # 6to4 (RFC 3056): IPv4 in bits 16-47
TEREDO = IPv6Network("2001::/32")  # Teredo (RFC 4380): server in 32-63, client ~ in 96-127
CARRIERS = (MAPPED, TRANSLATED, COMPATIBLE, NAT64)
"""Prefixes whose addresses only carry an IPv4 address in their last 32 bits: that address
is the destination, and it alone decides."""
UNSPECIFIED_OR_LOOPBACK = IPv6Network("::/127")
"""`::` and `::1`: IPv6 addresses of their own, not IPv4-compatible ones."""


def embedded_ipv4(address: IPv6Address) -> list[IPv4Address]:
    """The IPv4 addresses an IPv6 address carries (none for a plain IPv6 address)."""
    value = int(address)
    low32 = IPv4Address(value & 0xFFFFFFFF)
    if address not in UNSPECIFIED_OR_LOOPBACK and any(address in net for net in CARRIERS):
        return [low32]
    if address in SIX_TO_FOUR:
        return [IPv4Address((value >> 80) & 0xFFFFFFFF)]
    if address in TEREDO:
        server = IPv4Address((value >> 64) & 0xFFFFFFFF)
        return [server, IPv4Address(~value & 0xFFFFFFFF)]  # the client is stored inverted
    return []


@dataclass(frozen=True)
class Refused:
    """Why an address is not called: the address at fault (the IPv4 address an IPv6 one
    carries, or the address itself) and the range it is in."""

    culprit: Address
    why: str


def refusal(address: Address) -> Refused | None:
    """Why pdfqueue will not connect to `address`, or None for a public address."""
    if isinstance(address, IPv4Address):
        return _refusal4(address)
    carried = embedded_ipv4(address)
    for inner in carried:
        if (refused := _refusal4(inner)) is not None:
            return refused
    if carried:  # a carrier prefix, Teredo or 6to4 whose IPv4 addresses are public
        return None
    why = None
    if address in NAT64_LOCAL:
        why = "local-use NAT64 (64:ff9b:1::/48)"
    elif address not in GLOBAL_UNICAST_V6:
        why = "not IPv6 global unicast (2000::/3)"
    else:
        why = next((f"special-purpose {net}" for net in REFUSED_IPV6 if address in net), None)
    return Refused(address, why) if why else None


def _refusal4(address: IPv4Address) -> Refused | None:
    for net in REFUSED_IPV4:
        if address in net:
            return Refused(address, f"special-purpose {net}")
    return None


def is_loopback(address: Address) -> bool:
    """This host's loopback: 127.0.0.0/8, ::1, and 127.0.0.0/8 written IPv4-mapped.

    Only those reach this host on Linux: a dual-stack socket connecting to
    `::ffff:127.0.0.1` is connected to 127.0.0.1 by the kernel, while IPv4-compatible
    (`::7f00:1`), SIIT (`::ffff:0:7f00:1`) and NAT64 (`64:ff9b::7f00:1`, `64:ff9b:1::/48`)
    addresses are routed away, to whatever translator or router answers for them.
    """
    if isinstance(address, IPv6Address):
        return address == LOOPBACK_V6 or address in LOOPBACK_MAPPED
    return address in LOOPBACK_V4


LOOPBACK_V4 = IPv4Network("127.0.0.0/8")
LOOPBACK_V6 = IPv6Address("::1")
LOOPBACK_MAPPED = IPv6Network("::ffff:127.0.0.0/104")
NUMERIC_LABEL = re.compile(r"(0x[0-9a-f]*|[0-9]+)", re.IGNORECASE)


def host_refusal(host: str) -> str | None:
    """Why a URL's host is refused before it is resolved, or None.

    A host whose last label is a number is an IPv4 address to every resolver (`127.1`,
    `0x7f.0.0.1`, `2130706433`, `0177.0.0.1`, `127.0.0.1.`): only the four-decimal form
    is taken, so that what is checked is what anyone would read. A host IDNA cannot encode
    is refused; otherwise the encoded name (fullwidth digits and dots folded) is judged.
    """
    try:
        ascii_host = host.encode("idna").decode("ascii").lower()
    except UnicodeError:
        return "its host is not a valid domain name"
    if ":" in ascii_host:
        return None  # an IPv6 literal: judged by `refusal` once parsed
    labels = ascii_host.split(".")
    if NUMERIC_LABEL.fullmatch(labels[-1] or (labels[-2] if len(labels) > 1 else "")):
        try:
            IPv4Address(ascii_host)
        except ValueError:
            return "an IPv4 address must be written as four decimal numbers (a.b.c.d)"
        if ascii_host != host:
            return "an IPv4 address must be written in ASCII digits"
    return None
