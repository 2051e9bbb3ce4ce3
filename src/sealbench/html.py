"""The HTML pages people look at (docs/reports.md): a published report with drill-down and
interval plots, a refused run's page, and a comparison of two runs.

Each page is one self-contained file: inline CSS, inline SVG, a few lines of inline JavaScript
that only show and hide rows; no network, no external asset, so a page mailed or archived
reads the same in ten years and tells nobody that it was opened.

Everything that comes from the ledger is escaped here and nowhere else: a solver controls its
diff, its stdout and stderr, its refuse reason and the names of files it touched, so a
`</pre><script>` in any of them must stay text (tests/test_html.py).

Every rate on a page is one element carrying `data-n`, `data-lo` and `data-hi` (class `rate`),
so "never a rate without n and its interval" is a rule a test checks on the rendered page,
not a convention. A refused run's page has no rate at all: not a mean, not a share of tasks
passed, and not the outcomes of dataset attempts (a count of passes is a rate by counting).
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from html import escape
from typing import Any

from sealbench.ledger import AttemptRow, Ledger, RunRow
from sealbench.logs import Captured, attempt_logs, duration_text
from sealbench.render import renderer
from sealbench.report import pct
from sealbench.textsafe import rate_free, terminal_safe

__all__ = ["AttemptView", "attempt_views", "axis_x", "compare_page", "refused_facts",
           "refused_page", "report_page", "task_anchor"]

# the plot's geometry, in SVG user units
PLOT_WIDTH = 760
PLOT_LEFT = 190  # room for a row label
PLOT_RIGHT = 40
ROW_HEIGHT = 26

STYLE = """
body{font-family:system-ui,sans-serif;max-width:72em;margin:1.5em auto;padding:0 1em;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}
td,th{border:1px solid #ccc;padding:.2em .6em;text-align:left;vertical-align:top}
table{border-collapse:collapse;margin:.6em 0}
code,pre{font-family:ui-monospace,monospace;font-size:.9em}
pre{background:#f6f6f6;border:1px solid #ddd;padding:.5em;overflow-x:auto;white-space:pre-wrap;
max-height:30em}
.headline{font-size:1.4em;font-weight:600}
.banner{padding:.6em 1em;border-radius:4px;margin:1em 0;font-weight:600}
.banner.passed{background:#e6f4e6;border:1px solid #5a5}
.banner.refused{background:#fbe9e9;border:1px solid #c55}
.note{font-style:italic;color:#555}
.grid{display:grid;grid-template-columns:16em 9em 6em 1fr 8em 10em;gap:0 .8em;
align-items:baseline}
.tasks .head{font-weight:600;border-bottom:2px solid #ccc;padding:.2em 0}
.task{border-bottom:1px solid #eee}
.task>summary{cursor:pointer;padding:.2em 0;list-style:none}
.task>summary::-webkit-details-marker{display:none}
.task>summary:hover{background:#f3f6fb}
.task[open]>summary{background:#eef2f9}
.drill{padding:.4em 1em 1em 1em}
.outcome-pass{color:#185}.outcome-fail,.outcome-error{color:#b22}
.filters label{margin-right:1em}
svg text{font-size:12px;font-family:system-ui,sans-serif}
.disagree{background:#fff6dd}
tr:target,details:target>summary{outline:2px solid #36c}
"""

FILTER_SCRIPT = """
document.querySelectorAll('[data-filter]').forEach(function (box) {
  box.addEventListener('change', function () {
    var shown = {};
    document.querySelectorAll('[data-filter]').forEach(function (b) {
      shown[b.value] = b.checked;
    });
    document.querySelectorAll('[data-outcome]').forEach(function (row) {
      row.hidden = !shown[row.getAttribute('data-outcome')];
    });
  });
});
"""


# the one script a page may run (Content-Security-Policy, page())
SCRIPT_SOURCE = "'sha256-{}'".format(
    base64.b64encode(hashlib.sha256(FILTER_SCRIPT.encode("utf-8")).digest()).decode("ascii"))


# ------------------------------------------------------------------------------ pure parts


def text(value: object) -> str:
    """Ledger text as HTML text: control characters made visible (as in a terminal), then
    every markup character escaped, quotes included, so it is safe in an attribute too."""
    return escape(terminal_safe(str(value)), quote=True)


def axis_x(value: float, lo: float = 0.0, hi: float = 1.0, *, left: float = PLOT_LEFT,
           width: float = PLOT_WIDTH - PLOT_LEFT - PLOT_RIGHT) -> float:
    """Where `value` sits on an axis from `lo` to `hi` drawn `width` units wide from `left`;
    a value outside the axis is pinned to its end, so a bad figure cannot draw off the plot."""
    if hi <= lo:
        raise ValueError(f"an axis needs lo < hi, got {lo} and {hi}")
    share = (min(max(value, lo), hi) - lo) / (hi - lo)
    return round(left + share * width, 2)


def task_anchor(task_id: str) -> str:
    """An HTML id for a task's row: readable, and unique even when two task ids differ only in
    characters an id or a URL fragment should not hold (those get a short digest)."""
    slug = re.sub(r"[^A-Za-z0-9_.-]", "_", task_id)
    if slug != task_id or not slug:
        slug += "-" + hashlib.sha256(task_id.encode("utf-8")).hexdigest()[:8]
    return "task-" + slug


def points(value: float) -> str:
    """A difference of two rates in percentage points, signed (only an exact 0 is unsigned)."""
    return "0.0" if value == 0.0 else f"{100 * value:+.1f}"


def rate(mean: float, lo: float, hi: float, n: int, method: str, *, signed: bool = False) -> str:
    """A rate as the page shows every rate: the figure, its 95% interval and n in one element
    that carries them as data too (the checkable rule of this module's docstring)."""
    if signed:
        shown = (f"{points(mean)} points (95% CI {points(lo)} to {points(hi)}, "
                 f"{text(method)}; n = {n})")
    else:
        shown = f"{pct(mean)} (95% CI {pct(lo)}–{pct(hi)}, {text(method)}; n = {n})"
    return (f'<span class=rate data-n="{n}" data-lo="{lo!r}" data-hi="{hi!r}" '
            f'data-mean="{mean!r}">{shown}</span>')


@dataclass(frozen=True)
class Interval:
    """One row of an interval plot."""

    label: str
    mean: float
    lo: float
    hi: float
    n: int
    method: str
    anchor: str | None = None  # an id to give the row, for links into the plot


def interval_plot(rows: Sequence[Interval], *, lo: float = 0.0, hi: float = 1.0,
                  title: str, signed: bool = False) -> str:
    """Intervals drawn on one axis (0–100% of tasks, or −100 to +100 points for a difference),
    each row labelled with its figure, interval and n."""
    height = ROW_HEIGHT * len(rows) + 40
    ticks = [lo + (hi - lo) * i / 4 for i in range(5)]
    parts = [f'<svg class=plot role=img width="{PLOT_WIDTH}" height="{height}" '
             f'viewBox="0 0 {PLOT_WIDTH} {height}" aria-label="{text(title)}">',
             f"<title>{text(title)}</title>"]
    base = ROW_HEIGHT * len(rows) + 8
    for tick in ticks:
        x = axis_x(tick, lo, hi)
        whole = round(100 * tick)
        label = (f"{whole:+d}" if whole else "0") if signed else str(whole)
        parts.append(f'<line x1="{x}" x2="{x}" y1="4" y2="{base}" stroke="#ddd"/>'
                     f'<text class=tick x="{x}" y="{base + 14}" text-anchor="middle">'
                     f"{label}</text>")
    unit = "difference in points (B − A)" if signed else "share of tasks, per cent"
    parts.append(f'<text x="{axis_x((lo + hi) / 2, lo, hi)}" y="{base + 30}" '
                 f'text-anchor="middle" fill="#555">{unit}</text>')
    for index, row in enumerate(rows):
        y = 8 + ROW_HEIGHT * index + ROW_HEIGHT / 2
        x_lo, x_hi, x_mean = axis_x(row.lo, lo, hi), axis_x(row.hi, lo, hi), axis_x(
            row.mean, lo, hi)
        anchor = f' id="{text(row.anchor)}"' if row.anchor else ""
        parts.append(
            f'<g class=interval{anchor} data-n="{row.n}" data-lo="{row.lo!r}" '
            f'data-hi="{row.hi!r}" data-mean="{row.mean!r}">'
            f'<text x="{PLOT_LEFT - 8}" y="{y + 4}" text-anchor="end">{text(row.label[:28])}'
            f" (n = {row.n})</text>"
            f'<line x1="{x_lo}" x2="{x_hi}" y1="{y}" y2="{y}" stroke="#36c" stroke-width="3"/>'
            f'<line x1="{x_lo}" x2="{x_lo}" y1="{y - 6}" y2="{y + 6}" stroke="#36c"/>'
            f'<line x1="{x_hi}" x2="{x_hi}" y1="{y - 6}" y2="{y + 6}" stroke="#36c"/>'
            f'<circle cx="{x_mean}" cy="{y}" r="4.5" fill="#124"/></g>')
    parts.append("</svg>")
    return "".join(parts)


def table(head: Sequence[str], rows: Iterable[Sequence[str]], *, raw: bool = False) -> str:
    """A table; cells are escaped unless `raw` (cells this module built from escaped parts)."""
    cell = (lambda c: c) if raw else text
    body = "".join("<tr>" + "".join(f"<td>{cell(c)}</td>" for c in row) + "</tr>"
                   for row in rows)
    heads = "".join(f"<th>{text(h)}</th>" for h in head)
    return f"<table><thead><tr>{heads}</tr></thead><tbody>{body}</tbody></table>"


def page(title: str, body: Sequence[str], *, script: bool = False, style: str = STYLE) -> str:
    """A whole self-contained document, under the one policy every sealbench page has (the
    leaderboard's too: sealbench.leaderboard)."""
    js = f"<script>{FILTER_SCRIPT}</script>" if script else ""
    return ("<!doctype html>\n<html lang=en><head><meta charset=utf-8>"
            "<meta name=viewport content='width=device-width'>"
            # nothing may be fetched (a page that cannot load anything cannot tell anyone it was
            # opened), and no script runs but the filter, named by its digest: were escaping
            # ever to miss, an injected <script> or onerror= would still not run, nor would an
            # injected <base> re-point the page's links or a <form> send anything
            # (default-src does not cover base-uri and form-action)
            "<meta http-equiv=Content-Security-Policy content=\"default-src 'none'; "
            f"style-src 'unsafe-inline'; script-src {SCRIPT_SOURCE}; base-uri 'none'; "
            "form-action 'none'\">"
            f"<title>{text(title)}</title><style>{style}</style></head><body>\n"
            + "\n".join(part for part in body if part) + f"\n{js}</body></html>\n")


# ------------------------------------------------------------------------ what a row shows


# the page lists (and opens) at most this many attempts: a row carries its whole diff and log
# tails, so a page of every attempt of a 100,000-task run would not fit in memory or a browser;
# the rest are counted in the page's figures and named with how to see them
PAGE_ROWS_MAX = 2000


@dataclass(frozen=True)
class AttemptView:
    """One dataset attempt as the report page shows it, read from the ledger. An attempt past
    PAGE_ROWS_MAX is not listed (`listed` False): only what the page's figures need is kept."""

    task_id: str
    epoch: int
    outcome: str
    duration: object
    stratum: str | None
    cluster: str | None
    detail: str
    files_touched: list[str]
    egress: list[dict[str, Any]] | None
    tests: dict[str, Any] | None
    logs: dict[str, Captured | None] = field(default_factory=dict)
    listed: bool = True


def attempt_views(ledger: Ledger, run_id: str, *,
                  rows_max: int = PAGE_ROWS_MAX) -> list[AttemptView]:
    """The run's dataset attempts that count (the last record of each task and epoch), in task
    order: the first `rows_max` whole, each with its diff and its stdout and stderr tails (as
    `sealbench show`), the rest as outcome and cluster only. Two passes over the records,
    neither holding them all: the page of a 100,000-task run stays small."""
    last: dict[tuple[str, int], tuple[int, str, str | None]] = {}
    for row in ledger.iter_attempts(run_id, "dataset"):
        cluster = row.record.get("cluster")
        last[(row.task_id, row.epoch)] = (row.seq, str(row.record.get("outcome")),
                                          None if cluster is None else str(cluster))
    order = sorted(last)
    listed = {key: last[key][0] for key in order[:rows_max]}
    full: dict[tuple[str, int], AttemptView] = {}
    if listed:
        for row in ledger.iter_attempts(run_id, "dataset"):
            if listed.get((row.task_id, row.epoch)) == row.seq:
                full[(row.task_id, row.epoch)] = _view(ledger, row)
    return [full.get(key) or _unlisted(key, *last[key][1:]) for key in order]


def _unlisted(key: tuple[str, int], outcome: str, cluster: str | None) -> AttemptView:
    return AttemptView(task_id=key[0], epoch=key[1], outcome=outcome, duration=None,
                       stratum=None, cluster=cluster, detail="", files_touched=[], egress=None,
                       tests=None, listed=False)


def _view(ledger: Ledger, row: AttemptRow) -> AttemptView:
    from sealbench.patchpaths import diff_paths

    record = row.record
    logs = attempt_logs(ledger, row, full=False)
    diff = logs.get("diff")
    # the record counts the files touched; their names are in the diff it graded
    touched = list(diff_paths(diff.text.encode("utf-8"))) if diff is not None else []
    egress = record.get("egress")
    tests = record.get("tests")
    return AttemptView(
        task_id=row.task_id, epoch=row.epoch, outcome=str(record.get("outcome")),
        duration=record.get("duration"),
        stratum=None if record.get("stratum") is None else str(record["stratum"]),
        cluster=None if record.get("cluster") is None else str(record["cluster"]),
        detail=str(record.get("detail") or ""),
        files_touched=touched, egress=egress if isinstance(egress, list) else None,
        tests=tests if isinstance(tests, dict) else None, logs=logs)


def _tests_summary(tests: dict[str, Any] | None) -> str:
    if tests is None:
        return "-"
    results = tests.get("results") or {}
    if not isinstance(results, dict) or not results:
        return str(tests.get("problem") or tests.get("report_problem") or "no results")
    counts = Counter(str(v) for v in results.values())
    return ", ".join(f"{counts[k]} {k}" for k in sorted(counts))


def _egress_summary(egress: list[dict[str, Any]] | None) -> str:
    if egress is None:
        return "-"
    denied = sum(1 for e in egress if not e.get("allowed"))
    return f"{len(egress)} conn." + (f", {denied} denied" if denied else "")


def _captured(name: str, captured: Captured | None) -> str:
    if captured is None:
        return f"<p>{text(name)}: none recorded</p>"
    return (f"<h4>{text(name)} <small>({text(captured.note().replace('--full', 'show --full'))})"
            f"</small></h4><pre class={text(name)}>{text(captured.text) or '(empty)'}</pre>")


def _drill(view: AttemptView) -> str:
    """What a row opens: detail, files touched, egress, test results, diff, stdout, stderr."""
    parts = [f"<p><b>detail</b>: {text(view.detail) or '-'}</p>",
             "<p><b>files touched</b>: "
             + (", ".join(f"<code>{text(f)}</code>" for f in view.files_touched) or "none")
             + "</p>"]
    if view.egress:
        parts.append("<h4>egress</h4>" + table(
            ("host", "port", "allowed", "bytes up", "bytes down", "reason"),
            [(str(e.get("host")), str(e.get("port")), "yes" if e.get("allowed") else "no",
              str(e.get("bytes_up")), str(e.get("bytes_down")), str(e.get("reason") or ""))
             for e in view.egress]))
    results = (view.tests or {}).get("results")
    if isinstance(results, dict) and results:
        parts.append("<h4>test results</h4>" + table(
            ("test", "result"), [(str(k), str(v)) for k, v in sorted(results.items())]))
    for name in ("diff", "stdout", "stderr", "metric_log"):
        if name in view.logs:
            parts.append(_captured(name, view.logs[name]))
    return f"<div class=drill>{''.join(parts)}</div>"


def _task_row(view: AttemptView) -> str:
    epoch = f" (epoch {view.epoch})" if view.epoch else ""
    anchor = task_anchor(view.task_id) + (f"-{view.epoch}" if view.epoch else "")
    outcome = text(view.outcome)
    cells = [f"<code>{text(view.task_id)}</code>{epoch}",
             f'<span class="outcome-{outcome}">{outcome}</span>',
             text(duration_text(view.duration)),
             text(", ".join(view.files_touched) or "-"),
             text(_egress_summary(view.egress)),
             text(_tests_summary(view.tests))]
    return (f'<details class=task id="{anchor}" data-outcome="{outcome}" '
            f'data-task="{text(view.task_id)}"><summary class=grid>'
            + "".join(f"<span>{c}</span>" for c in cells) + "</summary>"
            + _drill(view) + "</details>")


def task_table(views: Sequence[AttemptView]) -> str:
    """Every attempt that counts (up to PAGE_ROWS_MAX, then a line saying how many more), one
    row each, filterable by outcome; a row opens its drill-down (no rate here: outcomes are per
    attempt, the counts in the filter are counts)."""
    hidden = sum(1 for v in views if not v.listed)
    views = [v for v in views if v.listed]
    counts = Counter(v.outcome for v in views)
    filters = "".join(
        f'<label><input type=checkbox data-filter value="{text(o)}" checked> {text(o)} '
        f"({counts[o]})</label>" for o in sorted(counts))
    head = "".join(f"<span>{h}</span>" for h in (
        "task", "outcome", "duration", "files touched", "egress", "test results"))
    rows = "\n".join(_task_row(v) for v in views)
    more = (f"<p class=note id=unlisted>{hidden} more attempts (past the first {len(views)} "
            "in task order) are counted in the figures above but not listed here: "
            "<code>sealbench show RUN_ID --task TASK_ID</code> prints any one, "
            "<code>sealbench export RUN_ID</code> writes them all.</p>" if hidden else "")
    return (f"{more}<p class=filters>show outcomes: {filters}</p>"
            f"<div class=tasks><div class='grid head'>{head}</div>\n{rows}</div>")


# ------------------------------------------------------------------------ published report


@renderer("report", "html", context=("attempts",))
def report_page(report: dict[str, Any], attempts: Sequence[AttemptView]) -> str:
    """The published report: headline and its interval on a 0–100% axis with Wilson beside it,
    the null-pack banner, per-stratum and per-cluster plots, the per-task table with its
    drill-down, settings and run header, and how to verify it."""
    from sealbench.report import _notes, _summary

    lo, hi = report["ci95"]
    head = Interval("headline", report["mean"], lo, hi, report["n"], report["ci_method"])
    plots = [head]
    wilson = report["interval"].get("wilson95")
    if wilson:
        plots.append(Interval("Wilson (cross-check)", report["mean"], wilson[0], wilson[1],
                              report["n"], "wilson"))
    body = [
        f"<h1>sealbench report — {text(report['protocol_id'])}</h1>",
        f"<p class=headline id=headline>{_interval_rate(head)}</p>",
        (f"<p>Wilson cross-check: {_interval_rate(plots[1])}</p>" if wilson else ""),
        interval_plot(plots, title="the headline and its 95% interval"),
        *(f"<p class=note>{text(note)}</p>" for note in _notes(report)),
        _gate_banner(report["null_pack"]),
        _strata_section(report),
        _cluster_section(report, attempts),
        _pass_k_section(report),
        f"<h2>Tasks ({len(attempts)} attempts)</h2>",
        task_table(attempts),
        "<h2>Null pack</h2>",
        _controls_table(report["null_pack"]["controls"]),
        "<h2>Settings and run header</h2>",
        # n is in every rate, and Wilson is drawn above with its n: not again without them
        table(("", ""), [(k, v) for k, v in _summary(report)
                         if k not in ("n (scored tasks)", "Wilson 95% (cross-check)")]),
        _settings_table(report),
        "<h2>Verify this report</h2>",
        _verify_section(report),
    ]
    return terminal_safe(page(f"sealbench — {report['protocol_id']}", body, script=True))


def _gate_banner(null_pack: dict[str, Any]) -> str:
    controls = null_pack["controls"]
    if null_pack["passed"]:
        return (f"<p class='banner passed' id=gate>Null pack passed: all {len(controls)} "
                "controls behaved as their rules require, so the rate above may be read.</p>")
    why = "; ".join(str(c["reason"]) for c in controls if c.get("reason"))
    return f"<p class='banner refused' id=gate>Null pack refused: {text(why)}</p>"


def _controls_table(controls: list[dict[str, Any]]) -> str:
    return table(("control", "rule", "expected", "got", "ok", "why"),
                 [(str(c["id"]), str(c["rule"]), _expected(str(c["rule"])), str(c["outcome"]),
                   "yes" if c["ok"] else "NO", str(c.get("reason") or ""))
                  for c in controls])


def _expected(rule: str) -> str:
    """What a control's rule asks for, in words (gate.py's rules)."""
    return {"must_pass": "pass", "must_fail": "fail (not pass)",
            "must_refuse": "refuse"}.get(rule, rule)


def _strata_section(report: dict[str, Any]) -> str:
    strata = report.get("strata") or {}
    if not strata:
        return ""
    rows = [Interval(name, s["mean"], s["ci95"][0], s["ci95"][1], s["n"], s["ci_method"])
            for name, s in strata.items()]
    return ("<h2>Per stratum</h2><p class=note>For reading: each stratum's own interval "
            "(automatic method); they never narrow the headline.</p>"
            + interval_plot(rows, title="per-stratum intervals")
            + table(("stratum", "rate"),
                    [(text(r.label), rate(r.mean, r.lo, r.hi, r.n, r.method)) for r in rows],
                    raw=True))


def cluster_intervals(report: dict[str, Any], attempts: Sequence[AttemptView]) -> list[Interval]:
    """Per cluster, the rate over its tasks with the automatic interval, computed as the report
    computes a stratum's; empty when the tasks carry no clusters or fewer than two."""
    from sealbench.report import published_headline
    from sealbench.stats import derive_seed

    scores: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    grouped: dict[str, list[AttemptView]] = defaultdict(list)
    for view in attempts:
        if view.outcome != "infrastructure_error":
            grouped[view.task_id].append(view)
    for task_id, views in grouped.items():
        cluster = views[0].cluster
        if cluster is None:
            return []
        passes = sum(v.outcome == "pass" for v in views)
        # within one cluster its tasks are the units (they share the cluster's label)
        scores[cluster][task_id] = {"score": passes / len(views), "cluster": None,
                                    "stratum": None}
    if len(scores) < 2:
        return []
    out = []
    for name in sorted(scores):
        head = published_headline(scores[name], seed=derive_seed(
            report["identity"], report["run_id"], "cluster", name), ci_method="auto",
            strata_fixed=False)
        out.append(Interval(name, head.mean, head.ci95[0], head.ci95[1], head.n, head.method))
    return out


def _cluster_section(report: dict[str, Any], attempts: Sequence[AttemptView]) -> str:
    rows = cluster_intervals(report, attempts)
    if not rows:
        return ""
    return ("<h2>Per cluster</h2><p class=note>For reading, not part of report.json: each "
            "cluster's tasks with the automatic interval, as if they were independent (they "
            "share the cluster, so these intervals are too narrow if anything); the headline "
            "accounts for the clustering.</p>"
            + interval_plot(rows, title="per-cluster intervals")
            + table(("cluster", "rate"),
                    [(text(r.label), rate(r.mean, r.lo, r.hi, r.n, r.method)) for r in rows],
                    raw=True))


def _pass_k_section(report: dict[str, Any]) -> str:
    rows = report.get("pass_at_k") or []
    if not rows:
        return ""
    return "<h2>pass@k and pass^k</h2>" + table(
        ("k", "pass@k", "pass^k"),
        [(str(r["k"]), _pass_rate(r, "pass_at_k"), _pass_rate(r, "pass_hat_k")) for r in rows],
        raw=True)


def _pass_rate(row: dict[str, Any], key: str) -> str:
    lo, hi = row[f"{key}_ci95"]
    return rate(row[key], lo, hi, row["n"], row["ci_method"])


def _settings_table(report: dict[str, Any]) -> str:
    mdd = report.get("min_detectable_difference") or {}
    value = mdd.get("value")
    timings = report.get("timings") or {}
    rows = [
        ("minimum detectable difference",
         (f"{100 * value:.1f} points at 80% power, α = 0.05 ({mdd.get('test')}; assumes "
          f"{mdd.get('assumes')}; n = {report['n']})" if value is not None
          else f"none reachable ({mdd.get('assumes')})").replace("%", " per cent")),
        ("publish", f"min_n {report['publish']['min_n']}, require_ci "
                    f"{report['publish']['require_ci']}"),
        ("exposed paths", ", ".join(report.get("exposed") or []) or "none"),
        ("started", str(timings.get("started_at"))),
        ("finished", str(timings.get("finished_at"))),
        ("attempts (re-runs included)", str(report["records"]["attempts"])),
        ("attempt time, total", duration_text(timings.get("attempt_seconds_total"))),
        ("sealbench", str(report.get("sealbench_version"))),
        ("versions", ", ".join(f"{k} {v}" for k, v in sorted(
            (report.get("versions") or {}).items()))),
    ]
    return table(("", ""), rows)


def _verify_section(report: dict[str, Any]) -> str:
    records = report["records"]
    command = (f"sealbench verify-report {report['run_id']}.json --protocol PROTOCOL_DIR "
               f"--ledger {records['ledger']}")
    parts = [
        "<p>Every figure on this page but the per-cluster plot is in report.json; check it "
        "against the ledger, recomputed from the records alone:</p>",
        f"<pre id=verify>{text(command)}</pre>",
        f"<p>Ledger <code>{text(records['ledger'])}</code>, run <code>{text(report['run_id'])}"
        f"</code>, chain head <code>{text(records['chain_head'])}</code> "
        f"({records['links']} links covered).</p>",
    ]
    signature = report.get("signature")
    if isinstance(signature, dict):
        parts.append(f"<p id=signature>Signed: {text(signature.get('algorithm'))} key "
                     f"<code>{text(signature.get('key_fingerprint'))}</code>; check it with "
                     "<code>sealbench verify-report REPORT --pubkey KEY.pub</code>.</p>")
    else:
        parts.append("<p id=signature>Not signed.</p>")
    return "".join(parts)


# ------------------------------------------------------------------------------ refused run


@dataclass(frozen=True)
class RefusedFacts:
    """What a refused run's page shows: the run header, why, and each control's verdict with
    its record's detail; never a dataset outcome."""

    run: RunRow
    reason: str
    controls: list[dict[str, Any]]
    control_records: dict[str, dict[str, Any]]
    dataset_attempts: int


def refused_facts(ledger: Ledger, run_id: str) -> RefusedFacts:
    """A refused run's facts, from the ledger alone (so `run` and `report --format html`
    write the same page)."""
    from sealbench.report import gate_section, latest_rows

    run = ledger.run(run_id)
    controls = gate_section(ledger, run)["controls"]
    records = {r.task_id: r.record for r in latest_rows(ledger.attempts(run_id, "null_pack"))}
    return RefusedFacts(run, run.reason or "no reason recorded", controls, records,
                        ledger.attempt_counts(run_id).get("dataset", 0))


def refused_page(facts: RefusedFacts) -> str:
    """A refused run: which controls misbehaved and how (expected against got, the detail the
    harness recorded), the run header, and where the logs are. No rate, no dataset outcome."""
    run = facts.run
    # a ledger written before the gate withheld figures, or a solver label, may hold one
    controls = [{**c, "reason": rate_free(str(c["reason"])) if c.get("reason") else None}
                for c in facts.controls]
    bad = [c for c in controls if not c["ok"]]
    items = "".join(
        f"<li id='{text(task_anchor(str(c['id'])))}' class=misbehaved><b>{text(c['id'])}</b> "
        f"({text(c['rule'])}): expected <b>{text(_expected(str(c['rule'])))}</b>, got "
        f"<b>{text(c['outcome'])}</b>. {_control_detail(facts.control_records.get(c['id']))}"
        f"<br><code>sealbench show {text(run.run_id)} --task {text(c['id'])}</code></li>"
        for c in bad)
    body = [
        f"<h1>sealbench — run refused — {text(run.protocol_id)}</h1>",
        f"<p class='banner refused' id=gate>Refused: "
        f"{'the null pack failed: ' if bad else ''}{text(rate_free(facts.reason))}</p>",
        "<p>No rate is computed for a refused run: the controls show the instrument cannot be "
        "trusted on this solver, so nothing it measured is shown.</p>",
        f"<h2>Controls that misbehaved ({len(bad)})</h2>",
        f"<ul>{items}</ul>" if bad else "<p>None: the run was refused for the reason above.</p>",
        "<h2>Every control</h2>",
        _controls_table(controls),
        "<h2>Run header</h2>",
        table(("", ""), [
            ("protocol identity", run.identity), ("run", run.run_id),
            ("solver", rate_free(run.solver)),
            ("sandbox", run.sandbox), ("state", run.state),
            ("started", str(run.started_at)), ("finished", str(run.finished_at)),
            ("dataset attempts recorded", f"{facts.dataset_attempts} (outcomes not shown)")]),
    ]
    return terminal_safe(page(f"sealbench — refused — {run.protocol_id}", body))


def _control_detail(record: dict[str, Any] | None) -> str:
    """How a control's attempt went: the harness's detail, the files it touched, its length;
    its diff and logs stay in the ledger (a solver writes them, and they could hold anything,
    a figure that reads as a rate included). The detail is partly the solver's too (a refuse
    reason, a stderr tail), so what reads as a rate in it is withheld (textsafe.rate_free)."""
    if record is None:
        return "It did not run."
    touched = record.get("files_touched")  # a count (names are in the diff, not shown)
    detail = rate_free(str(record.get("detail") or "-"))
    return (f"Detail: {text(detail)}. Files touched: "
            f"{text(touched if isinstance(touched, int) and touched else 'none')}. "
            f"Took {text(duration_text(record.get('duration')))}.")


# ------------------------------------------------------------------------------ comparison


@renderer("compare", "html", context=("scores",))
def compare_page(comparison: dict[str, Any],
                 scores: tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]) -> str:
    """Two published runs compared: both intervals on one axis, the paired difference with its
    interval, the verdict, and the disagreeing tasks linked to their rows in the paired table.
    `scores`: each run's per-task scores (report.task_scores)."""
    from sealbench.compare import _p

    runs, paired, dis = comparison["runs"], comparison["paired"], comparison["disagreements"]
    a, b = runs["a"], runs["b"]
    # "A" and "B": run ids share their date prefix, the table above names each run whole
    both = interval_plot([_interval("A", a), _interval("B", b)],
                         title="each run's rate and 95% interval")
    difference = _interval("B − A", {**paired, "mean": paired["diff"],
                                     "ci_method": paired["method"]})
    diff = interval_plot([difference], lo=-1.0, hi=1.0, signed=True,
                         title="the paired difference and its 95% interval")
    disagreeing = set(dis["a_only"]) | set(dis["b_only"])

    def links(ids: list[str]) -> str:
        return ", ".join(f"<a href='#{text(task_anchor(t))}'>{text(t)}</a>" for t in ids) \
            or "none"

    body = [
        f"<h1>sealbench comparison — {text(comparison['protocol_id'])}</h1>",
        f"<p class=headline id=verdict>{text(_verdict_words(comparison['verdict']))}</p>",
        table(("", "run", "solver", "rate"), [
            ("A", text(a["run_id"]), f"<code>{text(a['solver'])}</code>",
             _interval_rate(_interval("A", a))),
            ("B", text(b["run_id"]), f"<code>{text(b['solver'])}</code>",
             _interval_rate(_interval("B", b))),
            ("B − A (paired)", "", "", _interval_rate(difference, signed=True))], raw=True),
        both, diff,
        table(("", ""), [
            ("protocol identity", text(comparison["identity"])),
            ("test", f"{text(paired['test'])}: p = {text(_p(paired['p']))}"),
            ("clusters", text(paired["clusters"] if paired["clusters"] else "none")),
            ("note", text(paired["note"] or "-"))], raw=True),
        "<h2>Disagreeing tasks</h2>",
        f"<p id=a-only>A passed, B did not ({len(dis['a_only'])}): {links(dis['a_only'])}</p>",
        f"<p id=b-only>B passed, A did not ({len(dis['b_only'])}): {links(dis['b_only'])}</p>",
        f"<p>Scored in one run only, left out ({len(comparison['unpaired'])}): "
        f"{text(', '.join(comparison['unpaired']) or 'none')}</p>",
        "<h2>Paired tasks</h2>",
        _paired_table(scores, disagreeing),
    ]
    return terminal_safe(page(f"sealbench — compare — {comparison['protocol_id']}", body))


def _interval(label: str, section: dict[str, Any]) -> Interval:
    """A run's (or the difference's) figure as a plot row: mean, ci95, n, ci_method."""
    lo, hi = section["ci95"]
    return Interval(label, float(section["mean"]), float(lo), float(hi), int(section["n"]),
                    str(section["ci_method"]))


def _interval_rate(row: Interval, *, signed: bool = False) -> str:
    return rate(row.mean, row.lo, row.hi, row.n, row.method, signed=signed)


def _verdict_words(verdict: str) -> str:
    """The verdict's words; its figures are in the table below, each with n and interval."""
    return verdict.rsplit(" — ", 1)[0]


def _paired_table(scores: tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]],
                  disagreeing: set[str]) -> str:
    a, b = scores
    rows = []
    for task_id in sorted(a.keys() & b.keys()):
        mark = " class=disagree" if task_id in disagreeing else ""
        rows.append(f"<tr id='{text(task_anchor(task_id))}'{mark}>"
                    f"<td><code>{text(task_id)}</code></td>"
                    f"<td>{text(a[task_id].get('cluster') or '-')}</td>"
                    f"<td>{_score(a[task_id])}</td><td>{_score(b[task_id])}</td></tr>")
    return ("<table><thead><tr><th>task</th><th>cluster</th><th>A</th><th>B</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>")


def _score(score: dict[str, Any]) -> str:
    """A task's result in one run: passed epochs of scored epochs (a count, not a rate)."""
    passes, epochs = int(score["passes"]), int(score["epochs"])
    if epochs == 1:
        return "pass" if passes else "fail"
    return f"{passes} of {epochs} epochs passed"
