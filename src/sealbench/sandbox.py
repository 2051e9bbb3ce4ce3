"""The bubblewrap launcher (DESIGN.md §6).

The solver is untrusted code. Everything that could help it score without solving — the
protocol directory with its oracles, the ledger with other attempts' diffs, other workspaces —
is hidden, the host is read-only, the network is gone, and as root every capability is dropped
(otherwise the solver can simply unmount whatever hides the oracle).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import secrets
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sealbench.errors import InfrastructureError

SandboxKind = Literal["bwrap", "none"]
INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: apt-get install -y bubblewrap)"
TMPFS_BYTES = 256 * 1024 * 1024  # the solver's private /tmp and /dev/shm live in memory
CGROUP_BASES = (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup"))
# Each gets a fresh, empty tmpfs in the sandbox: temp files of other programs (other attempts'
# workspaces among them) stay out of sight, and so do the unix sockets of host services
# (/run/dbus, /run/docker.sock...), which --unshare-net does not cut off.
PRIVATE_DIRS = (Path("/tmp"), Path("/var/tmp"), Path("/run"), Path("/dev/shm"))


def private_dirs() -> tuple[Path, ...]:
    """The PRIVATE_DIRS that exist here as real directories (a /var/run symlink is covered by
    its target)."""
    return tuple(d for d in PRIVATE_DIRS if d.is_dir() and not d.is_symlink())


def is_private(path: Path) -> bool:
    """True when the sandbox would hide this host path behind one of its private tmpfs."""
    resolved = path.resolve()
    return any(resolved.is_relative_to(d.resolve()) for d in private_dirs())


@dataclass(frozen=True)
class Mounts:
    """What one attempt sees: its workspace and side files writable or readable, the rest hidden."""

    workspace: Path
    readable: tuple[Path, ...] = ()
    writable: tuple[Path, ...] = ()
    hidden: tuple[Path, ...] = ()
    runtime: tuple[Path, ...] = ()  # the solver's own files that a private tmpfs would hide


@dataclass(frozen=True)
class Sandbox:
    """How attempts are confined on this machine."""

    kind: SandboxKind
    bwrap: str | None = None
    network: bool = False
    reason: str | None = None

    def wrap(self, argv: list[str], mounts: Mounts, status_fd: int | None = None) -> list[str]:
        """The command line that runs argv confined to mounts (argv itself without a sandbox).

        status_fd receives bubblewrap's JSON status: an `exit-code` line proves the command
        ran, which is how a harness failure is told apart from the solver's own.
        """
        if self.kind == "none" or self.bwrap is None:
            return argv
        status = ["--json-status-fd", str(status_fd)] if status_fd is not None else []
        return [self.bwrap, *status, *bwrap_args(mounts, network=self.network), "--", *argv]


def bwrap_args(mounts: Mounts, *, network: bool) -> list[str]:
    """bubblewrap options. Order matters: private tmpfs, then the solver's runtime files put
    back, then whatever must stay hidden (even inside those), then the attempt's own paths."""
    args = [
        "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc",
        "--unshare-uts", "--unshare-cgroup-try", "--cap-drop", "ALL",
        "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
    ]
    for private in private_dirs():
        args += ["--size", str(TMPFS_BYTES), "--tmpfs", str(private)]
    if not network:
        args.append("--unshare-net")
    for path in mounts.runtime:
        args += ["--ro-bind", str(path), str(path)]
    for path in sorted(set(mounts.hidden), key=lambda p: len(p.parts)):
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


def sandbox_ran(status: bytes) -> bool:
    """True when bubblewrap reported the sandboxed command's exit code: the sandbox was set up
    and the command ran. A `child-pid` alone is not enough: bwrap reports it before setup,
    which can still fail (a mount it cannot make)."""
    return b'"exit-code"' in status


# --------------------------------------------------------------------------- process limits


@dataclass(frozen=True)
class ProcessCage:
    """A pids cgroup around one attempt: caps how many processes it may have (a fork bomb
    stops there) and finds every one of them afterwards, even those that escaped with setsid
    when there is no sandbox. Root's RLIMIT_NPROC cannot do this: the kernel exempts uid 0."""

    path: Path

    def prefix(self) -> list[str]:
        """Commands that move the attempt into the cgroup before anything of it runs (where
        the spawning thread cannot join it itself, see spawning())."""
        if self.thread_attach:
            return []
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.path / "cgroup.procs")]

    @property
    def thread_attach(self) -> bool:
        """cgroup v1 places threads one by one (a `tasks` file): the harness thread can step
        into the cage just for the fork, which saves a shell per attempt."""
        return (self.path / "tasks").exists()

    @contextlib.contextmanager
    def spawning(self) -> Iterator[None]:
        """Hold the calling thread inside the cage while it forks the attempt, so the child
        starts there; the thread steps back out before anything can be killed."""
        if not self.thread_attach:
            yield
            return
        tid = str(threading.get_native_id())
        try:
            home = _thread_home(self.path)
            (self.path / "tasks").write_text(tid)
        except OSError as exc:
            raise InfrastructureError(f"cannot enter the attempt's cgroup: {exc}") from exc
        try:
            yield
        finally:
            try:
                (home / "tasks").write_text(tid)
            except OSError:  # never stay inside: kill_all would reach the harness itself
                (next(b for b in CGROUP_BASES if self.path.is_relative_to(b)) / "tasks") \
                    .write_text(tid)

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def kill_all(self, deadline_sec: float = 5.0) -> None:
        """SIGKILL everything in the cgroup until it is empty (new forks included)."""
        end = time.monotonic() + deadline_sec
        kill_file = self.path / "cgroup.kill"
        pause = 0.0005
        while time.monotonic() < end:
            pids = self.pids()
            if not pids:
                return
            if kill_file.exists():
                with contextlib.suppress(OSError):
                    kill_file.write_text("1")
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(pause)  # exiting processes leave the list within a millisecond or so
            pause = min(pause * 2, 0.02)

    def remove(self) -> None:
        self.kill_all()
        with contextlib.suppress(OSError):
            self.path.rmdir()


_parent: Path | None = None
_parent_lock = threading.Lock()


def cgroup_parent() -> Path | None:
    """A writable pids cgroup directory for sealbench's attempts, or None where there is none
    (not root, cgroups read-only, no pids controller). Only success is remembered: a passing
    failure must not leave a whole process without a process limit."""
    global _parent
    with _parent_lock:
        if _parent is None:
            _parent = _make_cgroup_parent()
        return _parent


def _make_cgroup_parent() -> Path | None:
    # pids wrap (pid_max is often 32768): a random part keeps a new process's cgroup apart
    # from a dead namesake that another process may be sweeping at this very moment
    name = f"sealbench-{os.getpid()}-{secrets.token_hex(4)}"
    for base in CGROUP_BASES:
        if base.name != "pids" and not (base / "cgroup.controllers").exists():
            continue  # neither a v1 pids hierarchy nor a cgroup2 root (e.g. a tmpfs)
        _sweep_stale(base)
        parent = base / name
        try:
            parent.mkdir()
            if base.name != "pids":  # cgroup v2: delegate pids to our children
                (parent / "cgroup.subtree_control").write_text("+pids")
            probe = parent / "probe"
            probe.mkdir()
            usable = (probe / "pids.max").exists()
            probe.rmdir()
        except OSError:
            _remove_quietly(parent)
            continue
        if usable:
            atexit.register(_remove_quietly, parent)
            return parent
        _remove_quietly(parent)
    return None


def _thread_home(cage: Path) -> Path:
    """The pids cgroup the calling thread belongs to now (in the hierarchy the cage is in)."""
    base = next(b for b in CGROUP_BASES if cage.is_relative_to(b))
    for line in Path("/proc/thread-self/cgroup").read_text().splitlines():
        _, controllers, where = line.split(":", 2)
        if "pids" in controllers.split(","):
            return base / where.lstrip("/")
    return base


def _sweep_stale(base: Path) -> None:
    """Remove cgroups left by sealbench processes that died without cleaning up (SIGKILL)."""
    with contextlib.suppress(OSError):
        for stale in base.glob("sealbench-*"):
            pid = stale.name.split("-")[1]
            if not pid.isdigit() or Path(f"/proc/{pid}").exists():
                continue
            for child in stale.iterdir():
                if child.is_dir():
                    ProcessCage(child).remove()
            _remove_quietly(stale)


def _remove_quietly(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.rmdir()


def new_cage(name: str, max_pids: int) -> ProcessCage | None:
    """A fresh pids cgroup for one attempt, limited to max_pids processes."""
    parent = cgroup_parent()
    if parent is None:
        return None
    path = parent / name
    try:
        path.mkdir()
        (path / "pids.max").write_text(str(max_pids))
    except OSError:
        return None
    return ProcessCage(path)


class CagePool:
    """Empty cages kept for reuse: creating and removing a cgroup per attempt costs more than
    the sandbox itself. A cage goes back only once kill_all has emptied it."""

    def __init__(self) -> None:
        self._free: list[ProcessCage] = []
        self._lock = threading.Lock()
        self._count = 0

    def acquire(self, max_pids: int) -> ProcessCage | None:
        with self._lock:
            cage = self._free.pop() if self._free else None
            self._count += 1
            name = f"attempt-{self._count}"
        if cage is None:
            return new_cage(f"{name}-{os.getpid()}-{id(self)}", max_pids)
        with contextlib.suppress(OSError):
            (cage.path / "pids.max").write_text(str(max_pids))
        return cage

    def release(self, cage: ProcessCage) -> None:
        cage.kill_all()
        if cage.pids():
            cage.remove()
            return
        with self._lock:
            self._free.append(cage)

    def close(self) -> None:
        with self._lock:
            free, self._free = self._free, []
        for cage in free:
            cage.remove()
