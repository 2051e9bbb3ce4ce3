"""Workspaces and the harness's diff (docs/running.md, docs/isolation.md).

The solver gets a fresh git repository holding its task's fixture; the harness keeps its own
record of that fixture (bytes, modes, git blob ids) in memory and in a private object store the
solver cannot see. The result of an attempt is the diff between that record and what the solver
left behind, computed with real git on trees the harness wrote itself — never from the
workspace's `.git`, `.gitignore` or `.gitattributes`, which the solver controls.

Costs are paid once per fixture per run (`FixtureCache`), so an attempt costs writing the files
out, walking them back and, only when something changed, one `git diff` process.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import os
import stat
import subprocess
import tempfile
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
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


MAX_DEPTH = 256


def survey(root: Path, max_entries: int | None = None,
           max_depth: int = MAX_DEPTH) -> tuple[Scan, int]:
    """(relative posix path, lstat) of every non-directory entry git would track — `.git`
    directories skipped, symlinks not followed — and the bytes of *everything* under root,
    `.git` and nested `*/.git` included (they count toward budget.max_workspace_bytes like any
    other file: a solver must not be able to fill the disk from them unseen). Plain strings
    and scandir's cached stat: this runs after every attempt.

    Stops with WorkspaceTooLarge past max_entries (files and directories, `.git` included)
    or past max_depth levels of directories, so the harness's time and memory do not depend
    on what the solver left behind.
    """
    found: Scan = []
    size = 0
    top = str(root)
    stack: list[tuple[str, int, bool]] = [("", 0, False)]  # (dir, depth, inside a .git)
    seen = 0
    while stack:
        rel_dir, depth, in_git = stack.pop()
        with os.scandir(os.path.join(top, rel_dir) if rel_dir else top) as it:
            for item in it:
                seen += 1
                if max_entries is not None and seen > max_entries:
                    raise WorkspaceTooLarge(f"more than {max_entries} files and directories")
                rel = f"{rel_dir}/{item.name}" if rel_dir else item.name
                if item.is_dir(follow_symlinks=False):
                    if depth + 1 > max_depth:
                        raise WorkspaceTooLarge(f"directories nested more than {max_depth} "
                                                "levels deep")
                    stack.append((rel, depth + 1, in_git or item.name == GIT_DIR))
                    continue
                info = item.stat(follow_symlinks=False)
                size += info.st_size
                if not in_git and item.name != GIT_DIR:
                    found.append((rel, info))
    return found, size


def scan(root: Path, max_entries: int | None = None) -> Scan:
    """The entries git would track under root (see survey)."""
    return survey(root, max_entries)[0]


def read_tree(root: Path, scanned: Scan | None = None) -> Tree:
    """Read a directory as git would track it: regular files and symlinks, `.git` skipped."""
    tree: Tree = {}
    top = str(root)
    for rel, info in scan(root) if scanned is None else scanned:
        full = os.path.join(top, rel)
        if stat.S_ISLNK(info.st_mode):
            tree[rel] = Entry.of(MODE_LINK, os.fsencode(os.readlink(full)))
        elif stat.S_ISREG(info.st_mode):
            data = _read_file(full, info.st_size)
            tree[rel] = Entry.of(MODE_EXEC if info.st_mode & stat.S_IXUSR else MODE_FILE, data)
    return tree


def _read_file(path: str, size_hint: int) -> bytes:
    """A regular file's whole content. os-level (a buffered file object costs twice as much,
    and this runs for every file of every attempt) and O_NOFOLLOW: a file the survey saw as
    regular that is a symlink by now is an error (ELOOP), never read through, whatever it
    points at."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped for a FIFO or device since
            raise OSError(errno.EINVAL, "no longer a regular file", path)
        chunks = [os.read(fd, size_hint + 1)]
        while chunks[-1]:
            chunks.append(os.read(fd, 1 << 20))
        return b"".join(chunks)
    finally:
        os.close(fd)


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

    def diff(self, old_tree: str, new_tree: str, max_bytes: int | None = None) -> bytes:
        """What `git diff --binary` prints between two trees: renames, modes, and binary
        files *with their content*, as `git apply` takes them (and, on a binary file's
        `index` line, its full blob ids, which `git apply` checks).

        `--binary` because without it git prints only "Binary files a/x and b/x differ": any
        change to a binary file would look like any other to a metric, an oracle made with
        `git diff --binary` could never match, and the recorded diff could not be re-applied.

        With max_bytes, at most max_bytes + 1 bytes come back (one more than allowed says the
        diff is too large) and git is stopped there: the harness's memory and the artifact
        store must not grow with what the solver wrote (binary content included).
        """
        args = ["-c", "core.quotePath=true", "-c", "diff.renames=true", "-c", "color.ui=false",
                "diff", "--binary", "--no-ext-diff", "--no-textconv", old_tree, new_tree]
        if max_bytes is None:
            return git(args, cwd=self.path, home=self.path)
        return git_capped(args, cwd=self.path, home=self.path, max_bytes=max_bytes)


def git_capped(args: list[str], *, cwd: Path, home: Path, max_bytes: int) -> bytes:
    """Like git(), but reads at most max_bytes + 1 bytes of output, then stops git."""
    with tempfile.TemporaryFile() as errors:
        try:
            proc = subprocess.Popen(["git", *args], cwd=cwd, env=git_env(home),
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=errors)
        except OSError as exc:
            raise InfrastructureError(f"git could not start: {exc}") from exc
        assert proc.stdout is not None
        out = bytearray()
        with proc.stdout:
            while len(out) <= max_bytes:
                chunk = os.read(proc.stdout.fileno(), 1 << 16)
                if not chunk:
                    break
                out += chunk
        if len(out) > max_bytes:
            proc.kill()
            proc.wait()
            return bytes(out[: max_bytes + 1])
        if proc.wait() != 0:
            errors.seek(0)
            message = errors.read(4000).decode(errors="replace").strip()
            raise InfrastructureError(f"git {args[0]} failed: {message}")
        return bytes(out)


# --------------------------------------------------------------------------- fixture records


@dataclass
class FixtureRecord:
    """Everything needed to lay out a workspace and diff against it, read once per run."""

    files: Tree
    tree_id: str
    git_files: dict[str, tuple[int, bytes]] = field(default_factory=dict)
    git_dirs: tuple[str, ...] = ()  # empty ones too: git wants refs/ to exist

    def materialize(self, dest: Path, *, made: bool = False) -> None:
        """Create `dest` (its parent must exist, it must not) holding the fixture and its
        one-commit `.git`; with made=True, fill `dest`, which exists and is empty (an
        attempt's sandbox may already bind it: sealbench.process.Confined)."""
        if not made:
            os.mkdir(dest)
        # relative to the new directory's descriptor: the kernel walks a path of a few
        # components instead of the whole scratch path, once per entry
        top = os.open(dest, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            for rel in self.layout_dirs[1:]:  # the first is "" (dest itself)
                os.mkdir(rel, dir_fd=top)
            for rel, mode, data in self.layout_files:
                write_entry(rel, mode, data, top)
        finally:
            os.close(top)

    @functools.cached_property
    def layout_files(self) -> tuple[tuple[str, int, bytes], ...]:
        files = [(f"{GIT_DIR}/{rel}", mode, data) for rel, (mode, data) in self.git_files.items()]
        files += [(rel, entry.mode, entry.data) for rel, entry in self.files.items()]
        return tuple(files)

    @functools.cached_property
    def layout_dirs(self) -> tuple[str, ...]:
        """Every directory to create, parents first (computed once per fixture)."""
        dirs = {""}
        wanted = [f"{GIT_DIR}/{rel}/x" for rel in self.git_dirs]
        for rel in [*wanted, *(rel for rel, _, _ in self.layout_files)]:
            parent = os.path.dirname(rel)
            while parent not in dirs:
                dirs.add(parent)
                parent = os.path.dirname(parent)
        return tuple(sorted(dirs, key=lambda d: d.count("/") + bool(d)))


def write_entry(path: str, mode: int, data: bytes, dir_fd: int | None = None) -> None:
    """Create one file (or symlink) that must not exist yet (path relative to dir_fd when
    given)."""
    if mode == MODE_LINK:
        os.symlink(os.fsdecode(data), path, dir_fd=dir_fd)
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                 0o755 if mode == MODE_EXEC else 0o644, dir_fd=dir_fd)
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
    fault: str | None = None  # other solver-controlled state it cannot read back (refuse file)
    diff_too_large: str | None = None  # the diff passed budget.max_diff_bytes (kept: the cap)


def touched_paths(before: Tree, after: Tree) -> tuple[str, ...]:
    """Paths added, removed or changed (a rename touches two)."""
    changed = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
    return tuple(sorted(changed))


MAX_LINK_HOPS = 40  # the kernel's own limit on links followed in one lookup


def link_escapes(rel: str, target: str, readlink: Callable[[str], str | None]) -> bool:
    """Does the symlink at workspace path `rel`, pointing at `target`, lead out of the root?

    Resolved the way the kernel would, one component at a time, with every link on the way
    followed (`readlink(path)` gives a link's target, None for anything else): `d -> .` then
    `e -> d/d/../..` is outside, though `normpath` says it is not. An absolute target, a `..`
    above the root, or a chain longer than MAX_LINK_HOPS counts as escaping.
    """
    if os.path.isabs(target):
        return True
    parts = rel.split("/")[:-1]
    pending = list(reversed(target.split("/")))
    hops = 0
    while pending:
        part = pending.pop()
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                return True
            parts.pop()
            continue
        found = readlink("/".join([*parts, part]))
        if found is None:
            parts.append(part)
            continue
        hops += 1
        if hops > MAX_LINK_HOPS or os.path.isabs(found):
            return True
        pending.extend(reversed(found.split("/")))
    return False


def escaping_links(root: Path, tree: Tree) -> tuple[str, ...]:
    """Symlinks whose chain leads outside the workspace; judged, never followed by the
    harness (readlink and lstat only, see link_escapes)."""
    top = str(root)

    def readlink(rel: str) -> str | None:
        try:
            return os.fsdecode(os.readlink(os.path.join(top, rel)))
        except OSError:  # not a link, or not there
            return None

    return tuple(sorted(rel for rel, entry in tree.items()
                        if entry.mode == MODE_LINK
                        and link_escapes(rel, os.fsdecode(entry.data), readlink)))


MAX_ENTRIES = 100_000


def printable(path: str) -> str:
    """A file name fit for records and terminals: undecodable bytes shown as \\xNN."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def workspace_change(record: FixtureRecord, workspace: Path, store: ObjectStore,
                     max_bytes: int | None = None, *, with_diff: bool = True,
                     max_touched: int | None = None, max_diff: int | None = None) -> Change:
    """Diff the workspace against the harness's own record of the fixture.

    A workspace past max_bytes or MAX_ENTRIES is not read, and one that touches more than
    max_touched files is not diffed: the harness's time and memory must not depend on what
    the solver wrote. What the harness cannot read back (a name too long for the OS, say) is
    the solver's doing, reported in `unreadable`, never a harness failure.
    """
    try:
        scanned, size = survey(workspace, MAX_ENTRIES)
        if max_bytes is not None and size > max_bytes:
            return Change(b"", (), (), oversize=f"workspace grew to {size} bytes (.git "
                                                f"included), past budget.max_workspace_bytes "
                                                f"({max_bytes})")
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
    diff = store.diff(record.tree_id, new_tree, max_diff)
    return capped(Change(diff, shown, tuple(printable(p) for p in links)), max_diff)


def capped(change: Change, max_diff: int | None) -> Change:
    """The change with its diff cut to max_diff bytes, and why, when it was longer."""
    if max_diff is None or len(change.diff) <= max_diff:
        return change
    return replace(change, diff=change.diff[:max_diff],
                   diff_too_large=f"diff larger than budget.max_diff_bytes ({max_diff} bytes); "
                                  f"only the first {max_diff} bytes are kept")


def remove_tree(path: Path) -> bool:
    """Remove a directory tree whatever the solver left in it; True when it is gone.

    Iterative and fd-relative, so neither depth (a 1,500-level tree) nor path length (deeper
    than PATH_MAX) can stop it or exhaust the recursion limit, and a constant handful of
    descriptors is open whatever the depth. Never raises. Modes are changed only on
    directories *inside* the tree (to let us list and empty them), never on its parent: a
    tree that vanished under us (another sweep got it first) is simply gone. The caller must
    own the tree — no process may still write in it.
    """
    try:
        top = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return True
    except OSError as exc:
        if exc.errno == errno.ENOTDIR or exc.errno == errno.ELOOP:  # a file or a symlink
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            return True
        if exc.errno != errno.EACCES:
            return False
        with contextlib.suppress(OSError):  # the tree's own root, not its parent
            os.chmod(path, 0o700, follow_symlinks=False)
        try:
            top = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            return False
    try:
        _empty_directory(top)
    except OSError:
        pass  # whatever could not go is left; the rmdir below says so
    finally:
        os.close(top)
    try:
        os.rmdir(path)
    except FileNotFoundError:
        pass
    except OSError:
        return False
    return True


_DIR_MODE_NEEDED = stat.S_IRWXU


def _open_child_dir(parent: int, name: str) -> int | None:
    """A directory inside the tree, opened without following links; its mode fixed if the
    solver took our access away (only inside the tree being removed)."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    try:
        return os.open(name, flags, dir_fd=parent)
    except PermissionError:
        pass
    except OSError:
        return None
    try:  # known to be a directory (lstat) and nothing else writes here: chmod is safe
        os.chmod(name, 0o700, dir_fd=parent)
        return os.open(name, flags, dir_fd=parent)
    except OSError:
        return None


def _empty_directory(top: int) -> None:
    """Remove everything below the directory open at `top`, depth first, without recursion.

    Going down, only the current directory stays open; the way back up is `..`, checked
    against the device and inode remembered on the way down, so a rename cannot send us
    anywhere outside the tree. A directory that cannot be entered or emptied is remembered
    and skipped, so the walk always ends.
    """
    fd = os.dup(top)
    trail: list[tuple[int, int, str, int]] = []  # parent's (st_dev, st_ino), child name, inode
    failed: set[tuple[int, int]] = set()  # (st_dev of the parent, inode) of given-up dirs
    try:
        while True:
            info = os.fstat(fd)
            if info.st_mode & _DIR_MODE_NEEDED != _DIR_MODE_NEEDED:
                with contextlib.suppress(OSError):
                    os.fchmod(fd, info.st_mode | _DIR_MODE_NEEDED)
            child = _first_nonempty_subdir(fd, info.st_dev, failed)
            if child is not None:
                sub = _open_child_dir(fd, child[0])
                if sub is None:
                    failed.add((info.st_dev, child[1]))
                    continue
                trail.append((info.st_dev, info.st_ino, *child))
                os.close(fd)
                fd = sub
                continue
            if not trail:
                return
            dev, ino, name, inode = trail.pop()
            parent = os.open("..", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = parent
            seen = os.fstat(fd)
            if (seen.st_dev, seen.st_ino) != (dev, ino):
                return  # moved while we were inside: stop rather than wander
            try:
                os.rmdir(name, dir_fd=fd)
            except OSError:
                failed.add((dev, inode))
    finally:
        os.close(fd)


def _first_nonempty_subdir(fd: int, dev: int, failed: set[tuple[int, int]]
                           ) -> tuple[str, int] | None:
    """Unlink every non-directory and remove every empty directory in one directory; return
    the first subdirectory that still has something in it (name, inode), if any."""
    try:
        with os.scandir(fd) as entries:
            for entry in entries:
                if (dev, entry.inode()) in failed:
                    continue
                try:
                    is_dir = entry.is_dir(follow_symlinks=False)
                except OSError:
                    is_dir = False
                if not is_dir:
                    with contextlib.suppress(OSError):
                        os.unlink(entry.name, dir_fd=fd)
                    continue
                try:
                    os.rmdir(entry.name, dir_fd=fd)
                except OSError:
                    return entry.name, entry.inode()
    except OSError:
        return None
    return None
