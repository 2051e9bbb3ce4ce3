"""Exact-diff metric of the coding-repair example (metric id ``exact_diff_v1``).

A result passes only when its patch body equals the oracle's line for line. Header lines are
ignored because they carry blob ids and path spellings that differ between equivalent diffs;
trailing whitespace is ignored because editors and diff tools disagree about it.
"""

from __future__ import annotations

from pathlib import Path

METRIC_ID = "exact_diff_v1"
HEADER_PREFIXES = ("index ", "diff --git", "---", "+++")


def normalize(diff_text: str) -> str:
    """The patch body that decides a match: no header lines, no trailing whitespace."""
    kept = [
        line.rstrip()
        for line in diff_text.splitlines()
        if not line.startswith(HEADER_PREFIXES)
    ]
    return "\n".join(kept)


def score(result_diff: str, oracle_path: str) -> dict[str, bool | str]:
    """Pass iff ``result_diff`` makes exactly the change of the oracle patch."""
    oracle = Path(oracle_path).read_text(encoding="utf-8")
    return {"pass": normalize(result_diff) == normalize(oracle), "metric": METRIC_ID}
