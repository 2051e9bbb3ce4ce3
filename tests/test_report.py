"""report.json: a pinned format (golden), recomputed from the ledger alone."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from toy import SOLVER, write_solver

from sealbench.ledger import AttemptRow, Ledger, Link
from sealbench.report import attempt_history, covered_links, to_markdown, verify_report
from sealbench.runner import RunControl, RunInterrupted, RunOptions, resume, run
from sealbench.sealing import seal

DATA = Path(__file__).parent / "data"
GOLDEN = DATA / "golden_report.json"
VOLATILE = "<varies>"  # when and where a run happened; everything else is pinned


def normalized(report: dict[str, Any]) -> dict[str, Any]:
    report = json.loads(json.dumps(report))
    report["timings"] = {key: VOLATILE for key in report["timings"]}
    for key in ("ledger", "artifacts", "chain_head"):
        report["records"][key] = VOLATILE
    report["solver"]["command"] = VOLATILE
    report["sealbench_version"] = VOLATILE
    report["versions"] = {key: VOLATILE for key in report["versions"]}
    return report


def golden_run(tmp_path: Path) -> dict[str, Any]:
    proto = tmp_path / "golden_protocol"
    shutil.copytree(DATA / "golden_protocol", proto)
    ledger = Ledger(tmp_path / "ledger.sqlite")
    seal(proto, ledger=ledger)
    # ids are blind: the solver recognises toy-001 by its fixture, as an agent would
    body = SOLVER + ("if m and path == 'app.txt' and 'colour 1 is' in open(path).read():\n"
                     "    open('app.txt', 'a').write('oops\\n')\n")
    command = write_solver(tmp_path / "agent", body)
    result = run(proto, command, ledger=ledger, options=RunOptions(jobs=2), run_id="golden-run")
    return result.report


def test_golden_report_format(tmp_path: Path) -> None:
    """A silent change to report.json (a key, a type, a figure's computation) fails here."""
    report = golden_run(tmp_path)
    assert normalized(report) == json.loads(GOLDEN.read_text())


def test_report_carries_the_contract_fields(tmp_path: Path) -> None:
    report = golden_run(tmp_path)
    for key in ("protocol_id", "identity", "n", "mean", "ci95", "ci_method", "null_pack",
                "outcomes", "sandbox", "solver", "run_id", "timings", "records"):
        assert key in report
    assert report["n"] == 4 and report["mean"] == 0.75
    assert report["outcomes"]["fail"] == 1 and report["outcomes"]["pass"] == 3
    lo, hi = report["ci95"]
    assert 0 <= lo <= 0.75 <= hi <= 1
    markdown = to_markdown(report)
    assert report["identity"] in markdown and "n = 4" in markdown and "95% CI" in markdown


FLAKY = SOLVER.replace("if m:", "if m and (not sys.argv[-1].startswith('toy-00') "
                       "or int.from_bytes(os.urandom(1), 'big') % 2):")


@pytest.mark.slow
def test_epochs_give_pass_at_k_and_pass_hat_k(tmp_path: Path) -> None:
    from toy import make_protocol

    proto = make_protocol(tmp_path / "proto", n=12, min_n=10)
    ledger = Ledger(tmp_path / "l.sqlite")
    seal(proto, ledger=ledger)
    command = write_solver(tmp_path / "agent", FLAKY)  # toy-000..009 pass half the time
    result = run(proto, command, ledger=ledger, options=RunOptions(jobs=2, epochs=3))
    report = result.report
    assert report["epochs"] == 3 and report["n"] == 12
    assert ledger.attempt_counts(result.run_id)["dataset"] == 36
    rows = report["pass_at_k"]
    assert [r["k"] for r in rows] == [1, 2, 3]
    assert rows[0]["pass_at_k"] == pytest.approx(report["mean"])
    assert rows[0]["pass_hat_k"] == pytest.approx(report["mean"])
    at = [r["pass_at_k"] for r in rows]
    hat = [r["pass_hat_k"] for r in rows]
    assert at == sorted(at) and hat == sorted(hat, reverse=True)
    for r in rows:
        assert r["pass_at_k_ci95"][0] <= r["pass_at_k"] <= r["pass_at_k_ci95"][1]
    # the two tasks the solver always passes keep pass^3 at or above 2/12
    assert hat[-1] >= 2 / 12 - 1e-12


def test_ci_method_is_sealed_and_used(tmp_path: Path) -> None:
    from toy import make_protocol

    from sealbench.stats import clopper_pearson

    proto = make_protocol(tmp_path / "proto", n=6, min_n=5)
    text = (proto / "protocol.yaml").read_text()
    ledger = Ledger(tmp_path / "l.sqlite")
    bootstrap_identity = seal(proto, ledger=Ledger(tmp_path / "other.sqlite")).identity
    (proto / "protocol.yaml").write_text(
        text.replace("  require_ci: true", "  require_ci: true\n  ci_method: clopper-pearson"))
    sealed = seal(proto, ledger=ledger)
    assert sealed.identity != bootstrap_identity  # the interval method is part of the exam
    body = SOLVER + "if sys.argv[-1] == 'toy-004':\n    open('app.txt', 'a').write('x')\n"
    report = run(proto, write_solver(tmp_path / "agent", body), ledger=ledger).report
    assert report["ci_method"] == "clopper-pearson"
    assert report["ci95"] == list(clopper_pearson(5, 6))


def test_html_report_escapes_and_carries_the_headline(tmp_path: Path) -> None:
    from html.parser import HTMLParser

    from sealbench.render import render
    from sealbench.report import headline_text

    report = golden_run(tmp_path)
    report["solver"]["command"] = "<script>alert(1)</script> solve.sh"
    page = render("report", "html", report, attempts=lambda: [])
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)" in page
    texts: list[str] = []

    class Collect(HTMLParser):
        def handle_data(self, data: str) -> None:
            texts.append(data)

    Collect().feed(page)
    text = " ".join(texts)
    assert headline_text(report) in text and report["identity"] in text
    written = Path(report["records"]["ledger"]).parent / "reports" / "golden-run.html"
    assert written.exists()


# ---------------------------------------------------------------------------------- intervals

PASS_BELOW_21 = SOLVER.replace(  # repairs the controls and the tasks numbered below 21
    "if m:", "if m and (not os.path.exists('app.txt') or "
    "int(re.search(r'colour (\\d+)', open('app.txt').read()).group(1)) < 21):")


def _easy_hard_protocol(root: Path, *, fixed: bool) -> Path:
    """50 tasks, 20 'easy' then 30 'hard', no clusters; optionally publish.strata: fixed."""
    from toy import make_protocol

    proto = make_protocol(root, n=50, min_n=40, clusters=None,
                          protocol_id="toy.strata.fixed" if fixed else "toy.strata")
    rows = [json.loads(line) for line in (proto / "tasks" / "dataset.jsonl").read_text()
            .splitlines()]
    for i, row in enumerate(rows):
        row["stratum"] = "easy" if i < 20 else "hard"
    (proto / "tasks" / "dataset.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if fixed:
        text = (proto / "protocol.yaml").read_text()
        (proto / "protocol.yaml").write_text(
            text.replace("  require_ci: true", "  require_ci: true\n  strata: fixed"))
    return proto


@pytest.mark.slow
def test_easy_and_hard_strata_publish_no_narrower_than_wilson(tmp_path: Path) -> None:
    """20 easy tasks all pass, 30 hard ones 1 passes, two strata, no ci_method: the published
    interval is Wilson's for 21/50 (labels never narrow it); declared fixed, it is stratified
    and says it is conditional on the stratum sizes."""
    from sealbench.report import headline_text
    from sealbench.stats import wilson

    ledger = Ledger(tmp_path / "l.sqlite")
    command = write_solver(tmp_path / "agent", PASS_BELOW_21)
    proto = _easy_hard_protocol(tmp_path / "proto", fixed=False)
    seal(proto, ledger=ledger)
    report = run(proto, command, ledger=ledger, options=RunOptions(jobs=2)).report
    assert report["n"] == 50 and report["mean"] == 21 / 50
    low, high = report["ci95"]
    w_low, w_high = wilson(21, 50)
    assert low <= w_low and high >= w_high
    assert report["ci_method"] == "wilson" and not report["interval"]["stratified"]
    assert report["strata"]["easy"]["n"] == 20 and report["strata"]["hard"]["mean"] == 1 / 30

    fixed = _easy_hard_protocol(tmp_path / "fixed", fixed=True)
    seal(fixed, ledger=ledger)
    conditional = run(fixed, command, ledger=ledger, options=RunOptions(jobs=2)).report
    assert conditional["interval"]["conditional_on_strata"]
    assert conditional["ci_method"] == "stratified-wilson"
    assert "conditional on the stratum sizes" in headline_text(conditional)


def test_fixed_strata_with_a_one_task_stratum_are_refused_at_seal(tmp_path: Path) -> None:
    from toy import make_protocol

    from sealbench.errors import BadInput

    proto = make_protocol(tmp_path / "proto", n=5, min_n=4, clusters=None)
    rows = [json.loads(line) for line in (proto / "tasks" / "dataset.jsonl").read_text()
            .splitlines()]
    rows[4]["stratum"] = "lonely"
    del rows[3]["stratum"]
    rows[0]["cluster"] = rows[1]["cluster"] = "repo"  # toy-000 is in s0, toy-001 in s1
    (proto / "tasks" / "dataset.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = (proto / "protocol.yaml").read_text()
    (proto / "protocol.yaml").write_text(
        text.replace("  require_ci: true", "  require_ci: true\n  strata: fixed"))
    with pytest.raises(BadInput) as caught:
        seal(proto, ledger=Ledger(tmp_path / "l.sqlite"))
    lines = caught.value.lines()
    assert any("protocol.yaml:" in line and "publish.strata" in line and "'lonely'" in line
               for line in lines), lines
    assert any("dataset.jsonl:4" in line and "stratum" in line for line in lines), lines
    assert any("dataset.jsonl:2" in line and "field 'cluster'" in line and "'repo'" in line
               for line in lines), lines


@settings(max_examples=50, deadline=None)
@given(outcomes=st.lists(st.booleans(), min_size=2, max_size=120),
       data=st.data(), seed=st.integers(0, 2**63))
def test_published_headline_is_never_narrowed_by_strata(
        outcomes: list[bool], data: st.DataObject, seed: int) -> None:
    """The report's own headline function: a distinct stratum per task, or any strata, without
    publish.strata: fixed, gives exactly the interval of the unlabelled tasks; and no labels at
    all gives Wilson."""
    from sealbench.report import published_headline
    from sealbench.stats import wilson

    n = len(outcomes)
    clusters = data.draw(st.one_of(st.none(), st.lists(st.sampled_from("abcd"), min_size=n,
                                                       max_size=n)))
    some = data.draw(st.lists(st.sampled_from("xyz"), min_size=n, max_size=n))

    def scores(strata: list[str] | None) -> dict[str, dict[str, object]]:
        return {f"t{i}": {"score": float(o), "stratum": strata[i] if strata else None,
                          "cluster": clusters[i] if clusters else None}
                for i, o in enumerate(outcomes)}

    plain = published_headline(scores(None), seed=seed, ci_method="auto", strata_fixed=False)
    for strata in ([f"s{i}" for i in range(n)], some):
        labelled = published_headline(scores(strata), seed=seed, ci_method="auto",
                                      strata_fixed=False)
        assert labelled.ci95 == plain.ci95
    w_low, w_high = wilson(sum(outcomes), n)
    assert plain.ci95[0] <= w_low + 1e-12 and plain.ci95[1] >= w_high - 1e-12


@pytest.mark.parametrize(("network", "hosts", "text"), [
    (None, [], "not recorded"),
    ("none", [], "none"),
    ("open", [], "open"),
    ("model-api", [], "model-api, no host allowed"),
    ("model-api", ["api.openai.com:443", "[::1]:8080"],
     "model-api, allowed: api.openai.com:443, [::1]:8080"),
])
def test_network_line_of_the_renderings(network: str | None, hosts: list[str],
                                        text: str) -> None:
    from sealbench.report import network_text

    assert network_text({"network": network, "allow_hosts": hosts}) == text


def test_a_report_from_before_the_network_policy_still_verifies(tmp_path: Path) -> None:
    """A run recorded before the run header had `network`: its recomputed report has neither
    key, so the report written then verifies; the renderings say "not recorded"."""
    from sealbench.report import build_report, network_text, verify_report

    report = golden_run(tmp_path)
    ledger = Ledger(Path(report["records"]["ledger"]))
    source = ledger.run(report["run_id"])
    options = {k: v for k, v in source.options.items() if k not in ("network", "allow_hosts")}
    # the same records under a run header as an older sealbench wrote it
    ledger.create_run("older", source.protocol_id, source.identity, source.solver,
                      source.sandbox, options)
    for row in ledger.attempts(source.run_id):
        ledger.add_attempt("older", row.phase, row.task_id, row.epoch, row.record)
    ledger.finish_run("older", "finished")
    old = build_report(ledger, "older")
    assert "network" not in old and "allow_hosts" not in old
    ledger.finish_run("older", "published", None, old)
    assert verify_report(old, ledger) == []
    assert network_text(old) == "not recorded"


def _link(seq: int, kind: str, body: dict[str, Any] | None = None,
          attempt: tuple[str, str, int, str] | None = None) -> Link:
    row = None
    if attempt is not None:
        phase, task, epoch, outcome = attempt
        row = AttemptRow(seq, phase, task, epoch, {"outcome": outcome, "detail": "bwrap died"},
                         "p", f"d{seq}")
    return Link(seq, kind, body or {}, "p", f"d{seq}", row)


def test_attempt_history_lists_interrupted_and_rerun_attempts() -> None:
    links = [_link(0, "header"), _link(1, "created"),
             _link(2, "attempt", attempt=("dataset", "t1", 0, "infrastructure_error")),
             _link(3, "interrupted_attempt", {"phase": "dataset", "task_id": "t2", "epoch": 1,
                                              "how": "killed by a second interrupt"}),
             _link(4, "interrupted", {"reason": "stopped by the user"}),
             _link(5, "resumed"),
             _link(6, "attempt", attempt=("dataset", "t1", 0, "pass")),
             _link(7, "attempt", attempt=("dataset", "t2", 1, "pass")),
             _link(8, "finished"), _link(9, "published")]
    covered = covered_links(links)
    assert covered[-1].seq == 8  # the published link is never covered by its report
    assert attempt_history(covered) == {
        "interrupted": [{"phase": "dataset", "task_id": "t2", "epoch": 1,
                         "how": "killed by a second interrupt"}],
        "rerun": [{"phase": "dataset", "task_id": "t1", "epoch": 0,
                   "how": "infrastructure error, re-run: bwrap died"}]}


def test_a_resumed_run_lists_the_attempt_it_lost_in_report_json(tmp_path: Path) -> None:
    """An attempt in flight when the run died is chained as interrupted and shown in
    report.json; the report still verifies."""
    from toy import make_protocol

    proto = make_protocol(tmp_path / "proto", n=4, min_n=3)
    ledger = Ledger(tmp_path / "l.sqlite")
    seal(proto, ledger=ledger, sandbox="none")
    command = write_solver(tmp_path / "agent", SOLVER)
    control = RunControl()
    control.stop.set()  # recorded, then stopped before any attempt
    with pytest.raises(RunInterrupted):
        run(proto, command, ledger=ledger, run_id="lost", control=control,
            options=RunOptions(sandbox="none"))
    ledger.begin_attempt("lost", "dataset", "toy-001", 0)  # as a killed process leaves it
    result = resume(proto, command, "lost", ledger=ledger, options=RunOptions(sandbox="none"))
    assert result.report["attempt_history"]["interrupted"] == [
        {"phase": "dataset", "task_id": "toy-001", "epoch": 0,
         "how": "the run died while it ran"}]
    assert verify_report(result.report, ledger) == []


def test_a_report_reads_the_runs_attempt_records_once(tmp_path: Path) -> None:
    """Issue 13: a report of 100,000 attempts held two full copies of their records (one for
    the figures, one for the chain's links). The records are read from the ledger once, and
    the report is the one the run published."""
    from sealbench.report import build_report

    published = golden_run(tmp_path)
    ledger = Ledger(tmp_path / "ledger.sqlite")
    statements: list[str] = []
    ledger.db.set_trace_callback(statements.append)
    again = build_report(ledger, "golden-run")
    reads = [s for s in statements if s.startswith("SELECT seq, phase, task_id, epoch, record")]
    assert len(reads) == 1, reads
    assert normalized(again) == normalized(published)


@pytest.mark.parametrize(("record", "kept"), [
    ({"outcome": "pass", "stratum": "a", "cluster": "c", "duration": 0.5, "detail": "eq",
      "diff": "0" * 64, "metric": {"pass": True}},
     {"outcome": "pass", "stratum": "a", "cluster": "c", "duration": 0.5}),
    ({"outcome": "fail", "stratum": None, "cluster": None, "tests": {"results": {}}},
     {"outcome": "fail", "stratum": None, "cluster": None}),  # an old record: no duration
    ({"outcome": "infrastructure_error", "detail": "metric crashed", "tries": 3,
      "duration": 0.0, "stratum": "s", "cluster": "k"},
     {"outcome": "infrastructure_error", "detail": "metric crashed", "duration": 0.0,
      "stratum": "s", "cluster": "k"}),  # listed in the report with its detail
])
def test_a_report_keeps_what_its_figures_read_of_each_dataset_record(
        record: dict[str, Any], kept: dict[str, Any]) -> None:
    """Issue 13: a report holds, per dataset attempt, only the fields its figures come from."""
    from sealbench.report import _report_fields

    assert _report_fields(record) == kept
