"""The bubblewrap launcher (DESIGN.md §6).

The solver is untrusted code. Everything that could help it score without solving — the
protocol directory with its oracles, the ledger with other attempts' diffs, other workspaces —
is hidden, the host is read-only, the network is gone, and as root every capability is dropped
(otherwise the solver can simply unmount whatever hides the oracle).
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

SandboxKind = Literal["bwrap", "none"]
INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: apt-get install -y bubblewrap)"


@dataclass(frozen=True)
class Mounts:
    """What one attempt sees: its workspace and side files writable or readable, the rest hidden."""

    workspace: Path
    readable: tuple[Path, ...] = ()
    writable: tuple[Path, ...] = ()
    hidden: tuple[Path, ...] = ()


@dataclass(frozen=True)
class Sandbox:
    """How attempts are confined on this machine."""

    kind: SandboxKind
    bwrap: str | None = None
    network: bool = False
    reason: str | None = None
    extra_hidden: tuple[Path, ...] = field(default_factory=tuple)

    def wrap(self, argv: list[str], mounts: Mounts) -> list[str]:
        """The command line that runs argv confined to mounts (argv itself without a sandbox)."""
        if self.kind == "none" or self.bwrap is None:
            return argv
        return [self.bwrap, *bwrap_args(mounts, network=self.network,
                                        hidden=(*mounts.hidden, *self.extra_hidden)),
                "--", *argv]


def bwrap_args(mounts: Mounts, *, network: bool, hidden: tuple[Path, ...]) -> list[str]:
    """bubblewrap options; order matters: hide first, then bind the attempt's own paths back."""
    args = [
        "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc",
        "--unshare-uts", "--unshare-cgroup-try", "--cap-drop", "ALL",
        "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
        "--tmpfs", "/dev/shm",
    ]
    if not network:
        args.append("--unshare-net")
    for path in sorted(set(hidden), key=lambda p: len(p.parts)):
        if path.is_dir():
            args += ["--tmpfs", str(path)]
        elif path.exists():
            args += ["--ro-bind", "/dev/null", str(path)]
    args += ["--bind", str(mounts.workspace), str(mounts.workspace)]
    for path in mounts.readable:
        args += ["--ro-bind", str(path), str(path)]
    for path in mounts.writable:
        args += ["--bind", str(path), str(path)]
    args += ["--chdir", str(mounts.workspace), "--setenv", "HOME", "/tmp"]
    return args


@functools.cache
def probe_bwrap(executable: str) -> str | None:
    """Start a real sandbox once; None when it works, else why not (kernel, permissions...)."""
    try:
        done = subprocess.run(
            [executable, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
             "--unshare-pid", "--unshare-net", "--die-with-parent", "--new-session",
             "--cap-drop", "ALL", "true"],
            capture_output=True, timeout=30, check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap could not start: {exc}"
    if done.returncode != 0:
        return f"bubblewrap cannot create a sandbox here: {done.stderr.decode().strip()}"
    return None


def detect(*, network: bool = False, want: Literal["auto", "bwrap", "none"] = "auto") -> Sandbox:
    """Pick the sandbox for this machine: bubblewrap when it works, else `none` with a reason."""
    if want == "none":
        return Sandbox("none", reason="disabled with --sandbox none")
    executable = shutil.which("bwrap")
    if executable is None:
        return Sandbox("none", reason=f"bubblewrap (bwrap) is not on PATH; {INSTALL_HINT}")
    problem = probe_bwrap(executable)
    if problem is not None:
        return Sandbox("none", reason=problem)
    return Sandbox("bwrap", bwrap=executable, network=network)
