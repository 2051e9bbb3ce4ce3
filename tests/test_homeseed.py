"""`run --home-from DIR`: what is accepted, what is refused, what the digest covers."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from sealbench import homeseed
from sealbench.errors import BadInput
from sealbench.homeseed import read_home_seed
from sealbench.workspace import remove_tree


def _seed(root: Path) -> Path:
    (root / ".config" / "agent").mkdir(parents=True)
    (root / ".config" / "agent" / "config.toml").write_text("model = 'x'\n")
    os.symlink("/etc/hostname", root / "link")
    return root


def _fifo(root: Path) -> None:
    os.mkfifo(root / ".config" / "pipe")


@pytest.mark.parametrize(("change", "message"), [
    (lambda root: _fifo(root), r"\.config/pipe is neither a file, a directory nor a symlink"),
    (lambda root: (root / "big").write_bytes(b"x" * 2048), r"big alone is larger than 1024"),
    (lambda root: [(root / f"f{i}").write_text("x") for i in range(9)],
     r"holds more than 8 entries"),
])
def test_what_is_refused_names_dir_and_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             change: Callable[[Path], object],
                                             message: str) -> None:
    monkeypatch.setattr(homeseed, "MAX_SEED_BYTES", 1024)
    monkeypatch.setattr(homeseed, "MAX_SEED_ENTRIES", 8)
    root = _seed(tmp_path / "seed")
    change(root)
    with pytest.raises(BadInput, match=rf"^--home-from {root}: .*{message}"):
        read_home_seed(root)


def test_total_size_is_capped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(homeseed, "MAX_SEED_BYTES", 1024)
    root = _seed(tmp_path / "seed")
    for i in range(3):
        (root / f"part{i}").write_bytes(b"x" * 400)
    with pytest.raises(BadInput, match=r"holds more than 1024 bytes"):
        read_home_seed(root)


@pytest.mark.parametrize("given", ["missing", "a-file"])
def test_not_a_directory(tmp_path: Path, given: str) -> None:
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(BadInput, match=r"^--home-from .*: not an existing directory$"):
        read_home_seed(tmp_path / given)


@pytest.mark.parametrize(("edit", "same"), [
    (lambda root: None, True),
    (lambda root: (root / ".config" / "agent" / "config.toml").write_text("model = 'y'\n"),
     False),
    (lambda root: (root / ".config" / "agent" / "config.toml").chmod(0o600), False),
    (lambda root: (root / "new").mkdir(), False),
    (lambda root: (os.remove(root / "link"), os.symlink("/etc/passwd", root / "link")), False),
], ids=["unchanged", "content", "mode", "new-dir", "link-target"])
def test_the_digest_follows_content_mode_and_link_text(tmp_path: Path,
                                                       edit: Callable[[Path], object],
                                                       same: bool) -> None:
    root = _seed(tmp_path / "seed")
    before = read_home_seed(root)
    edit(root)
    after = read_home_seed(root)
    assert (before.digest == after.digest) is same
    assert after.path == root.resolve() and after.entries >= 4


def test_a_symlink_is_recorded_never_followed(tmp_path: Path) -> None:
    """A link to a directory outside is one entry: nothing behind it is read or counted."""
    root = _seed(tmp_path / "seed")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "huge").write_bytes(b"x" * 100_000)
    os.symlink(outside, root / "out")
    seed = read_home_seed(root)
    assert seed.entries == 5 and seed.bytes == len("model = 'x'\n")
    assert seed.header() == {"path": str(root.resolve()), "sha256": seed.digest,
                             "entries": 5, "bytes": seed.bytes}


def test_a_seed_nested_past_the_depth_cap_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    """Attack (careless operator): a seed thousands of directories deep used to exhaust the
    recursion limit of os.walk (and of the per-attempt copy) with a RecursionError."""
    root = tmp_path / "seed"
    root.mkdir()
    folder = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:  # relative steps: the absolute path would pass PATH_MAX long before the depth
        for _ in range(1200):
            os.mkdir("d", dir_fd=folder)
            inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=folder)
            os.close(folder)
            folder = inner
    finally:
        os.close(folder)
    try:
        with pytest.raises(BadInput, match=rf"^--home-from {root}: nests directories more "
                           rf"than {homeseed.MAX_SEED_DEPTH} deep"):
            read_home_seed(root)
    finally:  # rmtree (pytest's, of old base temps) recurses per level: this one does not
        assert remove_tree(root)


def test_a_directory_that_cannot_be_listed_is_refused(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """os.walk skips what it cannot list: the digest would silently leave it out."""
    root = _seed(tmp_path / "seed")
    real = os.scandir

    def scandir(path: str) -> object:
        if str(path).endswith("agent"):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    with pytest.raises(BadInput, match=r"agent cannot be listed \(Permission denied\)"):
        read_home_seed(root)
