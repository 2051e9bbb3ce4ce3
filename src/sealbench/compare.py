"""Paired comparison of two published runs of one exam (`sealbench compare A B`).

Two runs are comparable only when they measured the same thing: the same protocol identity,
each behind a null pack that passed, each published. Their per-task scores are then paired by
task id, so shared task difficulty cancels (stats.paired_comparison). Like a report, a
comparison is a pure function of the ledger.

Without clusters, 0/1 outcomes get Newcombe's paired interval and the exact McNemar test. When
tasks share clusters (e.g. repositories), McNemar's independence assumption fails, so the
interval and the test both come from one cluster-robust t on G − 1 degrees of freedom. The
verdict leads with what the data say — B better, A better, or inconclusive (and why) — and
never calls a difference absent while a test rejects (docs/statistics.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sealbench.errors import Refused, conforming
from sealbench.ledger import Ledger, RunRow, refuse_trial
from sealbench.render import renderer
from sealbench.report import gate_section, stored_report_problems, task_scores
from sealbench.stats import (
    PairedComparison,
    cluster_labels,
    design_effect,
    mdd_cluster_t,
    mdd_mcnemar,
    paired_comparison,
)
from sealbench.textsafe import terminal_safe

COMPARE_FORMAT = "sealbench-compare/v2"
ALPHA = 0.05
_ROUNDOFF = 1e-9  # a narrower interval is no interval (as in stats.headline)

__all__ = ["COMPARE_FORMAT", "Pairing", "check_published", "compare_runs", "measures_nothing",
           "pair_runs", "to_json", "to_markdown", "to_text", "verdict"]


def compare_runs(ledger: Ledger, run_a: str, run_b: str) -> dict[str, Any]:
    """Compare run B against run A on the tasks both scored; ``diff = mean_b - mean_a``.

    Raises BadInput for an unknown run id, and Refused when the runs are not comparable
    (different identities, a gate that did not pass, an unpublished run, a tampered record
    chain, or fewer paired tasks than the protocol's publish.min_n).
    """
    a = ledger.run(run_a)
    b = ledger.run(run_b)
    ledger.require_intact(a.run_id)
    ledger.require_intact(b.run_id)
    pairing = pair_runs(ledger, a, ledger, b)
    paired_ids, values_a, values_b = pairing.task_ids, pairing.values_a, pairing.values_b
    clusters, result = pairing.clusters, pairing.result
    paired: dict[str, Any] = {
        "n": result.n,
        "mean_a": result.mean_a,
        "mean_b": result.mean_b,
        "diff": result.diff,
        "ci95": list(result.ci95),
        "method": result.method,
        "test": result.test,
        "p": result.p_value,
        "df": result.df,
        "se": result.se,
        "clusters": result.clusters,
        "table": [list(row) for row in result.table] if result.table is not None else None,
        "correlation": result.correlation,
        "note": result.note,
        "mdd": _mdd(result, [v_b - v_a for v_a, v_b in zip(values_a, values_b, strict=True)],
                    clusters),
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
        "unpaired": pairing.unpaired,
    }
    comparison["verdict"] = verdict(paired)
    return checked_comparison(comparison)


def checked_comparison(comparison: dict[str, Any]) -> dict[str, Any]:
    """The comparison, validated against sealbench.formats.Comparison before it is rendered:
    a key or type the format does not have is a bug, refused here. Returned unchanged."""
    from sealbench.formats import Comparison

    runs = comparison["runs"]
    return conforming(Comparison, comparison, f"the comparison of run {runs['a']['run_id']} "
                                               f"with run {runs['b']['run_id']}")


@dataclass(frozen=True)
class Pairing:
    """Two comparable runs' scores on the tasks both scored, and the paired test on them
    (``diff = mean_b - mean_a``)."""

    task_ids: list[str]
    values_a: list[float]
    values_b: list[float]
    clusters: list[str] | None
    unpaired: list[str]
    result: PairedComparison


def pair_runs(ledger_a: Ledger, a: RunRow, ledger_b: Ledger, b: RunRow, *,
              checked: bool = False) -> Pairing:
    """The paired test of run B against run A, each read from its own ledger.

    Why separate from compare_runs: the leaderboard compares every pair of its runs, which
    may come from different ledgers, and must refuse exactly what `compare` refuses (other
    identities, unpublished runs, other conditions, too few shared tasks) with one test.
    The callers have checked both record chains (Ledger.require_intact). ``checked``: the
    caller has also run check_published on both runs (the leaderboard does it once per run, not
    once per pair: it recomputes the run's whole report, so per pair a board of k runs would
    recompute k² reports).
    """
    if a.identity != b.identity:
        raise Refused(
            f"cannot compare run {a.run_id} (protocol '{a.protocol_id}', identity {a.identity}) "
            f"with run {b.run_id} (protocol '{b.protocol_id}', identity {b.identity}): they "
            "sat different exams, so their scores are not comparable"
        )
    if not checked:
        check_published(ledger_a, a)
        check_published(ledger_b, b)
    _check_same_conditions(a, b)

    scores_a = task_scores(ledger_a, a.run_id)
    scores_b = task_scores(ledger_b, b.run_id)
    paired_ids = sorted(scores_a.keys() & scores_b.keys())
    min_n = int(a.options["min_n"])
    if len(paired_ids) < min_n:
        raise Refused(
            f"cannot compare run {a.run_id} with run {b.run_id}: only {len(paired_ids)} dataset "
            f"tasks were scored in both runs; publish.min_n is {min_n}"
        )
    values_a = [float(scores_a[t]["score"]) for t in paired_ids]
    values_b = [float(scores_b[t]["score"]) for t in paired_ids]
    clusters = cluster_labels([scores_a[t]["cluster"] for t in paired_ids], paired_ids)
    return Pairing(paired_ids, values_a, values_b, clusters,
                   sorted(scores_a.keys() ^ scores_b.keys()),
                   paired_comparison(values_a, values_b, clusters=clusters))


def _mdd(result: PairedComparison, d: list[float], clusters: list[str] | None) -> dict[str, Any]:
    """The smallest difference this comparison's own test detects with 80% power at α = 0.05,
    at the discordance (or variance and design effect) these two runs show."""
    base: dict[str, Any] = {"power": 0.8, "alpha": ALPHA, "test": result.test}
    n = result.n
    if result.method == "newcombe":
        discordance = (result.discordant_a_only + result.discordant_b_only) / n
        return {**base, "value": mdd_mcnemar(n, discordance),
                "assumes": f"the observed discordance {discordance:.3f} (share of tasks exactly "
                           "one run passed)"}
    labels = clusters if result.method == "cluster-t" and clusters is not None \
        else [str(i) for i in range(n)]
    groups = len(set(labels))
    if n < 2 or groups < 2:
        return {**base, "value": None, "assumes": "fewer than two clusters"}
    mean = sum(d) / n
    var = sum((x - mean) ** 2 for x in d) / (n - 1)
    deff = design_effect(d, labels)
    return {**base, "value": mdd_cluster_t(var, n, groups, design_effect=deff),
            "assumes": f"the observed Var(d) = {var:.4f}, {groups} clusters, design effect "
                       f"{deff:.2f}; t quantiles on G − 1 df"}


def check_published(ledger: Ledger, run: RunRow) -> None:
    """Refuse a run that has no published rate, or whose records no longer support one."""
    refuse_trial(run, "compared")
    if not gate_section(ledger, run)["passed"]:
        raise Refused(f"cannot compare run {run.run_id}: its null pack did not pass "
                      f"(state '{run.state}'), so it has no rate")
    if run.state != "published" or run.report is None:
        why = f": {run.reason}" if run.reason else ""
        raise Refused(f"cannot compare run {run.run_id}: it was not published "
                      f"(state '{run.state}'{why})")
    # the figures shown are the stored report's: edited with its published link recomputed,
    # only recomputing them from the records shows it
    stored = stored_report_problems(ledger, run.run_id)
    if stored:
        raise Refused(f"cannot compare run {run.run_id}: {stored[0]}", stored)


# what a run's figure depends on besides the agent: a difference in any of them would be read
# as a difference between agents (docs/running.md#compare)
CONDITIONS = (("sandbox", lambda r: r.sandbox),
              ("timeout scale", lambda r: r.options.get("timeout_scale")),
              ("exposed paths", lambda r: sorted(r.options.get("expose") or [])),
              ("epochs", lambda r: r.options.get("epochs")))


def _check_same_conditions(a: RunRow, b: RunRow) -> None:
    """Refuse two runs made under different conditions: a paired test would attribute the
    effect of a weaker sandbox, a longer timeout, an exposed file or more epochs to the agent."""
    differ = [f"{name} {get(a)!r} vs {get(b)!r}" for name, get in CONDITIONS
              if get(a) != get(b)]
    if differ:
        raise Refused(f"cannot compare run {a.run_id} with run {b.run_id}: they ran under "
                      f"different conditions ({'; '.join(differ)}), so a difference between "
                      "them is not a difference between agents")


def _run_section(run: RunRow) -> dict[str, Any]:
    report = run.report
    assert report is not None  # checked by check_published
    return {"run_id": run.run_id, "solver": run.solver, "n": report["n"],
            "mean": report["mean"], "ci95": list(report["ci95"]),
            "ci_method": report["ci_method"]}


# ------------------------------------------------------------------------------ the verdict


def verdict(paired: dict[str, Any]) -> str:
    """One sentence on a comparison's `paired` section that leads with what the data say.

    "B is better" / "A is better" only when the 95% interval excludes 0 *and* the test rejects
    at 0.05. When exactly one of them does, the verdict is "inconclusive — the tests
    disagree" and says which says what; never "no difference" while a test rejects. When
    neither does, "inconclusive", which is not evidence that the runs are equal (the minimum
    detectable difference says how large a difference could hide). A zero-width interval
    around a non-zero difference measures nothing, so it supports no claim either.
    """
    diff = float(paired["diff"])
    low, high = (float(x) for x in paired["ci95"])
    p = float(paired["p"])
    figure = (f"B - A = {_signed(diff)} (95% CI {_signed(low)} to {_signed(high)}, "
              f"{paired['method']}, n = {paired['n']}; {paired['test']} p = {_p(p)})")
    if measures_nothing((low, high), diff):
        return (f"no claim: the interval has zero width because the differences do not vary, "
                f"so it cannot measure the uncertainty — {figure}")
    ci_says = low > 0.0 or high < 0.0
    test_says = p < ALPHA
    if ci_says and test_says:
        return f"{'B' if diff > 0 else 'A'} is better on this exam — {figure}"
    if test_says:
        return (f"inconclusive — the tests disagree: the {paired['test']} test rejects at 0.05 "
                f"(p = {_p(p)}) but the 95% interval of B − A includes 0 — {figure}")
    if ci_says:
        return (f"inconclusive — the tests disagree: the 95% interval of B − A excludes 0 but the "
                f"{paired['test']} test does not reject at 0.05 (p = {_p(p)}) — {figure}")
    mdd = (paired.get("mdd") or {}).get("value")
    hide = (f"; differences below about {mdd:.3f} are likely to go undetected on this exam"
            if mdd is not None else "")
    return (f"inconclusive — the data do not tell A and B apart (this does not show they are "
            f"equal{hide}) — {figure}")


def measures_nothing(ci95: tuple[float, float], diff: float) -> bool:
    """A zero-width interval around a non-zero difference: the differences do not vary, so
    neither the interval nor the test measured any uncertainty, and no claim rests on them."""
    return ci95[1] - ci95[0] <= _ROUNDOFF and diff != 0.0


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


def _mdd_text(mdd: dict[str, Any]) -> str:
    value = f"{mdd['value']:.3f}" if mdd["value"] is not None else "none reachable"
    return f"{value} at 80% power, α = 0.05 ({mdd['test']}; assumes {mdd['assumes']})"


def _ids(ids: list[str]) -> str:
    return ", ".join(ids) if ids else "(none)"


# ------------------------------------------------------------------------------ rendering


@renderer("compare", "json")
def to_json(comparison: dict[str, Any]) -> str:
    return json.dumps(comparison, indent=2, sort_keys=True) + "\n"


@renderer("compare", "text")
def to_text(comparison: dict[str, Any]) -> str:
    """A compact aligned table for terminals: every rate with its interval and n."""
    runs, paired, dis = comparison["runs"], comparison["paired"], comparison["disagreements"]
    rows = [
        ("A", _rate(runs["a"]["mean"]), _ci(runs["a"]["ci95"]), str(runs["a"]["n"]),
         runs["a"]["ci_method"]),
        ("B", _rate(runs["b"]["mean"]), _ci(runs["b"]["ci95"]), str(runs["b"]["n"]),
         runs["b"]["ci_method"]),
        ("B - A", _signed(paired["diff"]), _ci(paired["ci95"], signed=True), str(paired["n"]),
         paired["method"] + (f", {paired['clusters']} clusters" if paired["clusters"] else "")),
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
    discordant = len(dis["a_only"]) + len(dis["b_only"])
    lines.append(f"{'test':<{label}}{paired['test']}: p = {_p(paired['p'])} ({discordant} "
                 f"discordant of n = {paired['n']})")
    lines.append(f"{'MDD':<{label}}{_mdd_text(paired['mdd'])}")
    if paired["note"]:
        lines.append(f"{'note':<{label}}{paired['note']}")
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
    # the solver labels are the operator's command lines, which can hold anything
    return terminal_safe("\n".join(lines) + "\n")


@renderer("compare", "md")
def to_markdown(comparison: dict[str, Any]) -> str:
    runs, paired, dis = comparison["runs"], comparison["paired"], comparison["disagreements"]

    def code(text: object) -> str:
        return "`" + str(text).replace("|", "\\|").replace("`", "'") + "`"

    def ids(values: list[str]) -> str:
        return ", ".join(code(v) for v in values) if values else "none"

    def interval(ci: list[float], signed: bool = False) -> str:
        fmt = _signed if signed else _rate
        return f"{fmt(ci[0])} to {fmt(ci[1])}"

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
        f"| test | {paired['test']}: p = {_p(paired['p'])} |",
        f"| minimum detectable difference | {_mdd_text(paired['mdd'])} |",
        f"| correlation | {f'{r:.3f}' if r is not None else 'undefined (constant scores)'} |",
        *([f"| note | {paired['note']} |"] if paired["note"] else []),
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
    return terminal_safe("\n".join(lines))

