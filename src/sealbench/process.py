"""Running one command confined: its own session, a process cage, a timeout, an output cap
(docs/isolation.md).

The solver and the verifier both run through `run_confined`, so a limit that holds for the agent
holds for the code under test when the hidden tests run it.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from sealbench.egress import EgressLog
from sealbench.errors import InfrastructureError
from sealbench.sandbox import (
    CagePool,
    Mounts,
    ProcessCage,
    Sandbox,
    memory_rlimit_prefix,
    sandbox_ran,
)

REAP_GRACE_SEC = 0.5


@dataclass(frozen=True)
class Execution:
    """What running a command produced, before any judgement."""

    returncode: int | None
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    flooded: bool = False
    duration: float = 0.0
    interrupted: bool = False
    memory_exceeded: bool = False
    egress: EgressLog | None = None  # the attempt's connections under network model-api


class AttemptInterrupted(Exception):
    """The user aborted the run while this attempt was running."""


def execute(
    argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float, output_cap: int,
    cage: ProcessCage | None = None, pass_fds: tuple[int, ...] = (),
    abort: threading.Event | None = None,
) -> Execution:
    """Run a command in its own session; kill the whole group on timeout or output flood."""
    started = time.monotonic()
    try:
        spawned = spawn(argv, cwd=cwd, env=env, cage=cage, pass_fds=pass_fds)
    except OSError as exc:
        return Execution(None, b"", f"solver could not start: {exc}".encode(),
                         duration=time.monotonic() - started)
    return supervise(spawned, timeout=timeout, output_cap=output_cap, abort=abort,
                     started=started)


@dataclass(frozen=True)
class Spawned:
    """A command started in its own session (in its cage), its output not read yet."""

    proc: subprocess.Popen[bytes]
    cage: ProcessCage | None
    oom_kills: int  # the cage's count before the command: more after it means it hit its cap


def spawn(argv: list[str], *, cwd: Path, env: dict[str, str], cage: ProcessCage | None = None,
          pass_fds: tuple[int, ...] = ()) -> Spawned:
    """Start argv in a new session, inside `cage` when given; OSError when it cannot start."""
    oom_kills = cage.oom_kills() if cage is not None else 0
    if cage is not None:
        argv = [*cage.prefix(), *argv]

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True, pass_fds=pass_fds,
        )

    proc = cage.spawn(start) if cage is not None else start()
    return Spawned(proc, cage, oom_kills)


def supervise(spawned: Spawned, *, timeout: float, output_cap: int,
              abort: threading.Event | None = None, started: float | None = None) -> Execution:
    """Read a spawned command's output until it ends; kill the whole group (and cage) on
    timeout, output flood or abort. The clock runs from `started` (default: now).

    stdout and stderr are read together with a selector, never with communicate(): a grandchild
    that keeps a pipe open must not hold the harness past the deadline, and output beyond the
    cap is dropped as it arrives so memory stays bounded whatever the solver prints.
    """
    proc, cage = spawned.proc, spawned.cage
    started = time.monotonic() if started is None else started
    assert proc.stdout is not None and proc.stderr is not None
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    buffers: dict[int, bytearray] = {out_fd: bytearray(), err_fd: bytearray()}
    seen = 0
    timed_out = flooded = interrupted = False
    deadline = started + timeout
    exited_at: float | None = None
    emptied = False  # the cage was seen empty once the command had exited
    with selectors.DefaultSelector() as selector:
        for stream in (proc.stdout, proc.stderr):
            os.set_blocking(stream.fileno(), False)
            selector.register(stream.fileno(), selectors.EVENT_READ)
        while selector.get_map():
            now = time.monotonic()
            if now >= deadline:
                timed_out = True
                break
            if abort is not None and abort.is_set():
                interrupted = True
                break
            if exited_at is None and proc.poll() is not None:
                exited_at = now
                emptied = _kill_all(proc.pid, cage)  # leftovers die with it
            if exited_at is not None and now - exited_at > REAP_GRACE_SEC:
                break
            for key, _ in selector.select(min(0.05, deadline - now)):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    selector.unregister(key.fd)
                    continue
                seen += len(chunk)
                room = output_cap - sum(len(b) for b in buffers.values())
                buffers[key.fd] += chunk[: max(room, 0)]
                if seen > output_cap:
                    flooded = True
            if flooded:
                break
    if not emptied:  # an empty cage stays empty: nothing inside is left to fork
        _kill_all(proc.pid, cage)
    returncode = proc.wait()
    proc.stdout.close()
    proc.stderr.close()
    memory_exceeded = cage is not None and cage.oom_kills() > spawned.oom_kills
    return Execution(
        None if timed_out or flooded or interrupted else returncode,
        bytes(buffers[out_fd]),
        bytes(buffers[err_fd]),
        timed_out=timed_out,
        flooded=flooded,
        duration=time.monotonic() - started,
        interrupted=interrupted,
        memory_exceeded=memory_exceeded,
    )


def discard(spawned: Spawned) -> None:
    """End a spawned command that will never be let go: everything it started dies, its
    pipes are closed and it is reaped."""
    _kill_all(spawned.proc.pid, spawned.cage)
    spawned.proc.wait()
    for stream in (spawned.proc.stdout, spawned.proc.stderr):
        if stream is not None:
            stream.close()


def _kill_all(pgid: int, cage: ProcessCage | None) -> bool:
    """Kill the process group, and with a cage every process of the attempt wherever it
    went (setsid, double fork); True when the cage is empty now (False without a cage: a
    process group alone proves nothing about processes that left it)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    return cage is not None and cage.kill_all()


def _read_available(fd: int) -> bytes:
    """Whatever is in a pipe now, without blocking."""
    os.set_blocking(fd, False)
    chunks = []
    with contextlib.suppress(BlockingIOError):
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    return b"".join(chunks)


@dataclass(frozen=True)
class Limits:
    """What one confined command may use."""

    timeout: float
    output_cap: int
    max_processes: int = 512
    max_memory_mb: int | None = None


def run_confined(argv: list[str], *, sandbox: Sandbox, mounts: Mounts, env: dict[str, str],
                 limits: Limits, cages: CagePool | None,
                 abort: threading.Event | None = None) -> Execution:
    """Run argv inside the sandbox, in a process cage, under the limits.

    Raises InfrastructureError when bubblewrap itself did not start the command (its JSON
    status never said so): that is the harness's failure, to be retried, never the command's.
    """
    return start_confined(argv, sandbox=sandbox, mounts=mounts, env=env, limits=limits,
                          cages=cages, abort=abort).run()


def start_confined(argv: list[str], *, sandbox: Sandbox, mounts: Mounts, env: dict[str, str],
                   limits: Limits, cages: CagePool | None,
                   abort: threading.Event | None = None) -> Confined:
    """run_confined in two steps: under bubblewrap the sandbox is started now and set up while
    the caller goes on (laying out the workspace its mounts name), and the command itself
    runs only at Confined.run(); without bubblewrap nothing starts before run()."""
    confined = Confined(argv, sandbox, mounts, env, limits, cages, abort)
    if sandbox.kind == "bwrap":
        confined.launch()
    return confined


class Confined:
    """One confined command, started up to its last step.

    Why: bubblewrap spends most of its start (namespaces, mounts: ~7 of its ~10 ms here,
    bench/bench_overhead.py) before it executes the command. Started with `--block-fd`, it
    does all of that and then waits for one byte on a pipe, so the harness can lay out the
    workspace meanwhile — the mounts bind the directories, not their contents, so files written
    after the start are what the command sees — and run() lets it go. The time limit runs from
    run(). A Confined never let go must be cancel()ed: closing the pipe alone would let the
    command start (bubblewrap reads end-of-file as the go-ahead), so cancel kills first.
    """

    def __init__(self, argv: list[str], sandbox: Sandbox, mounts: Mounts, env: dict[str, str],
                 limits: Limits, cages: CagePool | None, abort: threading.Event | None) -> None:
        self.argv, self.sandbox, self.mounts, self.env = argv, sandbox, mounts, env
        self.limits, self.cages, self.abort = limits, cages, abort
        memory = limits.max_memory_mb * 1024 * 1024 if limits.max_memory_mb else None
        self.cage = cages.acquire(limits.max_processes, memory) if cages else None
        self.memory = memory
        self.spawned: Spawned | None = None
        self.failed: Execution | None = None  # the command could not even start
        self._fds: list[int] = []
        self._status_r = self._status_w = self._go = -1
        self._done = False

    def _pipe(self) -> tuple[int, int]:
        read, write = os.pipe()
        self._fds += [read, write]
        return read, write

    def _close(self, fd: int) -> int:
        if fd in self._fds:
            self._fds.remove(fd)
            os.close(fd)
        return -1

    def launch(self) -> None:
        """Start the command (under bubblewrap, up to its block pipe)."""
        started = time.monotonic()
        sandboxed = self.sandbox.kind == "bwrap"
        pass_fds: tuple[int, ...] = ()
        try:
            if sandboxed:
                self._status_r, self._status_w = self._pipe()
                wait_r, self._go = self._pipe()
                wrapped = self.sandbox.wrap(self.argv, self.mounts, status_fd=self._status_w,
                                            block_fd=wait_r, go_fd=self._go)
                pass_fds = (self._status_w, wait_r, self._go)
            else:
                wait_r = -1
                wrapped = self.sandbox.wrap(self.argv, self.mounts)
            if self.memory is not None and (self.cage is None or self.cage.memory is None):
                wrapped = [*memory_rlimit_prefix(self.memory), *wrapped]  # no memory cgroup
            try:
                self.spawned = spawn(wrapped, cwd=self.mounts.workspace, env=self.env,
                                     cage=self.cage, pass_fds=pass_fds)
            except OSError as exc:
                self.failed = Execution(None, b"", f"solver could not start: {exc}".encode(),
                                        duration=time.monotonic() - started)
            self._close(wait_r)
            self._status_w = self._close(self._status_w)
        except BaseException:
            self.cancel()
            raise

    def run(self) -> Execution:
        """Let the command go and supervise it to its end; the cage goes back afterwards."""
        try:
            if self.spawned is None and self.failed is None:
                self.launch()
            if self.failed is not None:
                if self.sandbox.kind == "bwrap":  # bubblewrap itself, not the solver's command
                    raise InfrastructureError("the sandbox did not start: " + self.failed
                                              .stderr.decode(errors="replace").strip())
                return self.failed
            assert self.spawned is not None
            started = time.monotonic()
            if self._go >= 0:
                with contextlib.suppress(OSError):  # bubblewrap gone already: its status says
                    os.write(self._go, b"x")
                self._go = self._close(self._go)
            execution = supervise(self.spawned, timeout=self.limits.timeout,
                                  output_cap=self.limits.output_cap, abort=self.abort,
                                  started=started)
            cut_short = (execution.interrupted or execution.timed_out or execution.flooded
                         or execution.memory_exceeded)
            if (self.sandbox.kind == "bwrap" and not cut_short
                    and not sandbox_ran(_read_available(self._status_r))):
                raise InfrastructureError("the sandbox did not start: " + execution.stderr[-500:]
                                          .decode(errors="replace").strip())
            return execution
        finally:
            self._finish()

    def cancel(self) -> None:
        """Never let the command go: kill it (before its block pipe closes), free the cage."""
        try:
            if self.spawned is not None and self._go >= 0:
                discard(self.spawned)
        finally:
            self._finish()

    def _finish(self) -> None:
        if self._done:
            return
        self._done = True
        for fd in list(self._fds):
            self._close(fd)
        if self.cage is not None and self.cages is not None:
            self.cages.release(self.cage)
