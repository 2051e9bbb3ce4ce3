"""Process cages (sandbox.CagePool, ProcessCage, Resident): what the attempt's processes are
held in, on this host's real cgroups. The bubblewrap arguments are tested in
tests/test_sandbox_args.py."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sealbench.sandbox import CagePool, ProcessCage, cgroup_parent

pytestmark = pytest.mark.skipif(cgroup_parent() is None,
                                reason="no writable pids cgroup here (not root?)")


@pytest.fixture
def pool() -> Iterator[CagePool]:
    cages = CagePool()
    yield cages
    cages.close()


def _popen(argv: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, start_new_session=True)


def _spawn(cage: ProcessCage, argv: list[str]) -> subprocess.Popen[bytes]:
    return cage.spawn(lambda: _popen(argv))


def _cgroups(text: str) -> dict[str, str]:
    """controller -> cgroup path, from /proc/PID/cgroup text."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        _, controllers, where = line.split(":", 2)
        for name in controllers.split(","):
            found[name] = where
    return found


def test_a_spawned_attempt_starts_inside_its_cage_and_the_harness_stays_out(
        pool: CagePool) -> None:
    cage = pool.acquire(64, 256 << 20)
    assert cage is not None
    proc = _spawn(cage, ["cat", "/proc/self/cgroup"])
    out, _ = proc.communicate(timeout=30)
    child = _cgroups(out.decode())
    assert child["pids"].endswith(cage.path.name)
    if cage.memory is not None and cage.thread_attach:
        assert child["memory"].endswith(cage.memory.name)
    # this thread (and so the harness's main work) never entered the cage
    here = _cgroups(Path("/proc/thread-self/cgroup").read_text())
    assert not here.get("pids", "").endswith(cage.path.name)
    assert os.getpid() not in cage.pids()
    pool.release(cage)


def test_kill_all_empties_the_cage_and_never_reaches_the_harness(pool: CagePool) -> None:
    cage = pool.acquire(64)
    assert cage is not None
    sleepers = [_spawn(cage, ["sleep", "60"]) for _ in range(3)]
    assert {p.pid for p in sleepers} <= set(cage.pids())
    cage.kill_all()
    assert [p.wait(timeout=10) for p in sleepers] == [-9, -9, -9]
    assert cage.pids() == []
    again = _spawn(cage, ["true"])  # the cage (and its resident thread) still works
    assert again.wait(timeout=30) == 0
    pool.release(cage)


FORKER = """
import os, sys, time
made = 0
for _ in range(int(sys.argv[1])):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    made += 1
print(made, flush=True)
"""


@pytest.mark.parametrize("max_pids", [4, 9])
def test_the_process_limit_is_the_attempts_own(pool: CagePool, max_pids: int) -> None:
    """max_pids processes for the attempt, however the cage is entered: the resident thread
    that forks it on cgroup v1 takes none of them."""
    cage = pool.acquire(max_pids)
    assert cage is not None
    proc = _spawn(cage, [*cage.prefix(), sys.executable, "-c", FORKER, "50"])
    assert proc.stdout is not None
    made = proc.stdout.readline()  # its children keep the pipe open: one line, not EOF
    cage.kill_all()
    proc.communicate(timeout=30)
    assert int(made) == max_pids - 1  # the forker itself is one of them
    pool.release(cage)


def test_a_cage_with_its_resident_inside_is_removed_on_close() -> None:
    cages = CagePool()
    cage = cages.acquire(16, 128 << 20)
    assert cage is not None
    assert _spawn(cage, ["true"]).wait(timeout=30) == 0
    cages.release(cage)
    cages.close()
    assert not cage.path.exists()
    assert cage.memory is None or not cage.memory.exists()


HOG = "data = bytearray(512 << 20)\nfor i in range(0, len(data), 4096): data[i] = 1\n"


def test_running_out_of_memory_in_a_cage_kills_the_attempt_never_the_harness(
        pool: CagePool) -> None:
    """The kernel picks its OOM victim among the cage's processes: the harness, whose
    resident thread lives in the cage on cgroup v1 and whose memory is far larger than the
    attempt's, is not among them (this test's process would be the one killed)."""
    cage = pool.acquire(64, 96 << 20)
    assert cage is not None
    if cage.memory is None:
        pytest.skip("no memory cgroup here")
    before = cage.oom_kills()
    proc = _spawn(cage, [*cage.prefix(), sys.executable, "-c", HOG])
    assert proc.wait(timeout=60) == -9
    assert cage.oom_kills() > before
    alive = threading.Event()
    alive.set()  # still here
    assert alive.is_set()
    pool.release(cage)


def test_a_held_cage_goes_back_to_the_pool_only_when_the_hold_ends(pool: CagePool) -> None:
    """run_attempt holds the cages it released until its workspace (memory charged to the
    cage on a tmpfs scratch) is removed: no other attempt may get one before."""
    with pool.holding():
        first = pool.acquire(16)
        assert first is not None
        pool.release(first)
        second = pool.acquire(16)  # not `first`: it is held
        assert second is not None and second.path != first.path
        with pool.holding():  # a nested hold hands its cages to the outer one
            pool.release(second)
        third = pool.acquire(16)
        assert third is not None and third.path not in (first.path, second.path)
        pool.release(third)
    again = {c.path for c in (pool.acquire(16), pool.acquire(16), pool.acquire(16)) if c}
    assert again == {first.path, second.path, third.path}


def test_a_cage_released_on_another_thread_is_not_held(pool: CagePool) -> None:
    cage = pool.acquire(16)
    assert cage is not None
    with pool.holding():
        other = threading.Thread(target=pool.release, args=(cage,))
        other.start()
        other.join()
        reused = pool.acquire(16)
    assert reused is not None and reused.path == cage.path
