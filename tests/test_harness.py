"""Harness-side failures are told apart from the solver's: retried, never scored."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from toy import make_protocol

from sealbench import harness as harness_module
from sealbench.errors import BadInput, InfrastructureError
from sealbench.harness import (
    INFRA_RETRIES,
    MEMORY_SCRATCH_MIN_FREE,
    Harness,
    InfraFailure,
    memory_scratch_room,
    mount_type,
    scratch_root,
)
from sealbench.ledger import Ledger
from sealbench.sandbox import command_files, detect
from sealbench.sealing import Lock, seal
from sealbench.solver import AttemptResult, CommandSolver, DoNothingSolver, OracleSolver

pytestmark = pytest.mark.sandbox


def _harness(tmp_path: Path) -> Harness:
    proto = make_protocol(tmp_path / "proto")
    seal(proto, ledger=Ledger(tmp_path / "l.sqlite"))
    lock = Lock.model_validate_json((proto / "protocol.lock").read_bytes())
    from sealbench.protocol import load

    return Harness(load(proto, sealed=True), lock.sealed_files(), detect())


def test_a_sandbox_that_cannot_start_is_an_infrastructure_error(tmp_path: Path) -> None:
    """bwrap fails to set up (a mount source is missing): not the solver's failure."""
    with _harness(tmp_path) as harness:
        task = harness.protocol.dataset[0]
        broken = CommandSolver(("true",), visible=(tmp_path / "vanished-solver-dir",))
        result = harness.attempt(task, broken)
        assert isinstance(result, InfraFailure)
        assert result.tries == INFRA_RETRIES + 1
        assert "sandbox did not start" in result.detail


def test_a_solver_that_fails_like_bwrap_is_still_the_solvers_failure(tmp_path: Path) -> None:
    """Printing bwrap's error text and exiting 1 must not pass for a harness failure (which
    would take the task out of the denominator)."""
    with _harness(tmp_path) as harness:
        task = harness.protocol.dataset[0]
        faker = CommandSolver(("sh", "-c", "echo 'bwrap: Can'\\''t create file' >&2; exit 1"))
        result = harness.attempt(task, faker)
        assert isinstance(result, AttemptResult)
        assert result.outcome == "error"


def test_a_solver_that_does_not_exist_is_the_solvers_error(tmp_path: Path) -> None:
    """A typo in --solver is not a harness failure: it must not leave the denominator."""
    with _harness(tmp_path) as harness:
        task = harness.protocol.dataset[0]
        for argv in (("no-such-solver-xyz",), (str(tmp_path / "missing.sh"),)):
            result = harness.attempt(task, CommandSolver(argv))
            assert isinstance(result, AttemptResult)
            assert result.outcome == "error"
            assert "solver could not start" in result.detail


# --------------------------------------------------------------------------- default scratch

MOUNTS_TEXT = """\
/dev/vda / ext4 rw,relatime 0 0
tmpfs /dev/shm tmpfs rw,nosuid,nodev 0 0
tmpfs /run tmpfs rw 0 0
/dev/vdb /run/data xfs rw 0 0
tmpfs /srv/my\\040scratch tmpfs rw 0 0
/dev/vdc /mnt/over ext4 rw 0 0
tmpfs /mnt/over tmpfs rw 0 0
"""


@pytest.mark.parametrize(("path", "expected"), [
    ("/", "ext4"),
    ("/tmp", "ext4"),
    ("/dev/shm", "tmpfs"),
    ("/dev/shm/sealbench-run-1/attempt-x", "tmpfs"),
    ("/dev/shmore", "ext4"),  # a sibling whose name starts like the mount point
    ("/run/data/x", "xfs"),  # the deepest mount point wins
    ("/run/other", "tmpfs"),
    ("/srv/my scratch/a", "tmpfs"),  # \040 is a space in /proc/self/mounts
    ("/srv/my", "ext4"),
    ("/mnt/over/a", "tmpfs"),  # mounted over: the last mount on a point is the visible one
])
def test_mount_type_of_a_path(path: str, expected: str) -> None:
    assert mount_type(Path(path), MOUNTS_TEXT) == expected


def test_mount_type_without_a_covering_mount_is_none() -> None:
    assert mount_type(Path("/x"), "tmpfs /dev/shm tmpfs rw 0 0\n") is None


@pytest.mark.parametrize("where", ["/dev/shm", "/", "tmp"])
def test_mount_type_agrees_with_stat_on_this_host(where: str, tmp_path: Path) -> None:
    """What /proc/self/mounts says about being a tmpfs is what the kernel says (`stat -f`)."""
    path = tmp_path if where == "tmp" else Path(where)
    if not path.exists():
        pytest.skip(f"{path} does not exist here")
    kernel = subprocess.run(["stat", "-f", "-c", "%T", str(path)], capture_output=True,
                            text=True, check=True).stdout.strip()
    ours = mount_type(path.resolve(), Path("/proc/self/mounts").read_text())
    assert (ours == "tmpfs") == (kernel == "tmpfs")


@pytest.fixture
def no_scratch_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.delenv("SEALBENCH_SCRATCH", raising=False)
    return monkeypatch


def _shm_or_skip() -> Path:
    shm = Path("/dev/shm")
    if memory_scratch_room(shm) == 0:
        pytest.skip("no writable tmpfs at /dev/shm here")
    return shm


def test_the_default_scratch_is_the_tmpfs_when_it_has_room(no_scratch_env: pytest.MonkeyPatch
                                                           ) -> None:
    shm = _shm_or_skip()
    assert scratch_root(min_free=1) == shm
    assert scratch_root(min_free=memory_scratch_room(shm) * 4 + (1 << 40)) == \
        Path(tempfile.gettempdir())  # no room: the system temp dir


def test_a_default_scratch_that_is_no_tmpfs_is_not_taken(no_scratch_env: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    """Only a tmpfs is taken for the memory default: a disk directory (or none at all) in
    its place leaves the system temp dir."""
    kernel = subprocess.run(["stat", "-f", "-c", "%T", str(tmp_path)], capture_output=True,
                            text=True, check=True).stdout.strip()
    if kernel == "tmpfs":
        pytest.skip("the temp dir is itself a tmpfs here")
    for stand_in in (tmp_path, tmp_path / "missing", tmp_path / "file"):
        (tmp_path / "file").touch()
        no_scratch_env.setattr(harness_module, "MEMORY_SCRATCH", stand_in)
        assert memory_scratch_room(stand_in) == 0
        assert scratch_root(min_free=1) == Path(tempfile.gettempdir())


def test_sealbench_scratch_overrides_the_memory_default(no_scratch_env: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    _shm_or_skip()
    no_scratch_env.setenv("SEALBENCH_SCRATCH", str(tmp_path))
    assert scratch_root(min_free=1) == tmp_path
    no_scratch_env.setenv("SEALBENCH_SCRATCH", str(tmp_path / "missing"))
    with pytest.raises(BadInput, match=r"SEALBENCH_SCRATCH .*missing: not an existing"):
        scratch_root()


def test_a_harness_without_sealbench_scratch_works_in_memory(
        tmp_path: Path, no_scratch_env: pytest.MonkeyPatch) -> None:
    """Attempts laid out in the tmpfs default behave as on disk: the oracle passes, the
    do-nothing solver fails, and the run's scratch is gone afterwards."""
    shm = _shm_or_skip()
    if memory_scratch_room(shm) < MEMORY_SCRATCH_MIN_FREE:
        pytest.skip("/dev/shm has less room than the default asks for")
    harness = _harness(tmp_path)
    with harness:
        assert harness.scratch.parent == shm
        task = harness.protocol.dataset[0]
        oracle = harness.attempt(task, OracleSolver())
        nothing = harness.attempt(task, DoNothingSolver())
        assert isinstance(oracle, AttemptResult) and oracle.outcome == "pass"
        assert isinstance(nothing, AttemptResult) and nothing.outcome == "fail"
    assert not harness.scratch.exists()


LOOK_AROUND = """
import os, sys
seen = []
for top, dirs, files in os.walk("/dev/shm"):
    seen += [os.path.join(top, n) for n in dirs + files]
print("\\n".join(seen))
"""


def test_on_the_memory_scratch_the_solver_sees_only_its_own_attempt(
        tmp_path: Path, no_scratch_env: pytest.MonkeyPatch) -> None:
    """With the default scratch in the host's /dev/shm, the solver's /dev/shm is still its
    own empty tmpfs: only the path down to its own workspace, side files and HOME is there —
    no other file of the host's /dev/shm, not the run's object store or oracles."""
    shm = _shm_or_skip()
    if memory_scratch_room(shm) < MEMORY_SCRATCH_MIN_FREE:
        pytest.skip("/dev/shm has less room than the default asks for")
    decoy = Path(tempfile.mkdtemp(prefix="sealbench-decoy-", dir=shm))
    (decoy / "secret.txt").write_text("host data")
    script = tmp_path / "look.py"
    script.write_text(LOOK_AROUND)
    try:
        harness = _harness(tmp_path)
        with harness:
            task = harness.protocol.dataset[0]
            argv = (sys.executable, str(script))
            result = harness.attempt(task, CommandSolver(argv, visible=command_files(argv)))
            assert isinstance(result, AttemptResult), result
            seen = set(result.stdout.decode().split())
            run_dir = harness.scratch
            attempt = next(Path(p) for p in seen if Path(p).parent == run_dir)
            assert attempt.name.startswith("attempt-")
            allowed = {str(run_dir), str(attempt)}
            for part in ("workspace", "side", "home"):
                allowed.add(str(attempt / part))
            strays = {p for p in seen if p not in allowed
                      and not p.startswith(f"{attempt}/workspace/")
                      and not p.startswith(f"{attempt}/side/")}
            assert strays == set(), strays
            assert not any("decoy" in p or "objects.git" in p or "oracles" in p for p in seen)
    finally:
        shutil.rmtree(decoy, ignore_errors=True)


FILL_THE_SCRATCH = """
import os
written = 0
try:
    with open("fill.bin", "wb") as out:  # its workspace, on the host's /dev/shm
        while written < 600 * 1024 * 1024:
            out.write(b"x" * (1 << 20))
            out.flush()
            written += 1 << 20
except OSError as exc:
    print("stopped", exc)
print("wrote", written)
"""


@pytest.mark.sandbox
def test_filling_the_memory_scratch_past_the_budget_is_the_solvers_violation(
        tmp_path: Path, no_scratch_env: pytest.MonkeyPatch) -> None:
    """A dishonest agent writes 600 MiB into its workspace on the tmpfs scratch, past
    budget.max_workspace_bytes (1 MiB) and budget.max_memory_mb (128): the harness survives,
    the attempt is the solver's violation, its pages are freed, and the next attempt runs
    clean beside it."""
    shm = _shm_or_skip()
    if memory_scratch_room(shm) < MEMORY_SCRATCH_MIN_FREE:
        pytest.skip("/dev/shm has less room than the default asks for")
    proto = make_protocol(tmp_path / "proto")
    spec = proto / "protocol.yaml"
    spec.write_text(spec.read_text().replace(
        "  max_files_touched: 3\n",
        "  max_files_touched: 3\n  max_workspace_bytes: 1048576\n  max_memory_mb: 128\n"))
    seal(proto, ledger=Ledger(tmp_path / "l.sqlite"))
    lock = Lock.model_validate_json((proto / "protocol.lock").read_bytes())
    from sealbench.protocol import load

    script = tmp_path / "fill.py"
    script.write_text(FILL_THE_SCRATCH)
    with Harness(load(proto, sealed=True), lock.sealed_files(), detect()) as harness:
        assert harness.scratch.parent == shm
        task = harness.protocol.dataset[0]
        argv = (sys.executable, str(script))
        filled = harness.attempt(task, CommandSolver(argv, visible=command_files(argv)))
        assert isinstance(filled, AttemptResult), filled
        assert filled.outcome == "violation", filled.detail
        assert list(harness.scratch.glob("attempt-*")) == []  # its pages are gone
        honest = harness.attempt(task, CommandSolver(("true",)))
        assert isinstance(honest, AttemptResult) and honest.outcome == "fail", honest


LIST_RUN_DIR = """
import os
print("\\n".join(sorted(os.listdir(os.path.dirname(os.path.dirname(
    os.environ["SEALBENCH_WORKSPACE"]))))))
"""


def test_in_a_run_each_solver_sees_only_its_own_attempt_while_the_next_is_made_ready(
        tmp_path: Path) -> None:
    """run_all makes the next attempt ready (sandbox started, workspace laid out) while one
    runs: two attempt directories exist on the host at once, and still each solver's view of
    the run directory holds its own attempt only."""
    script = tmp_path / "list.py"
    script.write_text(LIST_RUN_DIR)
    harness = _harness(tmp_path)
    made_ready: list[object] = []
    prepare = harness.prepare

    def counting(*args: object) -> object:
        ready = prepare(*args)  # type: ignore[arg-type]
        made_ready.append(ready)
        return ready

    harness.prepare = counting  # type: ignore[method-assign, assignment]
    results: list[object] = []
    with harness:
        task = harness.protocol.dataset[0]
        argv = (sys.executable, str(script))
        harness.run_all(((task, epoch) for epoch in range(4)),
                        CommandSolver(argv, visible=command_files(argv)), 1,
                        lambda _t, _e, result: results.append(result))
    assert len(made_ready) == 3 and all(r is not None for r in made_ready)
    seen = []
    for result in results:
        assert isinstance(result, AttemptResult), result
        listing = result.stdout.decode().split()
        assert len(listing) == 1 and listing[0].startswith("attempt-"), listing
        seen.append(listing[0])
    assert len(set(seen)) == 4


def test_a_ready_attempt_whose_directory_the_scratch_lost_is_an_infrastructure_error(
        tmp_path: Path) -> None:
    """The scratch moved under the harness between laying out and reading back: the
    harness's failure (retried, never scored), not an unreadable workspace charged to the
    solver."""
    harness = _harness(tmp_path)
    with harness:
        task = harness.protocol.dataset[0]
        ready = harness.prepare(task, CommandSolver(("true",)))
        assert ready is not None
        ready.attempt_dir.rename(ready.attempt_dir.with_name("moved-away"))
        # caught by the directory check, or earlier by bubblewrap when it was still setting
        # up: the harness's failure either way
        with pytest.raises(InfrastructureError,
                           match=r"went missing from the scratch|the sandbox did not start"):
            ready.run()


EMPTY_ITS_WORKSPACE = """
import os, shutil, sys
root = os.environ["SEALBENCH_WORKSPACE"]
for name in os.listdir(root):
    path = os.path.join(root, name)
    shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
try:
    os.rmdir(root)
except OSError as exc:
    print("rmdir refused:", exc.errno)
"""


def test_a_solver_that_empties_and_removes_its_workspace_is_judged_never_infrastructure(
        tmp_path: Path) -> None:
    """A solver cannot pass its own failure off as the harness's by removing its workspace:
    the workspace is its mount point (rmdir is refused) and what it left is judged."""
    script = tmp_path / "empty.py"
    script.write_text(EMPTY_ITS_WORKSPACE)
    harness = _harness(tmp_path)
    with harness:
        argv = (sys.executable, str(script))
        result = harness.attempt(harness.protocol.dataset[0],
                                 CommandSolver(argv, visible=command_files(argv)))
    assert isinstance(result, AttemptResult), result
    assert result.outcome in ("fail", "violation"), result
    assert b"rmdir refused" in result.stdout
