"""Exact checks: paths of a printed diff read with git's rules, symlink chains resolved,
control characters never printed raw (pure functions, table tests)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from toy import GIT_ENV

from sealbench.patchpaths import diff_paths, unquote_c
from sealbench.textsafe import terminal_safe
from sealbench.workspace import escaping_links, link_escapes, read_tree

HUNK = b"@@ -1 +1 @@\n-old\n+new\n"

DIFFS: list[tuple[str, bytes, tuple[str, ...]]] = [
    ("plain", b"diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n" + HUNK, ("x.py",)),
    ("quoted header and lines",
     b'diff --git "a/secrets/.env" "b/secrets/.env"\n--- "a/secrets/.env"\n'
     b'+++ "b/secrets/.env"\n' + HUNK, ("secrets/.env",)),
    ("octal escapes", b'diff --git "a/\\163ecrets/.env" "b/\\163ecrets/.env"\n' + HUNK,
     ("secrets/.env",)),
    ("C escapes", b'--- "a/tab\\there"\n+++ "b/quote\\"d\\\\"\n' + HUNK,
     ("quote\"d\\", "tab\there")),
    ("non-UTF-8 octal", b'--- "a/evil\\377"\n+++ "b/evil\\377"\n' + HUNK, ("evil\\xff",)),
    ("quoted only on the +++ line", b"--- a/ok.txt\n+++ \"b/secrets/.env\"\n" + HUNK,
     ("ok.txt", "secrets/.env")),
    ("mixed quoting in the header", b'diff --git a/x "b/secrets/.env"\n',
     ("secrets/.env", "x")),
    ("spaces, both bare", b"diff --git a/my file.txt b/my file.txt\n", ("my file.txt",)),
    ("rename", b"diff --git a/x.py b/y.py\nsimilarity index 90%\nrename from x.py\n"
     b"rename to y.py\n", ("x.py", "y.py")),
    ("quoted rename target", b"diff --git a/x b/y\nrename from x\nrename to \"secrets/.env\"\n",
     ("secrets/.env", "x", "y")),
    ("copy", b"diff --git a/x b/z\ncopy from x\ncopy to z\n", ("x", "z")),
    ("new file from /dev/null", b"diff --git a/new.txt b/new.txt\nnew file mode 100644\n"
     b"--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1 @@\n+x\n", ("new.txt",)),
    ("deleted file", b"--- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n", ("gone.txt",)),
    ("timestamp after a tab", b"--- a/x.c\t2024-01-01 00:00:00\n+++ b/x.c\t2024-01-02\n" + HUNK,
     ("x.c",)),
    ("other prefixes count both ways", b"--- x/secrets/.env\n+++ y/secrets/.env\n" + HUNK,
     ("secrets/.env", "x/secrets/.env", "y/secrets/.env")),
    ("mnemonic prefixes", b"--- i/a.txt\n+++ w/a.txt\n" + HUNK, ("a.txt",)),
    ("dot segments normalised", b"--- a/./secrets//.env\n+++ b/src/../secrets/.env\n" + HUNK,
     ("secrets/.env",)),
    ("hunk content is not a header",
     b"--- a/notes.txt\n+++ b/notes.txt\n@@ -1,2 +1,2 @@\n--- a/secrets/.env\n"
     b"+++ b/secrets/.env\n context\n", ("notes.txt",)),
    ("a header after a short hunk", b"--- a/one\n+++ b/one\n@@ -1,5 +1,5 @@\n-x\n+y\n"
     b"diff --git a/two b/two\n", ("one", "two")),
    ("no newline marker", b"--- a/n\n+++ b/n\n@@ -1 +1 @@\n-a\n\\ No newline at end of file\n"
     b"+b\n--- a/m\n+++ b/m\n", ("m", "n")),
    ("CRLF", b"diff --git a/w.txt b/w.txt\r\n--- a/w.txt\r\n+++ b/w.txt\r\n", ("w.txt",)),
    ("nothing", b"just some words\n", ()),
    ("binary patch, then a text file",
     b"diff --git a/img.bin b/img.bin\nnew file mode 100644\nindex 0000000000000000000000000000"
     b"000000000000..8d4cdd1bd6ba0c14e3e6fd7e0c6e1b0d8a1de5c5\nGIT binary patch\nliteral 3\n"
     b"KcmZQzWMT#Y00aO5\n\nliteral 0\nHcmV?d00001\n\n" + b"--- a/next.txt\n+++ b/next.txt\n"
     + HUNK, ("img.bin", "next.txt")),
    ("forged binary data cannot hide a header",
     b"diff --git a/img.bin b/img.bin\nGIT binary patch\nliteral 3\nKcmZQzW\n"
     b"--- a/secrets/.env\n+++ b/secrets/.env\n" + HUNK, ("img.bin", "secrets/.env")),
    ("a data line of the wrong length ends the binary section",
     b"diff --git a/i b/i\nGIT binary patch\nliteral 3\nzcmZQzWMT#Y00aO5\n"
     b"rename to secrets/.env\n", ("i", "secrets/.env")),
]


@pytest.mark.parametrize(("diff", "expected"), [(d, e) for _, d, e in DIFFS],
                         ids=[name for name, _, _ in DIFFS])
def test_diff_paths_follow_gits_rules(diff: bytes, expected: tuple[str, ...]) -> None:
    assert diff_paths(diff) == expected


@pytest.mark.parametrize(("text", "expected"), [
    (b'"a/b" rest', (b"a/b", b" rest")),
    (b'"\\a\\b\\f\\n\\r\\t\\v\\\\\\""', (b"\a\b\f\n\r\t\v\\\"", b"")),
    (b'"\\303\\274"', ("ü".encode(), b"")),
    (b'"unterminated', None),
    (b'"bad \\q escape"', None),
    (b"bare", None),
])
def test_unquote_c(text: bytes, expected: tuple[bytes, bytes] | None) -> None:
    assert unquote_c(text) == expected


def test_diff_paths_agree_with_git_on_what_git_prints(tmp_path: Path) -> None:
    """Real git output with quoting, renames and a mode change: the same paths git lists."""
    def git(*args: str) -> bytes:
        return subprocess.run(["git", "-c", "core.quotePath=true", *args], cwd=tmp_path,
                              env=GIT_ENV, check=True, capture_output=True).stdout
    names = ["plain.txt", "sp ace.txt", "tab\there.txt", "ünï.txt", "q\"uote.txt"]
    git("init", "-q")
    for name in names:
        (tmp_path / name).write_text(f"{name}\n" * 20)
    git("add", "-A")
    git("commit", "-qm", "base")
    (tmp_path / "plain.txt").write_text("changed\n")
    os.rename(tmp_path / "sp ace.txt", tmp_path / "moved sp ace.txt")
    (tmp_path / "tab\there.txt").chmod(0o755)
    (tmp_path / "ünï.txt").unlink()
    git("add", "-A")
    diff = git("diff", "--cached", "-M")
    listed = git("diff", "--cached", "-M", "--name-status", "-z").split(b"\0")
    expected = {n.decode() for n in listed if n and not n[:1].isupper()}
    assert set(diff_paths(diff)) == expected
    assert "moved sp ace.txt" in expected and "tab\there.txt" in expected


def test_diff_paths_read_gits_binary_patches(tmp_path: Path) -> None:
    """`git diff --binary` with binary files added, changed, renamed and deleted (literal and
    delta hunks), between text files: the same paths git lists, and nothing from the
    base85 data."""
    def git(*args: str) -> bytes:
        return subprocess.run(["git", *args], cwd=tmp_path, env=GIT_ENV, check=True,
                              capture_output=True).stdout
    big = bytes(range(256)) * 64
    git("init", "-q")
    (tmp_path / "a.txt").write_text("a\n")
    (tmp_path / "logo.bin").write_bytes(big)
    (tmp_path / "old.bin").write_bytes(b"\x00gone\x00")
    (tmp_path / "moved.bin").write_bytes(b"\x00\x01" * 300)
    git("add", "-A")
    git("commit", "-qm", "base")
    (tmp_path / "logo.bin").write_bytes(big[:-3] + b"\x00\x00\x00")  # a delta hunk
    (tmp_path / "new.bin").write_bytes(os.urandom(200))  # a literal one
    (tmp_path / "old.bin").unlink()
    os.rename(tmp_path / "moved.bin", tmp_path / "sub dir.bin")
    (tmp_path / "sub dir.bin").write_bytes(b"\x00\x01" * 299 + b"\x00\x02")
    (tmp_path / "z.txt").write_text("z\n")
    git("add", "-A")
    diff = git("diff", "--cached", "--binary", "-M")
    assert b"delta " in diff and b"literal " in diff
    listed = git("diff", "--cached", "-M", "--name-status", "-z").split(b"\0")
    expected = {n.decode() for n in listed if n and not n[:1].isupper()}
    assert set(diff_paths(diff)) == expected
    assert {"logo.bin", "new.bin", "old.bin", "moved.bin", "sub dir.bin", "z.txt"} == expected


LINKS = {"d": ".", "up": "..", "loop1": "loop2", "loop2": "loop1", "sub/back": "..",
         "sub/deep": "../sub/../..", "abs": "/etc"}


def _readlink(rel: str) -> str | None:
    return LINKS.get(rel)


@pytest.mark.parametrize(("rel", "target", "escapes"), [
    ("e", "d/d/../..", True),       # lexically inside; really the parent of the root
    ("f", "d/d/d", False),          # the root itself
    ("g", "d/../x", True),
    ("h", "sub/back/sub/file", False),
    ("i", "sub/back/..", True),
    ("j", "sub/deep", True),        # a link whose own target escapes
    ("k", "up/anything", True),
    ("l", "loop1", True),           # a chain that never ends: not judged inside
    ("m", "abs/passwd", True),
    ("n", "/etc/passwd", True),
    ("sub/o", "../file", False),
    ("sub/p", "../../file", True),
    ("q", "missing/../file", False),
    ("r", "", False),
])
def test_link_escapes_resolves_the_chain(rel: str, target: str, escapes: bool) -> None:
    assert link_escapes(rel, target, _readlink) is escapes


def test_escaping_links_on_a_real_workspace(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    os.symlink(".", ws / "d")
    os.symlink("d/d/../..", ws / "e")
    os.symlink("d/d/sub", ws / "fine")
    os.symlink("../d/../..", ws / "sub" / "out")
    assert os.path.normpath(ws / "d/d/../..") == str(ws)  # what a lexical check believes
    assert escaping_links(ws, read_tree(ws)) == ("e", "sub/out")


@pytest.mark.parametrize(("text", "expected"), [
    ("plain text\nnext\tline", "plain text\nnext\tline"),
    ("\x1b[2Jcleared", "\\x1b[2Jcleared"),
    ("\x1b]0;pwned title\x07", "\\x1b]0;pwned title\\x07"),
    ("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\", "\\x1b]8;;http://x\\x1b\\link\\x1b]8;;\\x1b\\"),
    ("over\rwrite", "over\\x0dwrite"),
    ("c1 \x9b2J csi", "c1 \\x9b2J csi"),
    ("del\x7f", "del\\x7f"),
    ("bidi \u202egnp.exe", "bidi \\u202egnp.exe"),
    ("ünïcode ok", "ünïcode ok"),
])
def test_terminal_safe(text: str, expected: str) -> None:
    assert terminal_safe(text) == expected


def test_terminal_safe_single_line() -> None:
    assert terminal_safe("a\nb\tc\x1b", single_line=True) == "a\\nb\\tc\\x1b"
