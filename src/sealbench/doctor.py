"""`sealbench doctor`: does isolation actually hold on this machine? (DESIGN.md §6)

Each property is checked live, with the same launcher and limits real attempts use, against a
throwaway "protocol directory" holding a secret — never by reading configuration.
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

from sealbench.sandbox import INSTALL_HINT, Mounts, Sandbox, cgroup_parent, detect, new_cage
from sealbench.solver import Execution, execute

SECRET = "sealbench-doctor-secret-"


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


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def _run(sandbox: Sandbox, lab: _Lab, argv: list[str], timeout: float = 10) -> Execution:
    mounts = Mounts(workspace=lab.workspace, hidden=(lab.secret_dir,))
    cage = new_cage(f"doctor-{uuid.uuid4().hex[:8]}", 64)
    try:
        return execute(sandbox.wrap(argv, mounts), cwd=lab.workspace,
                       env={"PATH": "/usr/bin:/bin"}, timeout=timeout, output_cap=1 << 20,
                       cage=cage)
    finally:
        if cage is not None:
            cage.remove()


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
    _run(sandbox, lab, _python(code))
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
        server.setblocking(False)  # a completed connection waits in the backlog
        try:
            server.accept()[0].close()
            accepted = True
        except BlockingIOError:
            accepted = False
    held = not accepted and b"connected" not in result.stdout
    return Check("network refused", held,
                 f"a TCP connection to 127.0.0.1:{port} {'succeeded' if not held else 'failed'}")


def _strays_reaped(sandbox: Sandbox, lab: _Lab) -> Check:
    marker = f"9{uuid.uuid4().int % 10**6:06d}.5"
    code = ("import subprocess\n"
            f"subprocess.Popen(['setsid', 'sleep', '{marker}'])\n"
            f"subprocess.Popen(['sh', '-c', '(sleep {marker} &) ; true'])\n")
    _run(sandbox, lab, _python(code))
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


CHECKS: tuple[Callable[[Sandbox, _Lab], Check], ...] = (
    _oracle_hidden, _writes_refused, _network_refused, _strays_reaped, _process_limit,
)


def diagnose(sandbox: Sandbox | None = None) -> tuple[Sandbox, list[Check]]:
    """Run every check; without bubblewrap, say so and how to fix it.

    A sandbox may be passed in to check it instead of this machine's (tests pass a sandbox
    that confines nothing, to prove every check can fail).
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
                   root / "workspace", root / "outside", token)
        for d in (lab.secret_dir, lab.workspace, lab.outside):
            d.mkdir()
        lab.secret_file.write_text(SECRET + token)
        checks += [check(sandbox, lab) for check in CHECKS]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return sandbox, checks
