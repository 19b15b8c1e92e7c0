"""Network by name: the entries of ``allowed_domains`` and what they let through.

An entry is a host name (``pypi.org``), a wildcard over a name's subdomains
(``*.pythonhosted.org``: ``files.pythonhosted.org`` and ``a.b.pythonhosted.org``, not
``pythonhosted.org`` itself), or an IP literal written as such (``127.0.0.1``,
``[::1]``), each optionally followed by ``:port``. Without a port an entry allows ports
80 and 443. Names are compared case-insensitively, without a trailing dot, in their
IDNA (ASCII) form, so ``BÜCHER.example`` and ``xn--bcher-kva.example`` are one name.

The proxy (sandbox/bash/network/proxy.py) decides on the name a client asks for, then
resolves it itself and checks every address it would connect to: an address in a
loopback, private, link-local, shared, multicast, reserved or cloud-metadata range is
refused unless an entry names it explicitly, so a listed public name whose DNS answer
is changed to 127.0.0.1 or 169.254.169.254 (DNS rebinding) reaches nothing. An entry
names such an address explicitly when it is that IP literal, or when it is ``localhost``
(or a name under ``.localhost``, RFC 6761) and the address is a loopback one.

This module is pure data and stdlib only: the spawner side never needs it, the agent
side loads it with the policy.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass

from sandbox.errors import ConfigurationError

__all__ = [
    "DEFAULT_PORTS",
    "Allowlist",
    "DomainRule",
    "normalize_host",
    "parse_entry",
    "special_address",
]

DEFAULT_PORTS = (80, 443)

_LABEL = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")
_EXAMPLES = '"pypi.org", "*.pythonhosted.org", "github.com:443", "127.0.0.1:8080"'

# Ranges a public name has no business resolving to. ipaddress's is_private covers
# RFC 1918, loopback, link-local, ULA, documentation and the like; these are added on
# top: shared address space (carrier-grade NAT), benchmarking, and the well-known
# metadata addresses of cloud providers (169.254.169.254 is link-local already;
# fd00:ec2::254 is ULA already; 100.100.100.200 is Alibaba's, in the shared range).
_EXTRA_SPECIAL = tuple(
    ipaddress.ip_network(n)
    for n in ("100.64.0.0/10", "198.18.0.0/15", "192.0.0.0/24", "64:ff9b:1::/48")
)


def special_address(address: str) -> str | None:
    """Why ``address`` is not a public unicast address, or None when it is one."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return special_address(str(ip.ipv4_mapped))
    checks = (
        ("loopback", ip.is_loopback),
        ("unspecified", ip.is_unspecified),
        ("link-local (cloud metadata lives here)", ip.is_link_local),
        ("multicast", ip.is_multicast),
        ("private", ip.is_private),
        ("reserved", ip.is_reserved),
        ("shared or special-purpose", any(ip in n for n in _EXTRA_SPECIAL if n.version == ip.version)),
    )
    for why, hit in checks:
        if hit:
            return why
    return None


# The IDNA deviation characters: Python's codec (IDNA 2003) maps "faß.de" to fass.de,
# "βόλος" with a final sigma to the non-final one, and drops ZWJ/ZWNJ; IDNA 2008 (what
# curl, browsers and registries use) keeps them: xn--fa-hia.de is another domain, with
# another owner. An entry written with one would allow a domain nobody wrote.
_DEVIATIONS = frozenset("\u00df\u1e9e\u03c2\u200c\u200d")  # ß, ẞ, ς, ZWNJ, ZWJ


def _ip_literal(text: str) -> str | None:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


def normalize_host(host: str) -> str:
    """A host as the allowlist compares it: an IP literal in canonical form, or the
    lower-case IDNA form of a name without its trailing dot. Raises ValueError (with
    the reason) for something that is neither."""
    if not isinstance(host, str) or not host:
        raise ValueError("the host is empty")
    h = host.strip()
    if h != host or any(c.isspace() or ord(c) < 0x20 for c in h):
        raise ValueError("the host holds white space or control characters")
    if h.startswith("[") and h.endswith("]"):
        inner = _ip_literal(h[1:-1])
        if inner is None or ":" not in inner:
            raise ValueError(f"{host!r} is not an IPv6 literal")
        return inner
    literal = _ip_literal(h)
    if literal is not None:
        return literal
    if h.endswith("."):
        h = h[:-1]
    deviation = next((c for c in h if c in _DEVIATIONS), None)
    if deviation is not None:
        raise ValueError(
            f"{host!r} holds {deviation!r} (U+{ord(deviation):04X}), which IDNA 2003 maps "
            "away and IDNA 2008 keeps, so it names two different domains: write the "
            "name's xn-- form"
        )
    try:
        ascii_name = h.encode("idna").decode("ascii").lower()
    except UnicodeError as exc:
        raise ValueError(f"{host!r} is not a valid host name ({exc})") from None
    labels = ascii_name.split(".")
    if len(ascii_name) > 253 or not all(_LABEL.match(label) for label in labels):
        raise ValueError(f"{host!r} is not a valid host name")
    if labels[-1].isdigit():
        # 1.2.3 or 0x7f.1 are not names: inet_aton would read them as addresses.
        raise ValueError(f"{host!r} looks like an address in a form other than dotted quad")
    return ascii_name


@dataclass(frozen=True)
class DomainRule:
    """One ``allowed_domains`` entry, parsed.

    host: the name (IDNA, lower case), the suffix of a wildcard (without ``*.``), or an
    IP literal in canonical form. port: the one port allowed, or None for 80 and 443.
    """

    entry: str
    host: str
    port: int | None
    wildcard: bool = False
    ip: bool = False

    def matches(self, host: str, port: int) -> bool:
        if (port not in DEFAULT_PORTS) if self.port is None else port != self.port:
            return False
        if self.wildcard:
            return host.endswith("." + self.host)
        return host == self.host

    def names_address(self, address: str) -> bool:
        """Whether this entry names ``address`` explicitly (see the module's text)."""
        if self.ip:
            return ipaddress.ip_address(address) == ipaddress.ip_address(self.host)
        if self.host == "localhost" or self.host.endswith(".localhost"):
            return ipaddress.ip_address(address).is_loopback
        return False


def parse_entry(entry: object) -> DomainRule:
    """One entry of ``allowed_domains``; a ConfigurationError names a bad one."""

    def bad(why: str) -> ConfigurationError:
        return ConfigurationError(
            f"allowed_domains entry {entry!r} is invalid: {why}. Write a name, '*.' and a "
            f"domain, or an IP literal, each optionally with ':port', e.g. {_EXAMPLES}."
        )

    if not isinstance(entry, str):
        raise bad("it is not a string")
    text = entry
    if not text or text != text.strip():
        raise bad("it is empty or has white space around it")
    if "://" in text or "/" in text or "@" in text or "?" in text or "#" in text:
        raise bad("write the host only, without a scheme, user, path or query")
    port: int | None = None
    host = text
    if text.startswith("["):
        close = text.find("]")
        if close < 0:
            raise bad("an IPv6 literal opened with '[' is not closed")
        host, rest = text[: close + 1], text[close + 1 :]
        if rest:
            if not rest.startswith(":"):
                raise bad("only ':port' may follow an IPv6 literal")
            port = _port(rest[1:], bad)
    elif text.count(":") == 1:
        host, _, p = text.partition(":")
        port = _port(p, bad)
    elif text.count(":") > 1:
        if _ip_literal(text) is None:
            raise bad("an IPv6 literal with a port is written in brackets: '[::1]:8080'")
        raise bad("write an IPv6 literal in brackets, e.g. '[::1]' or '[::1]:8080'")
    wildcard = False
    if host.startswith("*."):
        wildcard, host = True, host[2:]
    if "*" in host:
        raise bad("a wildcard is only allowed as a leading '*.' (e.g. '*.example.com')")
    try:
        norm = normalize_host(host)
    except ValueError as exc:
        raise bad(str(exc)) from None
    is_ip = _ip_literal(norm) is not None
    if is_ip and wildcard:
        raise bad("a wildcard cannot stand before an IP literal")
    if is_ip and ":" in norm and not text.startswith("["):
        raise bad("write an IPv6 literal in brackets, e.g. '[::1]'")
    if wildcard and "." not in norm:
        raise bad("a wildcard needs a domain with at least two labels (e.g. '*.example.com')")
    return DomainRule(entry=entry, host=norm, port=port, wildcard=wildcard, ip=is_ip)


def _port(text: str, bad: Callable[[str], ConfigurationError]) -> int:
    if not text.isascii() or not text.isdigit() or not 0 < int(text) < 65536:
        raise bad(f"the port {text!r} is not a number from 1 to 65535")
    return int(text)


@dataclass(frozen=True)
class Allowlist:
    """The parsed ``allowed_domains`` of a policy."""

    rules: tuple[DomainRule, ...] = ()

    @classmethod
    def parse(cls, entries: object) -> Allowlist:
        if isinstance(entries, str) or not isinstance(entries, tuple | list):
            raise ConfigurationError(
                f"allowed_domains={entries!r} is invalid: write a tuple of entries, e.g. "
                f"({_EXAMPLES})."
            )
        return cls(tuple(parse_entry(e) for e in entries))

    def match(self, host: str, port: int) -> DomainRule | None:
        """The first rule allowing ``host:port`` (``host`` as normalize_host gives it)."""
        for rule in self.rules:
            if rule.matches(host, port):
                return rule
        return None

    def names_address(self, address: str, port: int) -> bool:
        """Whether an IP-literal entry lists ``address`` (on ``port``)."""
        return any(
            r.ip and r.names_address(address) and r.matches(r.host, port) for r in self.rules
        )

    @property
    def entries(self) -> tuple[str, ...]:
        return tuple(r.entry for r in self.rules)
