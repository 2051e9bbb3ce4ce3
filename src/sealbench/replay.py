"""Replayed attempts: `verify-report` names an attempt copied from another (docs/signing.md).

The hash chain shows that records were not edited after they were written, and re-scoring
(rescore.py) that they agree with the sealed instrument; neither can see an operator who copies
the rows of a better run's attempts, with their content-addressed artifacts, into the run being
published and recomputes its chain, report and log: every copied record is a genuine one, just
not this run's. What such a copy carries along is the other attempt's *evidence* — artifacts
that an honest re-run of the same task does not reproduce. This module names each attempt of a
run that shares such evidence with an attempt of another run in the same ledger (or with another
epoch of the same task in the same run):

- **a timing-bearing JUnit report**: the verifier's JUnit XML (`tests.junit`), byte for byte,
  when it holds a `timestamp` attribute or a non-zero `time` written to the millisecond or finer
  (pytest writes both on every run); or
- **the solver's whole output and the time it took, from a solver that does not repeat
  itself**: its stdout, its stderr and its diff, each non-empty and each identical, the measured
  `duration` identical to the 0.1 ms the record keeps (with a verifier, its `tests.duration`
  too), and the two runs' output (stdout, stderr, diff) differing on some other attempt both
  recorded — a deterministic script repeats its output on every task, and an identical duration
  alone happens (two honest attempts taking 60.9 ms each were seen); compared across runs only;
  or
- **another run's attempt id**: in a blinded run (`solver.task_ids: blind`) every attempt id is
  an HMAC of the run's own secret; a record carrying an id this run's secret does not give for
  that task and epoch was written by another run (the run it belongs to is named when it is in
  the ledger).

Empty artifacts (the empty blob: no diff, a silent solver) and output a deterministic solver
repeats on every run are never enough alone: a silent solver's identical diff is no evidence,
and neither is identical output that took a different time. Only the latest record of each
(phase, task, epoch) of the run is examined; records of infrastructure errors carry no artifacts.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sealbench.errors import SealbenchError
from sealbench.ledger import AttemptRow, Ledger

EMPTY = hashlib.sha256(b"").hexdigest()
# pytest's JUnit XML: `timestamp="2026-12-04T02:15:43.123456+00:00"` on the suite, `time="0.031"`
# on the suite and on every test case; a hand-written report with `time="0"` carries no timing
_TIMING = re.compile(rb'\btimestamp="[^"]+"|\btime="(?!0+(?:\.0+)?")\d+\.\d{3,}"')


@dataclass(frozen=True)
class _Attempt:
    run_id: str
    row: AttemptRow

    @property
    def key(self) -> tuple[str, str, int]:
        return self.row.phase, self.row.task_id, self.row.epoch

    def label(self) -> str:
        r = self.row
        return f"{r.phase} {r.task_id} epoch {r.epoch} (link {r.seq}) of run {self.run_id}"


def _junit_key(row: AttemptRow) -> tuple[str, str, str] | None:
    junit = (row.record.get("tests") or {}).get("junit")
    if not isinstance(junit, str) or junit == EMPTY:
        return None
    return row.phase, row.task_id, junit


def _output_key(row: AttemptRow) -> tuple[Any, ...] | None:
    """stdout, stderr and diff (each non-empty) and the measured durations: what a copy of the
    attempt shares with its original, and an honest re-run (even a deterministic solver's)
    almost never does all at once."""
    record = row.record
    digests = tuple(record.get(kind) for kind in ("stdout", "stderr", "diff"))
    if not all(isinstance(d, str) and d != EMPTY for d in digests):
        return None
    tests = record.get("tests") or {}
    return (row.phase, row.task_id, *digests, record.get("duration"), tests.get("duration"))


def _latest(rows: Iterator[AttemptRow]) -> list[AttemptRow]:
    latest: dict[tuple[str, str, int], AttemptRow] = {}
    for row in rows:
        latest[(row.phase, row.task_id, row.epoch)] = row
    return list(latest.values())


def replay_problems(ledger: Ledger, run_id: str) -> list[str]:
    """One line per attempt of `run_id` that shares evidence with another attempt (of another
    run of this ledger, or another epoch of this run): both are named, with the task and what
    they share. [] when none does."""
    mine = [r for r in _latest(ledger.iter_attempts(run_id))
            if r.record.get("outcome") != "infrastructure_error"]
    by_key = {(r.phase, r.task_id, r.epoch): r for r in mine}
    by_junit: dict[tuple[str, str, str], list[AttemptRow]] = {}
    by_output: dict[tuple[Any, ...], list[AttemptRow]] = {}
    for row in mine:
        if (junit := _junit_key(row)) is not None:
            by_junit.setdefault(junit, []).append(row)
        if (output := _output_key(row)) is not None:
            by_output.setdefault(output, []).append(row)
    found: dict[tuple[int, str, int], tuple[AttemptRow, _Attempt, list[str]]] = {}

    def note(row: AttemptRow, other: _Attempt, what: str) -> None:
        found.setdefault((row.seq, other.run_id, other.row.seq), (row, other, []))[2].append(what)

    timing: dict[str, bool] = {}
    same_output: list[tuple[AttemptRow, _Attempt]] = []
    # per other run, attempts it recorded with other solver output than this run's: a solver
    # that repeats itself byte for byte (a deterministic script) has none, and its identical
    # output is no evidence
    differs: dict[str, set[tuple[str, str, int]]] = {}
    for run in ledger.runs():
        for seen in ledger.iter_attempts(run.run_id):
            other = _Attempt(run.run_id, seen)
            for row in by_junit.get(_junit_key(seen) or ("", "", ""), []):
                if _other_attempt(run_id, row, other) and _timed(ledger, seen, timing):
                    note(row, other, "the same timestamped JUnit report of the verifier")
            if run.run_id == run_id:
                continue
            same_output += [(row, other) for row in by_output.get(_output_key(seen) or (), [])]
            here = by_key.get(other.key)
            if here is not None and _output_of(here) != _output_of(seen) \
                    and len(differs.setdefault(run.run_id, set())) < 2:
                differs[run.run_id].add(other.key)
    for row, other in same_output:
        if differs.get(other.run_id, set()) - {(row.phase, row.task_id, row.epoch)}:
            note(row, other, "the same stdout, stderr and diff, all non-empty, and the same "
                 f"duration ({row.record.get('duration')} s), where the two runs' output "
                 "differs on other attempts")
    problems = [f"attempt {_Attempt(run_id, row).label()} and attempt {other.label()} share "
                f"{' and '.join(what)}, which an honest re-run does not reproduce: one is a copy "
                "of the other (docs/signing.md#replayed-attempts)"
                for (_seq, _run, _other), (row, other, what) in sorted(found.items())]
    return problems + _foreign_attempt_ids(ledger, run_id, mine)


def _output_of(row: AttemptRow) -> tuple[Any, ...]:
    return tuple(row.record.get(kind) for kind in ("stdout", "stderr", "diff"))


def _other_attempt(run_id: str, row: AttemptRow, other: _Attempt) -> bool:
    """`other` is another attempt than `row`: another run's, or another epoch (or phase) of
    this run's (an earlier record of the same attempt, an infrastructure error, shares
    nothing)."""
    return other.run_id != run_id or other.key != (row.phase, row.task_id, row.epoch)


def _timed(ledger: Ledger, row: AttemptRow, cache: dict[str, bool]) -> bool:
    """Whether the attempt's JUnit report carries timing (read once per digest)."""
    digest = row.record["tests"]["junit"]
    if digest not in cache:
        try:
            cache[digest] = _TIMING.search(ledger.get_artifact(digest)) is not None
        except SealbenchError:
            cache[digest] = False  # a missing or altered artifact is named elsewhere
    return cache[digest]


def _foreign_attempt_ids(ledger: Ledger, run_id: str, mine: list[AttemptRow]) -> list[str]:
    """Records of a blinded run whose attempt id is not the one the run's secret gives."""
    from sealbench.runner import attempt_label

    run = ledger.run(run_id)
    secret = run.options.get("attempt_secret")
    if run.options.get("task_ids") != "blind" or not isinstance(secret, str):
        return []
    secrets = {r.run_id: s for r in ledger.runs()
               if r.run_id != run_id and isinstance(s := r.options.get("attempt_secret"), str)}
    epochs = max([int(r.options.get("epochs", 1)) for r in ledger.runs()] + [1])
    problems = []
    for row in mine:
        given = row.record.get("attempt_id")
        if not isinstance(given, str) or given == attempt_label(secret, row.task_id, row.epoch):
            continue
        owner = next((f"run {other}'s attempt of {row.task_id} epoch {epoch}"
                      for other, theirs in [(run_id, secret), *secrets.items()]
                      for epoch in range(epochs)
                      if attempt_label(theirs, row.task_id, epoch) == given), None)
        where = f"it is {owner}" if owner else "no run of this ledger gives it"
        problems.append(f"attempt {_Attempt(run_id, row).label()} carries attempt id {given}, "
                        f"which is not this run's for it ({where}): its record was copied "
                        "(docs/signing.md#replayed-attempts)")
    return problems
