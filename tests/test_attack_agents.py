"""Attacks on issue 11 by a dishonest solver: the egress proxy, the bridge, HOME and the
environment, under bubblewrap (sealbench/egress.py, egress_bridge.py, solver.py).

Each attack is a hostile solver (tests/hostile_helpers.py) run as a whole protocol: what it saw
comes back through the ledger, and what the harness made of it is the attempt's outcome.
"""

from __future__ import annotations

import http.server
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hostile_helpers import hostile_report, hostile_solver, records
from toy import make_protocol

from sealbench.egress import AllowedHost, EgressProxy
from sealbench.ledger import Ledger
from sealbench.runner import RunOptions, run
from sealbench.sealing import seal

CANARY = "SEALBENCH_ATTACK_CANARY"

# toy-000: read every environment it can find, look around HOME and the socket's directory,
# open a tunnel that never closes and a flood of connections, then solve the task as usual.
# toy-001: kill the bridge (its parent) — the attempt ends, and it is the solver's doing.
PROBE = r'''
import glob, socket
if TASK == "toy-000":
    seen = {}
    for path in glob.glob("/proc/[0-9]*/environ"):
        try:
            seen[path] = open(path, "rb").read().decode(errors="replace")
        except OSError as exc:
            seen[path] = type(exc).__name__
    home = os.environ["HOME"]
    tunnel = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    tunnel.sendall(f"CONNECT 127.0.0.1:{CFG['a']} HTTP/1.1\r\n\r\n".encode())
    opened = tunnel.recv(100).decode(errors="replace")
    flood = []
    for _ in range(300):
        try:
            flood.append(socket.create_connection(("127.0.0.1", 3128), timeout=2))
        except OSError:
            break
    report(environ=seen, home=sorted(os.listdir(home)),
           home_parent=sorted(os.listdir(os.path.dirname(home))),
           run_dir=sorted(os.listdir("/run/sealbench")), tunnel=opened, flood=len(flood))
if TASK == "toy-001":
    import signal
    os.kill(os.getppid(), signal.SIGKILL)
    import time
    time.sleep(30)
'''


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # the name http.server calls
        body = b"hello\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def base() -> Iterator[Path]:
    """Protocol, ledger and solver outside the host's /tmp (see tests/test_hostile.py)."""
    path = Path(tempfile.mkdtemp(prefix="sealbench-attack-", dir="/var/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.sandbox
@pytest.mark.slow
def test_a_dishonest_solver_under_model_api_learns_and_breaks_nothing(
        base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv(CANARY, "host-secret-not-named")
    proto = make_protocol(base / "proto", n=3, min_n=3, timeout=60)
    shutil.rmtree(base / ".scratch-proto")
    yaml = proto / "protocol.yaml"
    yaml.write_text(yaml.read_text().replace("  max_files_touched: 3\n",
                                             "  max_files_touched: 3\n  network: model-api\n"))
    ledger = Ledger(base / "ledger" / "ledger.sqlite")
    seal(proto, ledger=ledger)
    a = int(server.server_address[1])
    try:
        command = hostile_solver(base / "agent", before=PROBE, a=a)
        began = time.monotonic()
        result = run(proto, command, ledger=ledger,
                     options=RunOptions(jobs=2, allow_hosts=(f"127.0.0.1:{a}",)))
        took = time.monotonic() - began
    finally:
        server.shutdown()
        server.server_close()
    rows = records(ledger, result.run_id)
    seen = hostile_report(ledger, rows["toy-000"])
    # no environment in the sandbox holds a host variable that was not named
    assert seen["environ"], seen
    assert not any(CANARY in text for text in seen["environ"].values()), seen["environ"]
    # HOME is private and empty; its parent and /run/sealbench show nothing of other attempts
    assert seen["home"] == []
    assert set(seen["home_parent"]) <= {"home", "side", "workspace"}, seen["home_parent"]
    assert seen["run_dir"] == ["egress.sock"]
    assert seen["tunnel"].startswith("HTTP/1.1 200")
    assert seen["flood"] >= 64  # the bridge accepts; the proxy answers past 64 with 503
    # the open tunnel and the flood ended with the attempt, which still passed
    assert rows["toy-000"]["outcome"] == "pass", rows["toy-000"]["detail"]
    egress = rows["toy-000"]["egress"]
    assert egress[0]["allowed"] and egress[0]["duration"] < 30
    refused = [c for c in egress if str(c["reason"]).startswith("503")]
    assert refused and len(egress) <= 1 + seen["flood"]
    # killing the bridge is the solver's error, never an infrastructure error
    assert rows["toy-001"]["outcome"] == "error", rows["toy-001"]
    every = [r.record for r in ledger.attempts(result.run_id, "null_pack")] + list(rows.values())
    assert all(r["outcome"] != "infrastructure_error" for r in every)
    assert took < 55  # no attempt waited for its 60 s timeout: nothing hung on the proxy
    assert os.environ[CANARY] == "host-secret-not-named"


# --------------------------------------------------------------------------- the proxy alone


@pytest.fixture
def hello() -> Iterator[tuple[int, list[str]]]:
    """A local HTTP/1.1 server that keeps connections alive and notes each request's Host."""
    hosts: list[str] = []

    class _KeepAlive(_Hello):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # the name http.server calls
            hosts.append(self.headers.get("Host", ""))
            super().do_GET()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _KeepAlive)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield int(server.server_address[1]), hosts
    server.shutdown()
    server.server_close()


def _ask(path: Path, data: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(10)
        conn.connect(str(path))
        conn.sendall(data)
        conn.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.parametrize("target", [
    "localhost:{a}", "LOCALHOST.:{a}", "[::ffff:127.0.0.1]:{a}", "[::ffff:7f00:1]:{a}",
    "2130706433:{a}", "0x7f000001:{a}", "127.1:{a}", "0177.0.0.1:{a}", "[::1]:{a}",
    "127.0.0.1:{b}", "127.0.0.2:{a}", "0.0.0.0:{a}", "0:{a}",
])
def test_a_denied_host_spelled_another_way_is_still_denied(
        tmp_path: Path, hello: tuple[int, list[str]], target: str) -> None:
    """Only 127.0.0.1:A is allowed; every other spelling of that machine (or another port)
    is a 403, by CONNECT and by absolute-form plain HTTP, and nothing reaches the server."""
    a, hosts = hello
    where = target.format(a=a, b=a + 1 if a < 65535 else a - 1)
    with EgressProxy(tmp_path / "egress.sock", (AllowedHost("127.0.0.1", a),)) as proxy:
        tunnel = _ask(proxy.path, f"CONNECT {where} HTTP/1.1\r\n\r\n".encode())
        plain = _ask(proxy.path, f"GET http://{where}/ HTTP/1.1\r\nHost: 127.0.0.1:{a}\r\n"
                     "\r\n".encode())
    assert tunnel.startswith(b"HTTP/1.1 403") and plain.startswith(b"HTTP/1.1 403")
    assert hosts == []
    assert [c.allowed for c in proxy.log.connections] == [False, False]


def test_a_pipelined_request_reaches_the_allowed_server_only(
        tmp_path: Path, hello: tuple[int, list[str]]) -> None:
    """A second request behind an allowed plain-HTTP one, naming another Host, goes to the
    allowed address and port only (as anything in a CONNECT tunnel to it would): the proxy
    says `Connection: close` and the server answers the first request only."""
    a, hosts = hello
    with EgressProxy(tmp_path / "egress.sock", (AllowedHost("127.0.0.1", a),)) as proxy:
        answer = _ask(proxy.path, f"GET http://127.0.0.1:{a}/ HTTP/1.1\r\nHost: evil.example\r\n"
                      "\r\nGET http://evil.example/ HTTP/1.1\r\nHost: evil.example\r\n\r\n"
                      .encode())
    assert answer.startswith(b"HTTP/1.1 200") and answer.count(b"HTTP/1.1") == 1
    assert hosts == [f"127.0.0.1:{a}"]
    assert [(c.host, c.port, c.allowed) for c in proxy.log.connections] == [
        ("127.0.0.1", a, True)]


HOLD_TUNNELS = r'''
import http.server, os, resource, socket, sys, tempfile, threading
from pathlib import Path
from sealbench.egress import AllowedHost, EgressProxy

resource.setrlimit(resource.RLIMIT_NOFILE, (100, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
threading.Thread(target=server.serve_forever, daemon=True).start()
port = server.server_address[1]
held = []
with EgressProxy(Path(sys.argv[1]) / "egress.sock", (AllowedHost("127.0.0.1", port),)) as proxy:
    for _ in range(40):  # one solver holding 40 tunnels: 2 descriptors each in the harness
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(str(proxy.path))
        conn.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode())
        conn.recv(100)
        held.append(conn)
    try:  # the harness's own work meanwhile: a file, a directory, a pipe
        with open(os.devnull) as _f:
            os.close(os.pipe()[0])
            tempfile.mkdtemp(dir=sys.argv[1])
        print("harness ok")
    except OSError as exc:
        print(f"harness failed: {exc}")
'''


def test_tunnels_held_open_leave_the_harness_its_descriptors(tmp_path: Path) -> None:
    """Attack (dishonest solver): each tunnel costs the harness two descriptors; under a soft
    limit such as 1024 (here 100), tunnels held open by solvers used up the harness's, and
    its own next file or pipe failed: an infrastructure error the solver caused. The proxy
    raises the soft limit to the hard one (at most 65536) when it starts."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", HOLD_TUNNELS, str(tmp_path)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.stdout.strip() == "harness ok", done.stdout + done.stderr
