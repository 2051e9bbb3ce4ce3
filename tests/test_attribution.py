"""Failure attribution: what the solver leaves is judged as its own, and cleaning up after it
can neither crash the harness nor touch anything outside the tree being removed.

The end-to-end versions (real hostile solvers through `sealbench run`) are in
tests/test_hostile.py; these check the pieces on real directories.
"""

from __future__ import annotations

import multiprocessing
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sealbench.harness import SCRATCH_PREFIX, sweep_stale_scratch
from sealbench.solver import SolverFault, _refusal
from sealbench.workspace import (
    MODE_FILE,
    Entry,
    ObjectStore,
    WorkspaceTooLarge,
    build_record,
    remove_tree,
    survey,
    workspace_change,
)


def _modes(*paths: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mode for p in paths}


def _dead_pid() -> int:
    """A pid no process can have: above the kernel's pid_max."""
    return int(Path("/proc/sys/kernel/pid_max").read_text()) + 1


def _deep(root: Path, levels: int, name: str = "d") -> Path:
    """A chain of `levels` nested directories under root, made step by step (fd-relative),
    so it can go deeper than PATH_MAX; returns root."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(levels):
            os.mkdir(name, dir_fd=fd)
            sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = sub
        os.close(os.open("leaf", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    finally:
        os.close(fd)
    return root


@pytest.fixture
def deep_tmp(tmp_path: Path) -> Iterator[Path]:
    """tmp_path, emptied with remove_tree afterwards even when the test failed: pytest's own
    clean-up of old temp dirs is a recursive rmtree, which a 1,500-level tree would crash."""
    yield tmp_path
    remove_tree(tmp_path)


# --------------------------------------------------------------------------- removal


def test_remove_tree_takes_a_1500_level_tree(deep_tmp: Path) -> None:
    tmp_path = deep_tmp
    tree = tmp_path / "t"
    tree.mkdir()
    _deep(tree, 1500)
    before = _modes(tmp_path, tmp_path.parent)
    assert remove_tree(tree)
    assert not tree.exists()
    assert _modes(tmp_path, tmp_path.parent) == before


def test_remove_tree_takes_a_tree_deeper_than_path_max(tmp_path: Path) -> None:
    tree = tmp_path / "t"
    tree.mkdir()
    _deep(tree, 40, name="n" * 200)  # about 8,000 bytes of path
    assert remove_tree(tree)
    assert not tree.exists()


def test_remove_tree_fixes_modes_only_inside_the_tree(tmp_path: Path) -> None:
    parent = tmp_path / "parent"
    tree = parent / "t"
    (tree / "a" / "b").mkdir(parents=True)
    (tree / "a" / "b" / "f").write_text("x")
    (tree / "a" / "b").chmod(0)
    (tree / "a").chmod(0)
    tree.chmod(0o500)
    parent.chmod(0o751)
    sibling = parent / "sibling"
    sibling.mkdir(mode=0o705)
    before = _modes(parent, sibling, tmp_path)
    gone = remove_tree(tree)
    assert _modes(parent, sibling, tmp_path) == before
    assert gone and not tree.exists()


def test_remove_tree_of_something_gone_touches_nothing(tmp_path: Path) -> None:
    """The old remover chmod-ed the *parent* to 0700 when its target had vanished (another
    sweep removed it first): on /tmp that breaks every other user."""
    tmp_path.chmod(0o1777)
    before = _modes(tmp_path)
    gone = remove_tree(tmp_path / "never-there")
    assert _modes(tmp_path) == before
    assert gone


def test_remove_tree_never_follows_a_symlink(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o755)
    (outside / "keep.txt").write_text("keep")
    tree = tmp_path / "t"
    tree.mkdir()
    os.symlink(outside, tree / "link")
    os.symlink(outside, tmp_path / "top-link")
    assert remove_tree(tree) and remove_tree(tmp_path / "top-link")
    assert (outside / "keep.txt").read_text() == "keep"
    assert stat.S_IMODE(outside.stat().st_mode) == 0o755
    assert not (tmp_path / "top-link").is_symlink()


# --------------------------------------------------------------------------- sweeps


def _stale_dirs(root: Path, count: int) -> None:
    for i in range(count):
        stale = root / f"{SCRATCH_PREFIX}{_dead_pid()}-{i}"
        (stale / "attempt" / "workspace" / "x").mkdir(parents=True)
        (stale / "attempt" / "workspace" / "x").chmod(0)
        _deep(stale, 50)


def test_concurrent_sweeps_in_threads_touch_nothing_else(tmp_path: Path) -> None:
    root = tmp_path / "scratch"
    root.mkdir()
    root.chmod(0o1777)  # like /tmp
    bystander = root / "someone-elses"
    bystander.mkdir(mode=0o755)
    _stale_dirs(root, 12)
    before = _modes(root, bystander, tmp_path)
    start = threading.Barrier(6)

    def sweep() -> None:
        start.wait()
        sweep_stale_scratch(root)

    threads = [threading.Thread(target=sweep) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert _modes(root, bystander, tmp_path) == before
    assert sorted(p.name for p in root.iterdir()) == ["someone-elses"]


def _sweep_in_process(root: str, start: multiprocessing.synchronize.Event) -> None:
    start.wait()
    sweep_stale_scratch(Path(root))


def test_concurrent_sweeps_in_processes_touch_nothing_else(tmp_path: Path) -> None:
    root = tmp_path / "scratch"
    root.mkdir()
    root.chmod(0o1777)
    _stale_dirs(root, 12)
    before = _modes(root, tmp_path)
    context = multiprocessing.get_context("fork")
    start = context.Event()
    workers = [context.Process(target=_sweep_in_process, args=(str(root), start))
               for _ in range(4)]
    for worker in workers:
        worker.start()
    start.set()
    for worker in workers:
        worker.join()
    assert [w.exitcode for w in workers] == [0, 0, 0, 0]
    assert _modes(root, tmp_path) == before
    assert list(root.iterdir()) == []


def test_a_sweep_that_died_leaves_a_claim_the_next_sweep_takes(deep_tmp: Path) -> None:
    tmp_path = deep_tmp
    claim = tmp_path / f"{SCRATCH_PREFIX}{_dead_pid()}-swept-0123456789ab"
    claim.mkdir()
    _deep(claim, 1200)
    live = tmp_path / f"{SCRATCH_PREFIX}{os.getpid()}-mine"
    live.mkdir()
    sweep_stale_scratch(tmp_path)
    assert not claim.exists()
    assert live.exists()  # a live process's scratch is never swept


# --------------------------------------------------------------------------- workspace budget


@pytest.mark.parametrize("where", [".git/objects/junk", "sub/.git/junk", "a/b/.git"])
def test_workspace_budget_counts_git_directories(tmp_path: Path, where: str) -> None:
    store = ObjectStore(tmp_path / "store")
    record = build_record({"app.txt": Entry.of(MODE_FILE, b"x\n")}, store)
    ws = tmp_path / "ws"
    record.materialize(ws)
    target = ws / where
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(b"\0" * (2 << 20))
    change = workspace_change(record, ws, store, 1 << 20)
    assert change.oversize is not None and ".git included" in change.oversize
    assert change.touched == ()  # a .git is never part of the diff
    assert workspace_change(record, ws, store, 4 << 20).oversize is None


def test_survey_stops_past_the_depth_limit(tmp_path: Path) -> None:
    _deep(tmp_path, 30)
    with pytest.raises(WorkspaceTooLarge, match="more than 20 levels"):
        survey(tmp_path, max_depth=20)
    found, size = survey(tmp_path, max_depth=30)
    assert len(found) == 1 and size == 0


def test_a_diff_past_the_cap_is_cut_and_flagged(tmp_path: Path) -> None:
    store = ObjectStore(tmp_path / "store")
    record = build_record({"app.txt": Entry.of(MODE_FILE, b"x\n")}, store)
    ws = tmp_path / "ws"
    record.materialize(ws)
    (ws / "big.txt").write_bytes(b"line of text\n" * 200_000)  # a 2.6 MB diff
    change = workspace_change(record, ws, store, max_diff=64 * 1024)
    assert change.diff_too_large is not None and "max_diff_bytes" in change.diff_too_large
    assert len(change.diff) == 64 * 1024
    small = workspace_change(record, ws, store, max_diff=8 << 20)
    assert small.diff_too_large is None and len(small.diff) > 2_600_000


# --------------------------------------------------------------------------- refuse file


def _refuse_state(tmp_path: Path, how: str) -> Path:
    out = tmp_path / "out"
    out.mkdir()
    refuse = out / "refuse.txt"
    if how in ("file", "chmod 000", "out dir 000"):
        refuse.write_text("no, thanks\n")
    if how == "chmod 000":
        refuse.chmod(0)
    elif how == "out dir 000":
        out.chmod(0)
    elif how == "directory":
        refuse.mkdir()
    elif how == "fifo":
        os.mkfifo(refuse)
    elif how == "symlink":
        os.symlink("/etc/passwd", refuse)
    elif how == "dangling symlink":
        os.symlink("nowhere", refuse)
    return refuse


@pytest.mark.parametrize(("how", "expected"), [
    ("missing", None),
    ("file", "no, thanks"),
    ("chmod 000", "unreadable (mode 0000)"),
    ("out dir 000", "unsearchable (mode 0000)"),
    ("directory", "a directory at the refuse path"),
    ("fifo", "a FIFO at the refuse path"),
    ("symlink", "a symlink at the refuse path"),
    ("dangling symlink", "a symlink at the refuse path"),
])
def test_refuse_file_state_is_judged_not_trusted(tmp_path: Path, how: str,
                                                 expected: str | None) -> None:
    """The same outcome whatever uid the harness runs as: root could read a mode-000 file,
    another user could not; both call it the solver's violation."""
    refuse = _refuse_state(tmp_path, how)
    try:
        if expected is None or how == "file":
            assert _refusal(refuse) == expected
        else:
            with pytest.raises(SolverFault, match=expected.replace("(", r"\(").replace(")",
                                                                                     r"\)")):
                _refusal(refuse)
    finally:
        (tmp_path / "out").chmod(0o700)
