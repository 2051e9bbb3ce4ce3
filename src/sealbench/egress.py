"""The egress proxy of `budget.network: model-api` (docs/isolation.md#network-policy).

Under `model-api` the solver keeps its own network namespace (loopback only). The one way out
is a UNIX socket, fresh for every attempt, bound into the sandbox at SANDBOX_SOCKET; a bridge
started before the solver (`egress_bridge.py`) listens on 127.0.0.1:BRIDGE_PORT inside and
forwards each TCP connection to that socket, and the proxy variables point there. On the host
side of the socket this module's EgressProxy speaks HTTP CONNECT and plain forward-proxy
HTTP, admits only the run's allowed hosts (`run --allow-host HOST[:PORT]`), resolves names
itself (the sandbox has no DNS) and logs every connection of its attempt.

One listener per attempt is what attributes each connection to its attempt: the log is the
attempt's, whatever the solver sends. Nothing the client does may stop the harness: every
failure of a connection ends that connection, answered (400, 403, 502...) and logged.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import io
import ipaddress
import os
import re
import resource
import selectors
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from sealbench.logs import duration_text
from sealbench.sandbox import command_files
from sealbench.textsafe import terminal_safe

DEFAULT_PORT = 443  # `--allow-host api.example.com` admits HTTPS to it and nothing else
SANDBOX_SOCKET = Path("/run/sealbench/egress.sock")  # /run is a private tmpfs in the sandbox
SOCKET_NAME = "egress.sock"
BRIDGE_PORT = 3128  # inside the sandbox's own network namespace: no clash with the host
BRIDGE_SCRIPT = Path(__file__).with_name("egress_bridge.py")
MAX_HEAD_BYTES = 16 * 1024  # request line and headers; more is refused with 431
HEAD_TIMEOUT_SEC = 30.0  # a client that opens a connection and says nothing
CONNECT_TIMEOUT_SEC = 15.0
IDLE_TIMEOUT_SEC = 600.0  # a model call may think for minutes before its first byte
MAX_LIVE = 64  # connections open at once per attempt; more are refused with 503
WANTED_DESCRIPTORS = 65536  # the harness's soft limit on open files under model-api
MAX_LOGGED = 1000  # connections recorded per attempt; past that they are only counted
MAX_TEXT = 200  # characters of a host name or reason kept in the record
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "proxy-authorization",
                        "proxy-authenticate", "te", "trailer", "upgrade"})
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_VERSION = re.compile(r"^HTTP/1\.[01]$")
_LABEL = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
_HOSTNAME = re.compile(rf"^{_LABEL}(?:\.{_LABEL})*$")


# --------------------------------------------------------------------------- the allow list


@dataclass(frozen=True)
class AllowedHost:
    """One `--allow-host` entry: a host name or IP literal (lower case, no trailing dot) and
    a port. Matching is exact: a name admits that name, not the addresses it resolves to."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{_bracketed(self.host)}:{self.port}"


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def normal_host(host: str) -> str:
    """The spelling hosts are compared in: lower case, no trailing dot, an IPv6 address in
    its compressed form."""
    host = host.lower().removesuffix(".")
    with contextlib.suppress(ValueError):
        return str(ipaddress.IPv6Address(host))
    return host


def parse_allowed_host(text: str) -> AllowedHost:
    """`HOST[:PORT]` as given to `--allow-host`; ValueError saying why it is not one. The
    port defaults to DEFAULT_PORT (443); an IPv6 address is written in brackets."""
    if not text or text != text.strip():
        raise ValueError("must be HOST or HOST:PORT, without spaces")
    if "*" in text:
        raise ValueError("wildcards are not supported; name each host")
    if "/" in text or "@" in text or "?" in text or "#" in text:
        raise ValueError("must be HOST or HOST:PORT, not a URL")
    if text.count(":") > 1 and not text.startswith("["):
        raise ValueError("write an IPv6 address in brackets, e.g. [::1]:443")
    try:
        parts = urlsplit("//" + text)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"has a bad port ({exc})") from None
    if text.endswith(":"):
        raise ValueError("has an empty port")
    host = normal_host(parts.hostname or "")
    if not host:
        raise ValueError("names no host")
    if not _valid_host(host):
        raise ValueError(f"'{host}' is neither a host name nor an IP address")
    if port == 0:
        raise ValueError("port 0 is not a port")
    return AllowedHost(host, DEFAULT_PORT if port is None else port)


def _valid_host(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return len(host) <= 253 and _HOSTNAME.match(host) is not None


def is_allowed(host: str, port: int, allowed: tuple[AllowedHost, ...]) -> bool:
    """Whether the allow list admits host:port (compared in normal_host spelling)."""
    wanted = AllowedHost(normal_host(host), port)
    return wanted in allowed


# --------------------------------------------------------------------------- requests


class BadRequest(Exception):
    """A request the proxy will not carry out: answered with `status` and logged."""

    def __init__(self, status: int, reason: str, host: str | None = None,
                 port: int | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.host = host
        self.port = port


@dataclass(frozen=True)
class Request:
    """What a client asked the proxy for. `head` is what goes to the host before the
    client's further bytes: nothing for a CONNECT tunnel, the request rewritten to origin
    form for plain HTTP."""

    method: str
    host: str
    port: int
    head: bytes

    @property
    def tunnel(self) -> bool:
        return self.method == "CONNECT"


def parse_request(head: bytes) -> Request:
    """A request head (request line and headers, up to the blank line) as a Request;
    BadRequest(400) for anything that is not a CONNECT to `host:port` or an absolute-form
    `http://` request."""
    text = head.decode("latin-1")
    line, _, rest = text.partition("\r\n")
    parts = line.split(" ")
    if len(parts) != 3 or not _TOKEN.match(parts[0]) or not _VERSION.match(parts[2]):
        raise BadRequest(400, f"malformed request line {line[:80]!r}")
    method, target, version = parts
    if method == "CONNECT":
        host, port = _authority(target)
        return Request(method, host, port, b"")
    if not target.lower().startswith("http://"):
        raise BadRequest(400, f"{method} {target[:80]!r} is not an absolute http:// URL (use "
                         "CONNECT for https)")
    try:
        url = urlsplit(target)
        port = url.port or 80
    except ValueError as exc:
        raise BadRequest(400, f"bad URL {target[:80]!r}: {exc}") from None
    if not url.hostname or url.username is not None or url.password is not None:
        raise BadRequest(400, f"bad URL {target[:80]!r}: no host, or credentials in it")
    host = normal_host(url.hostname)
    origin = (url.path or "/") + (f"?{url.query}" if url.query else "")
    headers = _headers(rest.encode("latin-1"), host, port)
    authority = _bracketed(host) + ("" if port == 80 else f":{port}")
    lines = [f"{method} {origin} {version}", f"Host: {authority}",
             *(f"{name}: {value}" for name, value in headers), "Connection: close", "", ""]
    return Request(method, host, port, "\r\n".join(lines).encode("latin-1"))


def _authority(target: str) -> tuple[str, int]:
    """`host:port` of a CONNECT request; the port is required (RFC 9110, 9.3.6)."""
    try:
        parts = urlsplit("//" + target)
        port = parts.port
    except ValueError as exc:
        raise BadRequest(400, f"bad CONNECT target {target[:80]!r}: {exc}") from None
    if not parts.hostname or port is None or parts.path or parts.query or parts.username:
        raise BadRequest(400, f"bad CONNECT target {target[:80]!r}: must be host:port")
    return normal_host(parts.hostname), port


def _headers(block: bytes, host: str, port: int) -> list[tuple[str, str]]:
    """The headers to pass on: hop-by-hop ones (and those `Connection` names) dropped, `Host`
    replaced by the target's (a host header naming another site must not reach a virtual
    host through an allowed address)."""
    try:
        message = http.client.parse_headers(io.BytesIO(block))
    except http.client.HTTPException as exc:
        raise BadRequest(400, f"malformed headers: {type(exc).__name__}", host, port) from None
    if message.defects or message.get_payload():  # a line that is no header, a folded one
        raise BadRequest(400, "malformed header line", host, port)
    named = {token.strip().lower() for value in message.get_all("Connection", [])
             for token in str(value).split(",")}
    kept: list[tuple[str, str]] = []
    for name, value in message.items():
        if "\r" in value or "\n" in value or not _TOKEN.match(name):
            raise BadRequest(400, f"malformed header {name[:40]!r}", host, port)
        lowered = name.lower()
        if lowered not in HOP_BY_HOP and lowered not in named and lowered != "host":
            kept.append((name, value))
    return kept


def response(status: int, reason: str) -> bytes:
    """A short plain-text answer from the proxy itself."""
    body = f"sealbench egress proxy: {reason}\n".encode()
    title = http.client.responses.get(status, "Error")
    return (f"HTTP/1.1 {status} {title}\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body


TUNNEL_OPEN = b"HTTP/1.1 200 Connection established\r\n\r\n"


# --------------------------------------------------------------------------- the log


@dataclass(frozen=True)
class Connection:
    """One connection a solver made to the proxy, as the ledger keeps it (docs/formats.md).

    `bytes_up` and `bytes_down` count what went to the host and came back from it (for plain
    HTTP the rewritten request head included); a connection that never reached a host has
    zero of both. `reason` says why it was denied, or how an allowed one ended early."""

    host: str | None
    port: int | None
    allowed: bool
    bytes_up: int = 0
    bytes_down: int = 0
    duration: float = 0.0
    reason: str | None = None

    def as_record(self) -> dict[str, Any]:
        return {"host": self.host, "port": self.port, "allowed": self.allowed,
                "bytes_up": self.bytes_up, "bytes_down": self.bytes_down,
                "duration": round(self.duration, 4), "reason": self.reason}


@dataclass(frozen=True)
class EgressLog:
    """Every connection of one attempt, in the order they were opened; past MAX_LOGGED only
    counted (`unlogged`), so a solver cannot bloat the ledger."""

    connections: tuple[Connection, ...] = ()
    unlogged: int = 0


@dataclass
class _Live:
    """A connection being served; turned into a Connection when asked."""

    started: float
    host: str | None = None
    port: int | None = None
    allowed: bool = False
    bytes_up: int = 0
    bytes_down: int = 0
    reason: str | None = None
    ended: float | None = None

    def frozen(self, now: float) -> Connection:
        end = self.ended if self.ended is not None else now
        reason = self.reason if self.ended is not None else "still open when the attempt ended"
        return Connection(_short(self.host), self.port, self.allowed, self.bytes_up,
                          self.bytes_down, end - self.started, _short(reason))


def _short(text: str | None) -> str | None:
    return text if text is None or len(text) <= MAX_TEXT else text[:MAX_TEXT] + "..."


# --------------------------------------------------------------------------- the proxy


@dataclass
class EgressProxy:
    """The proxy of one attempt: a listener on a fresh UNIX socket at `path`, served by
    threads of the harness process until close(). Use as a context manager."""

    path: Path
    allowed: tuple[AllowedHost, ...]
    idle_timeout: float = IDLE_TIMEOUT_SEC
    head_timeout: float = HEAD_TIMEOUT_SEC
    _live: list[_Live] = field(default_factory=list)
    _unlogged: int = 0
    _sockets: set[socket.socket] = field(default_factory=set)  # clients and hosts, open
    _clients: int = 0  # client connections open now
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _closing: threading.Event = field(default_factory=threading.Event)
    _listener: socket.socket | None = None
    _wake: tuple[socket.socket, socket.socket] | None = None

    def __enter__(self) -> EgressProxy:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        raise_descriptor_limit()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            _bind_unix(listener, self.path)
            os.chmod(self.path, 0o600)  # the solver is its owner inside the sandbox
            listener.listen(MAX_LIVE)
        except OSError:
            listener.close()
            raise
        self._listener = listener
        self._wake = socket.socketpair()
        thread = threading.Thread(target=self._accept_loop, name="egress-accept", daemon=True)
        self._threads.append(thread)
        thread.start()

    def close(self) -> None:
        """Stop accepting, cut every open connection, wait briefly for the threads."""
        self._closing.set()
        if self._wake is not None:
            with contextlib.suppress(OSError):
                self._wake[1].send(b"x")
        with self._lock:
            for sock in list(self._sockets):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        deadline = time.monotonic() + 2.0
        for thread in list(self._threads):
            thread.join(max(0.0, deadline - time.monotonic()))
        for sock in (self._listener, *(self._wake or ())):
            if sock is not None:
                sock.close()
        with contextlib.suppress(OSError):
            self.path.unlink()

    @property
    def log(self) -> EgressLog:
        now = time.monotonic()
        with self._lock:
            return EgressLog(tuple(live.frozen(now) for live in self._live), self._unlogged)

    def _accept_loop(self) -> None:
        assert self._listener is not None and self._wake is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self._listener, selectors.EVENT_READ)
            selector.register(self._wake[0], selectors.EVENT_READ)
            while not self._closing.is_set():
                ready = {key.fileobj for key, _ in selector.select()}
                if self._closing.is_set() or self._listener not in ready:
                    continue
                try:
                    client, _ = self._listener.accept()
                except OSError:  # out of descriptors, say: the next try may work
                    time.sleep(0.05)
                    continue
                try:
                    self._admit(client)
                except Exception:  # the loop outlives any one connection
                    client.close()

    def _admit(self, client: socket.socket) -> None:
        live = _Live(time.monotonic())
        with self._lock:
            busy = self._clients >= MAX_LIVE
            if len(self._live) < MAX_LOGGED:
                self._live.append(live)
            else:
                self._unlogged += 1
            self._sockets.add(client)
            self._clients += 1
        if busy:
            self._refuse(client, live, 503, f"more than {MAX_LIVE} connections open at once")
            return
        thread = threading.Thread(target=self._serve, args=(client, live),
                                  name="egress-conn", daemon=True)
        try:
            thread.start()
        except RuntimeError:  # no thread to be had: this connection is refused, not the rest
            self._refuse(client, live, 503, "the proxy cannot take another connection now")
            return
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)

    def _refuse(self, client: socket.socket, live: _Live, status: int, reason: str) -> None:
        live.reason = f"{status}: {reason}"
        with contextlib.suppress(OSError):
            client.settimeout(5)
            client.sendall(response(status, reason))
            _linger(client)
        self._end(client, live)

    def _end(self, client: socket.socket, live: _Live, *more: socket.socket) -> None:
        """Close a client connection (and its host's), once, and stamp its end."""
        with self._lock:
            if live.ended is not None:
                return
            for each in (client, *more):
                self._sockets.discard(each)
            self._clients -= 1
            live.ended = time.monotonic()
        for each in (client, *more):
            each.close()

    def _serve(self, client: socket.socket, live: _Live) -> None:
        """One client connection, start to end. Whatever goes wrong ends this connection
        only, logged; nothing escapes the thread."""
        try:
            self._serve_request(client, live)
        except Exception as exc:  # the harness must outlive whatever a client does
            if live.ended is None:
                live.reason = live.reason or f"proxy error: {type(exc).__name__}: {exc}"
                self._end(client, live)

    def _serve_request(self, client: socket.socket, live: _Live) -> None:
        client.settimeout(self.head_timeout)
        try:
            head, rest = read_head(client)
            request = parse_request(head)
        except BadRequest as bad:
            live.host, live.port = bad.host, bad.port
            if bad.status == 0:  # the client left without a request: nothing to answer
                live.reason = bad.reason
                self._end(client, live)
            else:
                self._refuse(client, live, bad.status, bad.reason)
            return
        live.host, live.port = request.host, request.port
        if not is_allowed(request.host, request.port, self.allowed):
            self._refuse(client, live, 403, f"{_bracketed(request.host)}:{request.port} is not "
                         "in the run's allow list (run --allow-host)")
            return
        live.allowed = True
        try:
            upstream = socket.create_connection((request.host, request.port),
                                                timeout=CONNECT_TIMEOUT_SEC)
        except OSError as exc:
            self._refuse(client, live, 502, f"cannot connect to {_bracketed(request.host)}:"
                         f"{request.port}: {exc.strerror or exc}")
            return
        with self._lock:
            self._sockets.add(upstream)
        try:
            live.reason = self._relay(client, upstream, live, request, rest)
        except OSError as exc:
            live.reason = f"connection broken: {exc.strerror or exc}"
        finally:
            self._end(client, live, upstream)

    def _relay(self, client: socket.socket, upstream: socket.socket, live: _Live,
               request: Request, rest: bytes) -> str | None:
        """Open the tunnel (or send the rewritten request), then copy both ways."""
        if self._closing.is_set():
            return "cut when the attempt ended"
        client.settimeout(self.idle_timeout)
        upstream.settimeout(self.idle_timeout)
        if request.tunnel:
            client.sendall(TUNNEL_OPEN)
        first = request.head + rest
        if first:
            upstream.sendall(first)
            live.bytes_up += len(first)
        return self._pipe(client, upstream, live)

    def _pipe(self, client: socket.socket, upstream: socket.socket, live: _Live) -> str | None:
        """Copy both ways until both sides are done (a half-close passed on as one), or the
        tunnel idles past idle_timeout, or the attempt ends. Returns how it ended early."""
        peer = {client: upstream, upstream: client}
        with selectors.DefaultSelector() as selector:
            for sock in peer:
                selector.register(sock, selectors.EVENT_READ)
            last = time.monotonic()
            while selector.get_map():
                if self._closing.is_set():
                    return "cut when the attempt ended"
                ready = selector.select(timeout=0.5)
                if not ready:
                    if time.monotonic() - last > self.idle_timeout:
                        return f"closed after {self.idle_timeout:g} s without traffic"
                    continue
                for key, _ in ready:
                    source: socket.socket = key.fileobj  # type: ignore[assignment]
                    try:
                        data = source.recv(65536)
                    except OSError as exc:
                        return f"connection broken: {exc.strerror or exc}"
                    if not data:
                        selector.unregister(source)
                        with contextlib.suppress(OSError):
                            peer[source].shutdown(socket.SHUT_WR)
                        continue
                    try:
                        peer[source].sendall(data)
                    except OSError as exc:
                        return f"connection broken: {exc.strerror or exc}"
                    if source is client:
                        live.bytes_up += len(data)
                    else:
                        live.bytes_down += len(data)
                    last = time.monotonic()
        # both sides done: on their own, or because close() shut them down
        return "cut when the attempt ended" if self._closing.is_set() else None


def _linger(client: socket.socket, limit: int = 65536) -> None:
    """Let the client read the answer: closing with unread input (a request body, bytes
    sent after CONNECT) makes the kernel send a reset, which can overtake the answer. Read
    what it still sends, briefly and boundedly, after saying we are done."""
    client.shutdown(socket.SHUT_WR)
    client.settimeout(0.5)
    drained, deadline = 0, time.monotonic() + 2.0
    while drained < limit and time.monotonic() < deadline and (chunk := client.recv(4096)):
        drained += len(chunk)


def read_head(client: socket.socket) -> tuple[bytes, bytes]:
    """The request head (up to and without the blank line) and whatever the client sent
    after it; BadRequest when it is too large, too slow, or never comes (status 0: the client
    left, nothing to answer)."""
    data = b""
    while True:
        end = data.find(b"\r\n\r\n")
        if end >= 0:
            if end + 4 > MAX_HEAD_BYTES:
                break
            return data[:end + 2], data[end + 4:]
        if len(data) > MAX_HEAD_BYTES:
            break
        try:
            chunk = client.recv(4096)
        except TimeoutError:
            raise BadRequest(408, "no complete request in time") from None
        if not chunk:
            raise BadRequest(0, "closed before sending a complete request")
        data += chunk
    raise BadRequest(431, f"request head larger than {MAX_HEAD_BYTES} bytes")


@functools.cache
def raise_descriptor_limit() -> int:
    """Raise this process's soft limit on open files to its hard limit (at most
    WANTED_DESCRIPTORS) and return it. Every proxied connection holds two descriptors in the
    harness, up to MAX_LIVE per attempt and attempt: under a common soft limit of 1024, a
    few solvers holding tunnels open would leave the harness none for its own files, and a
    solver could cause infrastructure errors. Once per process."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = WANTED_DESCRIPTORS if hard == resource.RLIM_INFINITY \
        else min(hard, WANTED_DESCRIPTORS)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        with contextlib.suppress(OSError, ValueError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def _bind_unix(sock: socket.socket, path: Path) -> None:
    """Bind to path even past the 107-byte limit of a socket address (a deep
    $SEALBENCH_SCRATCH): through the directory's descriptor under /proc/self/fd."""
    if len(os.fsencode(path)) < 100:
        sock.bind(str(path))
        return
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        sock.bind(f"/proc/self/fd/{fd}/{path.name}")
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- the sandbox side


def proxy_env(port: int = BRIDGE_PORT) -> dict[str, str]:
    """The variables that send the solver's HTTP clients through the bridge: upper and lower
    case (curl reads only `http_proxy` in lower case), and an empty NO_PROXY so no host
    goes around it (there is no way around it anyway)."""
    url = f"http://127.0.0.1:{port}"
    env = {name: url for base in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY")
           for name in (base, base.lower())}
    return {**env, "NO_PROXY": "", "no_proxy": ""}


@functools.cache
def bridge_files() -> tuple[Path, ...]:
    """What the bridge needs inside the sandbox: the harness's interpreter (its venv or
    installation) and the bridge script; looked up once per process."""
    return command_files((sys.executable, str(BRIDGE_SCRIPT)))


def bridge_argv(argv: list[str], port: int = BRIDGE_PORT) -> list[str]:
    """The solver's command run under the bridge, by the harness's own interpreter in
    isolated mode without site (it imports nothing but the standard library)."""
    return [sys.executable, "-I", "-S", str(BRIDGE_SCRIPT), str(SANDBOX_SOCKET), str(port),
            "--", *argv]


# --------------------------------------------------------------------------- showing


def egress_lines(record: dict[str, Any]) -> list[str]:
    """What `show` prints of an attempt's connections (none for an attempt that ran without
    the proxy). Host names and reasons come from the solver: escaped, one line each;
    durations as `show` gives every duration (`250 ms`, never a bare `0.25`, which reads as a
    fraction before the gate)."""
    connections = record.get("egress")
    if connections is None:
        return []
    unlogged = int(record.get("egress_unlogged", 0))
    if not connections and not unlogged:
        return ["egress: no connections"]
    allowed = sum(1 for c in connections if c.get("allowed"))
    lines = [f"egress: {len(connections) + unlogged} connection(s), {allowed} allowed, "
             f"{len(connections) - allowed} denied" + (f", {unlogged} more not logged"
                                                       if unlogged else "")]
    for c in connections:
        where = "?" if c.get("host") is None else f"{_bracketed(str(c['host']))}:{c.get('port')}"
        verdict = "allowed" if c.get("allowed") else "denied "
        line = (f"  {verdict} {where}  up {c.get('bytes_up', 0)} B  down "
                f"{c.get('bytes_down', 0)} B  {duration_text(c.get('duration', 0))}")
        if c.get("reason"):
            line += f"  ({c['reason']})"
        lines.append(terminal_safe(line, single_line=True))
    return lines

