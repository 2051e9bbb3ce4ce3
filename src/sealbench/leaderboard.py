"""`sealbench leaderboard`: the published runs of one exam, in tiers it can tell apart.

Most leaderboards rank by a bare mean, so two agents whose intervals overlap almost entirely
get "1st" and "2nd". This one compares every pair of runs with `compare`'s own paired test on
the tasks both scored (compare.pair_runs: Newcombe and exact McNemar, or a cluster-robust t
when tasks share clusters), corrects the p-values for the number of pairs with Holm, and
shows the result as a compact letter display (Piepho 2004) written with tier numbers: runs
sharing a tier number are not distinguishable at a family-wise alpha of 0.05. Numbers, not the
display's usual letters, because the board also names the two sides of each pair "a" and "b":
"b − a" beside two runs of tier "a" read as a claim about tiers. Rows are ordered by mean,
but no row is ranked: inside a tier the order is not a ranking
(docs/statistics.md#sealbench-leaderboard-protocol).

Only published runs of the one protocol identity are on the board; every other run of the
ledgers is named with the reason it is left out, and every ledger's records are verified
before anything is read from them, as `compare` does.
"""

from __future__ import annotations

import html
import itertools
import json
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sealbench.compare import check_published, measures_nothing, pair_runs
from sealbench.errors import BadInput, Refused
from sealbench.formats import (
    LEADERBOARD_VERSION,
    Leaderboard,
    LeaderboardLeftOut,
    LeaderboardPair,
    LeaderboardRun,
)
from sealbench.html import page
from sealbench.ledger import Ledger, RunRow
from sealbench.render import renderer
from sealbench.stats import holm
from sealbench.textsafe import terminal_safe

ALPHA = 0.05
IDENTITY = re.compile(r"sha256:[0-9a-f]{64}")

__all__ = ["ALPHA", "build_leaderboard", "compact_tiers", "resolve_identity",
           "to_html", "to_json", "to_markdown", "to_text"]


# ------------------------------------------------------------------ the compact letter display


def compact_tiers(names: Sequence[str], different: Collection[tuple[str, str]]
                  ) -> dict[str, tuple[int, ...]]:
    """Tier numbers for each name such that two names share a tier exactly when their pair
    is not in ``different`` (Piepho 2004, *J. Comp. Graph. Stat.* 13:456, insert-absorb and
    sweep: a compact letter display, numbered).

    ``names`` are in display order (best mean first): tier 1 goes to the column holding the
    earliest name, so the top of the board reads "1". Why this algorithm: it works for any
    pattern of significant pairs, including non-transitive ones (A~B, B~C, A≠C gives (1,),
    (1, 2), (2,)), where grouping by a threshold on the means would silently merge or split
    tiers.
    """
    index = {name: i for i, name in enumerate(names)}
    if len(index) != len(names):
        raise ValueError("names must be distinct")
    columns: list[frozenset[int]] = [frozenset(range(len(names)))] if names else []
    for first, second in different:
        i, j = index[first], index[second]
        if i == j:
            raise ValueError(f"{first!r} cannot differ from itself")
        split: list[frozenset[int]] = []
        for column in columns:
            if i in column and j in column:
                split += [column - {i}, column - {j}]
            else:
                split.append(column)
        columns = _absorb(split)
    columns = sorted(_sweep(columns), key=sorted)
    return {name: tuple(k + 1 for k, column in enumerate(columns) if i in column)
            for name, i in index.items()}


def _absorb(columns: list[frozenset[int]]) -> list[frozenset[int]]:
    """Drop every column contained in another (and repeats): its tier says nothing more."""
    kept: list[frozenset[int]] = []
    for k, column in enumerate(columns):
        covered = any(column < other or (column == other and m < k)
                      for m, other in enumerate(columns) if m != k)
        if not covered:
            kept.append(column)
    return kept


def _sweep(columns: list[frozenset[int]]) -> list[frozenset[int]]:
    """Remove a tier from a name when every name it links it to shares another tier with it,
    and the name keeps some tier: fewer tiers, same pairs sharing one."""
    current = [set(column) for column in columns]
    for k, column in enumerate(current):
        for i in sorted(column):
            others = [c for m, c in enumerate(current) if m != k]
            if not any(i in c for c in others):
                continue
            if all(any(i in c and u in c for c in others) for u in column if u != i):
                column.discard(i)
    return [frozenset(c) for c in current if c]


# ------------------------------------------------------------------------------ the board


@dataclass(frozen=True)
class _Entry:
    ledger: Ledger
    row: RunRow


def resolve_identity(protocol: str) -> tuple[str, str | None]:
    """The identity a PROTOCOL argument names, and its protocol id when a directory gave it.

    A sealed protocol directory is verified first (a protocol edited since sealing names no
    identity); otherwise the argument must be an identity, `sha256:` and 64 hex digits.
    """
    path = Path(protocol)
    if path.is_dir():
        from sealbench.sealing import verify

        sealed = verify(path)
        return sealed.identity, sealed.protocol_id
    if IDENTITY.fullmatch(protocol):
        return protocol, None
    raise BadInput(f"{protocol}: neither a sealed protocol directory nor a protocol identity "
                   "(sha256: and 64 hex digits)")


def build_leaderboard(ledgers: Sequence[Ledger], identity: str,
                      run_ids: Sequence[str] = ()) -> Leaderboard:
    """The published runs of ``identity`` in ``ledgers`` (or only ``run_ids``), in tiers.

    Refused (exit 3) when a ledger's records are not intact, when an explicit run is not a
    published run of the identity, when fewer than two runs remain, and when `compare` would
    refuse any pair (other conditions, too few shared tasks): a board with that pair on it
    would rank a difference of settings as a difference of agents.
    """
    entries, left_out = _candidates(ledgers, identity)
    entries, left_out = _select(entries, left_out, ledgers, identity, run_ids)
    if len(entries) < 2:
        found = ", ".join(e.row.run_id for e in entries) or "none"
        skipped = "; ".join(f"{o.run_id}: {o.why}" for o in left_out) or "none"
        raise Refused(f"a leaderboard needs at least 2 published runs of identity {identity}; "
                      f"found {len(entries)} ({found}); left out: {skipped}")
    for entry in entries:
        check_published(entry.ledger, entry.row)
    entries.sort(key=lambda e: (-_mean(e), e.row.run_id))
    pairs = _pairs(entries)
    different = [(p.a, p.b) for p in pairs if p.distinguishable]
    tiers = compact_tiers([e.row.run_id for e in entries], different)
    return Leaderboard(
        format=LEADERBOARD_VERSION, protocol_id=entries[0].row.protocol_id, identity=identity,
        alpha=ALPHA, correction="holm",
        runs=[_run(e, tiers[e.row.run_id]) for e in entries], pairs=pairs,
        indistinguishable=[(p.a, p.b) for p in pairs if not p.distinguishable],
        left_out=left_out)


def _mean(entry: _Entry) -> float:
    report = entry.row.report
    assert report is not None  # published: checked by check_published
    return float(report["mean"])


def _candidates(ledgers: Sequence[Ledger], identity: str
                ) -> tuple[list[_Entry], list[LeaderboardLeftOut]]:
    """Every published run of the identity, and every other run with why it is not one.

    A ledger whose log is not intact is refused before any run is read: a deleted run (say,
    the one where this agent did badly) is exactly what a leaderboard must not miss.
    """
    entries: dict[str, _Entry] = {}
    left_out: list[LeaderboardLeftOut] = []
    for ledger in ledgers:
        problems = ledger.log_problems()
        if problems:
            raise Refused(f"ledger {ledger.path}: {problems[0].text}",
                          [f"ledger {ledger.path}: {p.text}" for p in problems])
        for row in ledger.runs():
            why = _left_out_why(row, identity)
            if why is None:
                ledger.require_intact(row.run_id)
                why = _duplicate_why(entries.get(row.run_id), ledger, row)
            if why is None:
                entries[row.run_id] = _Entry(ledger, row)
            else:
                left_out.append(LeaderboardLeftOut(run_id=row.run_id, ledger=str(ledger.path),
                                                   why=why))
    return list(entries.values()), left_out


def _left_out_why(row: RunRow, identity: str) -> str | None:
    if row.identity != identity:
        return f"another exam: protocol '{row.protocol_id}', identity {row.identity}"
    if row.trial:
        return "a trial: it has no rate"
    if row.state != "published" or row.report is None:
        reason = f": {row.reason}" if row.reason else ""
        return f"not published (state '{row.state}'{reason})"
    return None


def _duplicate_why(seen: _Entry | None, ledger: Ledger, row: RunRow) -> str | None:
    """The same run in two ledgers (a copy) counts once; two different runs under one id
    cannot both be meant, so they are refused."""
    if seen is None:
        return None
    if _head(seen.ledger, row.run_id) != _head(ledger, row.run_id):
        raise Refused(f"run {row.run_id} is in ledger {seen.ledger.path} and in ledger "
                      f"{ledger.path} with different records: which one is meant is unclear")
    return f"the same run as in ledger {seen.ledger.path} (identical records), counted once"


def _head(ledger: Ledger, run_id: str) -> str:
    links = ledger.links(run_id)
    return links[-1].digest if links else ""


def _select(entries: list[_Entry], left_out: list[LeaderboardLeftOut],
            ledgers: Sequence[Ledger], identity: str, run_ids: Sequence[str]
            ) -> tuple[list[_Entry], list[LeaderboardLeftOut]]:
    """Only the runs asked for, refusing (naming it) any that is not on the board; the
    published runs not asked for are named, so a board of hand-picked runs says so."""
    if not run_ids:
        return entries, left_out
    by_id = {e.row.run_id: e for e in entries}
    for run_id in run_ids:
        if run_id in by_id:
            continue
        why = next((o.why for o in left_out if o.run_id == run_id), None)
        where = ", ".join(str(ledger.path) for ledger in ledgers)
        raise Refused(f"run {run_id} is not a published run of identity {identity}: "
                      + (why if why is not None else f"it is in none of the ledgers ({where})"))
    wanted = list(dict.fromkeys(run_ids))
    chosen = [by_id[r] for r in wanted]
    skipped = [LeaderboardLeftOut(run_id=e.row.run_id, ledger=str(e.ledger.path),
                                  why="published, not selected with --run")
               for e in entries if e.row.run_id not in wanted]
    return chosen, [*left_out, *skipped]


def _pairs(entries: list[_Entry]) -> list[LeaderboardPair]:
    """Every pair, tested as `compare` tests it, then Holm-adjusted over the whole board."""
    raw = []
    for first, second in itertools.combinations(entries, 2):
        try:
            # every run was checked once by build_leaderboard (check_published)
            pairing = pair_runs(first.ledger, first.row, second.ledger, second.row,
                                checked=True)
        except Refused as exc:
            raise Refused(f"cannot build the leaderboard: the pair {first.row.run_id} / "
                          f"{second.row.run_id} is not comparable — {exc}") from None
        raw.append((first, second, pairing))
    for first, second, pairing in raw:
        if not 0.0 <= pairing.result.p_value <= 1.0:  # NaN included: Holm cannot order it
            raise Refused(f"cannot build the leaderboard: the test of {first.row.run_id} / "
                          f"{second.row.run_id} gave no p-value ({pairing.result.p_value!r})")
    adjusted = holm([pairing.result.p_value for _, _, pairing in raw])
    pairs = []
    for (first, second, pairing), p_holm in zip(raw, adjusted, strict=True):
        result = pairing.result
        pairs.append(LeaderboardPair(
            a=first.row.run_id, b=second.row.run_id, n=result.n, diff=result.diff,
            ci95=result.ci95, method=result.method, test=result.test, p=result.p_value,
            p_holm=p_holm,
            distinguishable=p_holm < ALPHA and not measures_nothing(result.ci95, result.diff),
            unpaired=pairing.unpaired))
    return pairs


def _run(entry: _Entry, tiers: tuple[int, ...]) -> LeaderboardRun:
    report = entry.row.report
    assert report is not None
    low, high = (float(x) for x in report["ci95"])
    return LeaderboardRun(run_id=entry.row.run_id, ledger=str(entry.ledger.path),
                          solver=entry.row.solver, n=int(report["n"]),
                          mean=float(report["mean"]), ci95=(low, high),
                          ci_method=str(report["ci_method"]), tiers=list(tiers))


# ------------------------------------------------------------------------------ rendering


Document = Leaderboard | dict[str, Any]


def _board(document: Document) -> Leaderboard:
    """The model, from itself or from its JSON document (what a renderer registry passes)."""
    if isinstance(document, Leaderboard):
        return document
    return Leaderboard.model_validate(document)


@renderer("leaderboard", "json")
def to_json(document: Document) -> str:
    board = _board(document)
    return json.dumps(board.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"


def _rate(x: float) -> str:
    return f"{x:.3f}"


def _signed(x: float) -> str:
    return "0.000" if x == 0.0 else f"{x:+.3f}"


def _p(p: float) -> str:
    return f"{p:.2g}" if p >= 0.001 else f"{p:.1e}"


def _columns(board: Leaderboard) -> list[int]:
    return sorted({t for run in board.runs for t in run.tiers})


def _aligned(tiers: Sequence[int], columns: Sequence[int]) -> str:
    """The tier numbers at their column's position ("1  ", "1 2", "  2"), as a compact
    display is read down its columns."""
    return " ".join(str(c) if c in tiers else " " * len(str(c)) for c in columns)


def _listed(tiers: Sequence[int]) -> str:
    """Tier numbers for prose and Markdown cells, where columns do not line up: "1, 2"."""
    return ", ".join(str(t) for t in tiers)


def method_line(board: Leaderboard) -> str:
    return (f"runs sharing a tier number are not distinguishable: paired tests on the tasks both "
            f"scored (as `sealbench compare`), p-values Holm-corrected over the "
            f"{len(board.pairs)} pairs, family-wise alpha = {board.alpha}; rows are ordered by "
            "mean, and inside a tier that order is not a ranking")


def _pair_sentences(board: Leaderboard) -> tuple[list[str], list[str]]:
    tied = [f"{p.a} ~ {p.b} (p Holm = {_p(p.p_holm)}"
            + ("; no claim: the interval has zero width" if p.p_holm < board.alpha else "")
            + ")" for p in board.pairs if not p.distinguishable]
    apart = [f"{p.a} {'>' if p.diff < 0 else '<'} {p.b} (p Holm = {_p(p.p_holm)})"
             for p in board.pairs if p.distinguishable]
    return tied, apart


@renderer("leaderboard", "text")
def to_text(document: Document) -> str:
    """An aligned table for terminals; solver labels are shown with control characters
    escaped (a solver command can hold anything)."""
    board = _board(document)
    columns = _columns(board)
    rows = [(_aligned(r.tiers, columns), _rate(r.mean), f"[{_rate(r.ci95[0])}, "
             f"{_rate(r.ci95[1])}]", str(r.n), r.run_id,
             terminal_safe(r.solver, single_line=True)) for r in board.runs]
    head = ("tier", "mean", "95% CI", "n", "run", "solver")
    widths = [max(len(head[k]), *(len(row[k]) for row in rows)) for k in range(5)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) if k != 1 else c.rjust(w)
                         for k, (c, w) in enumerate(zip(cells[:5], widths, strict=True))) \
            + "  " + cells[5]

    tied, apart = _pair_sentences(board)
    label = 12
    lines = [f"{'leaderboard':<{label}}{terminal_safe(board.protocol_id, single_line=True)}",
             f"{'identity':<{label}}{board.identity}",
             f"{'tiers':<{label}}{method_line(board)}", "",
             line(head), *(line(row) for row in rows), "",
             "pairs (b − a on the tasks both scored)"]
    for p in board.pairs:
        lines.append(f"  {p.a} vs {p.b}: b − a = {_signed(p.diff)} (95% CI {_signed(p.ci95[0])}"
                     f" to {_signed(p.ci95[1])}, {p.method}, n = {p.n}); {p.test} p = "
                     f"{_p(p.p)}, Holm {_p(p.p_holm)}"
                     + (f"; unpaired {len(p.unpaired)}" if p.unpaired else ""))
    lines += ["", f"{'not told apart':<16}" + ("; ".join(tied) or "none"),
              f"{'told apart':<16}" + ("; ".join(apart) or "none")]
    if board.left_out:
        lines += ["", "left out"]
        lines += [f"  {o.run_id} ({terminal_safe(o.ledger, single_line=True)}): "
                  f"{terminal_safe(o.why, single_line=True)}" for o in board.left_out]
    return "\n".join(lines) + "\n"


def _code(text: object) -> str:
    return "`" + str(text).replace("|", "\\|").replace("`", "'").replace("\n", " ") + "`"


@renderer("leaderboard", "md")
def to_markdown(document: Document) -> str:
    board = _board(document)
    tied, apart = _pair_sentences(board)
    lines = [f"# sealbench leaderboard — {_code(board.protocol_id)}", "",
             f"Identity {_code(board.identity)}. Tiers: {method_line(board)}.", "",
             "| tier | mean | 95% CI | n | run | solver |", "|---|---|---|---|---|---|",
             *(f"| **{_listed(r.tiers)}** | {_rate(r.mean)} | {_rate(r.ci95[0])} to "
               f"{_rate(r.ci95[1])} ({r.ci_method}) | {r.n} | {_code(r.run_id)} | "
               f"{_code(r.solver)} |" for r in board.runs), "",
             "## Pairs", "",
             "| a | b | b − a | 95% CI | n | test | p | p (Holm) | told apart |",
             "|---|---|---|---|---|---|---|---|---|",
             *(f"| {_code(p.a)} | {_code(p.b)} | {_signed(p.diff)} | {_signed(p.ci95[0])} to "
               f"{_signed(p.ci95[1])} ({p.method}) | {p.n} | {p.test} | {_p(p.p)} | "
               f"{_p(p.p_holm)} | {'yes' if p.distinguishable else 'no'} |"
               for p in board.pairs), "",
             f"- not told apart: {'; '.join(tied) or 'none'}",
             f"- told apart: {'; '.join(apart) or 'none'}", ""]
    if board.left_out:
        lines += ["## Left out", "",
                  *(f"- {_code(o.run_id)} ({_code(o.ledger)}): {_code(o.why)}"
                    for o in board.left_out), ""]
    # a solver label is a command line, which can hold anything (docs/threat-model.md)
    return terminal_safe("\n".join(lines))


_CSS = """
body{font:15px/1.45 system-ui,sans-serif;margin:2em auto;max-width:70em;color:#1b1b1b}
h1{font-size:1.4em}table{border-collapse:collapse;margin:1em 0}
th,td{padding:.3em .7em;border-bottom:1px solid #ddd;text-align:left;vertical-align:middle}
td.num{text-align:right;font-variant-numeric:tabular-nums}
td.tiers{font:bold 1.1em monospace;white-space:pre}
.method{background:#f4f6f8;padding:.6em 1em;border-left:4px solid #789}
code{font-size:.9em;word-break:break-all}code.run{white-space:nowrap;word-break:normal}
svg{display:block}
.interval line.ci{stroke:#245;stroke-width:3}.interval circle{fill:#c33}
.axis line{stroke:#999}.axis text{font-size:10px;fill:#555}
"""
_PLOT_W, _PLOT_H, _PAD = 320, 22, 16


def _x(rate: float) -> float:
    return _PAD + rate * (_PLOT_W - 2 * _PAD)


def _interval_svg(run: LeaderboardRun) -> str:
    """The published interval on a 0–100% axis, its mean as a dot."""
    low, high = run.ci95
    ticks = "".join(f'<line x1="{_x(t):.1f}" x2="{_x(t):.1f}" y1="4" y2="18"/>'
                    for t in (0.0, 0.5, 1.0))
    return (f'<svg class="interval" width="{_PLOT_W}" height="{_PLOT_H}" role="img" '
            f'aria-label="95% CI {100 * low:.1f}% to {100 * high:.1f}%, mean '
            f'{100 * run.mean:.1f}%, n = {run.n}"><g class="axis">'
            f'<line x1="{_x(0):.1f}" x2="{_x(1):.1f}" y1="11" y2="11"/>{ticks}</g>'
            f'<line class="ci" x1="{_x(low):.1f}" x2="{_x(high):.1f}" y1="11" y2="11"/>'
            f'<circle cx="{_x(run.mean):.1f}" cy="11" r="4"/></svg>')


def _axis_svg() -> str:
    """The axis's ticks in per cent of tasks, the unit said once in the column's title (a
    "25%" on its own would read as a rate with no n and no interval: sealbench.html's rule)."""
    labels = "".join(f'<text x="{_x(t):.1f}" y="12" text-anchor="middle">{int(100 * t)}'
                     f'</text>' for t in (0.0, 0.25, 0.5, 0.75, 1.0))
    return (f'<svg class="axis" width="{_PLOT_W}" height="16" aria-hidden="true">{labels}'
            '</svg>')


def _figures(mean: float, ci95: tuple[float, float], n: int) -> str:
    """A row's figure as data (data-mean, data-lo, data-hi, data-n): the pages' rule that a
    rate is one element carrying its n and interval (sealbench.html), checkable on the DOM."""
    return (f'data-mean="{mean!r}" data-lo="{ci95[0]!r}" data-hi="{ci95[1]!r}" '
            f'data-n="{n}"')


@renderer("leaderboard", "html")
def to_html(document: Document) -> str:
    """One self-contained page (html.page): inline CSS and SVG, no script, and the pages'
    Content-Security-Policy, which forbids every fetch, so it cannot reach the network even
    if a label tried."""
    board = _board(document)
    e = html.escape
    columns = _columns(board)
    tied, apart = _pair_sentences(board)
    run_rows = "".join(
        f'<tr class="run" data-run="{e(r.run_id)}" {_figures(r.mean, r.ci95, r.n)}>'
        f'<td class="tiers">'
        f'{e(_aligned(r.tiers, columns))}</td><td class="num">{100 * r.mean:.1f}%</td>'
        f'<td class="num">{100 * r.ci95[0]:.1f}% – {100 * r.ci95[1]:.1f}%</td>'
        f'<td class="num">{r.n}</td><td>{_interval_svg(r)}</td><td><code class="run">'
        f'{e(r.run_id)}</code>'
        f'</td><td><code>{e(r.solver)}</code></td></tr>' for r in board.runs)
    pair_rows = "".join(
        f'<tr class="pair" {_figures(p.diff, p.ci95, p.n)}><td><code>{e(p.a)}</code></td>'
        f'<td><code>{e(p.b)}</code></td>'
        f'<td class="num">{_signed(p.diff)}</td><td class="num">{_signed(p.ci95[0])} to '
        f'{_signed(p.ci95[1])} ({e(p.method)})</td><td class="num">{p.n}</td>'
        f'<td>{e(p.test)}</td><td class="num">{_p(p.p)}</td><td class="num">{_p(p.p_holm)}'
        f'</td><td>{"yes" if p.distinguishable else "no"}</td></tr>' for p in board.pairs)
    left = "".join(f"<li><code>{e(o.run_id)}</code> ({e(o.ledger)}): {e(o.why)}</li>"
                   for o in board.left_out)
    body = [
        f"<h1>Leaderboard — <code>{e(board.protocol_id)}</code></h1>",
        f"<p>Identity <code>{e(board.identity)}</code></p>",
        '<p class="method">Tiers are a compact letter display, numbered: '
        f'{e(method_line(board).replace("`", ""))}.</p>',
        '<table id="runs"><thead><tr><th>tier</th><th>mean</th><th>95% CI</th><th>n</th>'
        f'<th title="share of tasks, per cent">{_axis_svg()}</th><th>run</th><th>solver</th>'
        f"</tr></thead>\n<tbody>{run_rows}</tbody></table>",
        '<h2>Pairs</h2><table id="pairs"><thead><tr><th>a</th><th>b</th><th>b − a</th>'
        "<th>95% CI</th><th>n</th><th>test</th><th>p</th><th>p (Holm)</th><th>told apart</th>"
        f"</tr></thead>\n<tbody>{pair_rows}</tbody></table>",
        f'<p id="tied">Not told apart: {e("; ".join(tied) or "none")}</p>',
        f'<p id="apart">Told apart: {e("; ".join(apart) or "none")}</p>',
        f'<h2>Left out</h2><ul id="left-out">{left}</ul>' if left else "",
    ]
    # the document and its policy are every page's (html.page: nothing fetched, no script);
    # control characters shown as escapes, as on every page (html.text): a page printed to a
    # terminal cannot drive it, and a bidi override cannot reorder a label
    return terminal_safe(page(f"sealbench leaderboard — {board.protocol_id}", body,
                              style=_CSS))
