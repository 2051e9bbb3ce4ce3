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
    """Run a command in its own session; kill the whole group on timeout or output flood.

    stdout and stderr are read together with a selector, never with communicate(): a grandchild
    that keeps a pipe open must not hold the harness past the deadline, and output beyond the
    cap is dropped as it arrives so memory stays bounded whatever the solver prints.
    """
    started = time.monotonic()
    oom_kills = cage.oom_kills() if cage is not None else 0
    if cage is not None:
        argv = [*cage.prefix(), *argv]

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True, pass_fds=pass_fds,
        )

    try:
        proc = cage.spawn(start) if cage is not None else start()
    except OSError as exc:
        return Execution(None, b"", f"solver could not start: {exc}".encode(),
                         duration=time.monotonic() - started)
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
    memory_exceeded = cage is not None and cage.oom_kills() > oom_kills
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
    memory = limits.max_memory_mb * 1024 * 1024 if limits.max_memory_mb else None
    cage = cages.acquire(limits.max_processes, memory) if cages else None
    status_r, status_w = os.pipe()
    try:
        sandboxed = sandbox.kind == "bwrap"
        wrapped = sandbox.wrap(argv, mounts, status_fd=status_w if sandboxed else None)
        if memory is not None and (cage is None or cage.memory is None):
            wrapped = [*memory_rlimit_prefix(memory), *wrapped]  # no memory cgroup here
        execution = execute(wrapped, cwd=mounts.workspace, env=env, timeout=limits.timeout,
                            output_cap=limits.output_cap, cage=cage,
                            pass_fds=(status_w,) if sandboxed else (), abort=abort)
        os.close(status_w)
        status_w = -1
        cut_short = (execution.interrupted or execution.timed_out or execution.flooded
                     or execution.memory_exceeded)
        if sandboxed and not cut_short and not sandbox_ran(_read_available(status_r)):
            raise InfrastructureError("the sandbox did not start: " + execution.stderr[-500:]
                                      .decode(errors="replace").strip())
        return execution
    finally:
        for fd in (status_r, status_w):
            if fd >= 0:
                os.close(fd)
        if cage is not None and cages is not None:
            cages.release(cage)
