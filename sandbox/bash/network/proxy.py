"""The egress proxy of network="allowlist": HTTP (plain and CONNECT) and SOCKS5.

One ``EgressProxy`` per agent, on an event loop of its own in a thread of the agent's
process (``start()``). Why there, and not in the spawner or a process of its own: a
domain nobody listed can be *asked for* through the runner's ConfirmationProvider, which
lives in the agent; a thread reaches it with ``run_coroutine_threadsafe`` and no new
protocol, while its own loop keeps a 200 MiB download from ever lagging the agent's
loop (the GIL is handed over every switch interval). The proxy holds no privilege: it
connects out from the agent's own network namespace, as the agent could.

What a command's side looks like: its network namespace is its own and holds nothing
but lo; the listening sockets the command's clients reach (127.0.0.1:3128 for HTTP,
127.0.0.1:1080 for SOCKS5) are made *inside* that namespace before the command runs and
held only by this proxy (``attach``). There is no resolver inside: a name goes to the
proxy as written (``CONNECT pypi.org:443``, ``GET http://host/``, SOCKS5 ATYP 3), and the
proxy resolves it. Direct connections, UDP and DNS have nowhere to go.

Each connection: read the request head (bounded: ``max_head_bytes``, ``head_timeout``),
decide on the name against the allowlist (asking when the policy says so and the
attachment has an ``ask``), resolve it, keep only the addresses that are public or that
an entry names explicitly (allowlist.special_address), connect to one of *those*
addresses (never resolving again: no rebinding between check and use), then stream both
ways with one bounded buffer per direction until either side closes. No TLS is
intercepted: the decision is made on the name, nothing else (SECURITY.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import os
import resource
import socket
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from concurrent.futures import Future as ConcurrentFuture
from dataclasses import dataclass, field
from typing import Any

from sandbox.bash.network.allowlist import Allowlist, DomainRule, normalize_host, special_address
from sandbox.bash.network.forwarder import Forwarder
from sandbox.bash.network.protocol import (
    _REASONS,
    _authority,
    _destination,
    _forwarded_headers,
    _Refused,
)
from sandbox.bash.network.relay import _HAS_SPLICE, _bound_buffers, _cut, _splice_one_way

__all__ = [
    "HTTP_PORT",
    "SOCKS_PORT",
    "Attachment",
    "EgressProxy",
    "Resolver",
    "proxy_environment",
    "resolver_for_tests",
    "shared_proxy",
]

# How many destinations of each kind (allowed, denied) a command's report lists one by
# one; the rest are counted together in one last entry.
MAX_REPORTED = 100

# Inside the command's own network namespace nothing else listens: fixed ports let the
# environment be written before the namespace exists.
HTTP_PORT = 3128
SOCKS_PORT = 1080

Resolver = Callable[[str, int], Awaitable[Sequence[str]]]
Ask = Callable[[str, int], Awaitable[bool]]
Decision = Callable[[dict[str, Any]], None]


def proxy_environment(http_port: int = HTTP_PORT, socks_port: int = SOCKS_PORT) -> dict[str, str]:
    """The variables that point curl, pip, uv, npm, git, urllib and requests at the
    proxy. NO_PROXY is empty on purpose: ``localhost:8080`` in the allowlist is the
    *host's* localhost, reached through the proxy like any other name."""
    http = f"http://127.0.0.1:{http_port}"
    socks = f"socks5h://127.0.0.1:{socks_port}"
    env = {}
    for name, value in (("HTTP_PROXY", http), ("HTTPS_PROXY", http), ("ALL_PROXY", socks),
                        ("NO_PROXY", "")):  # fmt: skip
        env[name] = value
        env[name.lower()] = value
    env["npm_config_proxy"] = http
    env["npm_config_https_proxy"] = http
    return env


async def _system_resolver(host: str, port: int) -> Sequence[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )
    seen: list[str] = []
    for _family, _type, _proto, _canon, sockaddr in infos:
        address = str(sockaddr[0]).split("%", 1)[0]
        if address not in seen:
            seen.append(address)
    return seen


def _nonlocal_bind(family: int) -> bool:
    path = ("/proc/sys/net/ipv6/ip_nonlocal_bind" if family == socket.AF_INET6
            else "/proc/sys/net/ipv4/ip_nonlocal_bind")  # fmt: skip
    try:
        with open(path, "rb") as f:
            return f.read().strip() != b"0"
    except OSError:
        return False


def _this_machine(address: str) -> str | None:
    """"an address of this machine" when ``address`` is one of the proxy's own network
    namespace (an interface's address, or inside a local route), else None.

    A public address can be the machine's own (a server whose public IP sits on its
    interface): connecting there reaches every host service listening on 0.0.0.0, just
    as 127.0.0.1 does. Binding to an address succeeds only for a local one (unless
    ip_nonlocal_bind is set: then a connected UDP socket, which sends nothing, tells,
    as the kernel picks a local destination's own address as the source)."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        try:
            probe.bind((str(ip), 0))
        except OSError:
            return None
        if _nonlocal_bind(family):
            try:
                probe.close()
                with socket.socket(family, socket.SOCK_DGRAM) as routed:
                    routed.connect((str(ip), 9))
                    if ipaddress.ip_address(routed.getsockname()[0]) != ip:
                        return None
            except OSError:
                return None
    return "an address of this machine"


@dataclass
class Attachment:
    """The proxy's side of one command: its listening sockets, its connections, what
    it was allowed and refused (``report()`` is ``result["network"]``)."""

    allowlist: Allowlist
    command: str
    ask: Ask | None
    ask_loop: asyncio.AbstractEventLoop | None
    allowed: Counter[str] = field(default_factory=Counter)
    denied: Counter[str] = field(default_factory=Counter)
    reasons: dict[str, str] = field(default_factory=dict)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _listeners: list[socket.socket] = field(default_factory=list)
    _slots: asyncio.Semaphore | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    closed: bool = False
    # The distinct (host, port) this command's connections have asked about.
    asked: set[tuple[str, int]] = field(default_factory=set)

    # Destinations beyond the first MAX_REPORTED of each kind are counted together:
    # a command cycling through names (x1.test, x2.test, ...) made ~1,700 distinct
    # refusals a second, each kept in the agent's memory and returned in the result.
    others: Counter[str] = field(default_factory=Counter)

    def report(self) -> dict[str, list[dict[str, Any]]]:
        with self._lock:
            allowed = [{"destination": d, "connections": n}
                       for d, n in sorted(self.allowed.items())]  # fmt: skip
            denied = [{"destination": d, "connections": n, "reason": self.reasons[d]}
                      for d, n in sorted(self.denied.items())]  # fmt: skip
            for kind, entries in (("allowed", allowed), ("denied", denied)):
                if self.others[kind]:
                    entry: dict[str, Any] = {"destination": "(other destinations)",
                                             "connections": self.others[kind]}  # fmt: skip
                    if kind == "denied":
                        entry["reason"] = (f"not listed one by one past the first "
                                           f"{MAX_REPORTED}")  # fmt: skip
                    entries.append(entry)
            return {"allowed": allowed, "denied": denied}

    def _count(self, allowed: bool, destination: str, reason: str = "") -> None:
        with self._lock:
            counter = self.allowed if allowed else self.denied
            if destination not in counter and len(counter) >= MAX_REPORTED:
                kind = "allowed" if allowed else "denied"
                self.others[kind] += 1
                return
            counter[destination] += 1
            if not allowed:
                self.reasons.setdefault(destination, reason)


class EgressProxy:
    """An allowlisting HTTP/SOCKS5 proxy on an event loop of its own (see the module)."""

    def __init__(
        self,
        *,
        resolver: Resolver | None = None,
        on_decision: Decision | None = None,
        connect_timeout: float = 15.0,
        head_timeout: float = 30.0,
        ask_timeout: float = 600.0,
        max_head_bytes: int = 32 << 10,
        chunk_bytes: int = 1 << 20,
        max_connections: int = 256,
        max_connections_per_command: int = 64,
        max_questions_per_command: int = 20,
    ) -> None:
        self._resolver = resolver or _system_resolver
        self._on_decision = on_decision
        self.connect_timeout = connect_timeout
        self.head_timeout = head_timeout
        self.ask_timeout = ask_timeout
        self.max_head_bytes = max_head_bytes
        self.chunk_bytes = chunk_bytes
        self.max_connections = max_connections
        self.max_connections_per_command = max_connections_per_command
        self.max_questions_per_command = max_questions_per_command
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._slots: asyncio.Semaphore | None = None
        self._asking: dict[tuple[int, str, int], asyncio.Future[bool]] = {}
        self._lock = threading.Lock()
        # The bytes of decided connections move in a process of its own (forwarder.py:
        # no GIL shared with the agent); this thread moves them only when it cannot.
        self._forwarder = Forwarder()

    # ------------------------------------------------------------------ lifetime

    def start(self) -> EgressProxy:
        """Start the proxy's thread and loop (once; later calls do nothing)."""
        with self._lock:
            if self._thread is not None:
                return self
            self._thread = threading.Thread(target=self._run, name="sandbox-egress-proxy",
                                            daemon=True)  # fmt: skip
            self._thread.start()
        self._started.wait()
        return self

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        self.max_connections = min(self.max_connections, descriptor_budget())
        self.max_connections_per_command = min(self.max_connections_per_command,
                                               self.max_connections)  # fmt: skip
        self._slots = asyncio.Semaphore(self.max_connections)
        # Started from the loop, not here: start() returns without waiting for a fork.
        loop.call_soon(self._forwarder.start, loop)
        self._started.set()
        try:
            loop.run_forever()
        finally:
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            self._forwarder.close()
            loop.close()

    def stop(self) -> None:
        """Stop the loop and the thread; every attachment's connections are closed."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or not loop.is_running():
            return

        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(cancel_all(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)

    @property
    def forwarder_pid(self) -> int | None:
        """The pid of the process that moves the bytes of decided connections
        (forwarder.py), or None when there is none (not started, or it died: this
        proxy's thread then moves them itself)."""
        return self._forwarder.pid

    def _submit(self, coro: Awaitable[Any]) -> ConcurrentFuture[Any]:
        if self._loop is None:
            self.start()
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop)  # type: ignore[arg-type]

    # ------------------------------------------------------------------ attachments

    def attach(
        self,
        listeners: Sequence[socket.socket],
        allowlist: Allowlist,
        *,
        command: str = "",
        ask: Ask | None = None,
        ask_loop: asyncio.AbstractEventLoop | None = None,
    ) -> Attachment:
        """Serve clients of ``listeners`` (listening TCP sockets; the proxy takes them
        over) for one command. ``ask(host, port)`` is awaited on ``ask_loop`` (the
        caller's running loop when None) for a name no entry lists; without it such a
        name is refused. Call ``detach`` when the command has ended."""
        if ask is not None and ask_loop is None:
            ask_loop = asyncio.get_running_loop()
        att = Attachment(allowlist=allowlist, command=command, ask=ask, ask_loop=ask_loop)
        for sock in listeners:
            sock.setblocking(False)
            att._listeners.append(sock)
        self._submit(self._attach(att)).result(5)
        return att

    async def _attach(self, att: Attachment) -> None:
        att._slots = asyncio.Semaphore(self.max_connections_per_command)
        for sock in att._listeners:
            task = asyncio.create_task(self._accept_loop(att, sock))
            att._tasks.add(task)
            task.add_done_callback(att._tasks.discard)

    def detach(self, att: Attachment) -> dict[str, list[dict[str, Any]]]:
        """Close the command's listeners and every connection it still has; return its
        report."""
        if not att.closed:
            att.closed = True
            with contextlib.suppress(Exception):
                self._submit(self._detach(att)).result(5)
        return att.report()

    async def _detach(self, att: Attachment) -> None:
        tasks = list(att._tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for sock in att._listeners:
            sock.close()

    async def _accept_loop(self, att: Attachment, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        assert self._slots is not None and att._slots is not None
        while True:
            # Bounded: past the limits a client waits in the listen backlog, and the
            # agent never runs out of descriptors because of a command.
            await att._slots.acquire()
            try:
                await self._slots.acquire()
            except BaseException:
                att._slots.release()
                raise
            try:
                conn, _ = await loop.sock_accept(listener)
            except OSError:
                # EMFILE, ENFILE, ENOBUFS, a client gone before accept: the listener
                # stays served (an accept loop that died would leave the command's
                # clients hanging in the backlog until it ends).
                self._slots.release()
                att._slots.release()
                await asyncio.sleep(0.05)
                continue
            except BaseException:
                self._slots.release()
                att._slots.release()
                raise
            task = asyncio.create_task(self._serve(att, conn))
            att._tasks.add(task)
            task.add_done_callback(functools.partial(self._served, att, conn))

    def _served(self, att: Attachment, conn: socket.socket, task: asyncio.Task[None]) -> None:
        """When a connection's task is done, also one cancelled before it ever ran:
        its slots come back and its socket is closed."""
        att._tasks.discard(task)
        conn.close()
        assert self._slots is not None and att._slots is not None
        self._slots.release()
        att._slots.release()

    # ------------------------------------------------------------------ one connection

    async def _serve(self, att: Attachment, conn: socket.socket) -> None:
        upstream: socket.socket | None = None
        try:
            conn.setblocking(False)
            _bound_buffers(conn)
            loop = asyncio.get_running_loop()
            first = await asyncio.wait_for(loop.sock_recv(conn, 1), self.head_timeout)
            if not first:
                return
            plain = False
            if first == b"\x05":
                upstream = await self._socks5(att, conn)
                rest = b""
            else:
                upstream, rest, plain = await self._http(att, conn, first)
            if upstream is None:
                return
            if rest:
                await loop.sock_sendall(upstream, rest)
            await self._pipe(conn, upstream, close_after_response=plain)
        except (TimeoutError, OSError, asyncio.IncompleteReadError):
            pass
        finally:
            if upstream is not None:
                upstream.close()
            conn.close()

    async def _read_head(self, conn: socket.socket, first: bytes) -> tuple[bytes, bytes]:
        loop = asyncio.get_running_loop()
        buf = bytearray(first)
        deadline = time.monotonic() + self.head_timeout
        while True:
            end = buf.find(b"\r\n\r\n")
            if end >= 0:
                return bytes(buf[: end + 4]), bytes(buf[end + 4 :])
            if len(buf) > self.max_head_bytes:
                raise _Refused(f"the request head is over {self.max_head_bytes} bytes", 431)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _Refused("the request head did not arrive in time", 408)
            try:
                data = await asyncio.wait_for(loop.sock_recv(conn, 16384), remaining)
            except TimeoutError:
                raise _Refused("the request head did not arrive in time", 408) from None
            if not data:
                raise _Refused("the client closed before the end of the request head", 400)
            buf += data

    async def _http(
        self, att: Attachment, conn: socket.socket, first: bytes
    ) -> tuple[socket.socket | None, bytes, bool]:
        loop = asyncio.get_running_loop()
        destination = "?"
        try:
            head, rest = await self._read_head(conn, first)
            lines = head[:-4].split(b"\r\n")
            try:
                method, target, version = lines[0].decode("ascii").split(" ")
            except (UnicodeDecodeError, ValueError):
                raise _Refused("the request line is not 'METHOD TARGET HTTP/1.x'", 400) from None
            if not version.startswith("HTTP/1."):
                raise _Refused(f"{version!r} is not HTTP/1.x", 505)
            if method == "CONNECT":
                host, port = _authority(target, None)
                destination = _destination(host, port)
                upstream = await self._open(att, host, port)
                await loop.sock_sendall(conn, b"HTTP/1.1 200 Connection established\r\n\r\n")
                return upstream, rest, False
            if not target.lower().startswith("http://"):
                why = ("an https:// URL is fetched through CONNECT (the proxy does not "
                       "open TLS itself)" if target.lower().startswith("https://")
                       else "a proxy request names an absolute http:// URL")  # fmt: skip
                raise _Refused(why, 400)
            after = target[len("http://") :]
            slash = min((i for i in (after.find("/"), after.find("?")) if i >= 0),
                        default=len(after))  # fmt: skip
            authority, path = after[:slash], after[slash:] or "/"
            if path.startswith("?"):
                path = "/" + path
            if "@" in authority:
                raise _Refused("user information in the URL is not forwarded", 400)
            host, port = _authority(authority, 80)
            destination = _destination(host, port)
            headers = _forwarded_headers(lines[1:], authority)
            upstream = await self._open(att, host, port)
            request = f"{method} {path} {version}\r\n".encode("ascii") + headers + b"\r\n"
            return upstream, request + rest, True
        except _Refused as refusal:
            body = (f"sandbox egress proxy: {destination} refused: {refusal.reason}\n").encode()
            reply = (f"HTTP/1.1 {refusal.status} {_REASONS.get(refusal.status, 'Error')}\r\n"
                     "Content-Type: text/plain; charset=utf-8\r\n"
                     f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()  # fmt: skip
            with contextlib.suppress(OSError):
                await asyncio.wait_for(loop.sock_sendall(conn, reply + body), 5)
            return None, b"", False

    async def _socks5(self, att: Attachment, conn: socket.socket) -> socket.socket | None:
        loop = asyncio.get_running_loop()
        # One deadline for the whole handshake, as for an HTTP head: a client dripping
        # a byte just inside each read's timeout held its slot for hours.
        deadline = time.monotonic() + self.head_timeout

        async def read(n: int) -> bytes:
            data = b""
            while len(data) < n:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError("the SOCKS5 handshake did not arrive in time")
                chunk = await asyncio.wait_for(loop.sock_recv(conn, n - len(data)),
                                               remaining)  # fmt: skip
                if not chunk:
                    raise asyncio.IncompleteReadError(data, n)
                data += chunk
            return data

        async def reply(code: int) -> None:
            await loop.sock_sendall(conn, bytes([5, code, 0, 1, 0, 0, 0, 0, 0, 0]))

        (count,) = await read(1)
        methods = await read(count)
        if 0 not in methods:
            await loop.sock_sendall(conn, b"\x05\xff")
            return None
        await loop.sock_sendall(conn, b"\x05\x00")
        version, command, _reserved, kind = await read(4)
        if kind == 1:
            host = socket.inet_ntop(socket.AF_INET, await read(4))
        elif kind == 4:
            host = socket.inet_ntop(socket.AF_INET6, await read(16))
        elif kind == 3:
            (length,) = await read(1)
            raw = await read(length)
            host = raw.decode("ascii", "replace")
        else:
            await reply(0x08)
            return None
        port = int.from_bytes(await read(2), "big")
        if version != 5 or command != 1:
            # BIND and UDP ASSOCIATE: nothing but outgoing TCP leaves the namespace.
            att._count(False, _destination(host, port), "only SOCKS5 CONNECT is served")
            await reply(0x07)
            return None
        try:
            upstream = await self._open(att, host, port)
        except _Refused as refusal:
            await reply(refusal.socks)
            return None
        await reply(0x00)
        return upstream

    # ------------------------------------------------------------------ the decision

    async def _open(self, att: Attachment, raw_host: str, port: int) -> socket.socket:
        destination = _destination(raw_host, port)
        try:
            addresses, rule = await self._decide(att, raw_host, port)
        except _Refused as refusal:
            att._count(False, destination, refusal.reason)
            self._emit(att, destination, False, refusal.reason)
            raise
        last: OSError | None = None
        loop = asyncio.get_running_loop()
        for address in addresses:
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setblocking(False)
            _bound_buffers(sock)
            try:
                await asyncio.wait_for(loop.sock_connect(sock, (address, port)),
                                       self.connect_timeout)  # fmt: skip
            except (OSError, TimeoutError) as exc:
                sock.close()
                last = exc if isinstance(exc, OSError) else OSError("connect timed out")
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            why = f"allowed by {rule.entry!r}" if rule is not None else "allowed by a human"
            att._count(True, destination)
            self._emit(att, destination, True, why, address=address)
            return sock
        reason = f"could not connect to {', '.join(addresses)}: {last}"
        att._count(False, destination, reason)
        self._emit(att, destination, False, reason)
        raise _Refused(reason, 502, 0x05)

    async def _decide(
        self, att: Attachment, raw_host: str, port: int
    ) -> tuple[list[str], DomainRule | None]:
        try:
            host = normalize_host(raw_host)
        except ValueError as exc:
            raise _Refused(f"not a host name: {exc}", 400, 0x04) from None
        if not 0 < port < 65536:
            raise _Refused(f"port {port} is out of range", 400, 0x04)
        rule = att.allowlist.match(host, port)
        if rule is None and not await self._asked(att, host, port):
            raise _Refused(f"{host}:{port} is not in allowed_domains")
        try:
            ipaddress.ip_address(host)
            addresses: Sequence[str] = [host]
        except ValueError:
            try:
                addresses = await asyncio.wait_for(self._resolver(host, port),
                                                   self.connect_timeout)  # fmt: skip
            except (OSError, TimeoutError) as exc:
                raise _Refused(f"{host} does not resolve: {exc}", 502, 0x04) from None
        usable, refused = [], []
        for address in addresses:
            why = special_address(address) or _this_machine(address)
            if (why is None or (rule is not None and rule.names_address(address))
                    or att.allowlist.names_address(address, port)):  # fmt: skip
                usable.append(address)
            else:
                refused.append(f"{address} ({why})")
        if not usable:
            raise _Refused(
                f"{host} resolves to {', '.join(refused) or 'nothing'}, an address no "
                "entry names (a listed name must resolve to a public address, or the "
                "entry must name the address itself)"
            )
        return usable, rule

    async def _asked(self, att: Attachment, host: str, port: int) -> bool:
        """Whether a human allows ``host:port`` for this command (one question at a time
        per name and command; concurrent connections wait for the same answer)."""
        if att.ask is None or att.ask_loop is None:
            return False
        if (host, port) not in att.asked:
            # Bounded: a command cycling through names (x1.test, x2.test, ...) put
            # ~700 questions a second to the human, each a call record in the store.
            if len(att.asked) >= self.max_questions_per_command:
                raise _Refused(
                    f"{host}:{port} is not in allowed_domains, and this command has asked "
                    f"about {self.max_questions_per_command} names already: the rest are "
                    "refused without asking (list the names the job needs in "
                    "allowed_domains)"
                )
            att.asked.add((host, port))
        key = (id(att), host, port)
        pending = self._asking.get(key)
        if pending is None:
            pending = asyncio.get_running_loop().create_future()
            self._asking[key] = pending
            try:
                future = asyncio.run_coroutine_threadsafe(
                    _as_coroutine(att.ask(host, port)), att.ask_loop
                )
                try:
                    answer = await asyncio.wait_for(asyncio.wrap_future(future),
                                                    self.ask_timeout)  # fmt: skip
                except TimeoutError:
                    # Refused with a reply and a line in the report, as any refusal
                    # (the TimeoutError closed the connection without either).
                    pending.set_result(False)
                    raise _Refused(f"{host}:{port} is not in allowed_domains, and no "
                                   f"answer came in {self.ask_timeout:g} s") from None  # fmt: skip
                pending.set_result(bool(answer is True))
            except BaseException:
                if not pending.done():
                    pending.set_result(False)
                raise
            finally:
                self._asking.pop(key, None)
            return pending.result()
        return await asyncio.shield(pending)

    def _emit(self, att: Attachment, destination: str, allowed: bool, reason: str,
              **extra: Any) -> None:  # fmt: skip
        if self._on_decision is None:
            return
        event = {"destination": destination, "allowed": allowed, "reason": reason,
                 "command": att.command, **extra}  # fmt: skip
        with contextlib.suppress(Exception):
            self._on_decision(event)

    # ------------------------------------------------------------------ streaming

    async def _pipe(self, a: socket.socket, b: socket.socket, *,
                    close_after_response: bool = False) -> None:  # fmt: skip
        """Bytes both ways until both sides are done. ``close_after_response``: a plain
        HTTP request (absolute-form) went to ``b``, the host its URL names; its
        response is told ``Connection: close``. Without that a client that keeps
        proxy connections alive (curl does) sent its next request, for another host,
        down the same connection: to the first host, with the other's credentials,
        and took the first host's answer as the other's."""
        one_way = self._one_way

        async def down_stream() -> None:
            if close_after_response and not await self._response_head(b, a):
                with contextlib.suppress(OSError):
                    a.shutdown(socket.SHUT_WR)
                return
            await one_way(b, a, self.chunk_bytes)

        up = asyncio.create_task(one_way(a, b, self.chunk_bytes))
        down = asyncio.create_task(down_stream())
        try:
            await asyncio.gather(up, down)
        finally:
            up.cancel()
            down.cancel()

    async def _one_way(self, src: socket.socket, dst: socket.socket, size: int) -> None:
        """``src``'s bytes to ``dst`` until ``src`` ends, then ``dst`` half-closed: in
        the forwarding process, or here when it cannot take them."""
        try:
            if await self._forwarder.forward(src, dst, size):
                return
        except ConnectionAbortedError:  # the forwarding process died: cut
            _cut(src, dst)
            return
        except BaseException:  # cancelled (detach, stop): cut for every holder
            _cut(src, dst)
            raise
        await (_splice_one_way if _HAS_SPLICE else self._copy_one_way)(src, dst, size)

    async def _response_head(self, upstream: socket.socket, conn: socket.socket) -> bool:
        """Relay the response head(s) from ``upstream`` to ``conn`` with the connection
        headers replaced by ``Connection: close`` (interim 1xx heads pass as they are).
        False when there is no well-formed head within max_head_bytes: the client is
        then cut off (whatever it got is what the upstream sent)."""
        loop = asyncio.get_running_loop()
        buf = bytearray()
        while True:
            # A head may end its lines with a bare LF (RFC 9112 2.2 lets a recipient
            # read it so): waiting for CRLF CRLF would hold such a response back.
            ends = [(i, n) for i, n in ((buf.find(b"\r\n\r\n"), 4), (buf.find(b"\n\n"), 2))
                    if i >= 0]  # fmt: skip
            end, size = min(ends) if ends else (-1, 0)
            if end < 0:
                if len(buf) > self.max_head_bytes:
                    return False
                data = await loop.sock_recv(upstream, 16384)
                if not data:
                    if buf:
                        await loop.sock_sendall(conn, bytes(buf))
                    return False
                buf += data
                continue
            status_line, *fields = [line.removesuffix(b"\r")
                                    for line in bytes(buf[:end]).split(b"\n")]  # fmt: skip
            rest = bytes(buf[end + size :])
            parts = status_line.split(b" ", 2)
            interim = (len(parts) >= 2 and parts[0].startswith(b"HTTP/")
                       and parts[1][:1] == b"1")  # fmt: skip
            if not interim:
                fields = [f for f in fields if f.partition(b":")[0].strip().lower()
                          not in (b"connection", b"keep-alive", b"proxy-connection")]
                fields.append(b"Connection: close")
            await loop.sock_sendall(conn, b"\r\n".join([status_line, *fields]) + b"\r\n\r\n")
            buf = bytearray(rest)
            if not interim:
                if buf:
                    await loop.sock_sendall(conn, bytes(buf))
                return True

    @staticmethod
    async def _copy_one_way(src: socket.socket, dst: socket.socket, size: int) -> None:
        loop = asyncio.get_running_loop()
        buf = bytearray(size)
        view = memoryview(buf)
        try:
            while True:
                n = await loop.sock_recv_into(src, buf)
                if not n:
                    break
                await loop.sock_sendall(dst, view[:n])
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)


# Descriptors one proxied connection holds at most: the client's socket, the upstream
# socket (and one more while a second address is tried), a pipe (two descriptors) per
# direction for splice.
DESCRIPTORS_PER_CONNECTION = 7


def descriptor_budget() -> int:
    """How many connections the proxy may hold at once in this process: their
    descriptors take at most half of RLIMIT_NOFILE's soft limit, so that commands
    streaming through the proxy never run the agent out of descriptors (a soft limit
    of 1024, a common default, gives 73)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1 << 20
    return max(4, soft // 2 // DESCRIPTORS_PER_CONNECTION)


_shared: EgressProxy | None = None
_shared_lock = threading.Lock()


def shared_proxy() -> EgressProxy:
    """The agent's one egress proxy (started on first use)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = EgressProxy().start()
        return _shared


@contextlib.contextmanager
def resolver_for_tests(resolver: Resolver) -> Iterator[None]:
    """Names resolved by ``resolver`` instead of the system's while inside (the shared
    proxy's): tests map their own names to 127.0.0.1 servers without /etc/hosts."""
    proxy = shared_proxy()
    before = proxy._resolver
    proxy._resolver = resolver
    try:
        yield
    finally:
        proxy._resolver = before


def _forget_the_parents_proxy() -> None:
    # A forked agent has none of its parent's threads: it starts its own proxy.
    global _shared, _shared_lock
    _shared, _shared_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_the_parents_proxy)


async def _as_coroutine(value: Awaitable[bool]) -> bool:
    return await value
