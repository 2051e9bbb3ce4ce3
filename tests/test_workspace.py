"""The harness's diff is what `git diff --binary` prints for the same change
(docs/protocol.md#solverdiff_source, docs/isolation.md).

Each case builds a fixture, makes one kind of change both in a real git repository (the way a
user makes an oracle) and in a harness workspace, and compares the bytes. Binary content is
part of the diff: two different binary edits never produce the same diff, and an oracle made
with `git diff --binary` seals and passes (the end-to-end test at the bottom).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from example_helpers import metric
from toy import GIT_ENV, SOLVER, add_dataset_task, make_protocol, write_solver

from sealbench.ledger import Ledger
from sealbench.patchpaths import diff_paths
from sealbench.runner import RunOptions, run
from sealbench.sealing import seal
from sealbench.workspace import (
    MODE_EXEC,
    MODE_FILE,
    MODE_LINK,
    Entry,
    FixtureRecord,
    ObjectStore,
    Tree,
    build_record,
    read_tree,
    survey,
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
    return _git(["diff", "--cached", "--binary"], repo)


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


def _to_symlink(path: Path, outside: Path) -> None:
    path.unlink()
    os.symlink(outside, path)


def _to_fifo(path: Path, outside: Path) -> None:
    path.unlink()
    os.mkfifo(path)


@pytest.mark.parametrize("swap", [_to_symlink, _to_fifo], ids=["symlink", "fifo"])
def test_read_tree_never_reads_through_a_file_swapped_since_the_survey(
        tmp_path: Path, swap: Callable[[Path, Path], None]) -> None:
    """read_tree reads what the survey saw as regular files: one that became a symlink to a
    host secret, or a FIFO nobody writes to, since then is an error — never the secret's
    content, never a harness stuck forever on open()."""
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP SECRET\n")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")
    scanned, _ = survey(ws)
    swap(ws / "a.txt", secret)
    with pytest.raises(OSError):
        read_tree(ws, scanned)


@pytest.mark.parametrize(("files", "git_dirs"), [
    ({}, ()),
    ({}, ("objects/info", "refs/heads/deep/er")),  # parents named by no file nor dir
    ({"a/b/c/d.txt": Entry.of(MODE_FILE, b"d\n")}, ()),
    ({"run.sh": Entry.of(MODE_EXEC, b"#!/bin/sh\n"), "lnk": Entry.of(MODE_LINK, b"run.sh"),
      "x/y": Entry.of(MODE_FILE, b"")}, ("refs/tags",)),
])
def test_materialize_lays_out_every_file_and_directory(
        tmp_path: Path, files: Tree, git_dirs: tuple[str, ...]) -> None:
    """Every directory (empty ones and their parents too), file, mode and symlink of the
    record, and nothing else; the destination is created here and must not exist."""
    record = FixtureRecord(files, "0" * 40, {"HEAD": (MODE_FILE, b"ref: refs/heads/main\n")},
                           git_dirs)
    ws = tmp_path / "ws"
    record.materialize(ws)
    assert read_tree(ws) == files
    for rel in git_dirs:
        assert (ws / ".git" / rel).is_dir()
    assert (ws / ".git" / "HEAD").read_bytes() == b"ref: refs/heads/main\n"
    for rel, entry in files.items():
        if entry.mode != MODE_LINK:
            assert bool((ws / rel).stat().st_mode & stat.S_IXUSR) == (entry.mode == MODE_EXEC)
    with pytest.raises(FileExistsError):
        record.materialize(ws)


# --------------------------------------------------------------------------- binary content

LOGO_A = bytes(range(255, -1, -1)) * 4
LOGO_B = bytes(range(256)) * 3 + bytes(range(255, -1, -1))


def _harness_diff(tmp_path: Path, store: ObjectStore, name: str, data: bytes) -> bytes:
    record = build_record(FIXTURE, store)
    ws = tmp_path / name
    record.materialize(ws)
    (ws / "logo.bin").write_bytes(data)
    return workspace_change(record, ws, store).diff


def test_two_different_binary_edits_never_give_the_same_diff(tmp_path: Path,
                                                             store: ObjectStore) -> None:
    """Plain `git diff` prints "Binary files ... differ" for both edits, so any binary change
    matched any other; the harness's diff carries the content, and the example's exact-diff
    metric tells the two apart."""
    diff_a = _harness_diff(tmp_path, store, "ws-a", LOGO_A)
    diff_b = _harness_diff(tmp_path, store, "ws-b", LOGO_B)
    assert b"GIT binary patch" in diff_a and b"GIT binary patch" in diff_b
    assert diff_a != diff_b
    oracle = tmp_path / "oracle.patch"
    oracle.write_bytes(git_made_oracle(tmp_path / "a", [_edit("logo.bin", LOGO_A)]))
    assert oracle.read_bytes() == diff_a
    exact = metric()
    assert exact.score(diff_a.decode(), str(oracle))["pass"] is True
    assert exact.score(diff_b.decode(), str(oracle))["pass"] is False


def test_without_binary_git_cannot_tell_binary_edits_apart(tmp_path: Path) -> None:
    """The defect `--binary` removes, shown on real git: without it, two different binary
    edits differ only in their `index` line, which the exact-diff metric ignores."""
    texts = []
    for name, data in (("a", LOGO_A), ("b", LOGO_B)):
        repo = tmp_path / name
        _lay_out(repo, FIXTURE)
        _git(["init", "-q"], repo)
        _git(["add", "-A"], repo)
        _git(["commit", "-q", "-m", "fixture"], repo)
        (repo / "logo.bin").write_bytes(data)
        texts.append(_git(["diff"], repo))
    assert b"Binary files a/logo.bin and b/logo.bin differ" in texts[0]
    oracle = tmp_path / "plain-oracle.patch"
    oracle.write_bytes(texts[0])
    assert metric().score(texts[1].decode(), str(oracle))["pass"] is True


def test_a_binary_diff_applies_back_with_git_apply(tmp_path: Path, store: ObjectStore) -> None:
    """The recorded diff rebuilds the attempt's files (what re-grading a diff relies on)."""
    diff = _harness_diff(tmp_path, store, "ws", LOGO_B)
    target = tmp_path / "target"
    _lay_out(target, FIXTURE)
    subprocess.run(["git", "apply", "-"], cwd=target, input=diff, check=True, env=GIT_ENV)
    assert (target / "logo.bin").read_bytes() == LOGO_B


def test_a_binary_diff_past_the_cap_is_cut_and_flagged(tmp_path: Path,
                                                       store: ObjectStore) -> None:
    """max_diff_bytes caps binary content too (random bytes do not compress)."""
    noise = os.urandom(1 << 20)
    record = build_record(FIXTURE, store)
    ws = tmp_path / "ws"
    record.materialize(ws)
    (ws / "noise.bin").write_bytes(noise)
    change = workspace_change(record, ws, store, max_diff=64 * 1024)
    assert change.diff_too_large is not None and "max_diff_bytes" in change.diff_too_large
    assert len(change.diff) == 64 * 1024
    whole = workspace_change(record, ws, store, max_diff=4 << 20)
    assert whole.diff_too_large is None and len(whole.diff) > len(noise)  # base85: 5 per 4


BINARY_SOLVER = SOLVER + '''
import json
if os.path.exists("logo.bin"):
    open("logo.bin", "wb").write(bytes(json.loads(os.environ["LOGO"])))
'''


@pytest.mark.sandbox
@pytest.mark.parametrize(("logo", "outcome"), [(LOGO_A, "pass"), (LOGO_B, "fail")],
                         ids=["same-edit", "different-edit"])
def test_a_binary_oracle_made_with_git_diff_binary_seals_and_grades(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, logo: bytes, outcome: str) -> None:
    """Acceptance 4 of issue 10: a task whose oracle `git diff --binary` made seals (the
    oracle solver applies it and passes, do-nothing fails), a solver making the same binary
    edit passes and one making a different binary edit fails."""
    proto = make_protocol(tmp_path / "proto", n=3)
    add_dataset_task(proto, "bin-001", {"logo.bin": bytes(range(256)) * 4},
                     {"logo.bin": LOGO_A}, "Redraw logo.bin.")
    assert b"GIT binary patch" in (proto / "oracles" / "bin-001.patch").read_bytes()
    ledger = Ledger(tmp_path / "ledger.sqlite")
    seal(proto, ledger=ledger)  # the instrument check: oracle passes, do-nothing fails
    monkeypatch.setenv("LOGO", json.dumps(list(logo)))
    result = run(proto, write_solver(tmp_path / "agent", BINARY_SOLVER), ledger=ledger,
                 options=RunOptions(jobs=2, env=("LOGO",)))
    rows = {r.task_id: r.record for r in ledger.attempts(result.run_id, "dataset")}
    assert rows["bin-001"]["outcome"] == outcome, rows["bin-001"]["detail"]
    assert b"GIT binary patch" in ledger.get_artifact(rows["bin-001"]["diff"])
    assert all(rows[f"toy-{i:03d}"]["outcome"] == "pass" for i in range(3))
