"""Reports, recomputed from the ledger alone (docs/statistics.md, docs/formats.md).

A report is a pure function of the ledger: the same run always gives the same bytes, and a
reader holding the ledger can recompute every figure. A rate never appears without its protocol
identity, n and 95% interval, and never for a run whose gate did not pass.

The statistics (numpy, scipy) are imported inside the functions that compute figures:
`sealbench runs` formats headlines with this module and recomputes a report only for a run
that published one (cli.py's docstring, tests/test_startup.py).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sealbench import __version__
from sealbench.errors import SealbenchError, conforming
from sealbench.gate import OUTCOMES, evaluate
from sealbench.ledger import GENESIS, AttemptRow, Ledger, Link, RunRow
from sealbench.render import renderer
from sealbench.textsafe import terminal_safe

if TYPE_CHECKING:
    from sealbench.sealing import Sealed
    from sealbench.stats import Headline

REPORT_FORMAT = "sealbench-report/v3"


class NotPublishable(Exception):
    """The run's records do not allow a rate: the message says why, with no figure in it."""


def task_scores(ledger: Ledger, run_id: str) -> dict[str, dict[str, Any]]:
    """Per dataset task: mean score over its scored epochs, and its stratum and cluster."""
    return _scores(ledger.attempts(run_id, "dataset"))


def _scores(rows: list[AttemptRow]) -> dict[str, dict[str, Any]]:
    grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        grouped[row.task_id].append(row.record)
    scores: dict[str, dict[str, Any]] = {}
    for task_id in sorted(grouped):
        scored = [r for r in grouped[task_id] if r["outcome"] != "infrastructure_error"]
        if not scored:
            continue
        first = scored[0]
        passes = sum(1 for r in scored if r["outcome"] == "pass")
        scores[task_id] = {
            "score": passes / len(scored),
            "passes": passes,
            "epochs": len(scored),
            "stratum": first.get("stratum"),
            "cluster": first.get("cluster"),
        }
    return scores


def _outcome_counts(rows: list[AttemptRow]) -> dict[str, int]:
    counts = dict.fromkeys((*OUTCOMES, "infrastructure_error"), 0)
    for row in rows:
        counts[row.record["outcome"]] = counts.get(row.record["outcome"], 0) + 1
    return counts


def latest_rows(rows: list[AttemptRow]) -> list[AttemptRow]:
    """The record that counts for each (phase, task, epoch): the last one. Only an
    infrastructure error is ever followed by another record (its re-run on resume)."""
    last: dict[tuple[str, str, int], AttemptRow] = {}
    for row in rows:
        last[(row.phase, row.task_id, row.epoch)] = row
    return sorted(last.values(), key=lambda r: r.seq)


def unresolved_infrastructure_errors(rows: list[AttemptRow]) -> list[AttemptRow]:
    """Attempts whose latest record is an infrastructure error (rows as from latest_rows)."""
    return [r for r in rows if r.record["outcome"] == "infrastructure_error"]


def infrastructure_listing(rows: list[AttemptRow]) -> list[dict[str, Any]]:
    """The unresolved infrastructure errors, as every report lists them."""
    return [{"phase": r.phase, "task_id": r.task_id, "epoch": r.epoch,
             "detail": str(r.record.get("detail", ""))[:300]}
            for r in unresolved_infrastructure_errors(rows)]


def _infra_label(row: AttemptRow) -> str:
    return f"{row.task_id}" + (f" epoch {row.epoch}" if row.epoch else "")


def gate_section(ledger: Ledger, run: RunRow) -> dict[str, Any]:
    return _gate(run, latest_rows(ledger.attempts(run.run_id, "null_pack")))


def _gate(run: RunRow, rows: list[AttemptRow]) -> dict[str, Any]:
    gate = evaluate(run.options["rules"], {row.task_id: row.record for row in rows})
    return {"passed": gate.passed, "controls": [c.as_dict() for c in gate.controls]}


def build_report(ledger: Ledger, run_id: str) -> dict[str, Any]:
    """The published report of a run, from the ledger alone; NotPublishable when none may be."""
    from sealbench.stats import derive_seed

    run = ledger.run(run_id)
    _require_complete(ledger, run)
    rows = report_rows(ledger, run_id)  # read once; every figure below comes from these rows
    current = latest_rows(rows)
    dataset = [r for r in current if r.phase == "dataset"]
    null_pack = _gate(run, [r for r in current if r.phase == "null_pack"])
    if not null_pack["passed"]:
        raise NotPublishable("the null pack did not pass: " + "; ".join(
            c["reason"] for c in null_pack["controls"] if c["reason"]))
    options = run.options
    infra = unresolved_infrastructure_errors(current)
    limit = options.get("max_infrastructure_errors")  # absent: a run from before the policy
    if limit is not None and len(infra) > limit:
        shown = ", ".join(_infra_label(r) for r in infra[:10]) + (", ..." if len(infra) > 10
                                                                   else "")
        raise NotPublishable(
            f"{len(infra)} infrastructure error(s) left after retries ({shown}); "
            f"publish.max_infrastructure_errors is {limit}; nothing the solver did caused them, "
            f"and `--resume {run_id}` re-runs them")
    scores = _scores(dataset)
    n = len(scores)
    if n < options["min_n"]:
        raise NotPublishable(f"only {n} dataset tasks were scored; publish.min_n is "
                             f"{options['min_n']}")
    seed = derive_seed(run.identity, run.run_id)
    head = published_headline(scores, seed=seed, ci_method=options["ci_method"],
                              strata_fixed=options.get("strata") == "fixed")
    counts = _outcome_counts(dataset)
    links = covered_links(ledger.links(run_id, rows))
    return checked_report({
        "format": REPORT_FORMAT,
        "protocol_id": run.protocol_id,
        "identity": run.identity,
        "run_id": run.run_id,
        "solver": {"command": run.solver,
                   # names the solver got from the host (never values); None: a run from
                   # before the environment was explicit, when it got all of it
                   "env_names": options.get("env_names"),
                   "home_from": options.get("home_from")},
        "sandbox": run.sandbox,
        "exposed": list(options.get("expose", [])),
        **_network_fields(options),
        "n": head.n,
        "mean": head.mean,
        "ci95": list(head.ci95),
        "ci_method": head.method,
        "interval": _interval_section(head),
        "epochs": options["epochs"],
        "timeout_scale": options["timeout_scale"],
        "strata": _strata(scores, run),
        "min_detectable_difference": _mdd(scores),
        "pass_at_k": _pass_k(scores, options["epochs"], seed),
        "outcomes": {k: v for k, v in counts.items() if k != "infrastructure_error"},
        "infrastructure_errors": counts.get("infrastructure_error", 0),
        "infrastructure_error_attempts": infrastructure_listing(current),
        "task_ids": options.get("task_ids", "visible"),
        "null_pack": null_pack,
        "publish": {"min_n": options["min_n"], "require_ci": options["require_ci"]},
        "timings": _timings(run, rows),
        "attempt_history": attempt_history(links),
        "records": {"ledger": str(ledger.path.resolve()),
                    "artifacts": str(ledger.artifacts.resolve()), "run_id": run.run_id,
                    "attempts": len(rows), "links": len(links),
                    "chain_head": links[-1].digest if links else GENESIS,
                    # a run recorded before ledger v3: its settings are chained only since
                    "settings_chained": "since migration from ledger v2" if run.migrated
                    else "since the run was created"},
        "sealbench_version": __version__,
        "versions": versions(),
    })


def checked_report(report: dict[str, Any]) -> dict[str, Any]:
    """The report, validated against its model (sealbench.formats.Report) before anyone
    writes, prints, stores or signs it: a key the model does not know, or a figure of the
    wrong type, is a bug in sealbench, refused here rather than shipped. The dict is returned
    unchanged, so the bytes are what they were (tests/test_report.py's golden test)."""
    from sealbench.formats import Report

    return conforming(Report, report, f"the report of run {report['run_id']}")


# what a report reads of a dataset attempt's record: its figures come from these alone
REPORT_FIELDS = ("outcome", "stratum", "cluster", "duration")


def report_rows(ledger: Ledger, run_id: str) -> list[AttemptRow]:
    """The run's attempts as a report reads them, streamed from the ledger: a control's record
    whole (the gate judges it), a dataset attempt's only the fields its figures come from —
    and its detail when it is an infrastructure error, which the report lists. 100,000 whole
    records held ~450 MiB (issue 13); the report is the same."""
    return [row if row.phase != "dataset" else replace(row, record=_report_fields(row.record))
            for row in ledger.iter_attempts(run_id)]


def _report_fields(record: dict[str, Any]) -> dict[str, Any]:
    kept = {key: record[key] for key in REPORT_FIELDS if key in record}
    if record["outcome"] == "infrastructure_error" and "detail" in record:
        kept["detail"] = record["detail"]
    return kept


def covered_links(links: list[Link]) -> list[Link]:
    """The links a report covers: the chain up to (not including) its first published link,
    so the published link that follows a report never changes what verification recomputes."""
    for index, link in enumerate(links):
        if link.kind == "published":
            return links[:index]
    return links


def attempt_history(links: list[Link]) -> dict[str, list[dict[str, Any]]]:
    """Attempts that do not count but happened: interrupted ones (killed, redone) and
    infrastructure errors that were re-run, each with task, epoch and how."""
    interrupted = [{"phase": link.body.get("phase"), "task_id": link.body.get("task_id"),
                    "epoch": link.body.get("epoch"), "how": link.body.get("how")}
                   for link in links if link.kind == "interrupted_attempt"]
    attempts = [link.attempt for link in links if link.attempt is not None]
    last = {(a.phase, a.task_id, a.epoch): a.seq for a in attempts}
    rerun = [{"phase": a.phase, "task_id": a.task_id, "epoch": a.epoch,
              "how": "infrastructure error, re-run: " + str(a.record.get("detail", ""))[:300]}
             for a in attempts if last[(a.phase, a.task_id, a.epoch)] != a.seq]
    return {"interrupted": interrupted, "rerun": rerun}


def _network_fields(options: dict[str, Any]) -> dict[str, Any]:
    """The run's network policy and allowed hosts; absent for a run recorded before the run
    header had them, so a report written then still verifies against its ledger."""
    if "network" not in options:
        return {}
    return {"network": options["network"], "allow_hosts": list(options.get("allow_hosts", []))}


def published_headline(scores: dict[str, dict[str, Any]], *, seed: int, ci_method: str,
                       strata_fixed: bool) -> Headline:
    """The headline of a run from its per-task scores: the one function every published rate
    comes from (``bench/bench_coverage.py`` measures the coverage of exactly this).

    Tasks sharing a `cluster` are clustered (a task without one is its own cluster); strata
    count only when the protocol fixed them (``publish.strata: fixed``)."""
    from sealbench.stats import cluster_labels, headline

    return headline([s["score"] for s in scores.values()], seed=seed, method=ci_method,
                    strata=_labels(scores, "stratum"), strata_fixed=strata_fixed,
                    clusters=cluster_labels([s["cluster"] for s in scores.values()],
                                            list(scores)))


def _interval_section(head: Headline) -> dict[str, Any]:
    """How the interval was obtained, in enough detail to recompute it (docs/statistics.md)."""
    return {
        "confidence": 0.95,
        "method_requested": head.method_requested,
        "reason": head.reason,
        "note": head.note,
        "degenerate": head.degenerate,
        "quantile": head.quantile,
        "df": head.df,
        "clusters": head.clusters,
        "stderr": head.stderr,
        "cr1_stderr": head.cr1_stderr,
        "cr3_stderr": head.cr3_stderr,
        "stratified": head.stratified,
        "conditional_on_strata": head.conditional_on_strata,
        "effective_n": head.effective_n,
        "wilson95": list(head.wilson95) if head.wilson95 is not None else None,
        "seed": head.seed,
        "resamples": head.resamples,
        "draws": head.draws,
    }


def versions() -> dict[str, str]:
    """Library versions a figure depends on (the bootstrap's draws depend on numpy's)."""
    import platform

    import numpy
    import scipy  # type: ignore[import-untyped,unused-ignore]

    return {"python": platform.python_version(), "numpy": numpy.__version__,
            "scipy": scipy.__version__, "sealbench": __version__}


def _strata(scores: dict[str, dict[str, Any]], run: RunRow) -> dict[str, Any]:
    """Per-stratum n, mean and interval (the automatic method: Wilson, or cluster-wilson when the
    stratum's tasks share clusters), for reading; they never narrow the headline."""
    from sealbench.stats import derive_seed

    grouped: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for task_id, s in scores.items():
        if s["stratum"] is not None:
            grouped[str(s["stratum"])][task_id] = s
    out: dict[str, Any] = {}
    for name in sorted(grouped):
        head = published_headline(grouped[name], seed=derive_seed(run.identity, run.run_id, name),
                                  ci_method="auto", strata_fixed=False)
        out[name] = {"n": head.n, "mean": head.mean, "ci95": list(head.ci95),
                     "ci_method": head.method}
    return out


def _mdd(scores: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The smallest difference `compare` could detect between this agent and another on this
    exam (80% power, α = 0.05), for the test `compare` really uses, with its assumptions."""
    from sealbench.stats import (
        cluster_labels,
        design_effect,
        mdd_cluster_t,
        mdd_mcnemar_against,
    )

    values = [s["score"] for s in scores.values()]
    n = len(values)
    mean = sum(values) / n
    clusters = cluster_labels([s["cluster"] for s in scores.values()], list(scores))
    binary = all(v in (0.0, 1.0) for v in values)
    base = {"power": 0.8, "alpha": 0.05}
    if binary and clusters is None:
        return {**base, "value": mdd_mcnemar_against(n, mean), "test": "exact McNemar",
                "assumes": f"another agent whose pass rate differs from this one's ({mean:.3f}) "
                           "by the MDD, better or worse (the larger of the two), and who fails "
                           "independently of it; correlated agents disagree on fewer tasks and "
                           "are easier to tell apart; null when a difference in either "
                           "direction can never reach 80% power on n tasks"}
    labels = clusters if clusters is not None else [str(i) for i in range(n)]
    groups = len(set(labels))
    if n < 2 or groups < 2:
        return {**base, "value": None, "test": "none",
                "assumes": "fewer than two clusters: no paired test is possible"}
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    deff = design_effect(values, labels)
    test = "cluster-robust t" if clusters is not None else "paired t"
    return {**base, "value": mdd_cluster_t(2 * var, n, groups, design_effect=deff), "test": test,
            "assumes": f"Var(d) = 2 Var(score) (the other agent as variable, uncorrelated); "
                       f"{groups} clusters, design effect {deff:.2f} from this run; "
                       "t quantiles on G − 1 df"}


def _pass_k(scores: dict[str, dict[str, Any]], epochs: int, seed: int) -> list[dict[str, Any]]:
    """pass@k (Chen et al. 2021) and pass^k (tau-bench) for k = 1..epochs, each with the
    automatic interval over tasks (clusters honoured): a percentile bootstrap of pass^k covered
    0.69 at p = 0.1, k = 5 (docs/statistics.md)."""
    from sealbench.stats import cluster_labels, derive_seed, headline, pass_at_k, pass_hat_k

    full = {task: s for task, s in scores.items() if s["epochs"] == epochs}
    rows = list(full.values())
    if epochs < 2 or not rows:
        return []
    clusters = cluster_labels([s["cluster"] for s in rows], list(full))
    out = []
    for k in range(1, epochs + 1):
        at = [pass_at_k(epochs, s["passes"], k) for s in rows]
        hat = [pass_hat_k(epochs, s["passes"], k) for s in rows]
        at_head = headline(at, seed=derive_seed(str(seed), "pass@", str(k)), clusters=clusters)
        hat_head = headline(hat, seed=derive_seed(str(seed), "pass^", str(k)), clusters=clusters)
        out.append({
            "k": k, "n": len(rows),
            "pass_at_k": at_head.mean, "pass_at_k_ci95": list(at_head.ci95),
            "pass_hat_k": hat_head.mean, "pass_hat_k_ci95": list(hat_head.ci95),
            "ci_method": at_head.method,
        })
    return out


def _require_complete(ledger: Ledger, run: RunRow) -> None:
    """A rate only for a run that ran to its end: a figure from a stopped run would let anyone
    stop when the number looks good."""
    if run.trial:
        raise NotPublishable(f"run {run.run_id} is a trial: a trial is never published (no "
                             "gate verdict, no rate)")
    if run.state == "refused":
        raise NotPublishable(f"run {run.run_id} was refused: {run.reason}")
    if run.state not in ("finished", "published"):
        raise NotPublishable(f"run {run.run_id} is {run.state}, not finished; resume it with "
                             "`sealbench run DIR --solver CMD --resume "
                             f"{run.run_id}`")
    expected = run.options.get("expected") or {}
    counts = ledger.attempt_counts(run.run_id)
    missing = {phase: count - counts.get(phase, 0) for phase, count in expected.items()
               if counts.get(phase, 0) != count}
    if missing:
        raise NotPublishable(f"run {run.run_id} is missing attempts: " + ", ".join(
            f"{phase} {count}" for phase, count in sorted(missing.items())))


def _labels(scores: dict[str, dict[str, Any]], key: str) -> list[str] | None:
    """Labels for resampling, only when every scored task carries one."""
    labels = [s[key] for s in scores.values()]
    return [str(label) for label in labels] if all(label is not None for label in labels) \
        else None


def _timings(run: RunRow, rows: list[AttemptRow]) -> dict[str, Any]:
    durations = [r.record.get("duration", 0.0) for r in rows]
    return {"started_at": run.started_at, "finished_at": run.finished_at,
            "attempt_seconds_total": round(sum(durations), 3), "attempts": len(durations)}


@renderer("report", "json")
def to_json(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2, sort_keys=True) + "\n"


def pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def headline_text(report: dict[str, Any]) -> str:
    """The one-line figure: never a rate without n and its interval."""
    lo, hi = report["ci95"]
    conditional = ", conditional on the stratum sizes" if report["interval"].get(
        "conditional_on_strata") else ""
    return (f"{pct(report['mean'])} (95% CI {pct(lo)}–{pct(hi)}, {report['ci_method']}"
            f"{conditional}; n = {report['n']})")


def network_text(report: dict[str, Any]) -> str:
    """The network policy in one phrase, with the hosts model-api admitted."""
    policy = report.get("network")
    if policy is None:
        return "not recorded"
    if policy != "model-api":
        return str(policy)
    hosts = report.get("allow_hosts") or []
    return f"model-api, allowed: {', '.join(hosts)}" if hosts else "model-api, no host allowed"


def _summary(report: dict[str, Any]) -> list[tuple[str, str]]:
    """The facts every rendering shows beside the headline, in order."""
    interval = report["interval"]
    rows = [
        ("protocol identity", report["identity"]),
        ("run", report["run_id"]),
        ("solver", report["solver"]["command"]),
        ("solver environment", _env_text(report["solver"])),
        ("sandbox", report["sandbox"]),
        ("network", network_text(report)),
        ("n (scored tasks)", str(report["n"])),
        ("epochs", str(report["epochs"])),
        ("interval", f"{report['ci_method']}: {interval['reason']}"),
    ]
    if interval["resamples"]:
        rows.append(("bootstrap", f"seed {interval['seed']}, {interval['resamples']} resamples"))
    if interval["wilson95"]:
        lo, hi = interval["wilson95"]
        rows.append(("Wilson 95% (cross-check)", f"{pct(lo)}–{pct(hi)}"))
    rows += [("timeout scale", f"{report['timeout_scale']:g}"),
             ("infrastructure errors (not scored)", str(report["infrastructure_errors"])),
             ("task ids", "blind (opaque attempt ids)" if report["task_ids"] == "blind"
              else "visible: controls not blinded")]
    signature = report.get("signature")
    if isinstance(signature, dict):  # report.json holds the signature (docs/signing.md)
        rows.append(("signed by", f"{signature.get('algorithm')} key "
                                  f"{signature.get('key_fingerprint')} (see report.json)"))
    return rows


def _env_text(solver: dict[str, Any]) -> str:
    """What the solver got from the host besides the base (docs/running.md)."""
    names = solver.get("env_names")
    if names is None:
        return "not recorded (the whole host environment, before sealbench 11)"
    text = ("passed: " + ", ".join(names)) if names else "no variables passed"
    seed = solver.get("home_from")
    if seed:
        text += f"; HOME seeded from {seed['path']} (sha256 {seed['sha256'][:12]})"
    return text


def _notes(report: dict[str, Any]) -> list[str]:
    """Warnings every rendering prints under the headline."""
    notes = [report["interval"]["note"]] if report["interval"]["note"] else []
    if report["task_ids"] != "blind":
        notes.append("controls not blinded: the solver saw each task's real id "
                     "(solver.task_ids: visible), so it could tell the controls apart")
    notes += [f"infrastructure error (not scored): {i['phase']} {i['task_id']} epoch "
              f"{i['epoch']}: {i['detail']}" for i in report["infrastructure_error_attempts"]]
    return notes


def _controls(report: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    return [(c["id"], c["rule"], c["outcome"], "yes" if c["ok"] else "NO")
            for c in report["null_pack"]["controls"]]


@renderer("report", "md")
def to_markdown(report: dict[str, Any]) -> str:
    lines = [f"# sealbench report — {report['protocol_id']}", "",
             f"**{headline_text(report)}**", ""]
    for note in _notes(report):
        lines += [f"_{note}_", ""]
    lines += ["| | |", "|---|---|", *[f"| {k} | `{v}` |" if k in ("protocol identity", "run",
                                                                   "solver") else f"| {k} | {v} |"
                                      for k, v in _summary(report)]]
    lines += ["", "## Outcomes", "", "| outcome | attempts |", "|---|---|",
              *[f"| {k} | {v} |" for k, v in report["outcomes"].items()]]
    lines += ["", "## Null pack", "", "| control | rule | outcome | ok |", "|---|---|---|---|",
              *[f"| {a} | {b} | {c} | {d} |" for a, b, c, d in _controls(report)], ""]
    lines.append(f"Records: ledger `{report['records']['ledger']}`, run `{report['run_id']}`.")
    return terminal_safe("\n".join(lines) + "\n")


# --------------------------------------------------------------------------- re-checking


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, inner in value.items():
            out.update(_flatten(inner, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(value, list) and any(isinstance(v, dict | list) for v in value):
        out = {}
        for index, inner in enumerate(value):
            out.update(_flatten(inner, f"{prefix}[{index}]"))
        return out
    return {prefix: value}


# where the report was written from, not what it says: allowed to differ on another machine
LOCATION_FIELDS = ("records.ledger", "records.artifacts")


def verify_report(report: dict[str, Any], ledger: Ledger,
                  sealed: Sealed | None = None) -> list[str]:
    """Every way the report disagrees with the ledger it claims to come from; [] if none.

    Checks the ledger log (a deleted run), the run's chain (edited, deleted or reordered links,
    a state no chained event supports), the runs row against the chain (edited settings), every
    artifact's digest, then recomputes every figure from the ledger alone and names each that
    differs, the chain head first (records rewritten and the chain recomputed). With `sealed`
    (verify-report --protocol) the run header is checked against the sealed protocol too.
    """
    run_id = report.get("run_id")
    if not isinstance(run_id, str):
        return ["the report names no run_id"]
    if report.get("format") != REPORT_FORMAT:
        return [f"the report is in format {report.get('format')!r}, this sealbench writes and "
                f"checks {REPORT_FORMAT!r}: recompute it with `sealbench report {run_id}`"]
    if not ledger.has_run(run_id):
        logged = [p.text for p in ledger.log_problems(run_id)]
        return logged or [f"run {run_id} is not in {ledger.path}, and its ledger log has no "
                          "record of it: the report comes from another ledger, or the run and "
                          "its log entry were removed"]
    problems = [p.text for p in ledger.integrity(run_id)]
    problems += _artifact_problems(ledger, run_id)
    from sealbench.replay import replay_problems  # attempts copied from another

    problems += replay_problems(ledger, run_id)
    if sealed is not None:
        problems += header_problems(ledger.run(run_id), sealed)
    # hooks: re-scoring stored diffs with the sealed metric (rescore.py) and the report's
    # signature (signing.py) add their findings here
    try:
        recomputed = build_report(ledger, run_id)
    except NotPublishable as exc:
        return [*problems, f"the ledger does not support a published report: {exc}"]
    given, fresh = _flatten(report), _flatten(recomputed)
    head, chain = given.get("records.chain_head"), fresh.get("records.chain_head")
    if head != chain:
        problems.append(f"records.chain_head: the report covers chain head {str(head)[:16]}, "
                        f"the run's chain in the ledger ends at {str(chain)[:16]}: its records "
                        "were rewritten and the chain recomputed, or the report is not from "
                        "this ledger")
    problems += [f"figure '{key}': the report says {mine!r}, the ledger gives {theirs!r}"
                 for key, mine, theirs in _figure_differences(given, fresh)]
    problems += stored_report_problems(ledger, run_id, recomputed)
    return problems


def _figure_differences(given: dict[str, Any],
                        fresh: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(key, given, fresh) for each flattened figure that differs, leaving out what may
    differ between honest copies: locations, versions, the chain head (checked on its own)
    and the signature block (signing.check_signature)."""
    return [(key, given.get(key), fresh.get(key)) for key in sorted(given.keys() | fresh.keys())
            if not (key in LOCATION_FIELDS or key == "sealbench_version"
                    or key.startswith("versions.") or key == "records.chain_head"
                    or key.partition(".")[0] == "signature")
            and given.get(key) != fresh.get(key)]


def stored_report_problems(ledger: Ledger, run_id: str,
                           recomputed: dict[str, Any] | None = None) -> list[str]:
    """The ledger's stored copy of a run's report (the figure `runs` lists) against the figures
    its records give now. Its digest is held only by the published link and the ledger log's
    published entry, both tails nothing chains after, so an operator can edit the copy and
    recompute both; only recomputing the figures shows it. The stored report of a run migrated
    from an older ledger (an older format) is checked on n and mean only; a run made by this
    sealbench is checked on every figure, whatever format its stored copy claims."""
    run = ledger.run(run_id)
    stored = run.report
    if stored is None:
        return []
    if recomputed is None:
        try:
            recomputed = build_report(ledger, run_id)
        except NotPublishable as exc:
            return [f"the ledger's stored report (listed by `runs`) has no support in its "
                    f"records: {exc}"]
    given, fresh = _flatten(stored), _flatten(recomputed)
    if run.migrated and stored.get("format") != REPORT_FORMAT:
        given = {k: v for k, v in given.items() if k in ("n", "mean")}
        fresh = {k: v for k, v in fresh.items() if k in given}
    return [f"the ledger's stored report (listed by `runs`) disagrees with its records: figure "
            f"'{key}' is {mine!r} there, the records give {theirs!r}"
            for key, mine, theirs in _figure_differences(given, fresh)]


def _artifact_problems(ledger: Ledger, run_id: str) -> list[str]:
    problems = []
    for row in ledger.attempts(run_id):
        for kind in ("diff", "stdout", "stderr", "metric_log"):
            digest = row.record.get(kind)
            if digest is None:
                continue
            try:
                ledger.get_artifact(digest)
            except (OSError, SealbenchError):
                problems.append(f"attempt seq {row.seq} ({row.phase} {row.task_id}): its "
                                f"{kind} artifact {digest[:12]} is missing or altered")
    return problems


def header_problems(run: RunRow, sealed: Sealed) -> list[str]:
    """Where the run header disagrees with the sealed protocol: a run header rewritten to
    publish a stopped run (lowered expected counts or min_n) or under other rules."""
    spec, options = sealed.protocol.spec, run.options
    controls = len(sealed.protocol.null_pack)
    dataset = len(sealed.protocol.dataset) * int(options.get("epochs", 1))
    wanted: list[tuple[str, Any, Any]] = [
        ("identity", run.identity, sealed.identity),
        ("min_n", options.get("min_n"), spec.publish.min_n),
        ("ci_method", options.get("ci_method"), spec.publish.ci_method),
        ("require_ci", options.get("require_ci"), spec.publish.require_ci),
        ("strata", options.get("strata", "descriptive"), spec.publish.strata),
        ("rules", options.get("rules"), spec.null_pack.rules.class_of()),
        ("max_infrastructure_errors", options.get("max_infrastructure_errors"),
         spec.publish.max_infrastructure_errors),
        ("task_ids", options.get("task_ids", "visible"), spec.solver.task_ids),
    ]
    if not run.trial:
        wanted += [("expected null_pack", (options.get("expected") or {}).get("null_pack"),
                    controls),
                   ("expected dataset", (options.get("expected") or {}).get("dataset"),
                    dataset)]
    return [f"run {run.run_id}: its header says {name} {mine!r}, the sealed protocol "
            f"{sealed.protocol_id} says {theirs!r}"
            for name, mine, theirs in wanted if mine != theirs]
