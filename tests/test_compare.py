"""`compare_runs`: paired comparison of two real runs through the real pipeline (no mocks)."""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from toy import SOLVER, make_protocol, write_solver

from sealbench.compare import COMPARE_FORMAT, compare_runs, to_json, to_markdown, to_text, verdict
from sealbench.errors import BadInput, Refused
from sealbench.ledger import Ledger
from sealbench.report import build_report
from sealbench.runner import RunOptions, run
from sealbench.sealing import seal
from sealbench.stats import newcombe_paired, paired_comparison


def skipping(*task_ids: str) -> str:
    """The toy solver, except that it does nothing (so fails) on the given dataset tasks."""
    return f"import sys\nif sys.argv[-1] in {task_ids!r}:\n    sys.exit(0)\n" + SOLVER


@dataclass
class Bench:
    ledger: Ledger
    path: Path
    runs: dict[str, str]
    commands: dict[str, str]


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Bench:
    """One ledger: six runs of toy.v1 (n = 8 independent tasks, min_n = 6) and one of another
    exam. Clustered comparisons are tested on the bundled example (tests/test_cli.py)."""
    root = tmp_path_factory.mktemp("compare")
    proto = make_protocol(root / "proto", n=8, min_n=6, clusters=None)
    other = make_protocol(root / "other", n=8, min_n=6, protocol_id="toy.other.v1",
                          clusters=None)
    ledger = Ledger(root / "ledger" / "ledger.sqlite")
    seal(proto, ledger=ledger)
    seal(other, ledger=ledger)
    bodies = {
        "good": SOLVER,
        "skip14": skipping("toy-001", "toy-004"),
        "skip2": skipping("toy-002"),
        "skip7": skipping(*(f"toy-00{i}" for i in range(7))),
    }
    commands = {name: write_solver(root / "solvers" / name, body)
                for name, body in bodies.items()}
    commands["dead"] = write_solver(root / "solvers" / "dead", "import sys\n")
    options = RunOptions(jobs=2)
    runs = {
        "good1": run(proto, commands["good"], ledger=ledger, options=options).run_id,
        "good2": run(proto, commands["good"], ledger=ledger, options=options).run_id,
        "skip14": run(proto, commands["skip14"], ledger=ledger, options=options).run_id,
        "skip2": run(proto, commands["skip2"], ledger=ledger, options=options).run_id,
        "skip7": run(proto, commands["skip7"], ledger=ledger, options=options).run_id,
        "other": run(other, commands["good"], ledger=ledger, options=options).run_id,
    }
    with pytest.raises(Refused):
        run(proto, commands["dead"], ledger=ledger, options=options)
    dead = [r for r in ledger.runs() if r.solver == commands["dead"]]
    assert len(dead) == 1 and dead[0].state == "refused"
    runs["dead"] = dead[0].run_id
    return Bench(ledger, ledger.path, runs, commands)


def outcomes(ledger: Ledger, run_id: str) -> dict[str, bool]:
    return {r.task_id: r.record["outcome"] == "pass" for r in ledger.attempts(run_id, "dataset")}


def signed(x: float) -> str:
    return "0.000" if x == 0.0 else f"{x:+.3f}"


def with_infrastructure_errors(ledger: Ledger, source: str, broken: set[str]) -> str:
    """A run like `source` whose `broken` tasks were lost to the harness (never scored),
    recorded through the ledger API exactly as the runner records an InfraFailure."""
    src = ledger.run(source)
    run_id = f"{source}-infra-{'-'.join(sorted(broken))}"
    # as under a protocol whose publish.max_infrastructure_errors tolerates them
    ledger.create_run(run_id, src.protocol_id, src.identity, src.solver, src.sandbox,
                      {**src.options, "max_infrastructure_errors": len(broken)})
    for row in ledger.attempts(source):
        record: dict[str, Any] = row.record
        if row.phase == "dataset" and row.task_id in broken:
            record = {"stratum": record["stratum"], "cluster": record["cluster"],
                      "outcome": "infrastructure_error", "detail": "sandbox did not start",
                      "tries": 3, "duration": 0.0}
        ledger.add_attempt(run_id, row.phase, row.task_id, row.epoch, record)
    ledger.finish_run(run_id, "finished")
    ledger.finish_run(run_id, "published", None, build_report(ledger, run_id))
    return run_id


@pytest.mark.slow
def test_two_solvers_on_one_exam(bench: Bench) -> None:
    a_id, b_id = bench.runs["skip14"], bench.runs["skip2"]
    cmp = compare_runs(bench.ledger, a_id, b_id)
    a, b = bench.ledger.run(a_id), bench.ledger.run(b_id)
    assert a.report is not None and b.report is not None
    assert cmp["format"] == COMPARE_FORMAT
    assert cmp["protocol_id"] == "toy.v1" and cmp["identity"] == a.identity
    assert cmp["runs"]["a"] == {"run_id": a_id, "solver": bench.commands["skip14"], "n": 8,
                                "mean": a.report["mean"], "ci95": a.report["ci95"],
                                "ci_method": a.report["ci_method"]}
    assert cmp["runs"]["b"]["mean"] == b.report["mean"] == 7 / 8
    assert cmp["runs"]["a"]["mean"] == 6 / 8

    paired = cmp["paired"]
    assert paired["n"] == 8
    assert paired["diff"] == b.report["mean"] - a.report["mean"]  # exactly
    assert paired["method"] == "newcombe" and paired["test"] == "exact McNemar"
    assert paired["ci95"] == list(newcombe_paired(5, 2, 1, 0))  # both, B only, A only, neither
    low, high = paired["ci95"]
    assert low <= paired["diff"] <= high

    # disagreements and the 2x2 table, checked against the attempt records themselves
    out_a, out_b = outcomes(bench.ledger, a_id), outcomes(bench.ledger, b_id)
    assert sorted(out_a) == sorted(out_b) == [f"toy-00{i}" for i in range(8)]
    a_only = sorted(t for t in out_a if out_a[t] and not out_b[t])
    b_only = sorted(t for t in out_a if out_b[t] and not out_a[t])
    assert cmp["disagreements"] == {"a_only": a_only, "b_only": b_only}
    assert a_only == ["toy-002"] and b_only == ["toy-001", "toy-004"]
    both_pass = sum(out_a[t] and out_b[t] for t in out_a)
    both_fail = sum(not out_a[t] and not out_b[t] for t in out_a)
    assert paired["table"] == [[both_pass, 1], [2, both_fail]] == [[5, 1], [2, 0]]
    assert paired["p"] == 1.0  # 1 vs 2 discordant: binomtest(1, 3) is 1
    assert paired["mdd"]["test"] == "exact McNemar" and paired["mdd"]["value"] is None
    assert cmp["unpaired"] == []
    assert cmp["verdict"].startswith("inconclusive — the data do not tell A and B apart")
    assert "B - A = +0.125" in cmp["verdict"]

    # the same ledger gives the same comparison, bit for bit, from a fresh connection too
    again = compare_runs(Ledger(bench.path, create=False), a_id, b_id)
    assert again == cmp
    assert to_json(again) == to_json(cmp) == json.dumps(cmp, indent=2, sort_keys=True) + "\n"
    assert json.loads(to_json(cmp)) == cmp

    # swapped roles: the difference flips, the disagreements swap
    swapped = compare_runs(bench.ledger, b_id, a_id)
    assert swapped["paired"]["diff"] == -paired["diff"]
    assert swapped["disagreements"] == {"a_only": b_only, "b_only": a_only}

    text = to_text(cmp)
    md = to_markdown(cmp)
    for rendered in (text, md):
        for task in ("toy-001", "toy-002", "toy-004"):
            assert task in rendered
        assert a_id in rendered and b_id in rendered
        assert signed(low) in rendered and signed(high) in rendered
        assert cmp["verdict"] in rendered
    assert f"[{signed(low)}, {signed(high)}]" in text
    assert re.search(r"^B - A\s+\+0\.125\s+\[.*\]\s+8\s+newcombe$", text, re.M), text
    assert re.search(r"^A\s+0\.750\s+\[\d\.\d{3}, \d\.\d{3}\]\s+8\s", text, re.M), text
    assert re.search(r"A pass\s+5\s+1$", text, re.M) and re.search(r"A fail\s+2\s+0$", text,
                                                                    re.M), text
    assert f"{signed(low)} to {signed(high)} (newcombe) | 8 |" in md
    assert "exact McNemar: p = 1.00" in text and "| test | exact McNemar: p = 1.00 |" in md
    assert "| A pass | 5 | 1 |" in md


@pytest.mark.slow
def test_a_clear_difference_is_called_and_an_equal_pair_is_not(bench: Bench) -> None:
    cmp = compare_runs(bench.ledger, bench.runs["good1"], bench.runs["skip7"])
    paired = cmp["paired"]
    assert paired["diff"] == 1 / 8 - 1.0
    assert paired["ci95"][1] < 0.0 < paired["ci95"][1] - paired["ci95"][0]
    assert paired["p"] == pytest.approx(2 * 0.5**7)
    assert paired["table"] == [[1, 7], [0, 0]]
    assert cmp["disagreements"]["a_only"] == [f"toy-00{i}" for i in range(7)]
    assert cmp["verdict"].startswith("A is better on this exam — ")
    assert "exact McNemar p = 0.016" in cmp["verdict"]


@pytest.mark.slow
def test_same_solver_twice(bench: Bench) -> None:
    cmp = compare_runs(bench.ledger, bench.runs["good1"], bench.runs["good2"])
    paired = cmp["paired"]
    assert paired["diff"] == 0.0
    assert paired["ci95"][0] <= 0.0 <= paired["ci95"][1]
    assert paired["p"] == 1.0
    assert paired["table"] == [[8, 0], [0, 0]]
    assert paired["correlation"] is None  # both runs pass everything: r is undefined
    assert cmp["disagreements"] == {"a_only": [], "b_only": []}
    assert cmp["verdict"].startswith("inconclusive — the data do not tell A and B apart")
    assert "does not show they are equal" in cmp["verdict"]
    text = to_text(cmp)
    assert "undefined" in text and "(none)" in text
    assert "none" in to_markdown(cmp)


@pytest.mark.slow
def test_different_identities_are_refused(bench: Bench) -> None:
    a, b = bench.ledger.run(bench.runs["good1"]), bench.ledger.run(bench.runs["other"])
    assert a.identity != b.identity
    with pytest.raises(Refused) as caught:
        compare_runs(bench.ledger, a.run_id, b.run_id)
    message = str(caught.value)
    assert caught.value.exit_status == 3
    for part in (a.identity, b.identity, a.run_id, b.run_id, "toy.v1", "toy.other.v1"):
        assert part in message
    assert "\n" not in message


@pytest.mark.slow
def test_a_run_whose_gate_failed_is_refused(bench: Bench) -> None:
    dead = bench.runs["dead"]
    for pair in ((bench.runs["good1"], dead), (dead, bench.runs["good1"])):
        with pytest.raises(Refused) as caught:
            compare_runs(bench.ledger, *pair)
        assert dead in str(caught.value) and "null pack did not pass" in str(caught.value)
        assert not re.search(r"\d+\.\d+|%", str(caught.value).replace(dead, ""))


@pytest.mark.slow
def test_unknown_run_is_bad_input(bench: Bench) -> None:
    with pytest.raises(BadInput, match="no run 'nope'"):
        compare_runs(bench.ledger, bench.runs["good1"], "nope")


@pytest.mark.slow
def test_tasks_lost_to_infrastructure_errors_are_left_out_and_listed(bench: Bench) -> None:
    ledger = bench.ledger
    lost = with_infrastructure_errors(ledger, bench.runs["skip2"], {"toy-004"})
    cmp = compare_runs(ledger, bench.runs["skip14"], lost)
    assert cmp["unpaired"] == ["toy-004"]
    assert cmp["paired"]["n"] == 7 and cmp["runs"]["b"]["n"] == 7
    # A failed toy-004, but B never got a score for it: the pair is left out of both means
    assert cmp["paired"]["mean_a"] == cmp["paired"]["mean_b"] == 6 / 7
    assert cmp["runs"]["a"]["mean"] == 6 / 8
    assert cmp["paired"]["diff"] == 0.0
    assert cmp["disagreements"] == {"a_only": ["toy-002"], "b_only": ["toy-001"]}
    assert "toy-004" in to_text(cmp).split("unpaired")[1]
    # fewer paired tasks than publish.min_n: no comparison
    a = with_infrastructure_errors(ledger, bench.runs["good1"], {"toy-000", "toy-001"})
    b = with_infrastructure_errors(ledger, bench.runs["good2"], {"toy-002", "toy-003"})
    with pytest.raises(Refused, match=re.escape("only 4 dataset tasks were scored in both runs; "
                                                "publish.min_n is 6")):
        compare_runs(ledger, a, b)


@pytest.mark.slow
def test_tampered_records_are_refused(bench: Bench, tmp_path: Path) -> None:
    copy = tmp_path / "copy.sqlite"
    target = sqlite3.connect(copy)
    bench.ledger.db.backup(target)
    target.execute("UPDATE attempts SET record=json_set(record, '$.outcome', 'pass') "
                   "WHERE run_id=? AND task_id='toy-001'", (bench.runs["skip14"],))
    target.commit()
    target.close()
    with pytest.raises(Refused) as caught:
        compare_runs(Ledger(copy), bench.runs["skip14"], bench.runs["skip2"])
    assert f"run {bench.runs['skip14']}: chain broken at link" in str(caught.value)
    assert any("edited" in line for line in caught.value.lines())


def copied_run(ledger: Ledger, source: str, name: str, **options: Any) -> str:
    """A published copy of `source` recorded under other run options (through the ledger API,
    as the runner records a run)."""
    src = ledger.run(source)
    run_id = f"{source}-{name}"
    ledger.create_run(run_id, src.protocol_id, src.identity, src.solver,
                      options.pop("sandbox", src.sandbox), {**src.options, **options})
    for row in ledger.attempts(source):
        ledger.add_attempt(run_id, row.phase, row.task_id, row.epoch, row.record)
    ledger.finish_run(run_id, "finished")
    ledger.finish_run(run_id, "published", None, build_report(ledger, run_id))
    return run_id


@pytest.mark.parametrize(("name", "options", "named"), [
    ("scale", {"timeout_scale": 50.0}, "timeout scale 1.0 vs 50.0"),
    ("none", {"sandbox": "none"}, "sandbox 'bwrap' vs 'none'"),
    ("expose", {"expose": ["/opt/answers"]}, "exposed paths [] vs ['/opt/answers']"),
    ("epochs", {"epochs": 3}, "epochs 1 vs 3"),
])
@pytest.mark.slow
def test_runs_under_different_conditions_are_refused(bench: Bench, name: str,
                                                     options: dict[str, Any],
                                                     named: str) -> None:
    """A paired test would call a weaker sandbox, a longer timeout or an exposed file a
    better agent."""
    other = copied_run(bench.ledger, bench.runs["good1"], name, **options)
    with pytest.raises(Refused, match="different conditions") as caught:
        compare_runs(bench.ledger, bench.runs["good2"], other)
    assert named in str(caught.value)


def test_verdict_leads_with_what_the_data_say() -> None:
    """The literature example: 27 both pass, 3 A only, 11 B only, 9 both fail (n = 50)."""
    a = [1.0] * 27 + [1.0] * 3 + [0.0] * 11 + [0.0] * 9
    b = [1.0] * 27 + [0.0] * 3 + [1.0] * 11 + [0.0] * 9
    result = paired_comparison(a, b)
    assert result.p_value == pytest.approx(0.05737, abs=5e-5)
    paired = {"n": result.n, "diff": result.diff, "ci95": list(result.ci95),
              "method": result.method, "test": result.test, "p": result.p_value,
              "mdd": {"value": 0.2}}
    # Here Newcombe's interval excludes 0 but the exact test does not reject: no claim
    assert result.ci95[0] > 0.0
    sentence = verdict(paired)
    assert sentence.startswith("inconclusive — the tests disagree: the 95% interval of B − A "
                               "excludes 0 but the exact McNemar test does not reject at 0.05 "
                               "(p = 0.057)")
    assert "B - A = +0.160 (95% CI +0.013 to" in sentence and "better" not in sentence
    # neither says anything: inconclusive, with how large a difference could hide
    sentence = verdict({**paired, "ci95": [-0.02, 0.3], "p": 0.3})
    assert sentence.startswith("inconclusive — the data do not tell A and B apart")
    assert "below about 0.200" in sentence
    # the test rejects but the interval includes 0: said plainly, first, and no claim
    sentence = verdict({**paired, "ci95": [-0.02, 0.3], "p": 0.002})
    assert sentence.startswith("inconclusive — the tests disagree: the exact McNemar test "
                               "rejects at 0.05 (p = 0.002) but the 95% interval of B − A "
                               "includes 0")
    assert "better" not in sentence and "do not tell" not in sentence
    # the interval excludes 0 but the test does not reject: also said plainly
    sentence = verdict({**paired, "ci95": [0.01, 0.3], "p": 0.2})
    assert sentence.startswith("inconclusive — the tests disagree: the 95% interval of B − A "
                               "excludes 0")
    # both agree: the claim is made, first
    assert verdict({**paired, "ci95": [0.01, 0.3], "p": 0.01}).startswith(
        "B is better on this exam — ")
    assert verdict({**paired, "diff": -0.16, "ci95": [-0.3, -0.01], "p": 0.01}).startswith(
        "A is better on this exam — ")
    # a zero-width interval around a non-zero difference measures nothing
    sentence = verdict({**paired, "ci95": [0.16, 0.16], "p": 0.001})
    assert "better" not in sentence and "zero width" in sentence
    # a p-value is never rounded across 0.05
    assert "p = 0.04999" in verdict({**paired, "p": 0.049991})
