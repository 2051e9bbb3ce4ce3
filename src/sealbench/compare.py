"""Paired comparison of two published runs of one exam (`sealbench compare A B`).

Two runs are comparable only when they measured the same thing: the same protocol identity,
each behind a null pack that passed, each published. Their per-task scores are then paired by
task id, so shared task difficulty cancels and the interval for ``B - A`` is far tighter than two
separate intervals would suggest (stats.paired_comparison). Like a report, a comparison is a
pure function of the ledger: the bootstrap seed is derived from the identity and both run ids,
so the same ledger always gives the same bytes.

The verdict never overstates: "B is better" (or "A is better") needs the 95% interval of the
difference to exclude 0 and, for 0/1 outcomes, the exact McNemar test to reject at 0.05. When
the two disagree, the verdict says so and calls the result inconclusive.
"""

from __future__ import annotations

import json
from typing import Any

from sealbench.errors import BadInput, Refused
from sealbench.ledger import Ledger, RunRow
from sealbench.report import gate_section, task_scores
from sealbench.stats import derive_seed, paired_comparison

COMPARE_FORMAT = "sealbench-compare/v1"
ALPHA = 0.05
_ROUNDOFF = 1e-9  # a narrower interval is no interval (as in stats.headline)

__all__ = ["COMPARE_FORMAT", "compare_runs", "to_json", "to_markdown", "to_text", "verdict"]


def compare_runs(ledger: Ledger, run_a: str, run_b: str, *,
                 resamples: int = 10_000) -> dict[str, Any]:
    """Compare run B against run A on the tasks both scored; ``diff = mean_b - mean_a``.

    Raises BadInput for an unknown run id or a bad ``resamples``, and Refused when the runs
    are not comparable (different identities, a gate that did not pass, an unpublished run, a
    tampered record chain, or fewer paired tasks than the protocol's publish.min_n).
    """
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < 1:
        raise BadInput(f"--resamples must be a positive integer, got {resamples!r}")
    a = ledger.run(run_a)
    b = ledger.run(run_b)
    if a.identity != b.identity:
        raise Refused(
            f"cannot compare run {a.run_id} (protocol '{a.protocol_id}', identity {a.identity}) "
            f"with run {b.run_id} (protocol '{b.protocol_id}', identity {b.identity}): they "
            "sat different exams, so their scores are not comparable"
        )
    for row in (a, b):
        _check_published(ledger, row)

    scores_a = task_scores(ledger, a.run_id)
    scores_b = task_scores(ledger, b.run_id)
    paired_ids = sorted(scores_a.keys() & scores_b.keys())
    unpaired = sorted(scores_a.keys() ^ scores_b.keys())
    min_n = int(a.options["min_n"])
    if len(paired_ids) < min_n:
        raise Refused(
            f"cannot compare run {a.run_id} with run {b.run_id}: only {len(paired_ids)} dataset "
            f"tasks were scored in both runs; publish.min_n is {min_n}"
        )
    values_a = [float(scores_a[t]["score"]) for t in paired_ids]
    values_b = [float(scores_b[t]["score"]) for t in paired_ids]
    labels = [scores_a[t]["cluster"] for t in paired_ids]
    clusters = [str(c) for c in labels] if all(c is not None for c in labels) else None
    seed = derive_seed(a.identity, a.run_id, b.run_id)
    result = paired_comparison(values_a, values_b, seed=seed, resamples=resamples,
                               clusters=clusters)
    binary = result.mcnemar_p is not None
    paired: dict[str, Any] = {
        "n": result.n,
        "mean_a": result.mean_a,
        "mean_b": result.mean_b,
        "diff": result.diff,
        "ci95": list(result.ci95),
        "method": result.method,
        "seed": seed,
        "resamples": resamples,
        "mcnemar_p": result.mcnemar_p,
        "table": [list(row) for row in result.table] if binary else None,
        "correlation": result.correlation,
    }
    comparison: dict[str, Any] = {
        "format": COMPARE_FORMAT,
        "protocol_id": a.protocol_id,
        "identity": a.identity,
        "runs": {"a": _run_section(a), "b": _run_section(b)},
        "paired": paired,
        "disagreements": {
            "a_only": [t for t, x, y in zip(paired_ids, values_a, values_b, strict=True) if x > y],
            "b_only": [t for t, x, y in zip(paired_ids, values_a, values_b, strict=True) if y > x],
        },
        "unpaired": unpaired,
    }
    comparison["verdict"] = verdict(paired)
    return comparison


def _check_published(ledger: Ledger, run: RunRow) -> None:
    """Refuse a run that has no published rate, or whose records no longer support one."""
    if not gate_section(ledger, run)["passed"]:
        raise Refused(f"cannot compare run {run.run_id}: its null pack did not pass "
                      f"(state '{run.state}'), so it has no rate")
    if run.state != "published" or run.report is None:
        why = f": {run.reason}" if run.reason else ""
        raise Refused(f"cannot compare run {run.run_id}: it was not published "
                      f"(state '{run.state}'{why})")
    problems = ledger.verify_chain(run.run_id)
    if problems:
        raise Refused(f"cannot compare run {run.run_id}: its ledger records were tampered with",
                      [f"cannot compare run {run.run_id}: {p}" for p in problems])


def _run_section(run: RunRow) -> dict[str, Any]:
    report = run.report
    assert report is not None  # checked by _check_published
    return {"run_id": run.run_id, "solver": run.solver, "n": report["n"],
            "mean": report["mean"], "ci95": list(report["ci95"]),
            "ci_method": report["ci_method"]}


# ------------------------------------------------------------------------------ the verdict


def verdict(paired: dict[str, Any]) -> str:
    """One sentence on a comparison's `paired` section that claims no more than it shows.

    "B is better" / "A is better" only when the 95% interval excludes 0 and, for 0/1 outcomes,
    the exact McNemar test rejects at 0.05; when only one of them does, the sentence says so
    and claims nothing. A zero-width interval around a non-zero difference measures nothing,
    so it supports no claim either.
    """
    diff = float(paired["diff"])
    low, high = (float(x) for x in paired["ci95"])
    p: float | None = paired["mcnemar_p"]
    figure = (f"B - A = {_signed(diff)} (95% CI {_signed(low)} to {_signed(high)}, "
              f"{paired['method']}, n = {paired['n']}"
              + (f"; exact McNemar p = {_p(p)}" if p is not None else "") + ")")
    if high - low <= _ROUNDOFF and diff != 0.0:
        return (f"{figure}: no difference is claimed on this exam (the interval has zero width "
                "because the resampled differences do not vary, so it cannot measure the "
                "uncertainty)")
    ci_says = low > 0.0 or high < 0.0
    test_says = p is None or p < ALPHA
    if ci_says and test_says:
        return f"{figure}: {'B' if diff > 0 else 'A'} is better on this exam"
    if ci_says:
        return (f"{figure}: no detectable difference on this exam (the interval excludes 0 but "
                "the exact McNemar test does not reject at 0.05, so the evidence is "
                "inconclusive)")
    if p is not None and p < ALPHA:
        return (f"{figure}: no detectable difference on this exam (the exact McNemar test "
                "rejects at 0.05 but the interval includes 0, so the evidence is "
                "inconclusive)")
    return f"{figure}: no detectable difference on this exam"


def _signed(x: float) -> str:
    """A difference with its sign; only an exact zero goes unsigned, so a tiny negative
    endpoint still reads as below zero (-0.000)."""
    return "0.000" if x == 0.0 else f"{x:+.3f}"


def _p(p: float) -> str:
    """A p-value to two significant digits, never rounded across the 0.05 line."""
    if p >= 0.1:
        return f"{p:.2f}"
    if p < 0.001:
        return f"{p:.1e}"
    text = f"{p:.2g}"
    if (float(text) < ALPHA) != (p < ALPHA):
        text = f"{p:.4g}"
    return text


def _rate(x: float) -> str:
    return f"{x:.3f}"


def _ci(ci: list[float], signed: bool = False) -> str:
    fmt = _signed if signed else _rate
    return f"[{fmt(ci[0])}, {fmt(ci[1])}]"


def _ids(ids: list[str]) -> str:
    return ", ".join(ids) if ids else "(none)"


# ------------------------------------------------------------------------------ rendering


def to_json(comparison: dict[str, Any]) -> str:
    return json.dumps(comparison, indent=2, sort_keys=True) + "\n"


def to_text(comparison: dict[str, Any]) -> str:
    """A compact aligned table for terminals: every rate with its interval and n."""
    runs, paired, dis = comparison["runs"], comparison["paired"], comparison["disagreements"]
    rows = [
        ("A", _rate(runs["a"]["mean"]), _ci(runs["a"]["ci95"]), str(runs["a"]["n"]),
         runs["a"]["ci_method"]),
        ("B", _rate(runs["b"]["mean"]), _ci(runs["b"]["ci95"]), str(runs["b"]["n"]),
         runs["b"]["ci_method"]),
        ("B - A", _signed(paired["diff"]), _ci(paired["ci95"], signed=True), str(paired["n"]),
         f"{paired['method']}, seed {paired['seed']}, {paired['resamples']} resamples"),
    ]
    w_mean = max(len(r[1]) for r in rows)
    w_ci = max(len(r[2]) for r in rows)
    w_n = max(len("n"), *(len(r[3]) for r in rows))
    label = 12
    lines = [
        f"{'compare':<{label}}{comparison['protocol_id']}",
        f"{'identity':<{label}}{comparison['identity']}",
        f"{'A':<{label}}run {runs['a']['run_id']}  solver {runs['a']['solver']}",
        f"{'B':<{label}}run {runs['b']['run_id']}  solver {runs['b']['solver']}",
        "",
        f"{'':<{label}}{'mean':>{w_mean}}  {'95% CI':<{w_ci}}  {'n':>{w_n}}  interval",
        *[f"{r[0]:<{label}}{r[1]:>{w_mean}}  {r[2]:<{w_ci}}  {r[3]:>{w_n}}  {r[4]}" for r in rows],
        "",
    ]
    p = paired["mcnemar_p"]
    discordant = len(dis["a_only"]) + len(dis["b_only"])
    lines.append(f"{'McNemar':<{label}}"
                 + (f"exact p = {_p(p)} ({discordant} discordant of n = {paired['n']})"
                    if p is not None else "n/a (fractional scores: no 2x2 table)"))
    r = paired["correlation"]
    lines.append(f"{'correlation':<{label}}"
                 + (f"{r:.3f}" if r is not None else "undefined (a run's scores are constant)"))
    table = paired["table"]
    if table is not None:
        cells = [str(c) for row in table for c in row]
        w = max(len("B pass"), *(len(c) for c in cells))
        lines += [
            f"{'2x2 table':<{label}}{'':<8}{'B pass':>{w}}  {'B fail':>{w}}",
            f"{'':<{label}}{'A pass':<8}{table[0][0]:>{w}}  {table[0][1]:>{w}}",
            f"{'':<{label}}{'A fail':<8}{table[1][0]:>{w}}  {table[1][1]:>{w}}",
        ]
    higher = "passed" if table is not None else "scored higher"
    lines += [
        f"{'A only':<{label}}{_ids(dis['a_only'])}   (A {higher}, B did not)",
        f"{'B only':<{label}}{_ids(dis['b_only'])}   (B {higher}, A did not)",
        f"{'unpaired':<{label}}{_ids(comparison['unpaired'])}"
        + ("   (scored in one run only: infrastructure errors)" if comparison["unpaired"]
           else ""),
        "",
        f"{'verdict':<{label}}{comparison['verdict']}",
    ]
    return "\n".join(lines) + "\n"


def to_markdown(comparison: dict[str, Any]) -> str:
    runs, paired, dis = comparison["runs"], comparison["paired"], comparison["disagreements"]

    def code(text: object) -> str:
        return "`" + str(text).replace("|", "\\|").replace("`", "'") + "`"

    def ids(values: list[str]) -> str:
        return ", ".join(code(v) for v in values) if values else "none"

    def interval(ci: list[float], signed: bool = False) -> str:
        fmt = _signed if signed else _rate
        return f"{fmt(ci[0])} to {fmt(ci[1])}"

    p = paired["mcnemar_p"]
    r = paired["correlation"]
    lines = [
        f"# sealbench comparison — {comparison['protocol_id']}",
        "",
        f"**{comparison['verdict']}**",
        "",
        "| | run | solver | mean | 95% CI | n |",
        "|---|---|---|---|---|---|",
        *[f"| {k.upper()} | {code(run['run_id'])} | {code(run['solver'])} | {_rate(run['mean'])} "
          f"| {interval(run['ci95'])} ({run['ci_method']}) | {run['n']} |"
          for k, run in (("a", runs["a"]), ("b", runs["b"]))],
        f"| B − A (paired) | | | {_signed(paired['diff'])} | "
        f"{interval(paired['ci95'], signed=True)} ({paired['method']}) | {paired['n']} |",
        "",
        "| | |",
        "|---|---|",
        f"| protocol identity | {code(comparison['identity'])} |",
        f"| exact McNemar p | {_p(p) if p is not None else 'n/a (fractional scores)'} |",
        f"| correlation | {f'{r:.3f}' if r is not None else 'undefined (constant scores)'} |",
        f"| bootstrap | {paired['method']}, seed {paired['seed']}, "
        f"{paired['resamples']} resamples |",
        "",
    ]
    table = paired["table"]
    if table is not None:
        lines += [
            f"## Outcomes on the {paired['n']} paired tasks",
            "",
            "| | B pass | B fail |",
            "|---|---|---|",
            f"| A pass | {table[0][0]} | {table[0][1]} |",
            f"| A fail | {table[1][0]} | {table[1][1]} |",
            "",
        ]
    higher = "passed" if table is not None else "scored higher"
    lines += [
        "## Disagreements",
        "",
        f"- A {higher}, B did not ({len(dis['a_only'])}): {ids(dis['a_only'])}",
        f"- B {higher}, A did not ({len(dis['b_only'])}): {ids(dis['b_only'])}",
        f"- scored in one run only, left out ({len(comparison['unpaired'])}): "
        f"{ids(comparison['unpaired'])}",
        "",
    ]
    return "\n".join(lines)

