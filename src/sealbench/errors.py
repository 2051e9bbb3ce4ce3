"""Errors users see: one sentence naming file, line and field, mapped to an exit status.

Every failure that reaches the CLI is one of these two kinds, because docs/running.md gives
users exactly two non-zero statuses to script against: 2 (their input is wrong) and 3 (sealbench
refuses: unsealed, tampered, gate failed, below min_n, non-comparable).
"""

from __future__ import annotations

from dataclasses import dataclass

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


class InfrastructureError(Exception):
    """The harness itself failed (sandbox did not start, disk full): retried, never scored."""
