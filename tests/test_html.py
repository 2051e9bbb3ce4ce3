"""The HTML pages (sealbench.html, docs/reports.md): pure parts as table tests, then the demo's
published page, a refused run's page and a comparison's page rendered in headless Chromium
(issue 14, acceptance 1, 2 and 5 for these pages)."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from browser_helpers import Rendered, chromium, rendered
from click.testing import CliRunner
from hostile_helpers import hostile_solver, sealed_toy

from sealbench.cli import main
from sealbench.html import (
    AttemptView,
    Interval,
    RefusedFacts,
    axis_x,
    interval_plot,
    page,
    points,
    rate,
    refused_page,
    report_page,
    task_anchor,
    text,
)
from sealbench.ledger import RunRow
from sealbench.logs import Captured

# the project's "no rate before the gate" check (tests/test_cli.py, tests/test_blind.py)
RATE = re.compile(r"\d+(\.\d+)?\s*%|\b0\.\d+\b|\bmean\b|ci95|\binterval\b", re.IGNORECASE)
# a percentage; the confidence level ("95% CI", "95% interval") names no rate
PERCENT = re.compile(r"\d+(\.\d+)?\s*%(?!\s*(CI|interval|confidence))")
HOSTILE = "</pre><script>window.pwned = 1</script><img src=x onerror='window.pwned=2'>"

# rulebook, except that it gives up on every task of the textkit library (as in test_cli.py)
WEAKER = """\
import os, sys
if os.path.isdir("textkit"):
    sys.exit(0)
os.execv(sys.executable, [sys.executable, "-m", "sealbench.solvers.rulebook", sys.argv[-1]])
"""


# ------------------------------------------------------------------------------ pure parts


@pytest.mark.parametrize("value,lo,hi,expected", [
    (0.0, 0.0, 1.0, 190.0),
    (1.0, 0.0, 1.0, 720.0),
    (0.5, 0.0, 1.0, 455.0),
    (-0.2, 0.0, 1.0, 190.0),  # pinned: a bad figure cannot draw off the plot
    (1.7, 0.0, 1.0, 720.0),
    (0.0, -1.0, 1.0, 455.0),  # a difference: 0 in the middle
    (-1.0, -1.0, 1.0, 190.0),
    (0.25, -1.0, 1.0, 521.25),
])
def test_axis_x_maps_a_value_onto_the_plot(value: float, lo: float, hi: float,
                                           expected: float) -> None:
    assert axis_x(value, lo, hi) == expected


def test_axis_x_refuses_an_empty_axis() -> None:
    with pytest.raises(ValueError, match="lo < hi"):
        axis_x(0.5, 1.0, 1.0)


@pytest.mark.parametrize("task_id,readable", [
    ("textkit-001", True),
    ("a.b_c-1", True),
    ("a_b", True),
    ("a b", False),  # "a_b" once slugged: a digest keeps the two apart
    ("'><script>", False),
    ("", False),
])
def test_task_anchor_is_a_safe_id(task_id: str, readable: bool) -> None:
    anchor = task_anchor(task_id)
    assert re.fullmatch(r"task-[A-Za-z0-9_.-]+", anchor), anchor
    assert (anchor == "task-" + task_id) is readable
    if not readable:
        assert re.fullmatch(r"task-[A-Za-z0-9_.-]*-[0-9a-f]{8}", anchor), anchor


def test_task_anchors_of_ids_that_slug_alike_differ() -> None:
    ids = ["a b", "a_b", "a/b", "a:b", "a\tb"]
    assert len({task_anchor(i) for i in ids}) == len(ids)


@pytest.mark.parametrize("raw,shown", [
    ("<b>", "&lt;b&gt;"),
    ("</pre><script>", "&lt;/pre&gt;&lt;script&gt;"),
    ("a\"b'c", "a&quot;b&#x27;c"),
    ("\x1b[2J", "\\x1b[2J"),  # control characters made visible, as in a terminal
    ("\u202eevil", "\\u202eevil"),
    ("x & y", "x &amp; y"),
])
def test_text_escapes_markup_and_controls(raw: str, shown: str) -> None:
    assert text(raw) == shown


@pytest.mark.parametrize("value,shown", [
    (0.0, "0.0"), (0.123, "+12.3"), (-0.0004, "-0.0"), (-1.0, "-100.0")])
def test_points_keep_the_sign_of_a_difference(value: float, shown: str) -> None:
    assert points(value) == shown


def test_a_rate_carries_n_and_its_interval_as_data_and_as_text() -> None:
    shown = rate(0.5, 0.25, 0.75, 40, "wilson")
    assert 'data-n="40"' in shown and 'data-lo="0.25"' in shown and 'data-hi="0.75"' in shown
    assert "50.0% (95% CI 25.0%–75.0%, wilson; n = 40)" in shown


def test_an_interval_plot_draws_each_row_inside_the_axis() -> None:
    svg = interval_plot([Interval("a", 0.5, 0.3, 0.7, 10, "wilson"),
                         Interval("<b>", 1.0, 0.9, 1.2, 3, "wilson")], title="t")
    assert svg.count("<g class=interval") == 2
    assert "&lt;b&gt;" in svg and "<b>" not in svg
    xs = [float(x) for x in re.findall(r'x[12]="([\d.]+)"', svg)]
    assert min(xs) >= 190.0 and max(xs) <= 720.0


def _report(**extra: Any) -> dict[str, Any]:
    """A published report's dict, with the fields the page reads."""
    report: dict[str, Any] = {
        "format": "sealbench-report/v3", "protocol_id": "toy", "identity": "sha256:abc",
        "run_id": "run-1", "solver": {"command": "solver", "env_names": [], "home_from": None},
        "sandbox": "bwrap", "exposed": [], "n": 2, "mean": 0.5, "ci95": [0.1, 0.9],
        "ci_method": "wilson",
        "interval": {"note": None, "reason": "binary scores", "resamples": 0, "seed": 1,
                     "wilson95": [0.1, 0.9], "conditional_on_strata": False},
        "epochs": 1, "timeout_scale": 1.0, "strata": {}, "pass_at_k": [],
        "min_detectable_difference": {"value": 0.4, "test": "exact McNemar",
                                      "assumes": "x"},
        "outcomes": {"pass": 1, "fail": 1}, "infrastructure_errors": 0,
        "infrastructure_error_attempts": [], "task_ids": "blind",
        "null_pack": {"passed": True, "controls": [
            {"id": "NP-1", "rule": "must_pass", "outcome": "pass", "ok": True,
             "reason": None}]},
        "publish": {"min_n": 2, "require_ci": True},
        "timings": {"started_at": "s", "finished_at": "f", "attempt_seconds_total": 1.0},
        "records": {"ledger": "/l.sqlite", "artifacts": "/a", "run_id": "run-1",
                    "attempts": 3, "links": 5, "chain_head": "ab" * 32},
        "sealbench_version": "0", "versions": {"python": "3"},
    }
    report.update(extra)
    return report


def _hostile_views() -> list[AttemptView]:
    captured = Captured(HOSTILE, len(HOSTILE), len(HOSTILE), False)
    return [AttemptView(task_id=f"t{i}'><script>window.pwned=3</script>", epoch=0,
                        outcome=outcome, duration=0.5, stratum=None, cluster=None,
                        detail=HOSTILE, files_touched=[HOSTILE],
                        egress=[{"host": HOSTILE, "port": 443, "allowed": False,
                                 "bytes_up": 0, "bytes_down": 0, "reason": HOSTILE}],
                        tests={"results": {HOSTILE: "failed"}},
                        logs={"diff": captured, "stdout": captured, "stderr": None})
            for i, outcome in enumerate(("pass", "fail"))]


def test_what_a_solver_wrote_stays_text_on_the_report_page() -> None:
    page = report_page(_report(), _hostile_views())
    assert page.count("<script>") == 1  # the page's own filter script, nothing else
    assert "onerror=" not in page.replace("onerror=&#x27;", "")
    assert "&lt;/pre&gt;&lt;script&gt;window.pwned = 1&lt;/script&gt;" in page


def test_the_report_page_shows_a_signature_when_signed() -> None:
    signed = _report(signature={"algorithm": "ed25519", "key_fingerprint": "fp-1234"})
    assert "fp-1234" in report_page(signed, [])
    assert "Not signed." in report_page(_report(), [])


@pytest.mark.parametrize("outcome,touched,shown", [
    ("fail", 0, "Files touched: none."),
    ("pass", 3, "Files touched: 3."),  # the record counts them (an int, not names)
    ("violation", 1, "Files touched: 1."),
])
def test_a_refused_page_says_how_each_control_misbehaved(outcome: str, touched: int,
                                                        shown: str) -> None:
    run = RunRow("run-9", "toy", "sha256:abc", "solver", "bwrap", {}, "2026-01-01T00:00:00Z",
                 None, "refused", "NP-1 (must_fail): failed closed", None)
    facts = RefusedFacts(run, run.reason or "", [
        {"id": "NP-1", "rule": "must_fail", "outcome": outcome, "ok": False,
         "reason": "NP-1 (must_fail): failed closed"},
        {"id": "NP-2", "rule": "must_pass", "outcome": "pass", "ok": True, "reason": None}],
        {"NP-1": {"outcome": outcome, "detail": HOSTILE, "files_touched": touched,
                  "duration": 0.25}}, 40)
    page = refused_page(facts)
    assert shown in page and "expected <b>fail (not pass)</b>, got <b>" + outcome in page
    assert "sealbench show run-9 --task NP-1" in page
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "40 (outcomes not shown)" in page
    visible = re.sub(r"<style>.*?</style>|<[^>]+>", " ", page, flags=re.S)
    assert not RATE.search(visible), RATE.search(visible)


# ------------------------------------------------------------------------------ in a browser


@dataclass(frozen=True)
class Pages:
    report: Path
    refused: Path
    compare: Path
    ledger: Path
    refused_run: str


def _run(proto: Path, ledger: Path, solver: str, report: Path) -> Any:
    return CliRunner().invoke(main, ["run", str(proto), "--solver", solver, "--ledger",
                                     str(ledger), "--jobs", "2", "--report", str(report)])


def _field(stdout: str, name: str) -> str:
    return next(line.split(None, 1)[1] for line in stdout.splitlines()
                if line.startswith(name + " "))


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> Pages:
    """The demo (its report.html as `make demo` writes it), a refused run of do-nothing,
    a weaker variant and `compare --format html` of it against the demo's rulebook run."""
    base = tmp_path_factory.mktemp("html")
    demo = CliRunner().invoke(main, ["demo", "--dir", str(base / "demo")])
    assert demo.exit_code == 0, demo.stderr
    report = Path(_field(demo.stdout, "report")).with_suffix(".html")
    proto, ledger = base / "demo" / "coding-repair", base / "demo" / "ledger.sqlite"
    refused = _run(proto, ledger, f"{sys.executable} -m sealbench.solvers.do_nothing",
                   base / "refused" / "report.json")
    assert refused.exit_code == 3, refused.stderr
    assert f"Its page: {base / 'refused' / 'report.html'}" in refused.stderr
    assert not (base / "refused" / "report.json").exists()
    refused_run = re.search(r"run (\S+) refused", refused.stderr)
    assert refused_run is not None
    (base / "weaker.py").write_text(WEAKER)
    weak = _run(proto, ledger, f"{sys.executable} {base / 'weaker.py'}",
                base / "weak" / "report.json")
    assert weak.exit_code == 0, weak.stderr
    compared = CliRunner().invoke(main, ["compare", _field(weak.stdout, "run"),
                                         _field(demo.stdout, "run"), "--ledger", str(ledger),
                                         "--format", "html"])
    assert compared.exit_code == 0, compared.stderr
    (base / "compare.html").write_text(compared.stdout)
    return Pages(report, base / "refused" / "report.html", base / "compare.html", ledger,
                 refused_run.group(1))


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as launched:
        yield launched


def _shot(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.png"
    print(f"screenshot: {path}")
    return path


def _rates_are_bare(seen: Rendered) -> list[str]:
    """Each text node holding a percentage outside an element that carries n and its
    interval (data-n, data-lo, data-hi): the page's rule, checked on the rendered DOM."""
    found = seen.page.evaluate("""(pattern) => {
        const re = new RegExp(pattern);
        const bare = [];
        const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
        while (walk.nextNode()) {
            const node = walk.currentNode;
            if (!re.test(node.textContent)) continue;
            const owner = node.parentElement.closest('[data-n][data-lo][data-hi]');
            if (owner === null) bare.push(node.textContent);
        }
        return bare;
    }""", PERCENT.pattern)
    return [str(item) for item in found]


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.sandbox
def test_the_demo_report_shows_its_interval_banner_and_54_rows_that_open(
        pages: Pages, browser: Any, tmp_path: Path) -> None:
    with rendered(browser, pages.report, _shot(tmp_path, "report")) as seen:
        page = seen.page
        assert seen.outside_requests(pages.report) == []
        assert page.locator("svg.plot g.interval").count() >= 2  # headline and Wilson
        headline = page.locator("#headline .rate")
        assert float(headline.get_attribute("data-lo")) < float(
            headline.get_attribute("data-hi"))
        assert "n = 54" in headline.inner_text()
        banner = page.locator("#gate")
        assert banner.is_visible() and "Null pack passed" in banner.inner_text()
        rows = page.locator("details.task")
        assert rows.count() == 54
        first = rows.first
        cells = first.locator("summary > span")
        assert cells.nth(0).inner_text().startswith("datelite-001")
        assert ".py" in cells.nth(3).inner_text()  # the files the graded diff touched
        diff = first.locator("pre.diff")
        assert not diff.is_visible()
        first.locator("summary").click()
        assert diff.is_visible() and diff.inner_text().strip()
        assert first.locator("pre.stdout").is_visible()
        assert page.locator("svg[aria-label='per-cluster intervals'] g.interval").count() == 8
        assert page.locator("svg[aria-label='per-stratum intervals'] g.interval").count() > 1
        assert "sealbench verify-report" in page.locator("#verify").inner_text()
        # the outcome filter: unticking "pass" hides every passing row, and only those
        passing = page.locator("details.task[data-outcome=pass]").count()
        assert 0 < passing < 54
        page.locator("input[data-filter][value=pass]").uncheck()
        assert page.locator("details.task:visible").count() == 54 - passing
        assert _rates_are_bare(seen) == []


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.sandbox
def test_report_format_html_prints_the_page_run_wrote(pages: Pages) -> None:
    """`sealbench report RUN --format html` recomputes the same page from the ledger."""
    printed = CliRunner().invoke(main, ["report", pages.report.stem, "--format", "html",
                                        "--ledger", str(pages.ledger)])
    assert printed.exit_code == 0, printed.stderr
    assert printed.stdout == pages.report.read_text()


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.sandbox
def test_a_refused_run_page_names_each_misbehaving_control_and_holds_no_rate(
        pages: Pages, browser: Any, tmp_path: Path) -> None:
    with rendered(browser, pages.refused, _shot(tmp_path, "refused")) as seen:
        assert seen.outside_requests(pages.refused) == []
        shown = seen.text()
        assert not RATE.search(shown), RATE.search(shown)
        misbehaved = seen.page.locator("li.misbehaved")
        names = {misbehaved.nth(i).locator("b").first.inner_text()
                 for i in range(misbehaved.count())}
        # do-nothing fails open on both stubs, and does not refuse the secret's prompt
        assert names == {"NP-STUB-01", "NP-STUB-02", "NP-SECRET-01"}
        for i in range(misbehaved.count()):
            item = misbehaved.nth(i).inner_text()
            assert re.search(r"expected (pass|refuse), got \w+", item), item
            assert f"sealbench show {pages.refused_run} --task NP-" in item
        assert "Refused" in seen.page.locator("#gate").inner_text()
    # `report --format html` of the refused run prints the same page, and still exits 3
    again = CliRunner().invoke(main, ["report", pages.refused_run, "--format", "html",
                                      "--ledger", str(pages.ledger)])
    assert again.exit_code == 3
    assert "has no publishable report" in again.stderr
    assert again.stdout == pages.refused.read_text()


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.sandbox
def test_the_compare_page_shows_both_intervals_and_links_the_disagreeing_tasks(
        pages: Pages, browser: Any, tmp_path: Path) -> None:
    with rendered(browser, pages.compare, _shot(tmp_path, "compare")) as seen:
        page = seen.page
        assert seen.outside_requests(pages.compare) == []
        rates = page.locator("span.rate")
        assert rates.count() == 3  # A, B and the paired difference
        assert all("n = 54" in rates.nth(i).inner_text() for i in range(3))
        assert page.locator("svg.plot g.interval").count() == 3
        links = page.locator("#b-only a")
        assert links.count() > 0
        for i in range(links.count()):
            link = links.nth(i)
            assert link.inner_text().startswith("textkit-")
            target = link.get_attribute("href")
            assert target is not None
            assert page.locator(target).count() == 1  # the anchor lands on its row
            assert "disagree" in (page.locator(target).get_attribute("class") or "")
        links.first.click()
        assert page.evaluate("location.hash") == links.first.get_attribute("href")
        assert _rates_are_bare(seen) == []


@pytest.mark.browser
def test_a_hostile_diff_stays_text_in_the_browser(tmp_path: Path, browser: Any) -> None:
    path = tmp_path / "hostile.html"
    path.write_text(report_page(_report(), _hostile_views()))
    with rendered(browser, path, _shot(tmp_path, "hostile")) as seen:
        assert seen.page.evaluate("typeof window.pwned") == "undefined"
        assert seen.outside_requests(path) == []  # the <img src=x> never became an element
        seen.page.locator("details.task summary").first.click()
        assert HOSTILE in seen.page.locator("pre.diff").first.inner_text()
        assert _rates_are_bare(seen) == []
        # the filter, the one script the page's policy lets run, runs
        assert seen.page.locator("details.task:visible").count() == 2
        seen.page.locator("input[data-filter][value=pass]").uncheck()
        assert seen.page.locator("details.task:visible").count() == 1


@pytest.mark.browser
def test_a_script_that_escaping_missed_would_still_not_run(tmp_path: Path,
                                                           browser: Any) -> None:
    path = tmp_path / "injected.html"
    path.write_text(page("t", ["<script>window.pwned = 4</script>",
                               "<img src=data:, onerror='window.pwned = 5'>"], script=True))
    with rendered(browser, path) as seen:
        assert seen.page.evaluate("typeof window.pwned") == "undefined"
        assert seen.outside_requests(path) == []


@pytest.mark.browser
def test_markup_that_escaping_missed_cannot_repoint_links_or_send_a_form(
        tmp_path: Path, browser: Any) -> None:
    path = tmp_path / "based.html"
    path.write_text(page("t", ["<base href='http://evil.test/'><a id=link href='x'>x</a>",
                               "<form id=f action='http://evil.test/'><input name=q></form>"]))
    with rendered(browser, path) as seen:
        assert seen.page.evaluate("document.getElementById('link').href").startswith("file:")
        seen.page.evaluate("document.getElementById('f').submit()")
        seen.page.wait_for_timeout(300)
        assert seen.page.evaluate("location.protocol") == "file:"
        assert seen.outside_requests(path) == []


# a refusal that reads as a rate, written by the solver into every task's refuse file
FAKE_RATE = "mean 0.93: 93.0% (95% CI 88.0%-97.0%, n = 54), 50/54 passed"


@pytest.mark.slow
@pytest.mark.sandbox
def test_a_solver_cannot_put_a_rate_on_its_refused_page_or_refusal(tmp_path: Path) -> None:
    """A solver that refuses every task, the must_pass control included, with a reason that
    reads as a rate: the run is refused, and neither its page nor the refusal message shows
    that figure (the gate's reasons and the page withhold it; the ledger keeps it whole)."""
    proto, ledger = sealed_toy(tmp_path)
    solver = hostile_solver(tmp_path / "agent", before=f"""
        open(os.environ["SEALBENCH_REFUSE_FILE"], "w").write({FAKE_RATE!r})
        sys.exit(0)
    """)
    report = tmp_path / "out" / "report.json"
    result = CliRunner().invoke(main, ["run", str(proto), "--solver", solver, "--ledger",
                                       str(ledger.path), "--report", str(report)])
    assert result.exit_code == 3, result.stderr
    assert "NP-STUB-01" in result.stderr and "[withheld]" in result.stderr
    assert not RATE.search(result.stderr.replace("no rate is computed", "")), result.stderr
    page = (tmp_path / "out" / "report.html").read_text()
    visible = re.sub(r"<style>.*?</style>|<script>.*?</script>|<[^>]+>", " ", page, flags=re.S)
    assert "NP-STUB-01" in visible and "[withheld]" in visible
    assert not RATE.search(visible), RATE.search(visible)


@pytest.mark.slow
@pytest.mark.sandbox
def test_a_large_run_lists_the_first_rows_and_counts_the_rest_in_its_figures(
        pages: Pages) -> None:
    """A page lists at most rows_max attempts (a 100,000-task run's page must fit in memory
    and in a browser): the first in task order, each with its drill-down; the rest are only
    counted, and the per-cluster figures still cover every attempt."""
    import json as json_module

    from sealbench.html import attempt_views, cluster_intervals
    from sealbench.ledger import Ledger

    ledger, run_id = Ledger(pages.ledger), pages.report.stem
    report = json_module.loads(pages.report.with_suffix(".json").read_text())
    every = attempt_views(ledger, run_id)
    some = attempt_views(ledger, run_id, rows_max=10)
    assert [(v.task_id, v.epoch, v.outcome) for v in some] == \
        [(v.task_id, v.epoch, v.outcome) for v in every]
    assert [v.listed for v in some] == [True] * 10 + [False] * 44
    assert all(v.logs for v in some[:10]) and not any(v.logs for v in some[10:])
    assert cluster_intervals(report, some) == cluster_intervals(report, every)
    page_text = report_page(report, some)
    assert page_text.count("<details class=task") == 10
    assert "44 more attempts (past the first 10 in task order)" in page_text
    assert "44 more" not in report_page(report, every)
