"""The CLI on the bundled example, end to end (issue 2 items 1-2, issue 4 item 5)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from sealbench.cli import main
from sealbench.errors import BadInput
from sealbench.example import init

# a rate in any form: a percentage, a fraction between 0 and 1, or the words that carry one
RATE = re.compile(r"\d+(\.\d+)?\s*%|\b0\.\d+\b|\bmean\b|ci95|\binterval\b", re.IGNORECASE)
COMMANDS = ("init", "seal", "verify", "run", "report", "runs", "show", "export",
            "verify-report", "compare", "doctor", "demo", "import")

WEAKER = """\
import os, sys
# rulebook, except that it gives up on every task of the textkit library (its fixture holds
# the textkit package: the attempt id says nothing of the task)
if os.path.isdir("textkit"):
    sys.exit(0)
os.execv(sys.executable, [sys.executable, "-m", "sealbench.solvers.rulebook", sys.argv[-1]])
"""


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_documents_its_exit_statuses(command: str) -> None:
    result = CliRunner().invoke(main, [command, "--help"])
    assert result.exit_code == 0
    assert "Exit status: 0 done, 2 bad input or usage, 3 refused" in result.output
    if command in ("run", "demo"):
        assert "130 interrupted" in result.output


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The example, initialised and sealed once for this module; returns (protocol, ledger)."""
    base = tmp_path_factory.mktemp("example")
    proto = init(base / "coding-repair")
    ledger = base / "ledger.sqlite"
    result = CliRunner().invoke(main, ["seal", str(proto), "--ledger", str(ledger)])
    assert result.exit_code == 0, result.output
    return proto, ledger


def _run(example: tuple[Path, Path], solver: str, *extra: str):  # type: ignore[no-untyped-def]
    proto, ledger = example
    return CliRunner().invoke(main, ["run", str(proto), "--solver", solver, "--ledger",
                                     str(ledger), "--jobs", "2", *extra])


def _new_files(root: Path, before: set[Path]) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and p not in before]


@pytest.mark.slow
@pytest.mark.parametrize("solver,failing", [
    ("do-nothing", {"NP-STUB-01 (must_pass): failed open", "NP-STUB-02 (must_pass): failed open"}),
    ("gullible", {"NP-POISON-01 (must_fail): failed closed",
                  "NP-LEAK-02 (must_fail): failed closed",
                  "NP-SECRET-01 (must_refuse)"}),
])
def test_reference_solvers_that_must_be_caught_are_caught_without_a_rate(
        example: tuple[Path, Path], tmp_path: Path, solver: str, failing: set[str]) -> None:
    _, ledger = example
    watched = ledger.parent
    before = {p for p in watched.rglob("*") if p.is_file()}
    report = tmp_path / "report.json"
    result = _run(example, solver, "--report", str(report))
    assert result.exit_code == 3
    for text in failing:
        assert text in result.stderr
    assert "no rate is computed" in result.stderr
    assert not RATE.search(result.output), result.output
    assert not RATE.search(result.stderr), result.stderr
    assert not report.exists()
    for path in _new_files(watched, before):
        if path.suffix in (".json", ".md", ".txt", ".jsonl"):
            assert not RATE.search(path.read_text(errors="replace")), path


@pytest.mark.slow
def test_rulebook_publishes_and_beats_a_weaker_variant_in_compare(
        example: tuple[Path, Path], tmp_path: Path) -> None:
    _, ledger = example
    strong = _run(example, "rulebook")
    assert strong.exit_code == 0, strong.stderr
    (tmp_path / "weaker.py").write_text(WEAKER)
    weak = _run(example, f"{sys.executable} {tmp_path / 'weaker.py'}")
    assert weak.exit_code == 0, weak.stderr
    runner = CliRunner()
    runs = json.loads(runner.invoke(main, ["runs", "--format", "json", "--ledger",
                                           str(ledger)]).output)
    published = {r["solver"]: r for r in runs if r["state"] == "published"}
    rulebook = next(r for s, r in published.items() if s.endswith("sealbench.solvers.rulebook"))
    weaker = next(r for s, r in published.items() if s.endswith("weaker.py"))
    assert rulebook["n"] == weaker["n"] == 54
    assert 0 < rulebook["mean"] < 1
    assert weaker["mean"] < rulebook["mean"]
    result = runner.invoke(main, ["compare", weaker["run_id"], rulebook["run_id"], "--ledger",
                                  str(ledger)])
    assert result.exit_code == 0, result.stderr
    assert "B - A" in result.output
    lost = json.loads(runner.invoke(main, ["compare", weaker["run_id"], rulebook["run_id"],
                                           "--ledger", str(ledger), "--format", "json"]).output)
    # The example's libraries are clusters: the cluster-level test, not plain McNemar
    paired = lost["paired"]
    assert paired["method"] == "cluster-t" and paired["clusters"] == 8 and paired["df"] == 7
    assert paired["test"] == "cluster-robust t (7 df)"
    assert "cluster-robust t (7 df): p = " in result.output
    assert "McNemar" not in result.output
    rejects, excludes = paired["p"] < 0.05, paired["ci95"][0] > 0.0
    assert rejects == excludes  # one standard error serves the interval and the test
    assert lost["verdict"].startswith("B is better on this exam — " if rejects
                                      else "inconclusive — the data do not tell A and B apart")
    b_only = lost["disagreements"]["b_only"]
    assert b_only and all(task.startswith("textkit-") for task in b_only)
    for task in b_only:
        assert task in result.output
    assert lost["disagreements"]["a_only"] == []


@pytest.mark.slow
def test_compare_across_identities_is_refused(example: tuple[Path, Path],
                                              tmp_path: Path) -> None:
    # the other exam is the exact-diff example (no hidden tests to run: sealing it is quick)
    _, ledger = example
    other = init(tmp_path / "other", "coding-repair-exact")
    text = (other / "protocol.yaml").read_text()
    (other / "protocol.yaml").write_text(
        text.replace("coding-repair.example.2026-11-30", "coding-repair.other"))
    runner = CliRunner()
    assert runner.invoke(main, ["seal", str(other), "--ledger", str(ledger)]).exit_code == 0
    first = _run(example, "rulebook")
    second = runner.invoke(main, ["run", str(other), "--solver", "rulebook", "--ledger",
                                  str(ledger), "--jobs", "2"])
    assert first.exit_code == second.exit_code == 0
    ids = [line.split()[1] for r in (first, second) for line in r.stdout.splitlines()
           if line.startswith("run ")]
    result = runner.invoke(main, ["compare", *ids, "--ledger", str(ledger)])
    assert result.exit_code == 3
    assert "identit" in result.stderr


# rulebook on each bundled example (docs/example.md): tasks passed of 54 and the 95% interval
DEMO_FIGURES = {
    "coding-repair": ("coding-repair.tests.2026-11-30", 46, (0.7035, 0.9330)),
    "coding-repair-exact": ("coding-repair.example.2026-11-30", 36, (0.5043, 0.7973)),
}


def test_init_writes_the_chosen_example(tmp_path: Path) -> None:
    runner = CliRunner()
    graded = runner.invoke(main, ["init", str(tmp_path / "graded")])
    assert graded.exit_code == 0, graded.output
    assert "wrote the coding-repair example" in graded.output
    assert (tmp_path / "graded" / "hidden_tests").is_dir()
    assert not (tmp_path / "graded" / "metric_exact_diff.py").exists()
    exact = runner.invoke(main, ["init", str(tmp_path / "exact"), "--example",
                                 "coding-repair-exact"])
    assert exact.exit_code == 0, exact.output
    assert (tmp_path / "exact" / "metric_exact_diff.py").is_file()
    assert not (tmp_path / "exact" / "hidden_tests").exists()
    unknown = runner.invoke(main, ["init", str(tmp_path / "other"), "--example", "other"])
    assert unknown.exit_code == 2 and not (tmp_path / "other").exists()
    with pytest.raises(BadInput, match="not a bundled example"):
        init(tmp_path / "other", "other")


@pytest.mark.slow
@pytest.mark.parametrize("example", DEMO_FIGURES)
def test_demo_prints_identity_n_mean_and_interval(tmp_path: Path, example: str) -> None:
    protocol_id, passed, ci95 = DEMO_FIGURES[example]
    result = CliRunner().invoke(main, ["demo", "--dir", str(tmp_path / "demo"),
                                       "--example", example])
    assert result.exit_code == 0, result.stderr
    fields = dict(line.split(None, 1) for line in result.stdout.splitlines()
                  if line[:1].strip())  # continuation lines start with spaces
    assert fields["protocol"] == protocol_id
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", fields["identity"])
    assert int(fields["n"]) == 54
    mean = float(fields["mean"])
    assert 0 < mean < 1
    lo, hi = (float(x) for x in re.findall(r"[\d.]+", fields["95%"].split("]")[0]))
    assert lo < mean < hi
    report = json.loads(Path(fields["report"]).read_text())
    assert report["mean"] == pytest.approx(mean, abs=5e-5)
    assert report["mean"] == pytest.approx(passed / 54)
    assert report["ci95"] == pytest.approx(ci95, abs=5e-5)
    # The example's libraries are clusters: a cluster-aware interval, named, never narrower
    # than Wilson's
    assert report["ci_method"] == "cluster-wilson" and "(cluster-wilson)" in fields["95%"]
    assert "tasks share clusters (8 clusters)" in fields["interval"]
    w_lo, w_hi = report["interval"]["wilson95"]
    assert lo <= w_lo + 5e-5 and hi >= w_hi - 5e-5
