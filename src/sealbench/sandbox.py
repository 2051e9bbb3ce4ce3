"""The bubblewrap launcher (docs/isolation.md).

The solver is untrusted code. Its file system is built from an allow-list — the system
directories a toolchain needs, the world-readable part of /etc, the solver's own files, paths
exposed explicitly, the workspace — so everything else on the host (other checkouts and copies
of the oracles, other ledgers) is simply absent. It runs as an unprivileged uid in its own user
namespace with no capabilities, with the kernel's write surfaces under /proc read-only and no
network. Inside what the allow-list admits, the protocol directory, the ledger and the like are
hidden again (a solver kept beside its ledger must not find it in its own directory).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import queue
import secrets
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from sealbench.errors import InfrastructureError, Refused

_T = TypeVar("_T")
SandboxKind = Literal["bwrap", "none"]
INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: apt-get install -y bubblewrap)"
TMPFS_BYTES = 256 * 1024 * 1024  # the solver's private /tmp and /dev/shm live in memory
CGROUP_BASES = (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup"))
MEMORY_BASES = (Path("/sys/fs/cgroup/memory"), Path("/sys/fs/cgroup"))
# uid and gid of the solver inside its user namespace: `nobody`, never 0
SANDBOX_UID = 65534
# Each gets a fresh, empty tmpfs in the sandbox (the sandbox's root is itself an empty tmpfs, so
# these exist whatever the host has).
PRIVATE_DIRS = (Path("/tmp"), Path("/var/tmp"), Path("/run"), Path("/dev/shm"))
# What a toolchain needs of the host, read-only; a symlink (merged /usr) is recreated as one.
SYSTEM_DIRS = (Path("/usr"), Path("/bin"), Path("/sbin"), Path("/lib"), Path("/lib32"),
               Path("/lib64"), Path("/libx32"))
ETC = Path("/etc")


@dataclass(frozen=True)
class HostLayout:
    """What the allow-list takes from this host: the system directories (path, symlink target
    or None for a directory) and the /etc entries that only their owner may read."""

    system: tuple[tuple[Path, str | None], ...]
    etc_restricted: tuple[Path, ...] = ()


@functools.cache
def host_layout() -> HostLayout:
    """This host's layout, looked at once per process."""
    system: list[tuple[Path, str | None]] = []
    for path in SYSTEM_DIRS:
        if path.is_symlink():
            system.append((path, os.readlink(path)))
        elif path.is_dir():
            system.append((path, None))
    return HostLayout(tuple(system), etc_restricted(ETC))


def etc_restricted(root: Path) -> tuple[Path, ...]:
    """Entries under root that other users of the host may not read (shadow, gshadow, sudoers,
    ssh host keys, ssl/private...). In its user namespace the solver still acts as the host
    uid that started sealbench, so owner-only files would be readable: they are hidden.
    Empty ones are left alone (nothing to read, and each hiding costs a mount per attempt)."""
    found: list[Path] = []
    for parent, dirs, files in os.walk(root):
        for name in sorted(dirs):
            path = Path(parent) / name
            with contextlib.suppress(OSError):
                mode = path.lstat().st_mode
                if stat.S_ISDIR(mode) and mode & 0o005 != 0o005:
                    dirs.remove(name)  # hidden whole: nothing inside needs a look
                    if any(path.iterdir()):
                        found.append(path)
        for name in files:
            path = Path(parent) / name
            with contextlib.suppress(OSError):
                info = path.lstat()
                if stat.S_ISREG(info.st_mode) and not info.st_mode & 0o004 and info.st_size:
                    found.append(path)
    return tuple(sorted(found))


@dataclass(frozen=True)
class Mounts:
    """What one attempt sees beyond the system: its workspace and side files writable or
    readable, the solver's own files, exposed paths; hidden paths inside any of those."""

    workspace: Path
    readable: tuple[Path, ...] = ()
    writable: tuple[Path, ...] = ()
    hidden: tuple[Path, ...] = ()
    runtime: tuple[Path, ...] = ()  # the solver's own files (interpreter, venv, scripts)
    exposed: tuple[Path, ...] = ()  # `run --expose PATH`: read-only, named by the user
    # the attempt's private HOME, writable; None: HOME is the private /tmp (verifier, probe)
    home: Path | None = None
    # (host path, path inside): the egress proxy's socket under budget.network model-api
    sockets: tuple[tuple[Path, Path], ...] = ()


@dataclass(frozen=True)
class Sandbox:
    """How attempts are confined on this machine."""

    kind: SandboxKind
    bwrap: str | None = None
    network: bool = False
    reason: str | None = None

    def wrap(self, argv: list[str], mounts: Mounts, status_fd: int | None = None,
             block_fd: int | None = None, go_fd: int | None = None) -> list[str]:
        """The command line that runs argv confined to mounts (argv itself without a sandbox).

        status_fd receives bubblewrap's JSON status: an `exit-code` line proves the command
        ran, which is how a harness failure is told apart from the solver's own. With
        block_fd, bubblewrap sets the sandbox up and then waits to read a byte (or end of
        file) from it before it executes argv (sealbench.process.Confined). go_fd, the
        write end of block_fd's pipe, is held by the sandbox itself (`--sync-fd`: by
        bubblewrap while it waits, then by its pid 1, never by argv), so the pipe reaches
        end of file only when the caller lets go: a harness that dies first leaves its
        sandbox waiting, never running argv unwatched.
        """
        if self.kind == "none" or self.bwrap is None:
            return argv
        status = ["--json-status-fd", str(status_fd)] if status_fd is not None else []
        block = ["--block-fd", str(block_fd)] if block_fd is not None else []
        if go_fd is not None:
            block += ["--sync-fd", str(go_fd)]
        return [self.bwrap, *status, *block, *bwrap_args(mounts, network=self.network), "--",
                *argv]


def bwrap_args(mounts: Mounts, *, network: bool, host: HostLayout | None = None) -> list[str]:
    """bubblewrap options. The root is an empty tmpfs; onto it, in this order: the system
    directories, /etc, /proc (read-only), /dev, the private tmpfs, the
    solver's own files and exposed paths, then whatever must stay hidden inside any of those
    (shortest first), then the attempt's own paths (which may lie inside a hidden one)."""
    host = host or host_layout()
    args = [
        "--die-with-parent", "--new-session", "--unshare-user", "--uid", str(SANDBOX_UID),
        "--gid", str(SANDBOX_UID), "--disable-userns", "--unshare-pid", "--unshare-ipc",
        "--unshare-uts", "--unshare-cgroup-try", "--cap-drop", "ALL",
    ]
    if not network:
        args.append("--unshare-net")
    bound: list[Path] = []
    for path, target in host.system:
        if target is None:
            args += ["--ro-bind", str(path), str(path)]
            bound.append(path)
        else:
            args += ["--symlink", target, str(path)]
    # /proc read-only as a whole: every kernel write surface in it (/proc/sys, sysrq-trigger,
    # mtrr, pressure...) at once. bubblewrap covers a few of them only when it can tell they
    # are writable, and /proc/sys reports "not writable" to root while the files in it are;
    # a process whose host uid is 0 may write sysctls without any capability.
    args += ["--ro-bind", str(ETC), str(ETC), "--proc", "/proc", "--remount-ro", "/proc",
             "--dev", "/dev"]
    bound.append(ETC)
    for private in PRIVATE_DIRS:
        args += ["--size", str(TMPFS_BYTES), "--tmpfs", str(private)]
    binds, every_bound = _read_only_binds(tuple(bound), frozenset(
        {*mounts.runtime, *mounts.exposed}))
    args += binds
    # whether each is a directory, a file or gone is looked at for every attempt
    for path in _to_hide(every_bound, mounts.hidden, host.etc_restricted):
        if path.is_dir():
            args += ["--tmpfs", str(path)]
        elif path.exists():
            args += ["--ro-bind", "/dev/null", str(path)]
    args += ["--bind", str(mounts.workspace), str(mounts.workspace)]
    for path in mounts.readable:
        args += ["--ro-bind", str(path), str(path)]
    for path in mounts.writable:
        args += ["--bind", str(path), str(path)]
    if mounts.home is not None:
        args += ["--bind", str(mounts.home), str(mounts.home)]
    for source, inside in mounts.sockets:  # connect() needs no write access to the mount
        args += ["--ro-bind", str(source), str(inside)]
    home = str(mounts.home) if mounts.home is not None else "/tmp"
    args += ["--chdir", str(mounts.workspace), "--setenv", "HOME", home]
    return args


@functools.lru_cache(maxsize=256)
def _read_only_binds(bound: tuple[Path, ...], wanted: frozenset[Path]
                     ) -> tuple[tuple[str, ...], tuple[Path, ...]]:
    """The --ro-bind options for the solver's own files and exposed paths not inside what is
    bound already, shortest first (a directory bound makes what is inside it free), and
    everything bound then. Pure path arithmetic, remembered: the same few sets come back for
    every attempt of a run (bench/bench_overhead.py)."""
    args: list[str] = []
    done = list(bound)
    for path in sorted(wanted, key=lambda p: (len(p.parts), p)):
        if not any(path.is_relative_to(b) for b in done):
            args += ["--ro-bind", str(path), str(path)]
            done.append(path)
    return tuple(args), tuple(done)


@functools.lru_cache(maxsize=256)
def _to_hide(bound: tuple[Path, ...], hidden: tuple[Path, ...],
             restricted: tuple[Path, ...]) -> tuple[Path, ...]:
    """Every spelling of a hidden path inside what is bound, and the restricted /etc entries,
    shortest first; remembered like _read_only_binds (symlinks are resolved once per process
    already, see _resolved)."""
    found = [*_hidden_inside(list(bound), hidden), *(p for p in restricted
                                                      if p.is_relative_to(ETC))]
    return tuple(sorted(set(found), key=lambda p: (len(p.parts), p)))


def _hidden_inside(bound: list[Path], hidden: tuple[Path, ...]) -> list[Path]:
    """Where each hidden path shows up inside what is bound, at every spelling: a bound path
    reached through a symlink (`/home/u/lnk/sub` for `/data/sub`) shows the hidden
    `/data/sub/proto` at `/home/u/lnk/sub/proto`, and that is where it must be covered."""
    aliases = [(b, real) for b in bound if (real := _resolved(b)) != b]
    out: list[Path] = []
    for path in hidden:
        for spelling in {path, _resolved(path)}:
            out += [spelling] if any(spelling.is_relative_to(b) for b in bound) else []
            out += [b / spelling.relative_to(real) for b, real in aliases
                    if spelling.is_relative_to(real)]
    return out


@functools.lru_cache(maxsize=4096)
def _resolved(path: Path) -> Path:
    """`path.resolve()`, remembered: the same few paths are resolved for every attempt, and
    each resolution is a system call per component (the per-attempt overhead is measured by
    bench/bench_overhead.py)."""
    return path.resolve()


class ProbeFailed(Refused):
    """The start-up probe of bubblewrap ended for a reason that says nothing about whether
    bubblewrap works here (a signal, a timeout): falling back to `sandbox: none` on that would
    let a stray Ctrl-C turn a confined run into an unconfined one."""


@functools.cache
def probe_bwrap(executable: str) -> str | None:
    """Start a real sandbox once, with the options attempts use; None when it works, else why
    bubblewrap is not usable here (its own error: kernel, permissions, user namespaces...).

    The probe runs in its own session, so a Ctrl-C at the terminal does not reach it. Any
    other ending (killed by a signal, timed out) raises ProbeFailed: only bubblewrap's own
    refusal may lead to `sandbox: none`. Exceptions are not cached: the next call probes again.
    """
    with tempfile.TemporaryDirectory(prefix="sealbench-probe-") as work:
        argv = [executable, *bwrap_args(Mounts(workspace=Path(work)), network=False), "--",
                "true"]
        try:
            done = subprocess.run(argv, capture_output=True, timeout=30, check=False,
                                  start_new_session=True, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise ProbeFailed(f"the bubblewrap probe ({executable}) did not finish within "
                              "30 s; not falling back to running without a sandbox") from None
        except OSError as exc:
            return f"bubblewrap could not start: {exc}"
    if done.returncode < 0:
        raise ProbeFailed(f"the bubblewrap probe ({executable}) was killed by signal "
                          f"{signal.Signals(-done.returncode).name}; not falling back to "
                          "running without a sandbox (run again)")
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip()
        if said.startswith("bwrap:"):
            return f"bubblewrap cannot create a sandbox here: {said}"
        raise ProbeFailed(f"the bubblewrap probe ({executable}) failed with status "
                          f"{done.returncode} without saying why ({said[:200]!r}); not falling "
                          "back to running without a sandbox")
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


# a v1 cage's resident thread (see Resident) is one task of the cage: pids.max is raised by it
RESIDENT_TASKS = 1


class Resident:
    """A harness thread that lives inside one cgroup v1 cage and forks its attempts there.

    Why: every move of a task between cgroups takes the kernel's cgroup_threadgroup_rwsem for
    writing, which, once the lock has been idle for a few tens of milliseconds, waits for a
    whole RCU grace period — 3 to 10 ms, more than any other part of an attempt but bubblewrap
    itself (bench/bench_overhead.py). A thread that stepped into the cage for every fork and
    out again paid that on every attempt; this one steps in once, when the cage is made, and
    stays, so a fork from it starts the attempt inside the cage with no move at all.

    It does nothing but run the `start` callables handed to it (a Popen), one at a time, so
    no other harness work is ever charged to the cage. Being a thread and not the process's
    leader, the kernel never picks the harness when the cage runs out of memory (an OOM scan
    visits thread-group leaders only), nor is its memory charged there (pages go to the
    memory cgroup of the process's leader). `ProcessCage.pids` leaves the harness's own pid
    out (on v1, `cgroup.procs` lists it while the thread is inside), so kill_all never
    reaches the harness. It leaves the cage again before the cage is removed (stop()).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._failed: str | None = None

    def call(self, cage: ProcessCage, start: Callable[[], _T]) -> _T:
        """start() run on the resident thread, inside the cage; its result or its exception."""
        with self._lock:
            if self._thread is None:
                self._begin(cage)
            if self._failed is not None:
                raise InfrastructureError(f"cannot enter the attempt's cgroup: {self._failed}")
            call = _Call(start)
            self._requests.put(call)
            call.done.wait()
        if call.error is not None:
            raise call.error
        return call.value  # type: ignore[no-any-return]

    def _begin(self, cage: ProcessCage) -> None:
        entered = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(cage, entered),
                                        name=f"sealbench-cage-{cage.path.name}", daemon=True)
        self._thread.start()
        entered.wait()

    def _serve(self, cage: ProcessCage, entered: threading.Event) -> None:
        tid = str(threading.get_native_id())
        inside: list[tuple[Path, Path, tuple[Path, ...]]] = []
        try:
            for where, bases, controller in cage.hierarchies():
                home = _thread_home(where, bases, controller)
                (where / "tasks").write_text(tid)
                inside.append((where, home, bases))
        except OSError as exc:
            self._failed = str(exc)
        entered.set()
        try:
            while self._failed is None:
                call = self._requests.get()
                if call is None:
                    break
                try:
                    call.value = call.start()
                except BaseException as exc:  # handed to the caller, raised there
                    call.error = exc
                call.done.set()
        finally:
            _step_out(tid, inside)

    @property
    def failed(self) -> bool:
        """The thread could not enter the cage: the cage is no use (release removes it)."""
        return self._failed is not None

    def stop(self) -> None:
        """Leave the cage and end the thread (before the cage is removed)."""
        with self._lock:
            thread, self._thread = self._thread, None
            if thread is None:
                return
            self._requests.put(None)
            thread.join()
            self._failed = None


def _step_out(tid: str, inside: list[tuple[Path, Path, tuple[Path, ...]]]) -> None:
    """Move a thread back to the cgroups it came from (the hierarchy's root if that fails):
    a cage can only be removed once nothing is inside."""
    for where, home, bases in inside:
        try:
            (home / "tasks").write_text(tid)
        except OSError:
            with contextlib.suppress(OSError):
                (next(b for b in bases if where.is_relative_to(b)) / "tasks").write_text(tid)


@dataclass
class _Call:
    start: Callable[[], Any]
    value: Any = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)


@dataclass(frozen=True)
class ProcessCage:
    """A pids cgroup around one attempt: caps how many processes it may have (a fork bomb
    stops there) and finds every one of them afterwards, even those that escaped with setsid
    when there is no sandbox. Root's RLIMIT_NPROC cannot do this: the kernel exempts uid 0.

    With a memory cgroup beside it (`memory`: a v1 memory hierarchy directory, or the same
    directory on cgroup v2), the attempt's memory is capped too, page cache and tmpfs
    included, and the kernel's OOM kills in it are counted."""

    path: Path
    memory: Path | None = None
    resident: Resident = field(default_factory=Resident, compare=False, repr=False)

    def prefix(self) -> list[str]:
        """Commands that move the attempt into the cgroup before anything of it runs (where
        no harness thread can live in it, see spawn())."""
        if self.thread_attach:
            return []
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.path / "cgroup.procs")]

    @functools.cached_property
    def thread_attach(self) -> bool:
        """cgroup v1 places threads one by one (a `tasks` file): a harness thread can live in
        the cage and fork there (Resident), which saves a shell and a cgroup move per
        attempt. Looked at once: a cgroup's hierarchy does not change under it."""
        return (self.path / "tasks").exists()

    def hierarchies(self) -> list[tuple[Path, tuple[Path, ...], str]]:
        """The cage's directories, with the bases of their hierarchy and its controller."""
        found: list[tuple[Path, tuple[Path, ...], str]] = [(self.path, CGROUP_BASES, "pids")]
        if self.memory is not None:
            found.append((self.memory, MEMORY_BASES, "memory"))
        return found

    def spawn(self, start: Callable[[], _T]) -> _T:
        """start() (which forks the attempt) run so that the child begins inside the cage:
        on cgroup v1 on the cage's resident thread, on v2 here (prefix() moves the child)."""
        if not self.thread_attach:
            return start()
        return self.resident.call(self, start)

    def limit_memory(self, limit: int) -> None:
        """Cap the attempt's memory at limit bytes (RAM and, where accounted, swap too)."""
        if self.memory is None:
            return
        v1 = (self.memory / "memory.limit_in_bytes").exists()
        files = (["memory.limit_in_bytes", "memory.memsw.limit_in_bytes"] if v1
                 else ["memory.max", "memory.swap.max"])
        files = [f for f in files if (self.memory / f).exists()]
        # v1 wants limit <= memsw limit at every step: one order works when lowering, the
        # other when raising
        for order in (files, files[::-1]):
            try:
                for name in order:
                    (self.memory / name).write_text(str(limit if name != "memory.swap.max"
                                                         else 0))
                return
            except OSError:
                continue
        raise InfrastructureError(f"cannot set the memory limit in {self.memory}")

    @functools.cached_property
    def _oom_file(self) -> Path:
        """Where the cage's OOM kills are counted (v1, else v2), looked at once per cage."""
        assert self.memory is not None
        v1 = self.memory / "memory.oom_control"
        return v1 if v1.exists() else self.memory / "memory.events"

    def oom_kills(self) -> int:
        """How many processes the kernel has killed in this cage for want of memory, ever."""
        if self.memory is None:
            return 0
        try:
            for line in self._oom_file.read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def pids(self) -> list[int]:
        """The processes in the cage, the harness itself left out (on cgroup v1 its resident
        thread is inside, and `cgroup.procs` names a thread's whole process)."""
        own = os.getpid()
        try:  # os-level: read two or three times per attempt, a file object costs double
            fd = os.open(self._procs_file, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return []
        try:
            chunks = [os.read(fd, 65536)]
            while chunks[-1]:
                chunks.append(os.read(fd, 65536))
        except OSError:
            return []
        finally:
            os.close(fd)
        return [pid for p in b"".join(chunks).split() if (pid := int(p)) != own]

    @functools.cached_property
    def _procs_file(self) -> str:
        return str(self.path / "cgroup.procs")

    @functools.cached_property
    def _kill_file(self) -> Path | None:
        """cgroup v2's `cgroup.kill` (kernel 5.14+), looked at once per cage: a cgroup's
        interface files do not come and go."""
        kill_file = self.path / "cgroup.kill"
        return kill_file if kill_file.exists() else None

    def kill_all(self, deadline_sec: float = 5.0) -> bool:
        """SIGKILL everything in the cgroup until it is empty (new forks included); True when
        it is, False when processes were still there at the deadline."""
        end = time.monotonic() + deadline_sec
        kill_file = self._kill_file
        pause = 0.0005
        while time.monotonic() < end:
            pids = self.pids()
            if not pids:
                return True
            if kill_file is not None:
                with contextlib.suppress(OSError):
                    kill_file.write_text("1")
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(pause)  # exiting processes leave the list within a millisecond or so
            pause = min(pause * 2, 0.02)
        return not self.pids()

    def remove(self) -> None:
        self.resident.stop()
        self.kill_all()
        _remove_quietly(self.path)
        if self.memory is not None:
            _remove_quietly(self.memory)


_parents: dict[str, Path] = {}
_parent_lock = threading.RLock()  # the memory parent asks for the pids parent


def cgroup_parent() -> Path | None:
    """A writable pids cgroup directory for sealbench's attempts, or None where there is none
    (not root, cgroups read-only, no pids controller). Only success is remembered: a passing
    failure must not leave a whole process without a process limit."""
    return _remembered("pids", _make_cgroup_parent)


def memory_parent() -> Path | None:
    """A writable memory cgroup directory for sealbench's attempts, or None where there is
    none: on cgroup v1 under the memory cgroup this process is in (so a container's own limit
    still holds), on v2 the pids parent itself when the memory controller could be delegated
    to it."""
    return _remembered("memory", _make_memory_parent)


def _remembered(kind: str, make: Callable[[], Path | None]) -> Path | None:
    with _parent_lock:
        if kind not in _parents:
            made = make()
            if made is None:
                return None
            _parents[kind] = made
        return _parents[kind]


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
            if base.name != "pids":  # cgroup v2: delegate pids (and memory if we can)
                with contextlib.suppress(OSError):
                    (parent / "cgroup.subtree_control").write_text("+memory")
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


def _make_memory_parent() -> Path | None:
    pids = cgroup_parent()
    if pids is None:
        return None
    if not pids.is_relative_to(CGROUP_BASES[0]):  # cgroup v2: one hierarchy
        return pids if "memory" in _read(pids / "cgroup.subtree_control").split() else None
    v1 = MEMORY_BASES[0]
    if not (v1 / "memory.limit_in_bytes").exists():
        return None
    base = _own_cgroup(v1, "memory")
    _sweep_stale(base)
    parent = base / pids.name
    try:
        parent.mkdir()
    except OSError:
        return None
    atexit.register(_remove_quietly, parent)
    return parent


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _own_cgroup(base: Path, controller: str, who: str = "self") -> Path:
    """The cgroup of `controller` that this process (or thread) belongs to, under base."""
    for line in _read(Path(f"/proc/{who}/cgroup")).splitlines():
        _, controllers, where = line.split(":", 2)
        if controller in controllers.split(","):
            return base / where.lstrip("/")
    return base


def _thread_home(cage: Path, bases: tuple[Path, ...], controller: str) -> Path:
    """The cgroup the calling thread belongs to now (in the hierarchy the cage is in)."""
    base = next(b for b in bases if cage.is_relative_to(b))
    return _own_cgroup(base, controller, "thread-self")


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


def limit_pids(cage: Path, max_pids: int) -> None:
    """Let the attempt have max_pids processes, on cgroup v1 on top of the cage's resident
    thread (Resident), which counts as one of the cage's tasks."""
    extra = RESIDENT_TASKS if (cage / "tasks").exists() else 0
    (cage / "pids.max").write_text(str(max_pids + extra))


def new_cage(name: str, max_pids: int) -> ProcessCage | None:
    """A fresh pids cgroup for one attempt, limited to max_pids processes, with a memory
    cgroup beside it where there is one to be had."""
    parent = cgroup_parent()
    if parent is None:
        return None
    path = parent / name
    try:
        path.mkdir()
        limit_pids(path, max_pids)
    except OSError:
        return None
    memory = memory_parent()
    if memory is None:
        return ProcessCage(path)
    if memory == parent:  # cgroup v2: the same directory
        return ProcessCage(path, path if (path / "memory.max").exists() else None)
    try:
        (memory / name).mkdir()
    except OSError:
        return ProcessCage(path)
    return ProcessCage(path, memory / name)


def memory_rlimit_prefix(limit: int) -> list[str]:
    """Where no memory cgroup can be had: commands that set RLIMIT_DATA before the attempt
    starts. RLIMIT_DATA (private writable memory) rather than RLIMIT_AS: runtimes such as Go,
    V8 and the JVM reserve far more address space than they use, and would not start."""
    return ["/bin/sh", "-c", 'ulimit -d "$0" && exec "$@"', str(max(1, limit // 1024))]


class CagePool:
    """Empty cages kept for reuse: creating and removing a cgroup per attempt costs more than
    the sandbox itself. A cage goes back only once kill_all has emptied it."""

    def __init__(self) -> None:
        self._free: list[ProcessCage] = []
        self._lock = threading.Lock()
        self._count = 0
        self._limits: dict[Path, int] = {}  # memory limit each cage has now: writing costs
        self._held = threading.local()  # per thread: cages released inside holding()

    def acquire(self, max_pids: int, max_memory: int | None = None) -> ProcessCage | None:
        """A cage limited to max_pids processes and (where a memory cgroup exists)
        max_memory bytes."""
        with self._lock:
            cage = self._free.pop() if self._free else None
            self._count += 1
            name = f"attempt-{self._count}"
        if cage is None:
            cage = new_cage(f"{name}-{os.getpid()}-{id(self)}", max_pids)
        else:
            with contextlib.suppress(OSError):
                limit_pids(cage.path, max_pids)
        if cage is not None and max_memory is not None \
                and self._limits.get(cage.path) != max_memory:
            try:
                cage.limit_memory(max_memory)
            except InfrastructureError:
                cage.remove()
                raise
            with self._lock:
                self._limits[cage.path] = max_memory
        return cage

    def release(self, cage: ProcessCage) -> None:
        """Empty the cage (kill_all) and give it back; inside holding() on this thread it goes
        back only when the hold ends. A cage that cannot be emptied is removed."""
        if not cage.kill_all() or cage.resident.failed:
            cage.remove()
            return
        held: list[ProcessCage] | None = getattr(self._held, "cages", None)
        if held is not None:
            held.append(cage)
            return
        with self._lock:
            self._free.append(cage)

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """Cages this thread releases meanwhile go back to the pool only when the hold ends.

        Why: what an attempt writes into its workspace on a tmpfs scratch (the default) is
        memory charged to its cage's memory cgroup until the harness removes the workspace,
        after judging it. A cage handed to the next attempt before that would give it the
        last one's files as a head start on its memory limit (an out-of-memory `violation`
        that is not its own). run_attempt holds the cages it used until its workspace is gone.
        """
        outer: list[ProcessCage] | None = getattr(self._held, "cages", None)
        held: list[ProcessCage] = []
        self._held.cages = held
        try:
            yield
        finally:
            self._held.cages = outer
            for cage in held:
                if outer is not None:
                    outer.append(cage)
                    continue
                with self._lock:
                    self._free.append(cage)

    def close(self) -> None:
        with self._lock:
            free, self._free = self._free, []
        for cage in free:
            cage.remove()


def command_files(argv: tuple[str, ...]) -> tuple[Path, ...]:
    """What the solver needs to run beyond the system directories (the sandbox's file system
    is an allow-list): the files its command names, the program found on PATH when it names
    one bare, with their directories, a virtual environment they live in, the interpreter a
    script's `#!` line names (a venv's console script such as `venv/bin/agent` runs
    `venv/bin/python`, which may link to a Python installed outside the system directories,
    e.g. under pyenv), and this package (the reference solvers import it). Hidden paths inside
    them are hidden again after these are bound (see sandbox.bwrap_args). A directory that is
    or holds one of the sandbox's private directories (`/`, `/var`, `/tmp`...) is never bound:
    that would bring the host's back; the file itself is.
    """
    wanted: list[Path] = [Path(__file__).parent.parent]
    program = shutil.which(argv[0]) if argv and "/" not in argv[0] else None
    queue = [*argv, *([program] if program else [])]
    seen: set[str] = set()
    while queue:
        arg = queue.pop(0)
        if arg in seen:
            continue
        seen.add(arg)
        for path in symlink_chain(Path(arg)):  # venv python -> venv python -> ...
            if not path.is_absolute() or not (path.exists() or path.is_symlink()):
                break
            wanted += [path, path.parent]
            if path.parent.name == "bin" and _is_python_prefix(path.parent.parent):
                wanted.append(path.parent.parent)  # an interpreter needs its whole venv
            if not path.is_symlink():
                queue += [i for i in [script_interpreter(path)] if i and not _in_system(i)]
    private = [d.resolve() for d in PRIVATE_DIRS]
    visible: list[Path] = []
    for path in dict.fromkeys(wanted):
        if path.is_symlink() or not path.exists() \
                or any(d.is_relative_to(path.resolve()) for d in private):
            continue  # a symlink cannot be a mount point; its directory is bound instead
        visible.append(path)
    return tuple(visible)


def symlink_chain(path: Path, max_hops: int = 40) -> list[Path]:
    """path and each hop of the symlink chain it starts (lexically normalised, never
    resolved: a venv's `python` must stay the venv's), at most max_hops of them; what must be
    visible in the sandbox for a program to start as itself."""
    chain = [path]
    for _ in range(max_hops):
        try:
            target = os.readlink(chain[-1])
        except OSError:  # not a symlink, or gone
            break
        chain.append(Path(os.path.normpath(chain[-1].parent / target)))
    return chain


def regular_file_head(path: Path, size: int) -> bytes | None:
    """The first size bytes of the regular file at path (a symlink followed), or None for
    anything else or an unreadable file. Never waits: a FIFO is opened non-blocking and not
    read (reading it would wait for a writer for ever, and the run with it)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        return os.read(fd, size) if stat.S_ISREG(os.fstat(fd).st_mode) else None
    except OSError:
        return None
    finally:
        os.close(fd)


def script_interpreter(path: Path) -> str | None:
    """The program a script's `#!` line runs, by absolute path: `#!/opt/venv/bin/python`
    names it; `#!/usr/bin/env python3` names `python3`, found on this host's PATH (the
    solver's PATH is the host's). None for anything that is not a readable `#!` script."""
    head = regular_file_head(path, 512)
    if head is None or not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()
    if not words:
        return None
    if Path(words[0]).name == "env":
        names = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
        return shutil.which(names[0]) if names else None
    return words[0]


def _in_system(program: str) -> bool:
    """A program under the system directories, which every sandbox binds anyway."""
    path = Path(program)
    return any(path.is_relative_to(d) for d in SYSTEM_DIRS)


def _is_python_prefix(directory: Path) -> bool:
    """A virtual environment or a Python installation (whose interpreter in `bin/` needs the
    rest of it) — never just any directory that happens to hold a `bin/` (`~/bin/agent` must
    not bring all of `$HOME` into the sandbox)."""
    return (directory / "pyvenv.cfg").is_file() or any(
        (directory / "lib").glob("python3*"))
