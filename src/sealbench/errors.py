"""Errors users see: one sentence naming file, line and field, mapped to an exit status.

Every failure that reaches the CLI is one of these two kinds, because docs/running.md gives
users exactly two non-zero statuses to script against: 2 (their input is wrong) and 3 (sealbench
refuses: unsealed, tampered, gate failed, below min_n, non-comparable).
"""

from __future__ import annotations

import errno
import json
from dataclasses import dataclass
from typing import Any

EXIT_BAD_INPUT = 2
EXIT_REFUSED = 3


@dataclass(frozen=True)
class Problem:
    """One defect in an input, located precisely enough that the user can go and fix it."""

    file: str
    message: str
    line: int | None = None
    field: str | None = None

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        field = f"field '{self.field}': " if self.field else ""
        return f"{where}: {field}{self.message}"


class SealbenchError(Exception):
    """Base of every error the CLI turns into an exit status instead of a traceback."""

    exit_status = 1

    def __init__(self, message: str, problems: list[Problem] | list[str] | None = None) -> None:
        super().__init__(message)
        self.problems: list[Problem | str] = list(problems or [])

    def lines(self) -> list[str]:
        """The user-facing lines: each problem alone, or the message when there are none."""
        if self.problems:
            return [str(p) for p in self.problems]
        return [str(self)]


class BadInput(SealbenchError):
    """The user's files or arguments are wrong (exit 2)."""

    exit_status = EXIT_BAD_INPUT


class Refused(SealbenchError):
    """sealbench declines to go on: unsealed, tampered, gate failed, below min_n (exit 3)."""

    exit_status = EXIT_REFUSED


class FormatViolation(Refused):
    """sealbench built a document outside its own published format (sealbench.formats): a bug
    in sealbench, never the user's doing; it refuses to write it (exit 3) rather than ship a
    document its own schema rejects."""


def conforming(model: Any, document: dict[str, Any], what: str) -> dict[str, Any]:
    """`document`, unchanged, once its JSON validates against `model` (a pydantic model of
    sealbench.formats, strict: the JSON as written, not a coerced copy); else FormatViolation
    naming the first field that breaks it. pydantic is imported here, not at start-up."""
    conforming_json(model, json.dumps(document), what)
    return document


def conforming_json(model: Any, text: str, what: str) -> str:
    """`text` (one JSON document), unchanged, once it validates against `model`: for a writer
    that has the bytes already (an export line), so they are not serialised twice."""
    from pydantic import ValidationError

    try:
        model.model_validate_json(text)
    except ValidationError as exc:
        if not any(error["type"] == "json_invalid" for error in exc.errors()):
            raise _violation(model, exc, what) from None
        # A path or argument that is not UTF-8 reaches a record as a lone surrogate (Python's
        # surrogateescape), which json writes as a "\udcff" escape and pydantic's JSON parser
        # refuses. The document is still the format's: check its shape on a copy without them.
        try:
            model.model_validate_json(json.dumps(_without_surrogates(json.loads(text))))
        except ValidationError as again:
            raise _violation(model, again, what) from None
    return text


def _without_surrogates(value: Any) -> Any:
    """`value` with every lone surrogate in its strings (keys too) replaced by "?"."""
    if isinstance(value, str):
        return value.encode("utf-8", errors="replace").decode("utf-8")
    if isinstance(value, list):
        return [_without_surrogates(item) for item in value]
    if isinstance(value, dict):
        return {_without_surrogates(k): _without_surrogates(v) for k, v in value.items()}
    return value


def _violation(model: Any, exc: Any, what: str) -> FormatViolation:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "(top)"
    return FormatViolation(f"internal error: {what} does not match its format "
                           f"({model.__name__}, field '{where}': {first['msg']}, "
                           f"{exc.error_count()} problem(s)); this is a bug in sealbench, "
                           "please report it")


class InfrastructureError(Exception):
    """The harness itself failed (sandbox did not start, disk full): retried, never scored."""


class Unwritable(Refused):
    """The machine refused a write sealbench needs: disk full, read-only filesystem, no
    permission (exit 3). `disk_full` lets a run add how to resume once space is freed."""

    def __init__(self, message: str, *, disk_full: bool = False) -> None:
        super().__init__(message)
        self.disk_full = disk_full


# what the user can fix by naming another path (exit 2); any other errno is the machine
# refusing (read-only filesystem, disk full, permission: exit 3)
_BAD_PATH = {
    errno.ENOENT: "does not exist (nor, maybe, its parent directory); give an existing path",
    errno.ENOTDIR: "a parent of it is a file, not a directory; give a path inside a directory",
    errno.EISDIR: "is a directory; give a file",
    errno.ENAMETOOLONG: "is too long a name; give a shorter path",
    errno.ELOOP: "is a loop of symbolic links; give a real path",
    errno.EEXIST: "already exists; give a new path",
}
_REFUSED = {
    errno.EROFS: "is on a read-only filesystem; give a writable path or remount",
    errno.ENOSPC: "the disk is full; free space and try again",
    errno.EDQUOT: "the disk quota is exhausted; free space and try again",
    errno.EACCES: "permission denied; give a path you may use",
    errno.EPERM: "operation not permitted; give a path you may use",
}
DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


def path_error(exc: OSError, what: str = "", path: object = None) -> SealbenchError:
    """An OSError on a path as one line naming the path, what failed and what to do: BadInput
    for a path the user gave wrong (missing, a directory, a parent that is a file), Unwritable
    for the machine's refusal (read-only filesystem, disk full, permission)."""
    # a failed write on an open file names no path: the caller says which one
    path = exc.filename if exc.filename is not None else path or "(a path)"
    failed = f"{what}: " if what else ""
    reason = exc.strerror or str(exc)
    if exc.errno in _BAD_PATH:
        return BadInput(f"{path}: {failed}{reason}; {_BAD_PATH[exc.errno]}")
    advice = _REFUSED.get(exc.errno or 0, "check the path and the machine, then try again")
    return Unwritable(f"{path}: {failed}{reason}; {advice}",
                      disk_full=exc.errno in DISK_FULL)
