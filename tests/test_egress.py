"""The egress proxy of `budget.network: model-api` (sealbench/egress.py, egress_bridge.py).

Pure pieces (allow-list syntax and matching, request parsing, what `show` prints) are table
tests; the proxy itself is driven over real UNIX sockets against real local servers; the
acceptance test (issue 11, item 1) runs a whole protocol under bubblewrap with a solver that
tries every way out it can think of.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hostile_helpers import hostile_report, hostile_solver, records
from hypothesis import given, settings
from hypothesis import strategies as st
from toy import make_protocol

from sealbench import egress, egress_bridge
from sealbench.egress import (
    AllowedHost,
    BadRequest,
    EgressProxy,
    egress_lines,
    is_allowed,
    parse_allowed_host,
    parse_request,
    proxy_env,
)
from sealbench.errors import BadInput, Refused
from sealbench.ledger import Ledger
from sealbench.runner import RunControl, RunInterrupted, RunOptions, resume, run
from sealbench.sealing import seal

RATE = re.compile(r"\d+(\.\d+)?\s*%|\b0\.\d+\b|\bmean\b|ci95|\binterval\b", re.IGNORECASE)

# --------------------------------------------------------------------------- allow list


@pytest.mark.parametrize(("text", "host", "port"), [
    ("api.openai.com", "api.openai.com", 443),
    ("API.Anthropic.com:8443", "api.anthropic.com", 8443),
    ("api.example.com.", "api.example.com", 443),
    ("127.0.0.1:8080", "127.0.0.1", 8080),
    ("[::1]:8080", "::1", 8080),
    ("[0:0::1]", "::1", 443),
    ("my_host.internal", "my_host.internal", 443),
])
def test_allowed_host_syntax(text: str, host: str, port: int) -> None:
    assert parse_allowed_host(text) == AllowedHost(host, port)


@pytest.mark.parametrize(("text", "why"), [
    ("", "HOST or HOST:PORT"),
    (" api.openai.com", "without spaces"),
    ("*.openai.com", "wildcards"),
    ("https://api.openai.com", "not a URL"),
    ("api.openai.com/v1", "not a URL"),
    ("user@api.openai.com", "not a URL"),
    ("::1", "brackets"),
    ("api.openai.com:", "empty port"),
    ("api.openai.com:0", "port 0"),
    ("api.openai.com:70000", "bad port"),
    ("api.openai.com:https", "bad port"),
    ("-bad-.example", "neither a host name"),
    ("exa mple.com", "neither a host name"),
    (":443", "names no host"),
])
def test_allowed_host_refusals(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_allowed_host(text)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80))
def test_any_allow_host_text_is_a_host_or_a_value_error(text: str) -> None:
    """What --allow-host is given becomes one line of bad input, never a traceback; and what
    it accepts is printed back in a form it accepts again, unchanged."""
    try:
        host = parse_allowed_host(text)
    except ValueError as exc:
        assert str(exc)
        return
    assert parse_allowed_host(str(host)) == host and 0 < host.port < 65536


ALLOWED = (AllowedHost("api.openai.com", 443), AllowedHost("127.0.0.1", 8080),
           AllowedHost("::1", 9000))


@pytest.mark.parametrize(("host", "port", "admitted"), [
    ("api.openai.com", 443, True),
    ("API.OPENAI.COM", 443, True),
    ("api.openai.com.", 443, True),
    ("api.openai.com", 80, False),
    ("openai.com", 443, False),
    ("evil.api.openai.com", 443, False),
    ("127.0.0.1", 8080, True),
    ("127.1", 8080, False),  # another spelling of the address is not the name allowed
    ("localhost", 8080, False),
    ("0:0::1", 9000, True),
    ("::1", 443, False),
])
def test_allow_list_matching(host: str, port: int, admitted: bool) -> None:
    assert is_allowed(host, port, ALLOWED) is admitted


# --------------------------------------------------------------------------- requests


@pytest.mark.parametrize(("head", "method", "host", "port", "forwarded"), [
    (b"CONNECT api.openai.com:443 HTTP/1.1\r\nHost: api.openai.com:443\r\n",
     "CONNECT", "api.openai.com", 443, b""),
    (b"CONNECT [::1]:8443 HTTP/1.0\r\n", "CONNECT", "::1", 8443, b""),
    (b"GET http://127.0.0.1:8080/v1/x?a=1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n"
     b"Accept: */*\r\n",
     "GET", "127.0.0.1", 8080,
     b"GET /v1/x?a=1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nAccept: */*\r\nConnection: close"
     b"\r\n\r\n"),
    # hop-by-hop headers and those Connection names are dropped; Host is the target's
    (b"POST http://Example.COM/api HTTP/1.1\r\nHost: other.example\r\nConnection: keep-alive, "
     b"X-Secret\r\nX-Secret: 1\r\nProxy-Authorization: Basic abc\r\nKeep-Alive: 5\r\n"
     b"Content-Length: 2\r\n",
     "POST", "example.com", 80,
     b"POST /api HTTP/1.1\r\nHost: example.com\r\nContent-Length: 2\r\nConnection: close"
     b"\r\n\r\n"),
    (b"GET http://h.example HTTP/1.0\r\n", "GET", "h.example", 80,
     b"GET / HTTP/1.0\r\nHost: h.example\r\nConnection: close\r\n\r\n"),
])
def test_requests_are_parsed_and_rewritten(head: bytes, method: str, host: str, port: int,
                                           forwarded: bytes) -> None:
    request = parse_request(head)
    assert (request.method, request.host, request.port, request.head) == (
        method, host, port, forwarded)
    assert request.tunnel is (method == "CONNECT")


@pytest.mark.parametrize(("head", "why"), [
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", "malformed request line"),
    (b"GET /v1/models HTTP/1.1\r\nHost: api.openai.com\r\n", "not an absolute http://"),
    (b"GET https://api.openai.com/ HTTP/1.1\r\n", "not an absolute http://"),
    (b"CONNECT api.openai.com HTTP/1.1\r\n", "must be host:port"),
    (b"CONNECT api.openai.com:99999 HTTP/1.1\r\n", "bad CONNECT target"),
    (b"GET http://u:p@api.openai.com/ HTTP/1.1\r\n", "credentials"),
    (b"GET http://h.example/ HTTP/2\r\n", "malformed request line"),
    (b"GET  http://h.example/ HTTP/1.1\r\n", "malformed request line"),
    (b"GET http://h.example/ HTTP/1.1\r\nBad Header: x\r\n", "malformed header"),
    (b"GET http://h.example/ HTTP/1.1\r\nA: b\r\n folded\r\n", "malformed header"),
    (b"GET http://h.example/ HTTP/1.1\r\n folded\r\nA: b\r\n", "malformed header"),
])
def test_malformed_requests_are_400(head: bytes, why: str) -> None:
    with pytest.raises(BadRequest, match=why) as caught:
        parse_request(head)
    assert caught.value.status == 400


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=300),
                 st.builds(lambda method, target, rest: f"{method} {target} HTTP/1.1\r\n"
                           .encode() + rest,
                           st.sampled_from(["CONNECT", "GET", "POST", "G\x00T"]),
                           st.text(max_size=60), st.binary(max_size=120))))
def test_whatever_a_client_sends_is_a_request_or_a_400(head: bytes) -> None:
    """Parsing never fails any other way: the proxy answers everything."""
    try:
        request = parse_request(head)
    except BadRequest as bad:
        assert bad.status == 400 and bad.reason
        return
    assert request.port > 0 and request.host
    assert request.tunnel or request.head.endswith(b"Connection: close\r\n\r\n")


def test_proxy_variables_point_at_the_bridge_and_bypass_nothing() -> None:
    env = proxy_env(3128)
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY"):
        assert env[name] == env[name.lower()] == "http://127.0.0.1:3128"
    assert env["NO_PROXY"] == env["no_proxy"] == ""


# --------------------------------------------------------------------------- show


@pytest.mark.parametrize(("record", "lines"), [
    ({}, []),
    ({"egress": []}, ["egress: no connections"]),
    ({"egress": [{"host": "127.0.0.1", "port": 8080, "allowed": True, "bytes_up": 120,
                  "bytes_down": 3400, "duration": 0.25, "reason": None},
                 {"host": "::1", "port": 9, "allowed": False, "bytes_up": 0, "bytes_down": 0,
                  "duration": 0.001, "reason": "403: not allowed"},
                 {"host": None, "port": None, "allowed": False, "bytes_up": 0,
                  "bytes_down": 0, "duration": 0, "reason": "400: malformed\x1b[2J"}],
      "egress_unlogged": 5},
     ["egress: 8 connection(s), 1 allowed, 2 denied, 5 more not logged",
      "  allowed 127.0.0.1:8080  up 120 B  down 3400 B  250 ms",
      "  denied  [::1]:9  up 0 B  down 0 B  1 ms  (403: not allowed)",
      "  denied  ?  up 0 B  down 0 B  0 ms  (400: malformed\\x1b[2J)"]),
])
def test_egress_lines(record: dict[str, Any], lines: list[str]) -> None:
    assert egress_lines(record) == lines


@pytest.mark.parametrize("duration", [0, 0.001, 0.25, 0.9999, 1.5, 250.0])
def test_egress_durations_never_read_as_a_fraction(duration: float) -> None:
    """Attack (no rate before the gate): durations were printed as `0.25 s`, a fraction the
    no-rate check flags in `show` of a run that has not passed its gate."""
    record = {"egress": [{"host": "api.example.com", "port": 443, "allowed": True,
                          "bytes_up": 1, "bytes_down": 2, "duration": duration,
                          "reason": None}]}
    for line in egress_lines(record):
        assert not RATE.search(line), line


# --------------------------------------------------------------------------- the proxy


class _Hello(http.server.BaseHTTPRequestHandler):
    """A local HTTP server that says which server it is and counts what it served."""

    def do_GET(self) -> None:  # the name http.server calls
        self.server.hits += 1  # type: ignore[attr-defined]
        body = f"hello from {self.server.name}\n".encode()  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def servers() -> Iterator[dict[str, http.server.ThreadingHTTPServer]]:
    """Two local HTTP servers, A (to be allowed) and B (not), on the host's 127.0.0.1."""
    made: dict[str, http.server.ThreadingHTTPServer] = {}
    for name in ("A", "B"):
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
        server.name, server.hits = name, 0  # type: ignore[attr-defined]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        made[name] = server
    yield made
    for server in made.values():
        server.shutdown()
        server.server_close()


def _port(server: http.server.ThreadingHTTPServer) -> int:
    return int(server.server_address[1])


def _exchange(path: Path, data: bytes, *, half_close: bool = True) -> bytes:
    """Send data to the proxy at path and read until it closes."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(10)
        folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:  # a path past the address limit, reached through its directory
            conn.connect(f"/proc/self/fd/{folder}/{path.name}")
        finally:
            os.close(folder)
        conn.sendall(data)
        if half_close:
            conn.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


@pytest.fixture
def proxy_at(tmp_path: Path, servers: dict[str, http.server.ThreadingHTTPServer]
             ) -> Iterator[EgressProxy]:
    proxy = EgressProxy(tmp_path / "egress.sock",
                        (AllowedHost("127.0.0.1", _port(servers["A"])),))
    with proxy:
        yield proxy


def test_proxy_forwards_allowed_http_and_tunnels_and_logs_each_connection(
        proxy_at: EgressProxy, servers: dict[str, http.server.ThreadingHTTPServer]) -> None:
    a, b = _port(servers["A"]), _port(servers["B"])
    plain = _exchange(proxy_at.path, f"GET http://127.0.0.1:{a}/x HTTP/1.1\r\nHost: x\r\n"
                      "Proxy-Connection: keep-alive\r\n\r\n".encode())
    assert plain.startswith(b"HTTP/1.0 200") and plain.endswith(b"hello from A\n")
    tunnel = _exchange(proxy_at.path, f"CONNECT 127.0.0.1:{a} HTTP/1.1\r\n\r\n"
                       f"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
                       .encode())
    assert tunnel.startswith(egress.TUNNEL_OPEN) and tunnel.endswith(b"hello from A\n")
    denied = _exchange(proxy_at.path, f"CONNECT 127.0.0.1:{b} HTTP/1.1\r\n\r\n".encode())
    assert denied.startswith(b"HTTP/1.1 403 Forbidden")
    assert b"not in the run's allow list" in denied
    assert (servers["A"].hits, servers["B"].hits) == (2, 0)  # type: ignore[attr-defined]
    proxy_at.close()
    log = proxy_at.log.connections
    assert [(c.host, c.port, c.allowed) for c in log] == [
        ("127.0.0.1", a, True), ("127.0.0.1", a, True), ("127.0.0.1", b, False)]
    assert all(c.bytes_up > 0 and c.bytes_down > 0 for c in log[:2])
    assert log[0].bytes_down == len(plain)
    assert log[1].bytes_down == len(tunnel) - len(egress.TUNNEL_OPEN)
    assert (log[2].bytes_up, log[2].bytes_down) == (0, 0)
    assert log[2].reason is not None and log[2].reason.startswith("403")
    assert all(c.duration >= 0 for c in log)


@pytest.mark.parametrize(("sent", "status", "reason"), [
    (b"\x16\x03\x01 hello\r\n\r\n", b"400", "malformed request line"),
    (b"GET http://127.0.0.1:1/ HTTP/1.1\r\nX: " + b"y" * 20000 + b"\r\n\r\n", b"431",
     "larger than"),
    (b"GET http://127.0.0.1:1/ HTTP/1.1\r\n" + b"X: y\r\n" * 3000, b"431", "larger than"),
    (b"GET http://127.0.0.1", b"", "closed before sending a complete request"),
])
def test_bad_clients_get_an_answer_and_a_log_line(proxy_at: EgressProxy, sent: bytes,
                                                  status: bytes, reason: str) -> None:
    answer = _exchange(proxy_at.path, sent)
    assert answer[9:12] == status
    proxy_at.close()
    (only,) = proxy_at.log.connections
    assert not only.allowed
    assert only.reason is not None and reason in only.reason


def test_allowed_host_that_refuses_is_a_502_and_the_proxy_goes_on(tmp_path: Path) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        dead = unused.getsockname()[1]
    with EgressProxy(tmp_path / "e.sock", (AllowedHost("127.0.0.1", dead),)) as proxy:
        answer = _exchange(proxy.path, f"CONNECT 127.0.0.1:{dead} HTTP/1.1\r\n\r\n".encode())
        again = _exchange(proxy.path, b"garbage\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 502") and again.startswith(b"HTTP/1.1 400")
    first, second = proxy.log.connections
    assert first.allowed and first.reason is not None and "cannot connect" in first.reason
    assert not second.allowed and second.reason is not None and second.reason.startswith("400")


def test_slow_and_idle_clients_are_cut(tmp_path: Path,
                                       servers: dict[str, http.server.ThreadingHTTPServer]
                                       ) -> None:
    a = _port(servers["A"])
    with EgressProxy(tmp_path / "e.sock", (AllowedHost("127.0.0.1", a),), idle_timeout=0.5,
                     head_timeout=0.5) as proxy:
        silent = _exchange(proxy.path, b"", half_close=False)
        idle = _exchange(proxy.path, f"CONNECT 127.0.0.1:{a} HTTP/1.1\r\n\r\n".encode(),
                         half_close=False)
    assert silent.startswith(b"HTTP/1.1 408")
    assert idle == egress.TUNNEL_OPEN
    reasons = [c.reason for c in proxy.log.connections]
    assert reasons[0] is not None and "no complete request" in reasons[0]
    assert reasons[1] is not None and "without traffic" in reasons[1]


def test_closing_cuts_open_tunnels_and_logs_them(
        proxy_at: EgressProxy, servers: dict[str, http.server.ThreadingHTTPServer]) -> None:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(str(proxy_at.path))
    conn.sendall(f"CONNECT 127.0.0.1:{_port(servers['A'])} HTTP/1.1\r\n\r\n".encode())
    assert conn.recv(100) == egress.TUNNEL_OPEN
    started = time.monotonic()
    proxy_at.close()
    assert time.monotonic() - started < 3
    conn.close()
    (only,) = proxy_at.log.connections
    assert only.allowed and only.reason == "cut when the attempt ended"
    assert not proxy_at.path.exists()


def test_the_log_is_capped_and_the_rest_counted(
        proxy_at: EgressProxy, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(egress, "MAX_LOGGED", 3)
    for _ in range(5):
        _exchange(proxy_at.path, b"nonsense\r\n\r\n")
    proxy_at.close()
    assert (len(proxy_at.log.connections), proxy_at.log.unlogged) == (3, 2)


def test_a_socket_path_past_the_address_limit_still_binds(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    with EgressProxy(deep / "egress.sock", ()) as proxy:
        assert len(os.fsencode(proxy.path)) > 108
        assert _exchange(proxy.path, b"CONNECT x.example:443 HTTP/1.1\r\n\r\n") \
            .startswith(b"HTTP/1.1 403")


# --------------------------------------------------------------------------- the bridge


@pytest.mark.parametrize(("args", "parsed"), [
    (["/run/s.sock", "3128", "--", "python", "a.py"], ("/run/s.sock", 3128, ["python", "a.py"])),
    (["/s", "1", "--", "x"], ("/s", 1, ["x"])),
])
def test_bridge_arguments(args: list[str], parsed: tuple[str, int, list[str]]) -> None:
    assert egress_bridge.parse_args(args) == parsed


@pytest.mark.parametrize("args", [[], ["/s", "3128", "x"], ["/s", "0", "--", "x"],
                                  ["/s", "p", "--", "x"], ["/s", "3128", "--"]])
def test_bridge_refuses_bad_arguments(args: list[str]) -> None:
    with pytest.raises(ValueError):
        egress_bridge.parse_args(args)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize(("child", "status"), [
    ("import sys; sys.exit(3)", 3),
    ("print('out'); import sys; sys.exit(0)", 0),
    ("import os, signal; os.kill(os.getpid(), signal.SIGTERM)", -signal.SIGTERM),
])
def test_bridge_ends_the_way_its_solver_ends(tmp_path: Path, child: str, status: int) -> None:
    """The bridge runs here outside any sandbox: a real process, its real exit."""
    done = subprocess.run([sys.executable, "-I", "-S", str(egress.BRIDGE_SCRIPT),
                           str(tmp_path / "none.sock"), str(_free_port()), "--",
                           sys.executable, "-c", child], capture_output=True, timeout=30)
    assert done.returncode == status
    assert done.stderr == b""
    assert done.stdout == (b"out\n" if "print" in child else b"")


# --------------------------------------------------------------------------- whole runs

MODEL_API = "  network: model-api\n"

# Every attempt (controls too, before the toy solver acts) fetches A through the proxy; on
# toy-001 the solver then tries every other way out and reports what happened.
PROBE_ALL = r'''
import urllib.request
with urllib.request.urlopen(f"http://127.0.0.1:{CFG['a']}/via-proxy", timeout=10) as page:
    FETCHED = page.read().decode()
'''

ESCAPES = r'''
if TASK == "toy-001":
    import socket, urllib.error
    seen = {"fetched": FETCHED, "env": {k: os.environ.get(k) for k in
                                        ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY")}}
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{CFG['b']}/", timeout=10)
        seen["b_via_proxy"] = "reached"
    except urllib.error.HTTPError as exc:
        seen["b_via_proxy"] = exc.code
    with socket.create_connection(("127.0.0.1", 3128), timeout=10) as tunnel:
        tunnel.sendall(f"CONNECT 127.0.0.1:{CFG['a']} HTTP/1.1\r\n\r\n".encode())
        opened = tunnel.recv(200)
        tunnel.sendall(b"GET /tunnel HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        got = b""
        while chunk := tunnel.recv(65536):
            got += chunk
        seen["tunnel"] = [opened.decode(), got.decode().splitlines()[-1]]
    for name, target in (("direct_a", CFG["a"]), ("direct_b", CFG["b"])):
        try:
            socket.create_connection(("127.0.0.1", target), timeout=3).close()
            seen[name] = "connected"
        except OSError as exc:
            seen[name] = type(exc).__name__
    try:
        socket.getaddrinfo("example.com", 443)
        seen["dns"] = "resolved"
    except OSError as exc:
        seen["dns"] = type(exc).__name__
    for name, address in (("unix_path", CFG["unix"]), ("unix_abstract", "\0" + CFG["abstract"])):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            try:
                conn.connect(address)
                seen[name] = "connected"
            except OSError as exc:
                seen[name] = type(exc).__name__
    report(**seen)
'''


def _model_api_toy(base: Path) -> tuple[Path, Ledger]:
    proto = make_protocol(base / "proto", n=3, min_n=3)
    shutil.rmtree(base / ".scratch-proto")
    yaml = proto / "protocol.yaml"
    yaml.write_text(yaml.read_text().replace("  max_files_touched: 3\n",
                                             "  max_files_touched: 3\n" + MODEL_API))
    ledger = Ledger(base / "ledger" / "ledger.sqlite")
    seal(proto, ledger=ledger)
    return proto, ledger


@pytest.fixture
def base() -> Iterator[Path]:
    """Protocol, ledger and solver outside the host's /tmp (see tests/test_hostile.py)."""
    path = Path(tempfile.mkdtemp(prefix="sealbench-egress-", dir="/var/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


class _UnixListener:
    """A listening AF_UNIX socket on the host (a path or an abstract name) that counts."""

    def __init__(self, address: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(address)
        self.sock.listen(4)
        self.sock.settimeout(0.05)
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


@pytest.mark.sandbox
@pytest.mark.slow
def test_model_api_admits_the_allowed_host_and_nothing_else(
        base: Path, servers: dict[str, http.server.ThreadingHTTPServer], cli: Any) -> None:
    """Issue 11, acceptance 1: through the proxy A is reached; B (through it or directly), A
    directly, DNS, a host unix socket by path and an abstract one are all unreachable; the
    attempt that tried goes on to pass; every attempt's connections are in the ledger and in
    `show`."""
    proto, ledger = _model_api_toy(base)
    a, b = _port(servers["A"]), _port(servers["B"])
    unix_dir = Path(tempfile.mkdtemp(prefix="sealbench-egress-sock-", dir="/srv"))
    abstract = f"sealbench-egress-{uuid.uuid4().hex}"
    listeners = [_UnixListener(str(unix_dir / "host.sock")), _UnixListener("\0" + abstract)]
    try:
        command = hostile_solver(base / "agent", before=PROBE_ALL, after=ESCAPES, a=a, b=b,
                                 unix=str(unix_dir / "host.sock"), abstract=abstract)
        result = run(proto, command, ledger=ledger,
                     options=RunOptions(jobs=2, allow_hosts=(f"127.0.0.1:{a}",)))
        unix_hits = [listener.accepted for listener in listeners]
    finally:
        for listener in listeners:
            listener.close()
        shutil.rmtree(unix_dir, ignore_errors=True)
    rows = {**records(ledger, result.run_id, "null_pack"), **records(ledger, result.run_id)}
    seen = hostile_report(ledger, rows["toy-001"])
    assert seen["fetched"] == "hello from A\n"
    assert seen["env"] == {"HTTPS_PROXY": "http://127.0.0.1:3128",
                           "HTTP_PROXY": "http://127.0.0.1:3128",
                           "ALL_PROXY": "http://127.0.0.1:3128", "NO_PROXY": ""}
    assert seen["b_via_proxy"] == 403
    assert seen["tunnel"] == ["HTTP/1.1 200 Connection established\r\n\r\n", "hello from A"]
    assert seen["direct_a"] == seen["direct_b"] == "ConnectionRefusedError"
    assert seen["dns"] == "gaierror"
    assert seen["unix_path"] == "FileNotFoundError"
    assert seen["unix_abstract"] == "ConnectionRefusedError"
    assert unix_hits == [0, 0]
    assert servers["B"].hits == 0  # type: ignore[attr-defined]
    # one fetch per attempt that ran the probe, plus toy-001's tunnel: nothing else reached A
    assert servers["A"].hits == len(rows) + 1  # type: ignore[attr-defined]
    assert rows["toy-001"]["outcome"] == "pass"
    for task_id, record in rows.items():
        allowed = [(c["host"], c["port"]) for c in record["egress"] if c["allowed"]]
        assert ("127.0.0.1", a) in allowed, (task_id, record["egress"])
    toy = rows["toy-001"]["egress"]
    assert [(c["port"], c["allowed"]) for c in toy] == [(a, True), (b, False), (a, True)]
    assert toy[1]["reason"].startswith("403") and toy[1]["bytes_up"] == 0
    header = ledger.run(result.run_id).options
    assert (header["network"], header["allow_hosts"]) == ("model-api", [f"127.0.0.1:{a}"])
    assert (result.report["network"], result.report["allow_hosts"]) == (
        "model-api", [f"127.0.0.1:{a}"])
    shown = cli("show", result.run_id, "--ledger", ledger.path)
    assert shown.exit_code == 0
    for task_id in rows:
        assert f" {task_id} epoch 0 egress: " in shown.stdout
    assert f"denied  127.0.0.1:{b}" in shown.stdout
    assert f"allowed 127.0.0.1:{a}" in shown.stdout


@pytest.mark.sandbox
@pytest.mark.slow
def test_model_api_without_allowed_hosts_denies_all_and_attempts_go_on(base: Path) -> None:
    proto, ledger = _model_api_toy(base)
    command = hostile_solver(base / "agent", before=r'''
import urllib.request, urllib.error
try:
    urllib.request.urlopen("http://127.0.0.1:9/", timeout=10)
except urllib.error.HTTPError as exc:
    report(code=exc.code)
''')
    warnings: list[str] = []

    def on_event(kind: str, data: dict[str, Any]) -> None:
        if kind == "warning":
            warnings.append(data["message"])

    result = run(proto, command, ledger=ledger, options=RunOptions(jobs=2), on_event=on_event)
    assert any("no --allow-host" in w for w in warnings)
    rows = records(ledger, result.run_id)
    assert all(r["outcome"] == "pass" for r in rows.values())
    assert hostile_report(ledger, rows["toy-000"]) == {"code": 403}
    assert [c["allowed"] for c in rows["toy-000"]["egress"]] == [False]
    assert result.report["allow_hosts"] == []


# --------------------------------------------------------------------------- refusals


def test_allow_host_needs_model_api_and_good_syntax(cli: Any, toy: Path,
                                                    toy_solver: str) -> None:
    cli("seal", toy)
    bad = cli("run", toy, "--solver", toy_solver, "--allow-host", "*.openai.com")
    assert bad.exit_code == 2
    assert bad.stderr.strip() == ("sealbench: --allow-host '*.openai.com': wildcards are not "
                                  "supported; name each host")
    wrong = cli("run", toy, "--solver", toy_solver, "--allow-host", "api.openai.com")
    assert wrong.exit_code == 2
    assert "allowed hosts apply only under 'model-api'" in wrong.stderr
    assert len(wrong.stderr.strip().splitlines()) == 1


def test_model_api_without_bubblewrap_is_refused(base: Path) -> None:
    proto, ledger = _model_api_toy(base)
    with pytest.raises(Refused, match="only bubblewrap can enforce"):
        run(proto, "true", ledger=ledger,
            options=RunOptions(sandbox="none", allow_hosts=("127.0.0.1:1",)))
    assert ledger.runs() == []


def test_api_bad_allow_host_is_bad_input(base: Path) -> None:
    proto, ledger = _model_api_toy(base)
    with pytest.raises(BadInput, match="--allow-host 'a b'"):
        run(proto, "true", ledger=ledger, options=RunOptions(allow_hosts=("a b",)))


@pytest.mark.sandbox
def test_resume_keeps_the_allow_list(base: Path) -> None:
    proto, ledger = _model_api_toy(base)
    control = RunControl()
    control.stop.set()  # no attempt starts: the run is recorded, then stopped
    with pytest.raises(RunInterrupted):
        run(proto, "true", ledger=ledger, control=control, run_id="r1",
            options=RunOptions(allow_hosts=("127.0.0.1:8080", "api.example.com")))
    header = ledger.run("r1").options
    assert header["allow_hosts"] == ["127.0.0.1:8080", "api.example.com:443"]
    with pytest.raises(Refused, match="began with --allow-host"):
        resume(proto, "true", "r1", ledger=ledger,
               options=RunOptions(allow_hosts=("127.0.0.1:8080",)))
    assert json.dumps(ledger.run("r1").options) == json.dumps(header)


HTTPS_FETCH = r'''
import ssl, urllib.request
context = ssl.create_default_context(cafile=CFG["ca"])
with urllib.request.urlopen(f"https://127.0.0.1:{CFG['port']}/tls", timeout=10,
                            context=context) as page:
    report(https=page.read().decode())
'''


@pytest.mark.sandbox
@pytest.mark.slow
@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl for a certificate")
def test_https_reaches_an_allowed_host_through_a_connect_tunnel(base: Path) -> None:
    """What real agents do: HTTPS with HTTPS_PROXY set, i.e. TLS end to end inside a CONNECT
    tunnel the proxy only counts bytes of."""
    import ssl

    agent = base / "agent"
    agent.mkdir()
    cert, key = agent / "cert.pem", base / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    server.name, server.hits = "TLS", 0  # type: ignore[attr-defined]
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        proto, ledger = _model_api_toy(base)
        port = _port(server)
        command = hostile_solver(agent, before=HTTPS_FETCH, ca=str(cert), port=port)
        result = run(proto, command, ledger=ledger,
                     options=RunOptions(jobs=2, allow_hosts=(f"127.0.0.1:{port}",)))
    finally:
        server.shutdown()
        server.server_close()
    rows = records(ledger, result.run_id)
    assert hostile_report(ledger, rows["toy-000"]) == {"https": "hello from TLS\n"}
    (tunnel,) = rows["toy-000"]["egress"]
    assert (tunnel["host"], tunnel["port"], tunnel["allowed"]) == ("127.0.0.1", port, True)
    assert tunnel["bytes_up"] > 200 and tunnel["bytes_down"] > 500  # handshake and all


def test_connections_past_the_open_limit_get_503(
        proxy_at: EgressProxy, servers: dict[str, http.server.ThreadingHTTPServer],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(egress, "MAX_LIVE", 1)
    first = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    first.connect(str(proxy_at.path))
    first.sendall(f"CONNECT 127.0.0.1:{_port(servers['A'])} HTTP/1.1\r\n\r\n".encode())
    assert first.recv(100) == egress.TUNNEL_OPEN  # one tunnel open: its host socket too
    assert _exchange(proxy_at.path, b"x\r\n\r\n").startswith(b"HTTP/1.1 503")
    first.close()
    time.sleep(0.3)
    assert _exchange(proxy_at.path, b"x\r\n\r\n").startswith(b"HTTP/1.1 400")  # room again
    proxy_at.close()
    assert [c.reason[:3] if c.reason else None for c in proxy_at.log.connections] == [
        None, "503", "400"]
