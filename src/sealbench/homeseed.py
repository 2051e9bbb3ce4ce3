"""`run --home-from DIR`: what every attempt's private HOME starts with (docs/running.md).

An agent keeps its configuration in HOME (`~/.config/...`, `~/.aider.conf.yml`); each attempt
gets a fresh HOME of its own, and DIR is copied into it before the solver starts. DIR itself is
never bound into the sandbox nor written: "seeded read-only". It is checked once, at run start
— size, entry count, kinds of entries — and summarised by a digest that the run header records,
so a resume can tell when the seed changed under it.
"""

from __future__ import annotations

import functools
import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from sealbench.errors import BadInput
from sealbench.ledger import canonical

MAX_SEED_BYTES = 64 * 1024 * 1024  # copied once per attempt: configuration, not a toolchain
MAX_SEED_ENTRIES = 10_000
# directories nested deeper than this are refused: configuration is shallow, and walking or
# copying a tree thousands of levels deep exhausts Python's recursion limit (a traceback)
MAX_SEED_DEPTH = 64
DIGEST_FORMAT = "sealbench-home-seed/v1"


@dataclass(frozen=True)
class HomeSeed:
    """A checked --home-from directory: where it is, what it holds (digest), how big it is."""

    path: Path
    digest: str
    entries: int
    bytes: int

    def header(self) -> dict[str, str | int]:
        """What the run header keeps: enough to say which seed a run used, no file contents."""
        return {"path": str(self.path), "sha256": self.digest, "entries": self.entries,
                "bytes": self.bytes}


def read_home_seed(given: Path) -> HomeSeed:
    """Check DIR and digest its content; one line (BadInput, exit 2) naming DIR and the entry
    at fault when it is missing, not a directory, too large, or holds something other than
    regular files, directories and symlinks (a FIFO would hang the copy, a device is no
    configuration), nests directories more than MAX_SEED_DEPTH deep, or has a directory that
    cannot be listed. Symlinks are recorded by their target, never followed."""
    root = given.resolve()
    if not root.is_dir():
        raise BadInput(f"--home-from {given}: not an existing directory")
    rows: list[list[str | int]] = []
    total = 0
    for directory, dirs, files in os.walk(root, onerror=functools.partial(_unlisted, given)):
        dirs.sort()
        if dirs and len(Path(directory).relative_to(root).parts) >= MAX_SEED_DEPTH:
            raise BadInput(f"--home-from {given}: nests directories more than "
                           f"{MAX_SEED_DEPTH} deep; seed HOME with configuration only")
        for name in sorted([*dirs, *files]):
            path = Path(directory) / name
            rows.append(_entry(given, root, path))
            if len(rows) > MAX_SEED_ENTRIES:
                raise BadInput(f"--home-from {given}: holds more than {MAX_SEED_ENTRIES} "
                               "entries; seed HOME with configuration only")
            total += int(rows[-1][3]) if rows[-1][1] == "file" else 0
            if total > MAX_SEED_BYTES:
                raise BadInput(f"--home-from {given}: holds more than {MAX_SEED_BYTES} bytes "
                               "(64 MiB); seed HOME with configuration only")
        dirs[:] = [d for d in dirs if not (Path(directory) / d).is_symlink()]
    digest = hashlib.sha256(canonical({"format": DIGEST_FORMAT, "entries": rows})).hexdigest()
    return HomeSeed(root, digest, len(rows), total)


def _unlisted(given: Path, exc: OSError) -> None:
    """os.walk skips a directory it cannot list; the seed would then differ from its copy."""
    raise BadInput(f"--home-from {given}: {exc.filename} cannot be listed "
                   f"({exc.strerror or exc})")


def _entry(given: Path, root: Path, path: Path) -> list[str | int]:
    """[relative path, kind, mode, size, sha256 of the content or the link's target]."""
    rel = path.relative_to(root).as_posix()
    try:
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            target = os.readlink(path)
            return [rel, "symlink", 0, 0, hashlib.sha256(os.fsencode(target)).hexdigest()]
        mode = stat.S_IMODE(info.st_mode)
        if stat.S_ISDIR(info.st_mode):
            return [rel, "dir", mode, 0, ""]
        if stat.S_ISREG(info.st_mode):
            if info.st_size > MAX_SEED_BYTES:  # refused before reading it all
                raise BadInput(f"--home-from {given}: {rel} alone is larger than "
                               f"{MAX_SEED_BYTES} bytes (64 MiB); seed HOME with "
                               "configuration only")
            return [rel, "file", mode, info.st_size, _file_digest(path)]
    except OSError as exc:
        raise BadInput(f"--home-from {given}: {rel} cannot be read "
                       f"({exc.strerror or exc})") from None
    raise BadInput(f"--home-from {given}: {rel} is neither a file, a directory nor a "
                   "symlink; it cannot be copied into HOME")


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
