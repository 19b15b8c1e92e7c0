"""The HTTP the egress proxy speaks: a request's destination and authority, the headers
it forwards (hop-by-hop ones dropped), and its error replies' reasons."""

from __future__ import annotations


class _Refused(Exception):
    """A connection the proxy will not make; ``status`` is the HTTP status to send."""

    def __init__(self, reason: str, status: int = 403, socks: int = 0x02) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.socks = socks


_REASONS = {400: "Bad Request", 403: "Forbidden", 408: "Request Timeout",
            431: "Request Header Fields Too Large", 502: "Bad Gateway",
            505: "HTTP Version Not Supported"}  # fmt: skip
_HOP_BY_HOP = {b"proxy-connection", b"proxy-authorization", b"connection", b"keep-alive",
               b"host", b"proxy-authenticate", b"te", b"trailer", b"upgrade"}  # fmt: skip


def _destination(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _authority(text: str, default_port: int | None) -> tuple[str, int]:
    if text.startswith("["):
        close = text.find("]")
        host, rest = text[1:close], text[close + 1 :]
        if close < 0 or (rest and not rest.startswith(":")):
            raise _Refused(f"{text!r} is not host:port", 400)
        port_text = rest[1:] if rest else ""
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            host, port_text = text, ""
    if not port_text:
        if default_port is None:
            raise _Refused(f"{text!r} names no port", 400)
        return host, default_port
    if not port_text.isascii() or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise _Refused(f"{text!r} has no valid port", 400)
    return host, int(port_text)


def _forwarded_headers(lines: list[bytes], authority: str) -> bytes:
    """The client's headers for the origin: hop-by-hop ones dropped, Host set to the
    URL's authority (RFC 9112 3.2.2), one request per connection."""
    out = [b"Host: " + authority.encode("ascii")]
    for line in lines:
        name, sep, _value = line.partition(b":")
        if not sep or not name or name != name.strip() or b"\r" in line or b"\n" in line:
            raise _Refused("a header line is malformed", 400)
        if name.lower() in _HOP_BY_HOP:
            continue
        out.append(line)
    out.append(b"Connection: close")
    return b"\r\n".join(out) + b"\r\n"
