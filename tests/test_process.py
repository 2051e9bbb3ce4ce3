"""Running one command confined (process.py): what is left of it once execute returns."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sealbench.process import execute
from sealbench.sandbox import CagePool, cgroup_parent

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
