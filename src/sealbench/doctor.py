"""`sealbench doctor`: does isolation actually hold on this machine? (docs/isolation.md)

Each property is checked live, with the same launcher and limits real attempts use, against a
throwaway "protocol directory" holding a secret — never by reading configuration. Every probe
prints a marker first: a probe that could not even start proves nothing and fails its check.
"""

from __future__ import annotations

import shutil
import socket
import sys
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sealbench.egress import (
    BRIDGE_PORT,
    SANDBOX_SOCKET,
    SOCKET_NAME,
    AllowedHost,
    EgressProxy,
    bridge_argv,
    bridge_files,
    proxy_env,
)
from sealbench.process import Execution, execute
from sealbench.sandbox import (
    INSTALL_HINT,
    Mounts,
    Sandbox,
    cgroup_parent,
    detect,
    memory_rlimit_prefix,
    new_cage,
)
from sealbench.sandbox import command_files as solver_files

SECRET = "sealbench-doctor-secret-"
RAN = "sealbench-doctor-ran"
MEMORY_LIMIT = 128 << 20  # the doctor's attempt limit; it tries to take four times as much


@dataclass(frozen=True)
class Check:
    name: str
    held: bool
    detail: str


@dataclass
class _Lab:
    """A scratch layout: a hidden 'protocol dir' with a secret, and a workspace."""

    root: Path
    secret_dir: Path
    secret_file: Path
    workspace: Path
    outside: Path
    token: str
    copy: Path  # another copy of the secret, elsewhere on the host, named by no option
    limits: bool = True  # False: run without cgroups or rlimits (tests: a check must fail)


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", f"print({RAN!r}, flush=True)\n" + code]


def _run(sandbox: Sandbox, lab: _Lab, argv: list[str], timeout: float = 10, *,
         sockets: tuple[tuple[Path, Path], ...] = (),
         env: dict[str, str] | None = None) -> Execution:
    """argv as an attempt runs: the same mounts (the interpreter bound as a solver's would
    be), a pids cage and the memory limit; with sockets, the egress proxy's bound in and the
    bridge's files visible, as under budget.network model-api."""
    runtime = (*solver_files(tuple(argv[:1])), *(bridge_files() if sockets else ()))
    mounts = Mounts(workspace=lab.workspace, hidden=(lab.secret_dir,), runtime=runtime,
                    sockets=sockets)
    cage = new_cage(f"doctor-{uuid.uuid4().hex[:8]}", 64) if lab.limits else None
    try:
        wrapped = sandbox.wrap(argv, mounts)
        if cage is not None:
            cage.limit_memory(MEMORY_LIMIT)
        if lab.limits and (cage is None or cage.memory is None):
            wrapped = [*memory_rlimit_prefix(MEMORY_LIMIT), *wrapped]
        return execute(wrapped, cwd=lab.workspace, env={"PATH": "/usr/bin:/bin", **(env or {})},
                       timeout=timeout, output_cap=1 << 20, cage=cage)
    finally:
        if cage is not None:
            cage.remove()


def _ran(result: Execution) -> bool:
    return RAN.encode() in result.stdout


def _not_run(name: str, result: Execution) -> Check:
    tail = result.stderr[-300:].decode(errors="replace").strip()
    return Check(name, False, f"the probe did not run, so nothing was shown: {tail}")


def _oracle_hidden(sandbox: Sandbox, lab: _Lab) -> Check:
    code = (
        "import subprocess, glob, os\n"
        "found = ''\n"
        f"subprocess.run(['umount', '-l', {str(lab.secret_dir)!r}], capture_output=True)\n"
        f"subprocess.run(['mount', '-o', 'remount,rw', '/'], capture_output=True)\n"
        f"paths = [{str(lab.secret_file)!r}]"
        f" + glob.glob('/proc/*/root' + {str(lab.secret_file)!r})\n"
        "for p in paths:\n"
        "    try: found += open(p).read()\n"
        "    except OSError: pass\n"
        "print(found)\n"
    )
    result = _run(sandbox, lab, _python(code))
    if not _ran(result):
        return _not_run("oracle hidden", result)
    leaked = lab.token.encode() in result.stdout
    return Check("oracle hidden", not leaked,
                 "the secret was readable (by path, /proc/<pid>/root or after umount)" if leaked
                 else "by path, via /proc/<pid>/root and after umount: not readable")


def _writes_refused(sandbox: Sandbox, lab: _Lab) -> Check:
    targets = [lab.outside / "escaped.txt", lab.secret_dir / "escaped.txt",
               Path.home() / f".sealbench-doctor-{lab.token}.txt",
               Path(tempfile.gettempdir()) / f"sealbench-doctor-{lab.token}.txt"]
    code = "\n".join(f"try: open({str(t)!r}, 'w').write('x')\nexcept OSError: pass"
                     for t in targets)
    result = _run(sandbox, lab, _python(code))
    if not _ran(result):
        return _not_run("writes outside the workspace refused", result)
    written = [t for t in targets if t.exists()]
    for t in written:
        t.unlink()
    return Check("writes outside the workspace refused", not written,
                 f"written on the host: {', '.join(map(str, written))}" if written
                 else "$HOME, the protocol dir, the host's /tmp and /var/tmp stayed untouched")


def _network_refused(sandbox: Sandbox, lab: _Lab) -> Check:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        code = ("import socket\ntry:\n"
                f"    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
                "    print('connected')\n"
                "except OSError as e: print('refused', e)")
        result = _run(sandbox, lab, _python(code))
        if not _ran(result):
            return _not_run("network refused", result)
        server.setblocking(False)  # a completed connection waits in the backlog
        try:
            server.accept()[0].close()
            accepted = True
        except BlockingIOError:
            accepted = False
    held = not accepted and b"connected" not in result.stdout
    return Check("network refused", held,
                 f"a TCP connection to 127.0.0.1:{port} {'succeeded' if not held else 'failed'}")


MODEL_API_PROBE = """
import socket
def via(port):
    try:
        conn = socket.create_connection(('127.0.0.1', BRIDGE), timeout=5)
        conn.sendall(f'CONNECT 127.0.0.1:{port} HTTP/1.1\\r\\n\\r\\n'.encode())
        print('via', port, conn.recv(12).decode(errors='replace'))
    except OSError:
        print('via', port, 'failed')
def direct(port):
    try:
        socket.create_connection(('127.0.0.1', port), timeout=2)
        print('direct', port, 'connected')
    except OSError:
        print('direct', port, 'refused')
via(ALLOWED); via(OTHER); direct(ALLOWED); direct(OTHER)
"""


def _model_api_only_proxy(sandbox: Sandbox, lab: _Lab) -> Check:
    """Under budget.network model-api, with one host listener allowed and another not: the
    allowed one is reached through the proxy only, the other not at all."""
    name = "model-api admits only the proxy"
    with socket.socket() as allowed, socket.socket() as other:
        for server in (allowed, other):
            server.bind(("127.0.0.1", 0))
            server.listen(4)
        a, b = allowed.getsockname()[1], other.getsockname()[1]
        confined = sandbox.kind == "bwrap"  # without a sandbox the bridge would take a host port
        code = (MODEL_API_PROBE.replace("BRIDGE", str(BRIDGE_PORT if confined else 1))
                .replace("ALLOWED", str(a)).replace("OTHER", str(b)))
        side = lab.root / "egress"
        side.mkdir(exist_ok=True)
        with EgressProxy(side / SOCKET_NAME, (AllowedHost("127.0.0.1", a),)) as proxy:
            argv = bridge_argv(_python(code)) if confined else _python(code)
            result = _run(sandbox, lab, argv, sockets=((proxy.path, SANDBOX_SOCKET),),
                          env=proxy_env())
        if not _ran(result):
            return _not_run(name, result)
        other.setblocking(False)
        try:
            other.accept()[0].close()
            reached_other = True
        except BlockingIOError:
            reached_other = False
    said = result.stdout.decode(errors="replace")
    expected = [f"via {a} HTTP/1.1 200", f"via {b} HTTP/1.1 403", f"direct {a} refused",
                f"direct {b} refused"]
    logged = [(c.port, c.allowed) for c in proxy.log.connections]
    held = all(line in said for line in expected) and not reached_other \
        and logged == [(a, True), (b, False)]
    return Check(name, held,
                 f"127.0.0.1:{a} allowed: reached through the proxy only; 127.0.0.1:{b}: "
                 "denied by the proxy, unreachable directly; both logged" if held
                 else f"the probe saw {' / '.join(said.split(chr(10))[1:5])}; the proxy "
                 f"logged {logged}")


def _strays_reaped(sandbox: Sandbox, lab: _Lab) -> Check:
    marker = f"9{uuid.uuid4().int % 10**6:06d}.5"
    code = ("import subprocess\n"
            f"subprocess.Popen(['setsid', 'sleep', '{marker}'])\n"
            f"subprocess.Popen(['sh', '-c', '(sleep {marker} &) ; true'])\n")
    result = _run(sandbox, lab, _python(code))
    if not _ran(result):
        return _not_run("stray processes reaped", result)
    left = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline_has(p, marker)]
    return Check("stray processes reaped", not left,
                 f"{len(left)} process(es) outlived the attempt" if left
                 else "setsid and double-forked children did not outlive the attempt")


def _cmdline_has(proc: Path, marker: str) -> bool:
    try:
        return marker.encode() in (proc / "cmdline").read_bytes()
    except OSError:
        return False


def _process_limit(_sandbox: Sandbox, _lab: _Lab) -> Check:
    parent = cgroup_parent()
    return Check("process limit (pids cgroup)", parent is not None,
                 f"attempts get a pids cgroup under {parent}" if parent
                 else "no writable pids cgroup: fork bombs are bounded only by the timeout "
                      "(run as root on a machine with cgroups)")


def _unprivileged(sandbox: Sandbox, lab: _Lab) -> Check:
    code = ("import os\n"
            "caps = [l.split()[1] for l in open('/proc/self/status') if l.startswith('CapEff')]\n"
            "print('ids', os.getuid(), os.getgid(), int(caps[0], 16))\n")
    result = _run(sandbox, lab, _python(code))
    if not _ran(result):
        return _not_run("unprivileged inside", result)
    line = next((ln for ln in result.stdout.decode().splitlines() if ln.startswith("ids ")), "")
    uid, gid, caps = (int(x) for x in line.split()[1:4]) if line else (0, 0, -1)
    held = uid != 0 and gid != 0 and caps == 0
    return Check("unprivileged inside", held,
                 f"uid {uid}, gid {gid}, effective capabilities {caps:#x}")


def _proc_sys_read_only(sandbox: Sandbox, lab: _Lab) -> Check:
    # writes back the value already there: even where the write goes through, the host's
    # setting is unchanged
    targets = ["/proc/sys/fs/lease-break-time", "/proc/sys/kernel/core_pattern"]
    code = ("import sys\n"
            f"for path in {targets!r}:\n"
            "    try:\n"
            "        value = open(path).read()\n"
            "        with open(path, 'w') as f: f.write(value)\n"
            "        print('WROTE', path)\n"
            "    except OSError as e: print('refused', path, e)\n")
    result = _run(sandbox, lab, _python(code))
    if not _ran(result):
        return _not_run("/proc/sys read-only", result)
    wrote = [ln.split()[1] for ln in result.stdout.decode().splitlines()
             if ln.startswith("WROTE ")]
    return Check("/proc/sys read-only", not wrote,
                 f"written from inside: {', '.join(wrote)}" if wrote
                 else f"writing {' and '.join(targets)} failed")


def _host_sockets_unreachable(sandbox: Sandbox, lab: _Lab) -> Check:
    path = lab.root / "doctor.sock"  # outside the sandbox's private dirs, on purpose
    abstract = f"\0sealbench-doctor-{lab.token}"
    servers = []
    for address in (str(path), abstract):
        server = socket.socket(socket.AF_UNIX)
        server.bind(address)
        server.listen(1)
        server.setblocking(False)
        servers.append(server)
    code = ("import socket\n"
            f"for address in [{str(path)!r}, {abstract!r}]:\n"
            "    s = socket.socket(socket.AF_UNIX)\n"
            "    try: s.connect(address); print('CONNECTED', repr(address))\n"
            "    except OSError as e: print('refused', e)\n")
    try:
        result = _run(sandbox, lab, _python(code))
        accepted = 0
        for server in servers:
            try:
                server.accept()[0].close()
                accepted += 1
            except BlockingIOError:
                pass
    finally:
        for server in servers:
            server.close()
    if not _ran(result):
        return _not_run("host unix sockets unreachable", result)
    held = not accepted and b"CONNECTED" not in result.stdout
    return Check("host unix sockets unreachable", held,
                 f"a socket at {path} and an abstract one were "
                 + ("not reachable" if held else "reachable from inside"))


def _other_copies_absent(sandbox: Sandbox, lab: _Lab) -> Check:
    code = ("import os\n"
            f"try: print(open({str(lab.copy)!r}).read())\n"
            "except OSError as e: print('unreadable', e)\n")
    result = _run(sandbox, lab, _python(code))
    if not _ran(result):
        return _not_run("other copies of the oracles absent", result)
    leaked = lab.token.encode() in result.stdout
    return Check("other copies of the oracles absent", not leaked,
                 f"a copy at {lab.copy}, named by no option, was "
                 + ("readable" if leaked else "not there"))


def _memory_limited(sandbox: Sandbox, lab: _Lab) -> Check:
    code = (f"data = b'x' * {4 * MEMORY_LIMIT}\n"  # filled, so every page is really used
            "print('ALLOCATED', len(data))\n")
    result = _run(sandbox, lab, _python(code), timeout=30)
    if not _ran(result):
        return _not_run("memory limit", result)
    allocated = b"ALLOCATED" in result.stdout
    how = "the cgroup's OOM killer" if result.memory_exceeded else "RLIMIT_DATA"
    return Check("memory limit", not allocated,
                 f"{4 * MEMORY_LIMIT >> 20} MiB under a {MEMORY_LIMIT >> 20} MiB limit: "
                 + ("allocated" if allocated else f"stopped by {how}"))


CHECKS: tuple[Callable[[Sandbox, _Lab], Check], ...] = (
    _oracle_hidden, _writes_refused, _network_refused, _strays_reaped, _process_limit,
    _unprivileged, _proc_sys_read_only, _host_sockets_unreachable, _other_copies_absent,
    _memory_limited, _model_api_only_proxy,
)


def diagnose(sandbox: Sandbox | None = None, *,
             limits: bool = True) -> tuple[Sandbox, list[Check]]:
    """Run every check; without bubblewrap, say so and how to fix it.

    A sandbox may be passed in to check it instead of this machine's, and limits turned off
    (tests pass a sandbox that confines nothing, without limits, to prove every check can
    fail).
    """
    if sandbox is None:
        sandbox = detect()
        if sandbox.kind == "none":
            reason = sandbox.reason or "bubblewrap not found"
            fix = "" if INSTALL_HINT in reason else f"; to fix: {INSTALL_HINT}"
            return sandbox, [Check("bubblewrap available", False, reason + fix)]
        checks = [Check("bubblewrap available", True, f"{sandbox.bwrap} starts a sandbox")]
    else:
        checks = []
    # outside the sandbox's private dirs (/tmp, /var/tmp...) on purpose: there the secret
    # would be hidden by the blanket tmpfs, not by the hiding this check is about
    scratch = Path.home() / ".cache"
    scratch.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="sealbench-doctor-", dir=scratch))
    try:
        token = uuid.uuid4().hex
        lab = _Lab(root, root / "protocol", root / "protocol" / "oracle.patch",
                   root / "workspace", root / "outside", token,
                   root / "elsewhere" / "oracle-copy.patch", limits)
        for d in (lab.secret_dir, lab.workspace, lab.outside, lab.copy.parent):
            d.mkdir()
        lab.secret_file.write_text(SECRET + token)
        lab.copy.write_text(SECRET + token)
        checks += [check(sandbox, lab) for check in CHECKS]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return sandbox, checks
