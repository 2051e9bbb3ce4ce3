"""Workspaces and the harness's diff (DESIGN.md §4).

The solver gets a fresh git repository holding its task's fixture; the harness keeps its own
record of that fixture (bytes, modes, git blob ids) in memory and in a private object store the
solver cannot see. The result of an attempt is the diff between that record and what the solver
left behind, computed with real git on trees the harness wrote itself — never from the
workspace's `.git`, `.gitignore` or `.gitattributes`, which the solver controls.

Costs are paid once per fixture per run (`FixtureCache`), so an attempt costs writing the files
out, walking them back and, only when something changed, one `git diff` process.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sealbench.errors import InfrastructureError
from sealbench.gitrepo import FileEntry, repository_files, tree_objects

MODE_FILE = 0o100644
MODE_EXEC = 0o100755
MODE_LINK = 0o120000
GIT_DIR = ".git"
# Fixed identity and dates: the workspace's commit is the same bytes on every machine.
GIT_ENV_FIXED = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "sealbench",
    "GIT_AUTHOR_EMAIL": "fixture@sealbench.invalid",
    "GIT_COMMITTER_NAME": "sealbench",
    "GIT_COMMITTER_EMAIL": "fixture@sealbench.invalid",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z",
    "LC_ALL": "C",
}


def git_env(home: Path) -> dict[str, str]:
    """Environment for harness git calls: no user or system config can change the output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_ENV_FIXED)
    env["HOME"] = str(home)
    return env


def git(args: list[str], *, cwd: Path, home: Path, stdin: bytes | None = None) -> bytes:
    """Run git for the harness; a failure here is the harness's, never the solver's."""
    try:
        done = subprocess.run(
            ["git", *args], cwd=cwd, env=git_env(home), input=stdin,
            capture_output=True, check=False,
        )
    except OSError as exc:
        raise InfrastructureError(f"git could not start: {exc}") from exc
    if done.returncode != 0:
        message = done.stderr.decode(errors="replace").strip()
        raise InfrastructureError(f"git {args[0]} failed: {message}")
    return done.stdout


def blob_id(data: bytes) -> str:
    """The git blob id of some bytes: lets us compare with the fixture without running git."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


@dataclass(frozen=True)
class Entry:
    """A file as git sees it: mode, content (a symlink's content is its target) and blob id."""

    mode: int
    data: bytes
    blob: str

    @classmethod
    def of(cls, mode: int, data: bytes) -> Entry:
        return cls(mode, data, blob_id(data))


Tree = dict[str, Entry]


Scan = list[tuple[str, os.stat_result]]


class WorkspaceTooLarge(Exception):
    """The solver left more entries than the harness will look at."""


def scan(root: Path, max_entries: int | None = None) -> Scan:
    """(relative posix path, lstat) of every non-directory entry, `.git` skipped, symlinks not
    followed. Plain strings and scandir's cached stat: this runs after every attempt.

    Stops with WorkspaceTooLarge past max_entries (files and directories), so the harness's
    time and memory do not depend on how many empty files a solver leaves behind.
    """
    found: Scan = []
    top = str(root)
    stack = [""]
    seen = 0
    while stack:
        rel_dir = stack.pop()
        with os.scandir(os.path.join(top, rel_dir) if rel_dir else top) as it:
            for item in it:
                if item.name == GIT_DIR:
                    continue
                seen += 1
                if max_entries is not None and seen > max_entries:
                    raise WorkspaceTooLarge(f"more than {max_entries} files and directories")
                rel = f"{rel_dir}/{item.name}" if rel_dir else item.name
                if item.is_dir(follow_symlinks=False):
                    stack.append(rel)
                else:
                    found.append((rel, item.stat(follow_symlinks=False)))
    return found


def read_tree(root: Path, scanned: Scan | None = None) -> Tree:
    """Read a directory as git would track it: regular files and symlinks, `.git` skipped."""
    tree: Tree = {}
    top = str(root)
    for rel, info in scan(root) if scanned is None else scanned:
        full = os.path.join(top, rel)
        if stat.S_ISLNK(info.st_mode):
            tree[rel] = Entry.of(MODE_LINK, os.fsencode(os.readlink(full)))
        elif stat.S_ISREG(info.st_mode):
            with open(full, "rb") as handle:
                data = handle.read()
            tree[rel] = Entry.of(MODE_EXEC if info.st_mode & stat.S_IXUSR else MODE_FILE, data)
    return tree


# --------------------------------------------------------------------------- object store


class ObjectStore:
    """A private bare git repository: the harness writes trees here and asks git to diff them."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        git(["init", "--quiet", "--bare", "--template=", str(path)], cwd=path, home=path)
        self._known: set[str] = set()
        self._lock = threading.Lock()

    def _write_object(self, kind: bytes, data: bytes) -> str:
        raw = kind + b" %d\0" % len(data) + data
        oid = hashlib.sha1(raw, usedforsecurity=False).hexdigest()
        with self._lock:
            if oid in self._known:
                return oid
        target = self.path / "objects" / oid[:2] / oid[2:]
        if not target.exists():
            target.parent.mkdir(exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target.parent)
            with os.fdopen(fd, "wb") as handle:
                handle.write(zlib.compress(raw, 1))
            os.replace(tmp, target)
        with self._lock:
            self._known.add(oid)
        return oid

    def write_tree(self, tree: Tree) -> str:
        """Write every blob and tree object of a flat path map; return the root tree id."""
        root, objects = tree_objects({rel: FileEntry(e.mode, e.data) for rel, e in tree.items()})
        for obj in objects:
            self._write_object(obj.kind, obj.data)
        return root

    def diff(self, old_tree: str, new_tree: str) -> bytes:
        """What porcelain `git diff` prints between two trees (renames, modes, binary notes)."""
        return git(
            ["-c", "core.quotePath=true", "-c", "diff.renames=true", "-c", "color.ui=false",
             "diff", "--no-ext-diff", "--no-textconv", old_tree, new_tree],
            cwd=self.path, home=self.path,
        )


# --------------------------------------------------------------------------- fixture records


@dataclass
class FixtureRecord:
    """Everything needed to lay out a workspace and diff against it, read once per run."""

    files: Tree
    tree_id: str
    git_files: dict[str, tuple[int, bytes]] = field(default_factory=dict)
    git_dirs: tuple[str, ...] = ()  # empty ones too: git wants refs/ to exist

    def materialize(self, dest: Path) -> None:
        """Write the fixture and its one-commit `.git` into a fresh directory."""
        top = str(dest)
        for rel in self.layout_dirs:
            os.makedirs(os.path.join(top, rel), exist_ok=True)
        for rel, mode, data in self.layout_files:
            _write(os.path.join(top, rel), mode, data)

    @functools.cached_property
    def layout_files(self) -> tuple[tuple[str, int, bytes], ...]:
        files = [(f"{GIT_DIR}/{rel}", mode, data) for rel, (mode, data) in self.git_files.items()]
        files += [(rel, entry.mode, entry.data) for rel, entry in self.files.items()]
        return tuple(files)

    @functools.cached_property
    def layout_dirs(self) -> tuple[str, ...]:
        """Every directory to create, parents first (computed once per fixture)."""
        dirs = {""} | {f"{GIT_DIR}/{rel}" for rel in self.git_dirs}
        for rel, _, _ in self.layout_files:
            parent = os.path.dirname(rel)
            while parent not in dirs:
                dirs.add(parent)
                parent = os.path.dirname(parent)
        return tuple(sorted(dirs, key=lambda d: d.count("/") + bool(d)))


def _write(path: str, mode: int, data: bytes) -> None:
    if mode == MODE_LINK:
        os.symlink(os.fsdecode(data), path)
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o755 if mode == MODE_EXEC else 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def build_record(files: Tree, store: ObjectStore) -> FixtureRecord:
    """The fixture's record: its tree in the harness's store, and the one-commit `.git` every
    workspace of it gets (written in git's formats directly, see gitrepo.py)."""
    tree_id = store.write_tree(files)
    git_files, git_dirs = repository_files(
        {rel: FileEntry(entry.mode, entry.data) for rel, entry in files.items()})
    return FixtureRecord(files, tree_id, {rel: (MODE_FILE, data) for rel, data in
                                          git_files.items()}, tuple(git_dirs))


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Change:
    """What an attempt did to its workspace, as the harness saw it."""

    diff: bytes
    touched: tuple[str, ...]
    escaping_links: tuple[str, ...]
    oversize: str | None = None  # why the workspace was not read: too big, too many entries
    written: tuple[str, ...] = ()  # workspace paths changed, when the diff came from stdout
    unreadable: str | None = None  # the solver left something the harness cannot read back


def touched_paths(before: Tree, after: Tree) -> tuple[str, ...]:
    """Paths added, removed or changed (a rename touches two)."""
    changed = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
    return tuple(sorted(changed))


def escaping_links(root: Path, tree: Tree) -> tuple[str, ...]:
    """Symlinks whose target lies outside the workspace; recorded, never followed."""
    bad: list[str] = []
    for rel, entry in tree.items():
        if entry.mode != MODE_LINK:
            continue
        target = os.fsdecode(entry.data)
        resolved = os.path.normpath(os.path.join(root, os.path.dirname(rel), target))
        if os.path.isabs(target) or not Path(resolved).is_relative_to(root):
            bad.append(rel)
    return tuple(sorted(bad))


MAX_ENTRIES = 100_000


def printable(path: str) -> str:
    """A file name fit for records and terminals: undecodable bytes shown as \\xNN."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def workspace_change(record: FixtureRecord, workspace: Path, store: ObjectStore,
                     max_bytes: int | None = None, *, with_diff: bool = True,
                     max_touched: int | None = None) -> Change:
    """Diff the workspace against the harness's own record of the fixture.

    A workspace past max_bytes or MAX_ENTRIES is not read, and one that touches more than
    max_touched files is not diffed: the harness's time and memory must not depend on what
    the solver wrote. What the harness cannot read back (a name too long for the OS, say) is
    the solver's doing, reported in `unreadable`, never a harness failure.
    """
    try:
        scanned = scan(workspace, MAX_ENTRIES)
        size = sum(info.st_size for _, info in scanned)
        if max_bytes is not None and size > max_bytes:
            return Change(b"", (), (), oversize=f"workspace grew to {size} bytes, past "
                                                f"budget.max_workspace_bytes ({max_bytes})")
        after = read_tree(workspace, scanned)
    except WorkspaceTooLarge as exc:
        return Change(b"", (), (), oversize=f"workspace has {exc}")
    except OSError as exc:
        return Change(b"", (), (), unreadable=f"{exc.strerror or exc}: "
                                              f"{printable(str(exc.filename or ''))[-200:]}")
    touched = touched_paths(record.files, after)
    links = escaping_links(workspace, after)
    shown = tuple(printable(p) for p in touched)
    if not touched or not with_diff or (max_touched is not None and len(touched) > max_touched):
        return Change(b"", shown, tuple(printable(p) for p in links))
    new_tree = store.write_tree(after)
    return Change(store.diff(record.tree_id, new_tree), shown,
                  tuple(printable(p) for p in links))


def diff_paths(diff: bytes) -> tuple[str, ...]:
    """Paths a git-format diff touches, for a diff the solver printed itself."""
    paths: set[str] = set()
    for line in diff.splitlines():
        if line.startswith(b"diff --git "):
            rest = line[len(b"diff --git "):].decode(errors="replace")
            if " b/" in rest:
                a, b = rest.split(" b/", 1)
                paths.update({a.removeprefix("a/"), b})
        elif line.startswith((b"--- a/", b"+++ b/")):
            paths.add(line[6:].decode(errors="replace").rstrip("\t"))
    return tuple(sorted(paths))


def remove_tree(path: Path) -> None:
    """Remove a workspace whatever modes the solver left on it."""

    def onerror(func: Callable[..., object], target: str, _exc: object) -> None:
        try:
            os.chmod(os.path.dirname(target), 0o700)
            os.chmod(target, 0o700)
            func(target)
        except OSError:
            pass

    shutil.rmtree(path, onerror=onerror)  # onexc is 3.12+
