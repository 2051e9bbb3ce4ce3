"""Running one command confined (process.py): what is left of it once execute returns."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from sealbench.errors import InfrastructureError
from sealbench.process import Confined, Limits, execute, start_confined
from sealbench.sandbox import CagePool, Mounts, cgroup_parent, detect

pytestmark = pytest.mark.skipif(cgroup_parent() is None,
                                reason="no writable pids cgroup here (not root?)")


@pytest.fixture
def pool() -> Iterator[CagePool]:
    cages = CagePool()
    yield cages
    cages.close()


def _alive(pid: int) -> bool:
    """A process that still runs (a zombie waiting for its reaper has stopped running)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z"


def _running_with(text: str) -> list[int]:
    """Live processes whose command line contains text (procps may not be installed)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if text in cmdline and _alive(int(entry.name)):
                found.append(int(entry.name))
    return found


# a command that leaves a process behind in every way it can (its own session, a double
# fork, a plain background job) and exits at once, printing the pids it left
LEAVER = ("setsid sleep 60 & echo $!; (sleep 60 & echo $!) ; sleep 60 & echo $!; "
          "trap '' TERM HUP; exit 0")


@pytest.mark.parametrize("exit_code", [0, 3])
def test_nothing_the_command_left_behind_outlives_execute(
        tmp_path: Path, pool: CagePool, exit_code: int) -> None:
    """Whether it exits cleanly or not, every process the command started is dead when
    execute returns and the cage is empty (execute skips a second sweep only when the first,
    made after the command exited, found the cage empty)."""
    cage = pool.acquire(64)
    assert cage is not None
    script = LEAVER.replace("exit 0", f"exit {exit_code}")
    done = execute(["sh", "-c", script], cwd=tmp_path, env={"PATH": os.defpath}, timeout=30,
                   output_cap=1 << 20, cage=cage)
    left = [int(p) for p in done.stdout.split()]
    assert done.returncode == exit_code and len(left) == 3
    assert not any(_alive(pid) for pid in left)
    assert cage.pids() == []
    pool.release(cage)


def test_cage_pids_lists_the_attempts_processes_and_never_the_harness(pool: CagePool) -> None:
    cage = pool.acquire(64)
    assert cage is not None
    child = cage.spawn(lambda: subprocess.Popen(["sleep", "60"], start_new_session=True))
    try:
        assert child.pid in cage.pids()
        assert os.getpid() not in cage.pids()
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    assert cage.kill_all() and cage.pids() == []
    pool.release(cage)


# --------------------------------------------------------------------------- started early


def _confined(tmp_path: Path, script: str, pool: CagePool | None,
              timeout: float = 30) -> Confined:
    """`sh -c script` started under bubblewrap (up to its go-ahead) with tmp_path/ws as its
    workspace and tmp_path/out writable."""
    sandbox = detect()
    if sandbox.kind != "bwrap":
        pytest.fail(f"needs bubblewrap: {sandbox.reason}")
    (tmp_path / "ws").mkdir()
    (tmp_path / "out").mkdir()
    mounts = Mounts(workspace=tmp_path / "ws", writable=(tmp_path / "out",))
    return start_confined(["sh", "-c", script], sandbox=sandbox, mounts=mounts,
                          env={"PATH": os.defpath}, limits=Limits(timeout, 1 << 20),
                          cages=pool)


@pytest.mark.sandbox
def test_a_started_sandbox_runs_its_command_only_when_let_go_and_sees_what_came_meanwhile(
        tmp_path: Path, pool: CagePool) -> None:
    """The harness lays the workspace out after bubblewrap started: the bind mounts are of
    the directories, so files written in between are what the command finds."""
    confined = _confined(tmp_path, f"cat late.txt; touch {tmp_path}/out/ran", pool)
    time.sleep(0.3)  # bubblewrap is set up by now, blocked before the command
    assert not (tmp_path / "out" / "ran").exists()
    (tmp_path / "ws" / "late.txt").write_text("written after the sandbox started\n")
    done = confined.run()
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"written after the sandbox started\n"
    assert (tmp_path / "out" / "ran").exists()


@pytest.mark.sandbox
@pytest.mark.parametrize("caged", [True, False])
def test_a_cancelled_sandbox_never_runs_its_command_and_leaves_no_process(
        tmp_path: Path, pool: CagePool, caged: bool) -> None:
    """cancel() kills before it closes the block pipe (bubblewrap reads end-of-file as the
    go-ahead): the command never runs and nothing of it is left — with a cage, and without
    one, where only that order (and --die-with-parent) stops it."""
    confined = _confined(tmp_path, f"touch {tmp_path}/out/ran; sleep 60",
                         pool if caged else None)
    time.sleep(0.3)
    assert confined.spawned is not None
    bwrap = confined.spawned.proc.pid
    confined.cancel()
    time.sleep(0.5)  # had the command been let go, it would have touched its file by now
    assert not (tmp_path / "out" / "ran").exists()
    assert not _alive(bwrap)
    assert _running_with(f"touch {tmp_path}/out/ran") == []
    if caged:
        assert confined.cage is not None and confined.cage.pids() == []


@pytest.mark.sandbox
def test_the_time_limit_runs_from_the_go_ahead_not_from_the_start(
        tmp_path: Path, pool: CagePool) -> None:
    """A sandbox made ready ahead of its turn may wait longer than its limit; the solver's
    clock starts when it is let go."""
    confined = _confined(tmp_path, "sleep 0.2", pool, timeout=2.0)
    time.sleep(3.0)
    done = confined.run()
    assert not done.timed_out and done.returncode == 0
    assert done.duration < 2.0


# a harness that starts a sandbox up to its go-ahead and dies (SIGKILL) before letting it go
DYING_HARNESS = """
import os, signal, sys
from dataclasses import replace
from pathlib import Path
from sealbench.process import Limits, start_confined
from sealbench.sandbox import Mounts, detect
base = Path(sys.argv[1])
confined = start_confined(["sh", "-c", sys.argv[2]], sandbox=detect(),
                          mounts=Mounts(workspace=base / "ws", writable=(base / "out",)),
                          env={"PATH": os.defpath}, limits=Limits(30, 1 << 20), cages=None)
assert confined.spawned is not None
print(confined.spawned.proc.pid, flush=True)
sys.stdin.readline()  # the test says when bubblewrap is set up
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.sandbox
def test_a_sandbox_started_early_never_runs_its_command_when_the_harness_dies_first(
        tmp_path: Path) -> None:
    """A harness killed (SIGKILL) while an attempt waits for its go-ahead closes its end of
    the block pipe: bubblewrap would read that end-of-file as the go-ahead and run the solver
    unwatched (no time limit, nothing recorded; --die-with-parent is armed only just before
    the command runs). The sandbox holds the pipe's write end itself (--sync-fd), so it keeps
    waiting and the command never runs."""
    (tmp_path / "ws").mkdir()
    (tmp_path / "out").mkdir()
    marker = f"{tmp_path}/out/ran"
    script = f"touch {marker}; sleep 2; touch {marker}-late"
    harness = subprocess.Popen(
        [sys.executable, "-c", DYING_HARNESS, str(tmp_path), script],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert harness.stdin is not None and harness.stdout is not None
    try:
        harness.stdout.readline()
        time.sleep(0.3)  # bubblewrap set up and blocked
        harness.stdin.write("\n")
        harness.stdin.flush()
        assert harness.wait(30) == -signal.SIGKILL
        time.sleep(2.5)  # had the command been let go, both files would be there by now
        assert sorted(p.name for p in (tmp_path / "out").iterdir()) == []
    finally:
        for pid in _running_with(script):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.sandbox
def test_a_command_started_early_holds_no_descriptor_of_the_harness(
        tmp_path: Path, pool: CagePool) -> None:
    """The go-ahead pipe's ends stay with bubblewrap: the solver starts with stdin, stdout
    and stderr only (and the descriptor its own listing opens)."""
    confined = _confined(tmp_path, "ls /proc/self/fd", pool)
    done = confined.run()
    assert done.returncode == 0, done.stderr
    assert sorted(int(fd) for fd in done.stdout.split()) == [0, 1, 2, 3]


@pytest.mark.sandbox
@pytest.mark.parametrize("early", [True, False])
def test_bubblewrap_that_cannot_be_started_is_the_harness_failure_not_the_solvers(
        tmp_path: Path, pool: CagePool, early: bool) -> None:
    """The sandbox's own program failing to start (here: gone; in life a fork refused for
    want of pids or memory while another attempt runs) is the harness's failure, retried,
    never an outcome charged to the solver — whether it was started early or at run()."""
    sandbox = replace(detect(), kind="bwrap", bwrap=str(tmp_path / "no-such-bwrap"))
    (tmp_path / "ws").mkdir()
    confined = Confined(["true"], sandbox, Mounts(workspace=tmp_path / "ws"),
                        {"PATH": os.defpath}, Limits(30, 1 << 20), pool, None)
    if early:
        confined.launch()
    with pytest.raises(InfrastructureError, match="the sandbox did not start"):
        confined.run()
    assert confined.cage is None or confined.cage.pids() == []
