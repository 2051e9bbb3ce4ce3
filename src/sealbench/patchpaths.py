"""The paths a printed diff touches, read with git's own rules (gitdiff headers, `git apply`).

Where a protocol takes the diff from the solver's stdout (`solver.diff_source: stdout`), the
forbidden-path and files-touched checks read the paths out of that text. They must read them
the way git does, or a solver escapes the checks by spelling: C-quoted names with escapes
(`"a/secrets/.env"`, `"a/\\163ecrets/.env"`), renames and copies (`rename from`/`rename to`),
`---`/`+++` lines with any prefix, names with spaces. The rules followed (apply.c in git):

- `diff --git A B`: each name C-quoted or bare; two bare names split where both sides name the
  same file once their first component is stripped;
- `---`/`+++` names lose one leading component (`-p1`), bare ones end at a TAB; `/dev/null`
  is no file;
- `rename from/to`, `copy from/to`, `rename old/new` names are taken whole;
- hunk bodies are skipped by their line counts, so a removed line reading `-- x` is not a name;
- a `GIT binary patch` (what `git diff --binary` prints) is skipped line by line as git's
  parse_binary reads it: `literal N` / `delta N` headers, base85 data lines whose length
  character agrees with their length, and the blank line ending each of its two parts. The
  first line that is none of these ends the binary section and is read as a header again, so
  a malformed "binary" section can never hide a name git would read.

A name whose first component is not one of git's prefixes (`a/`, `b/`, the mnemonic `c/ i/
o/ w/ 1/ 2/`) is also recorded unstripped: another tool (`patch -p0`) would write there, and a
check that errs should err towards seeing a path. Names are normalised (`x/./y`, `x//y`,
`x/../y`) as the file system would, and undecodable bytes shown as \\xNN.
"""

from __future__ import annotations

import posixpath
import re

GIT_PREFIXES = frozenset({"a", "b", "c", "i", "o", "w", "1", "2"})
NULL_NAME = "/dev/null"
C_ESCAPES = {ord("a"): 7, ord("b"): 8, ord("f"): 12, ord("n"): 10, ord("r"): 13,
             ord("t"): 9, ord("v"): 11, ord("\\"): 92, ord('"'): 34}
HUNK = re.compile(rb"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")
WHOLE_NAME_HEADERS = (b"rename from ", b"rename to ", b"copy from ", b"copy to ",
                      b"rename old ", b"rename new ")
BINARY_START = b"GIT binary patch"
BINARY_HUNK = re.compile(rb"^(?:literal|delta) \d+$")
BASE85_LINE = re.compile(rb"^[A-Za-z][0-9A-Za-z!#$%&()*+\-;<=>?@^_`{|}~]+$")


def is_binary_data_line(line: bytes) -> bool:
    """A base85 line of a binary hunk: its first character says how many bytes it decodes
    to (A-Z = 1-26, a-z = 27-52), and it must be exactly the five characters per four bytes
    that many bytes take (the check git apply makes before calling a patch corrupt)."""
    if BASE85_LINE.match(line) is None:
        return False
    first = line[0]
    size = first - ord("A") + 1 if first <= ord("Z") else first - ord("a") + 27
    return len(line) - 1 == (size + 3) // 4 * 5


def _in_binary_patch(line: bytes) -> bool:
    """Is this line part of a binary patch's body (read after `GIT binary patch`)?"""
    line = line.rstrip(b"\r")
    return line == b"" or BINARY_HUNK.match(line) is not None or is_binary_data_line(line)


def unquote_c(text: bytes) -> tuple[bytes, bytes] | None:
    """Git's C-style quoted name at the start of text: (name, rest after the closing quote),
    or None when text does not start with a well-formed quoted name."""
    if not text.startswith(b'"'):
        return None
    out = bytearray()
    i = 1
    while i < len(text):
        char = text[i]
        if char == ord('"'):
            return bytes(out), text[i + 1:]
        if char != ord("\\"):
            out.append(char)
            i += 1
            continue
        i += 1
        if i >= len(text):
            return None
        code = text[i]
        if code in C_ESCAPES:
            out.append(C_ESCAPES[code])
            i += 1
        elif ord("0") <= code <= ord("3") and re.fullmatch(rb"[0-3][0-7]{2}", text[i:i + 3]):
            out.append(int(text[i:i + 3], 8))
            i += 3
        else:
            return None
    return None


def _strip_one(name: bytes) -> bytes | None:
    """Drop the first path component as `git apply -p1` does (runs of slashes count as one)."""
    slash = name.find(b"/")
    if slash < 0:
        return None
    return name[slash:].lstrip(b"/")


def _header_names(rest: bytes) -> list[bytes]:
    """The two names of a `diff --git` line (without the `diff --git ` part), unstripped."""
    first = unquote_c(rest)
    if first is not None:
        name, after = first
        after = after.lstrip(b" ")
        second = unquote_c(after)
        return [name, second[0] if second is not None else after]
    if rest.endswith(b'"'):  # bare first name, quoted second
        for cut in range(len(rest) - 1, 0, -1):
            if rest[cut - 1:cut + 1] == b' "':
                second = unquote_c(rest[cut:])
                if second is not None and second[1] == b"":
                    return [rest[:cut - 1], second[0]]
    found: list[bytes] = []
    for cut in range(len(rest)):  # both bare: where both sides name the same file
        if rest[cut:cut + 1] == b" ":
            left, right = rest[:cut], rest[cut + 1:]
            if _strip_one(left) is not None and _strip_one(left) == _strip_one(right):
                return [left, right]
    if b" b/" in rest:  # no agreeing split: git takes the names from later lines; so do we,
        found.extend(rest.split(b" b/", 1))  # but a check would rather see a path than not
        found[1] = b"b/" + found[1]
    return found


def _line_name(text: bytes) -> bytes:
    """A `---`/`+++` name: quoted, or bare up to a TAB (a timestamp may follow)."""
    quoted = unquote_c(text)
    if quoted is not None:
        return quoted[0]
    return text.split(b"\t", 1)[0].rstrip(b"\r")


def _normal(name: bytes) -> str | None:
    text = name.decode("utf-8", "backslashreplace")
    if not text or text == NULL_NAME:
        return None
    normal = posixpath.normpath(text).lstrip("/")
    return None if normal in ("", ".") else normal


def _add_prefixed(paths: set[str], name: bytes) -> None:
    """A name carrying a prefix component: record it as -p1 reads it, and whole as well when
    the prefix is not one git writes."""
    if name.decode(errors="replace") == NULL_NAME:
        return
    stripped = _strip_one(name)
    first = name.split(b"/", 1)[0].decode(errors="replace")
    for candidate in (stripped, None if first in GIT_PREFIXES and stripped else name):
        normal = _normal(candidate) if candidate is not None else None
        if normal is not None:
            paths.add(normal)


def diff_paths(diff: bytes) -> tuple[str, ...]:
    """Every path a git-format (or traditional unified) diff touches, sorted."""
    paths: set[str] = set()
    old_left = new_left = 0
    in_binary = False
    for line in diff.split(b"\n"):
        if in_binary:
            if _in_binary_patch(line):
                continue
            in_binary = False  # not binary data: read it as a header
        if old_left > 0 or new_left > 0:  # inside a hunk: content, not headers
            marker = line[:1]
            if marker in (b" ", b""):
                old_left, new_left = old_left - 1, new_left - 1
                continue
            if marker == b"-":
                old_left -= 1
                continue
            if marker == b"+":
                new_left -= 1
                continue
            if marker == b"\\":
                continue
            old_left = new_left = 0  # a short hunk: read this line as a header
        hunk = HUNK.match(line)
        if hunk is not None:
            old_left = int(hunk.group(1)) if hunk.group(1) is not None else 1
            new_left = int(hunk.group(2)) if hunk.group(2) is not None else 1
        elif line.rstrip(b"\r") == BINARY_START:
            in_binary = True
        elif line.startswith(b"diff --git "):
            for name in _header_names(line[len(b"diff --git "):].rstrip(b"\r")):
                _add_prefixed(paths, name)
        elif line.startswith((b"--- ", b"+++ ")):
            _add_prefixed(paths, _line_name(line[4:]))
        elif line.startswith(WHOLE_NAME_HEADERS):
            header = next(h for h in WHOLE_NAME_HEADERS if line.startswith(h))
            normal = _normal(_line_name(line[len(header):]))
            if normal is not None:
                paths.add(normal)
    return tuple(sorted(paths))
