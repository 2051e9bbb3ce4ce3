"""report.json: a pinned format (golden), recomputed from the ledger alone."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from toy import SOLVER, write_solver

from sealbench.ledger import Ledger
from sealbench.report import to_markdown
from sealbench.runner import RunOptions, run
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

    from sealbench.report import headline_text, to_html

    report = golden_run(tmp_path)
    report["solver"]["command"] = "<script>alert(1)</script> solve.sh"
    page = to_html(report)
    assert "<script>" not in page and "&lt;script&gt;" in page
    texts: list[str] = []

    class Collect(HTMLParser):
        def handle_data(self, data: str) -> None:
            texts.append(data)

    Collect().feed(page)
    text = " ".join(texts)
    assert headline_text(report) in text and report["identity"] in text
    written = Path(report["records"]["ledger"]).parent / "reports" / "golden-run.html"
    assert written.exists()
