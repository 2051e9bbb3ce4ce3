"""Re-scoring verification: `verify-report --protocol DIR` (docs/running.md#verifying-a-report).

The hash chain proves that records were not edited after they were written, but an operator
with write access to the ledger can rewrite records *and* recompute the chain: the chain is
then intact and says whatever the operator wants. What such an operator cannot rewrite is the
sealed protocol — its metric, oracles, fixtures and verifier are held to the identity the run
names. So this module grades every stored diff again with the sealed instrument and names each
attempt whose recorded outcome the instrument disagrees with:

- a sealed metric module is run again, in the same MetricRunner worker processes a run uses
  (compiled from the verified bytes), on the stored diff of the latest record of every
  (phase, task, epoch), with what the metric needs rebuilt: the private oracle copy and, for
  interface 2, the fixture with the diff applied (or, with a verifier, the hidden tests run again
  through the same Grader);
- the built-in `tests_v1` is recomputed from the stored test results, after checking them
  against the stored JUnit report (its artifact, held to its digest): the hidden tests are not
  run again, so a JUnit report forged with its digest goes unseen (docs/threat-model.md).

Then outcomes are recounted against the sealed null-pack rules, publish.min_n and
publish.max_infrastructure_errors (not the run header's copies, which the operator can edit).
Only outcomes decided by grading are re-scored (pass, fail, and an error of the metric); a
recorded pass is always re-scored, whatever the record says decided it. Before grading, the
rules a diff itself shows are applied again as the run's `judge` does: a stored diff touching a
forbidden or verifier-protected path, or one that could shadow the test runner's own modules,
is a `violation`, whatever the record says; so is a stored test run whose recorded tripwires
reported the wrong status (docs/threat-model.md#tripwires).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sealbench.errors import InfrastructureError, SealbenchError
from sealbench.gate import evaluate
from sealbench.harness import Harness
from sealbench.ledger import AttemptRow, Ledger
from sealbench.metric import MetricHung
from sealbench.patchpaths import diff_paths
from sealbench.protocol import Task
from sealbench.report import latest_rows
from sealbench.sandbox import Sandbox, detect
from sealbench.sealing import Sealed
from sealbench.solver import is_forbidden
from sealbench.tripwires import Tripwire
from sealbench.verifier import (
    VerifierRun,
    apply_diff,
    import_roots,
    parse_junit,
    protected_hits,
    resolved,
    shadow_names,
    shadowing_detail,
    shadowing_hits,
)
from sealbench.workspace import remove_tree

# outcomes that grading decides; any other outcome was decided before grading (timeout,
# violation, refusal, the solver's exit status) from what only the run itself saw
GRADED = ("pass", "fail")
METRIC_ERROR = "metric failed: "
RESCORE_JOBS = 2
SHOWN_MISSING = 5


@dataclass(frozen=True)
class Verdict:
    """What the sealed instrument says now about one recorded attempt."""

    row: AttemptRow
    outcome: str | None  # None: it could not be re-scored (said in `problem`)
    detail: str = ""
    problem: str | None = None


def label(row: AttemptRow) -> str:
    return f"attempt seq {row.seq} ({row.phase} {row.task_id} epoch {row.epoch})"


def rescored(row: AttemptRow) -> bool:
    """Whether grading decided this record's outcome, so the sealed instrument can re-decide
    it from the stored diff."""
    outcome = row.record.get("outcome")
    return outcome in GRADED or (outcome == "error"
                                 and str(row.record.get("detail", "")).startswith(METRIC_ERROR))


def rescore(ledger: Ledger, run_id: str, sealed: Sealed, *, jobs: int = RESCORE_JOBS
            ) -> list[str]:
    """One line per attempt whose recorded outcome the sealed instrument disagrees with, and
    per way the recount under the sealed rules differs from what was published; [] if none."""
    run = ledger.run(run_id)
    if run.identity != sealed.identity:
        return [f"run {run_id} was made under protocol identity {run.identity}, the protocol "
                f"given is {sealed.identity}: its attempts were not re-scored"]
    rows = latest_rows(ledger.attempts(run_id))
    tasks: dict[tuple[str, str], Task] = {(t.kind, t.id): t for t in sealed.protocol.tasks}
    problems = [f"{label(r)}: task '{r.task_id}' is not in the sealed protocol's "
                f"{r.phase.replace('_', ' ')}" for r in rows if (r.phase, r.task_id) not in tasks]
    chosen = [r for r in rows if (r.phase, r.task_id) in tasks and rescored(r)]
    scale = run.options.get("timeout_scale", 1.0)  # the verifier's limit, as in the run
    verdicts = _regrade(ledger, sealed, chosen, tasks, jobs,
                        float(scale) if isinstance(scale, int | float) else 1.0)
    now: dict[int, str] = {}
    for verdict in verdicts:
        if verdict.problem is not None:
            problems.append(f"{label(verdict.row)}: {verdict.problem}")
            continue
        assert verdict.outcome is not None
        now[verdict.row.seq] = verdict.outcome
        recorded = verdict.row.record["outcome"]
        if verdict.outcome != recorded:
            problems.append(f"{label(verdict.row)}: recorded {recorded}, the sealed "
                            f"instrument now says {verdict.outcome} ({verdict.detail[:200]})")
    return problems + recount(rows, now, sealed)


def recount(rows: list[AttemptRow], now: dict[int, str], sealed: Sealed) -> list[str]:
    """The run's outcomes, re-scored where they could be, against the sealed publish rules:
    the gate, min_n, infrastructure errors and the sealed dataset's tasks. No rate appears
    here: pass counts are said only for a gate that passes."""
    spec = sealed.protocol.spec
    current = [_with_outcome(r, now.get(r.seq)) for r in rows]
    problems: list[str] = []
    controls = {r.task_id: r.record for r in current if r.phase == "null_pack"}
    gate = evaluate(spec.null_pack.rules.class_of(), controls)
    if not gate.passed:
        problems.append("recount under the sealed rules: the null pack does not pass ("
                        + "; ".join(gate.reasons()) + ")")
    dataset = [r for r in current if r.phase == "dataset"]
    infra = [r for r in current if r.record["outcome"] == "infrastructure_error"]
    limit = spec.publish.max_infrastructure_errors
    if limit is not None and len(infra) > limit:
        problems.append(f"recount under the sealed rules: {len(infra)} infrastructure "
                        f"error(s) left, publish.max_infrastructure_errors is {limit}")
    scored = {r.task_id for r in dataset if r.record["outcome"] != "infrastructure_error"}
    # a task left with an infrastructure error is counted by the limit above, not here
    missing = sorted({t.id for t in sealed.protocol.tasks if t.kind == "dataset"}
                     - {r.task_id for r in dataset})
    if missing:
        shown = ", ".join(missing[:SHOWN_MISSING]) + (", ..." if len(missing) > SHOWN_MISSING
                                                      else "")
        problems.append(f"recount under the sealed rules: {len(missing)} task(s) of the sealed "
                        f"dataset have no attempt ({shown})")
    if len(scored) < spec.publish.min_n:
        problems.append(f"recount under the sealed rules: {len(scored)} dataset task(s) "
                        f"scored, the sealed publish.min_n is {spec.publish.min_n}")
    was = sum(r.record["outcome"] == "pass" for r in rows if r.phase == "dataset")
    passes = sum(r.record["outcome"] == "pass" for r in dataset)
    if gate.passed and passes != was:
        problems.append(f"recount under the sealed rules: the sealed instrument passes "
                        f"{passes} dataset attempt(s), the records say {was}")
    return problems


def _with_outcome(row: AttemptRow, outcome: str | None) -> AttemptRow:
    if outcome is None or outcome == row.record["outcome"]:
        return row
    return AttemptRow(row.seq, row.phase, row.task_id, row.epoch,
                      {**row.record, "outcome": outcome}, row.prev_digest, row.digest)


# --------------------------------------------------------------------------- grading again


def _regrade(ledger: Ledger, sealed: Sealed, rows: list[AttemptRow],
             tasks: dict[tuple[str, str], Task], jobs: int,
             timeout_scale: float) -> list[Verdict]:
    if not rows:
        return []
    if sealed.protocol.spec.metric.builtin == "tests_v1":
        return [_from_stored_tests(ledger, r, tasks[(r.phase, r.task_id)], _protected(sealed),
                                   _shadowing(sealed)) for r in rows]
    # the solver never runs here; the metric (and a verifier) get this machine's sandbox
    harness = Harness(sealed.protocol, sealed.lock.sealed_files(),
                      Sandbox("none", reason="re-scoring runs no solver"),
                      timeout_scale=timeout_scale, verifier_sandbox=detect(want="auto"),
                      hidden=_kept_out(ledger),
                      environment=sealed.lock.environment,
                      shadow_names=sealed.lock.shadow_names)
    with harness, ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(_metric_verdict, harness, ledger, r,
                               tasks[(r.phase, r.task_id)], _protected(sealed),
                               _shadowing(sealed)) for r in rows]
        verdicts: list[Verdict] = []
        for row, future in zip(rows, futures, strict=True):
            try:
                verdicts.append(future.result())
            except MetricHung as hung:
                harness.metric.hung.set()  # the others give up at once
                return [*verdicts, Verdict(row, None, problem=f"not re-scored: {hung}")]
        return verdicts


def _kept_out(ledger: Ledger) -> tuple[Path, ...]:
    """The ledger stays out of the metric's sight here as in a run."""
    db = ledger.path.resolve()
    return (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm"),
            ledger.artifacts.resolve())


Shadowing = Callable[[Task, Sequence[str]], tuple[str, ...]]


def broken_rule(diff: bytes, task: Task, protected: tuple[str, ...],
                shadowing: Shadowing | None = None) -> str | None:
    """Why a run would have judged this diff a `violation` before grading, as far as the diff
    itself shows it: a forbidden path, one the verifier protects, or one that could shadow the
    runner's own modules. (Files written but left unchanged, sizes and symlinks are not in a
    diff: those are taken as recorded.)"""
    paths = diff_paths(diff)
    forbidden = sorted({p for p in paths if is_forbidden(p, task.forbidden)})
    if forbidden:
        return f"wrote forbidden path(s): {', '.join(forbidden)}"
    guarded = protected_hits(paths, protected)
    if guarded:
        return f"changed path(s) the verifier protects (verifier.protected): {', '.join(guarded)}"
    shadowed = shadowing(task, paths) if shadowing is not None else ()
    if shadowed:
        return shadowing_detail(shadowed)
    return None


def _protected(sealed: Sealed) -> tuple[str, ...]:
    verifier = sealed.protocol.spec.verifier
    return () if verifier is None else tuple(verifier.protected)


def _shadowing(sealed: Sealed) -> Shadowing | None:
    """The run's shadowing rule (`Verifier.shadowing`) from the sealed protocol and lock: the
    hidden test paths come from the lock's manifest, the names from its record."""
    verifier = sealed.protocol.spec.verifier
    if verifier is None:
        return None
    names = shadow_names(sealed.lock.shadow_names or ())
    root = sealed.protocol.root

    def rule(task: Task, paths: Sequence[str]) -> tuple[str, ...]:
        hidden: list[str] = []
        if task.tests is not None:
            prefix = task.tests.relative_to(root).as_posix() + "/"
            hidden = [f.path[len(prefix):] for f in sealed.lock.files
                      if f.path.startswith(prefix)]
        return shadowing_hits(paths, import_roots(verifier.pythonpath, hidden), names)

    return rule


def _diff_of(ledger: Ledger, row: AttemptRow) -> bytes | str:
    """The stored diff, or why there is none to re-score."""
    digest = row.record.get("diff")
    if not isinstance(digest, str):
        return "not re-scored: the record holds no diff"
    try:
        return ledger.get_artifact(digest)
    except (OSError, SealbenchError):
        return f"not re-scored: its diff artifact {digest[:12]} is missing or altered"


def _gradable_diff(ledger: Ledger, row: AttemptRow, task: Task,
                   protected: tuple[str, ...], shadowing: Shadowing | None = None
                   ) -> bytes | Verdict:
    """The stored diff, or the verdict that comes before grading: not re-scored when the diff
    cannot be read, a violation when it breaks a rule the run judges before the metric."""
    diff = _diff_of(ledger, row)
    if isinstance(diff, str):
        return Verdict(row, None, problem=diff)
    broken = broken_rule(diff, task, protected, shadowing)
    if broken is not None:
        return Verdict(row, "violation", broken)
    return diff


def _metric_verdict(harness: Harness, ledger: Ledger, row: AttemptRow, task: Task,
                    protected: tuple[str, ...], shadowing: Shadowing | None) -> Verdict:
    """Grade the stored diff as the run did: a fresh fixture with the diff applied is the
    workspace (interface 2 reads it); with a verifier the Grader runs the hidden tests again."""
    diff = _gradable_diff(ledger, row, task, protected, shadowing)
    if isinstance(diff, Verdict):
        return diff
    attempt_dir = Path(tempfile.mkdtemp(prefix="rescore-", dir=harness.scratch))
    try:
        workspace = attempt_dir / "workspace"
        grader = harness.context.grader
        if grader.verifier is None:
            harness.record_for(task).materialize(workspace)
            apply_diff(workspace, diff)  # one that does not apply leaves the bare fixture
        grade = grader.grade(task, diff, attempt_dir, workspace)
    except (OSError, InfrastructureError) as exc:
        return Verdict(row, None, problem=f"not re-scored: the harness failed: {exc}")
    finally:
        remove_tree(attempt_dir)
    return Verdict(row, grade.outcome, grade.detail)


def _from_stored_tests(ledger: Ledger, row: AttemptRow, task: Task,
                       protected: tuple[str, ...], shadowing: Shadowing | None) -> Verdict:
    """tests_v1 again, from the stored results once they agree with the stored JUnit report
    (held to its digest); the report problem is derived again, never taken from the record."""
    diff = _gradable_diff(ledger, row, task, protected, shadowing)
    if isinstance(diff, Verdict):
        return diff
    tests = row.record.get("tests")
    if not isinstance(tests, dict):
        return Verdict(row, "fail", "no hidden-test results are recorded")
    digest = tests.get("junit")
    try:
        junit = ledger.get_artifact(digest) if isinstance(digest, str) else b""
    except (OSError, SealbenchError):
        return Verdict(row, None, problem=f"not re-scored: its JUnit artifact "
                       f"{str(digest)[:12]} is missing or altered")
    run = replace(_stored_run(tests, junit), tripwires=tuple(
        Tripwire(str(t["id"]), t["kind"], str(t["source"]))
        for t in tests.get("tripwires") or ()))
    stored = tests.get("results") or {}
    planted = {t.id for t in run.tripwires}
    graded = {k: v for k, v in run.by_id().items() if k not in planted}
    if run.report_problem is None and stored != graded:
        return Verdict(row, None, problem="its recorded test results differ from its stored "
                       "JUnit report")
    if run.problem is None and run.report_problem is None and run.tampered is not None:
        return Verdict(row, "violation", run.tampered)
    passed, why = resolved(run, task.fail_to_pass, task.pass_to_pass)
    return Verdict(row, "pass" if passed else "fail", f"tests_v1: {why}")


def _stored_run(tests: dict[str, Any], junit: bytes) -> VerifierRun:
    """The verifier's run as stored, its per-test results parsed again from the JUnit bytes
    with the sealed verifier's parser (the checks of verifier._finish)."""
    exit_code = tests.get("exit_code")
    base = VerifierRun(exit_code if isinstance(exit_code, int) else None, (), 0.0,
                       problem=tests.get("problem") or None)
    if not junit:
        return VerifierRun(base.exit_code, (), 0.0, problem=base.problem,
                           report_problem="the verifier wrote no JUnit report")
    try:
        parsed = parse_junit(junit)
    except ValueError as exc:
        return VerifierRun(base.exit_code, (), 0.0, problem=base.problem,
                           report_problem=str(exc))
    if base.exit_code not in (0, 5) and not any(t.outcome in ("failed", "error")
                                                for t in parsed):
        return VerifierRun(base.exit_code, (), 0.0, problem=base.problem,
                           report_problem="the JUnit report does not agree with the exit status")
    return VerifierRun(base.exit_code, parsed, 0.0, problem=base.problem)
