"""Which network addresses Handraise may call at an outsider's word (a request's ``callback_url``): public ones.

An address is public when it is globally reachable and neither multicast nor reserved. An IPv6
address that carries an IPv4 one reaches that IPv4 address, so it is judged by the IPv4 one under
the same rule: IPv4-mapped ``::ffff:0:0/96``, IPv4-compatible ``::/96``, NAT64's well-known prefix
``64:ff9b::/96`` and 6to4's ``2002::/16`` (``::ffff:127.0.0.1``, ``::7f00:1``, ``64:ff9b::7f00:1``
and ``2002:7f00:1::`` are all loopback). Two prefixes are refused whole, because where they lead is
not written in the address: NAT64's local-use ``64:ff9b:1::/48`` (RFC 8215; the operator picks
where the IPv4 sits) and Teredo's ``2001::/32`` (a client behind a NAT, reached through a relay).
"""

from __future__ import annotations

from ipaddress import IPv4Address, IPv6Address, IPv6Network, ip_address

IPAddress = IPv4Address | IPv6Address

# The IPv4 address is the low 32 bits of these (RFC 4291 §2.5.5, RFC 6052 §2.1).
_LOW_32_BITS = (IPv6Network("::ffff:0:0/96"), IPv6Network("::/96"), IPv6Network("64:ff9b::/96"))
_SIX_TO_FOUR = IPv6Network("2002::/16")  # the IPv4 address is bits 16-47 (RFC 3056)
_REFUSED_WHOLE = (IPv6Network("64:ff9b:1::/48"), IPv6Network("2001::/32"))


def parse(text: str) -> IPAddress | None:
    """``text`` as an address (an IPv6 zone, ``%eth0``, dropped: it names an interface, not a host), or None."""
    try:
        return ip_address(text.split("%", 1)[0])
    except ValueError:
        return None


def embedded_ipv4(address: IPv6Address) -> IPv4Address | None:
    """The IPv4 address an IPv6 one carries and reaches, or None."""
    if any(address in prefix for prefix in _LOW_32_BITS):
        return IPv4Address(int(address) & 0xFFFF_FFFF)
    if address in _SIX_TO_FOUR:
        return address.sixtofour
    return None


def is_public(address: IPAddress) -> bool:
    """May a connection go there: never loopback, private, link-local, shared, multicast, reserved or unspecified."""
    if isinstance(address, IPv6Address):
        inner = embedded_ipv4(address)
        if inner is not None:
            return is_public(inner)  # :: and ::1 land here as 0.0.0.0 and 0.0.0.1: refused
        if any(address in prefix for prefix in _REFUSED_WHOLE):
            return False
    return address.is_global and not address.is_multicast and not address.is_reserved
