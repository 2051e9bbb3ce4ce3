"""The harness's diff is what `git diff` prints for the same change (docs/isolation.md).

Each case builds a fixture, makes one kind of change both in a real git repository (the way a
user makes an oracle) and in a harness workspace, and compares the bytes.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from toy import GIT_ENV

from sealbench.patchpaths import diff_paths
from sealbench.workspace import (
    MODE_EXEC,
    MODE_FILE,
    MODE_LINK,
    Entry,
    ObjectStore,
    Tree,
    build_record,
    read_tree,
    workspace_change,
)

Change = Callable[[Path], None]

FIXTURE: Tree = {
    "README.md": Entry.of(MODE_FILE, b"# demo\n\nSome text.\n"),
    "src/app.py": Entry.of(MODE_FILE, b"def add(a, b):\n    return a - b\n\n\nX = 1\n"),
    "src/util.py": Entry.of(MODE_FILE, b"".join(b"line %d\n" % i for i in range(40))),
    "run.sh": Entry.of(MODE_EXEC, b"#!/bin/sh\necho hi\n"),
    "logo.bin": Entry.of(MODE_FILE, bytes(range(256)) * 4),
    "link": Entry.of(MODE_LINK, b"src/app.py"),
    "docs/a b ü.txt": Entry.of(MODE_FILE, b"spaces and unicode\n"),
}


def _edit(rel: str, data: bytes) -> Change:
    def change(root: Path) -> None:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return change


def _rename(src: str, dst: str, append: bytes = b"") -> Change:
    def change(root: Path) -> None:
        (root / dst).parent.mkdir(parents=True, exist_ok=True)
        os.rename(root / src, root / dst)
        if append:
            with (root / dst).open("ab") as handle:
                handle.write(append)
    return change


def _chmod_x(rel: str) -> Change:
    return lambda root: (root / rel).chmod(0o755)


def _chmod_plain(rel: str) -> Change:
    return lambda root: (root / rel).chmod(0o644)


def _delete(rel: str) -> Change:
    return lambda root: (root / rel).unlink()


def _symlink(rel: str, target: str) -> Change:
    def change(root: Path) -> None:
        path = root / rel
        if path.is_symlink() or path.exists():
            path.unlink()
        os.symlink(target, path)
    return change


CASES: dict[str, list[Change]] = {
    "modified": [_edit("src/app.py", b"def add(a, b):\n    return a + b\n\n\nX = 1\n")],
    "new file": [_edit("src/new_mod.py", b"NEW = True\n")],
    "new file in new dir": [_edit("pkg/deep/__init__.py", b"")],
    "deleted": [_delete("src/util.py")],
    "renamed": [_rename("src/util.py", "src/helpers.py")],
    "renamed and edited": [_rename("src/util.py", "lib/util2.py", b"one more\n")],
    "mode +x": [_chmod_x("README.md")],
    "mode -x": [_chmod_plain("run.sh")],
    "new symlink": [_symlink("src/alias.py", "app.py")],
    "symlink retargeted": [_symlink("link", "README.md")],
    "file became symlink": [_symlink("README.md", "src/app.py")],
    "binary modified": [_edit("logo.bin", bytes(range(255, -1, -1)) * 4)],
    "binary new": [_edit("img.bin", b"\x00\x01\x02binary\x00")],
    "unicode path": [_edit("docs/a b ü.txt", b"changed\n")],
    "several at once": [_edit("src/app.py", b"X = 2\n"), _delete("README.md"),
                        _edit("new.txt", b"n\n"), _chmod_x("src/util.py")],
}


def _lay_out(root: Path, tree: Tree) -> None:
    for rel, entry in tree.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if entry.mode == MODE_LINK:
            os.symlink(entry.data.decode(), path)
        else:
            path.write_bytes(entry.data)
            path.chmod(0o755 if entry.mode == MODE_EXEC else 0o644)


def _git(args: list[str], cwd: Path) -> bytes:
    return subprocess.run(["git", *args], cwd=cwd, env=GIT_ENV, check=True,
                          capture_output=True).stdout


def git_made_oracle(tmp: Path, changes: list[Change]) -> bytes:
    repo = tmp / "oracle-repo"
    _lay_out(repo, FIXTURE)
    _git(["init", "-q"], repo)
    _git(["add", "-A"], repo)
    _git(["commit", "-q", "-m", "fixture"], repo)
    for change in changes:
        change(repo)
    _git(["add", "-A"], repo)
    return _git(["diff", "--cached"], repo)


@pytest.fixture
def store(tmp_path: Path) -> ObjectStore:
    return ObjectStore(tmp_path / "store.git")


@pytest.mark.parametrize("case", sorted(CASES))
def test_harness_diff_matches_git_diff(case: str, tmp_path: Path, store: ObjectStore) -> None:
    expected = git_made_oracle(tmp_path, CASES[case])
    record = build_record(FIXTURE, store)
    ws = tmp_path / "ws"
    record.materialize(ws)
    for change in CASES[case]:
        change(ws)
    got = workspace_change(record, ws, store)
    assert expected, "the case must change something"
    assert got.diff == expected
    assert set(got.touched) <= set(FIXTURE) | set(read_tree(ws))


def test_workspace_is_a_git_repository_of_the_fixture(tmp_path: Path, store: ObjectStore) -> None:
    record = build_record(FIXTURE, store)
    ws = tmp_path / "ws"
    record.materialize(ws)
    assert _git(["status", "--porcelain"], ws) == b""
    assert _git(["log", "--format=%s"], ws) == b"fixture\n"
    _git(["fsck", "--strict", "--no-dangling"], ws)  # raises on any malformed object or pack
    assert _git(["rev-parse", "HEAD^{tree}"], ws).decode().strip() == record.tree_id
    assert read_tree(ws) == FIXTURE
    (ws / "src" / "app.py").write_text("changed\n")
    assert _git(["status", "--porcelain"], ws) == b" M src/app.py\n"


def test_empty_fixture_is_an_empty_repository(tmp_path: Path, store: ObjectStore) -> None:
    record = build_record({}, store)
    ws = tmp_path / "ws"
    record.materialize(ws)
    assert _git(["status", "--porcelain"], ws) == b""
    (ws / "new.txt").write_text("x\n")
    assert _git(["status", "--porcelain"], ws) == b"?? new.txt\n"


def test_unchanged_workspace_has_empty_diff(tmp_path: Path, store: ObjectStore) -> None:
    record = build_record(FIXTURE, store)
    ws = tmp_path / "ws"
    record.materialize(ws)
    (ws / "emptydir").mkdir()  # git tracks no empty directories; neither do we
    change = workspace_change(record, ws, store)
    assert change.diff == b"" and change.touched == ()


def test_rewriting_dot_git_does_not_hide_an_edit(tmp_path: Path, store: ObjectStore) -> None:
    """A solver that commits its edit, ignores it and rebuilds .git still shows its diff."""
    record = build_record(FIXTURE, store)
    ws = tmp_path / "ws"
    record.materialize(ws)
    (ws / "src/app.py").write_bytes(b"cheat = True\n")
    (ws / ".gitignore").write_text("src/app.py\n")
    (ws / ".gitattributes").write_text("* -diff\n")
    shutil.rmtree(ws / ".git")
    _git(["init", "-q"], ws)
    _git(["add", "-A"], ws)
    _git(["commit", "-q", "-m", "everything is fine"], ws)
    assert _git(["status", "--porcelain"], ws) == b""  # git in the workspace sees nothing
    change = workspace_change(record, ws, store)
    assert b"+cheat = True" in change.diff
    assert {"src/app.py", ".gitignore", ".gitattributes"} <= set(change.touched)


def test_symlinks_are_recorded_not_followed(tmp_path: Path, store: ObjectStore) -> None:
    record = build_record(FIXTURE, store)
    ws = tmp_path / "ws"
    record.materialize(ws)
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP SECRET\n")
    os.symlink(secret, ws / "leak")
    os.symlink("../../outside", ws / "src" / "up")
    os.symlink("app.py", ws / "src" / "fine")
    change = workspace_change(record, ws, store)
    assert b"TOP SECRET" not in change.diff
    assert str(secret).encode() in change.diff
    assert change.escaping_links == ("leak", "src/up")


def test_diff_paths_reads_a_printed_diff() -> None:
    diff = (b"diff --git a/x.py b/y.py\nsimilarity index 90%\nrename from x.py\nrename to y.py\n"
            b"diff --git a/new.txt b/new.txt\nnew file mode 100644\n--- /dev/null\n"
            b"+++ b/new.txt\n@@ -0,0 +1 @@\n+x\n")
    assert diff_paths(diff) == ("new.txt", "x.py", "y.py")


def test_read_tree_skips_special_files(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    os.mkfifo(tmp_path / "pipe")
    tree = read_tree(tmp_path)
    assert list(tree) == ["f"]
    assert stat.S_ISFIFO((tmp_path / "pipe").lstat().st_mode)
