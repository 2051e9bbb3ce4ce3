"""The CLI on the bundled example, end to end (issue 2 items 1-2, issue 4 item 5)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from sealbench.cli import main
from sealbench.errors import BadInput
from sealbench.example import init

# a rate in any form: a percentage, a fraction between 0 and 1, or the words that carry one
RATE = re.compile(r"\d+(\.\d+)?\s*%|\b0\.\d+\b|\bmean\b|ci95|\binterval\b", re.IGNORECASE)
COMMANDS = ("init", "seal", "verify", "run", "report", "runs", "show", "export",
            "verify-report", "compare", "leaderboard", "doctor", "demo", "import",
            "keygen", "schema")

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


@dataclass(frozen=True)
class Demo:
    """`sealbench demo` of the bundled example, run once for this module: the README's first
    command, end to end (init, seal, rulebook's run, report). Its sealed protocol, ledger and
    published rulebook run serve the other whole-example tests, which would otherwise seal
    the example and run rulebook over its 59 tasks again."""

    result: Result
    fields: dict[str, str]
    proto: Path
    ledger: Path


def demo_fields(result: Result) -> dict[str, str]:
    return dict(line.split(None, 1) for line in result.stdout.splitlines()
                if line[:1].strip())  # continuation lines start with spaces


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    base = tmp_path_factory.mktemp("example") / "demo"
    result = CliRunner().invoke(main, ["demo", "--dir", str(base)])
    assert result.exit_code == 0, result.stderr
    return Demo(result, demo_fields(result), base / "coding-repair", base / "ledger.sqlite")


@pytest.fixture(scope="module")
def example(demo: Demo) -> tuple[Path, Path]:
    """The example, initialised and sealed by the demo; returns (protocol, ledger)."""
    return demo.proto, demo.ledger


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
        demo: Demo, example: tuple[Path, Path], tmp_path: Path) -> None:
    _, ledger = example
    assert demo.fields["solver"].endswith("sealbench.solvers.rulebook")  # the strong run
    (tmp_path / "weaker.py").write_text(WEAKER)
    weak = _run(example, f"{sys.executable} {tmp_path / 'weaker.py'}")
    assert weak.exit_code == 0, weak.stderr
    weak_id = next(line.split()[1] for line in weak.stdout.splitlines()
                   if line.startswith("run "))
    runner = CliRunner()
    runs = json.loads(runner.invoke(main, ["runs", "--format", "json", "--ledger",
                                           str(ledger)]).output)
    published = {r["solver"]: r for r in runs if r["state"] == "published"
                 and r["run_id"] in (demo.fields["run"], weak_id)}
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
def test_compare_across_identities_is_refused(demo: Demo, example: tuple[Path, Path],
                                              tmp_path: Path) -> None:
    # the other exam is the exact-diff example (no hidden tests to run: sealing it is quick);
    # the first run is the demo's published rulebook run of the test-graded example
    _, ledger = example
    other = init(tmp_path / "other", "coding-repair-exact")
    text = (other / "protocol.yaml").read_text()
    (other / "protocol.yaml").write_text(
        text.replace("coding-repair.example.2026-12-04", "coding-repair.other"))
    runner = CliRunner()
    assert runner.invoke(main, ["seal", str(other), "--ledger", str(ledger)]).exit_code == 0
    second = runner.invoke(main, ["run", str(other), "--solver", "rulebook", "--ledger",
                                  str(ledger), "--jobs", "2"])
    assert demo.result.exit_code == second.exit_code == 0
    ids = [line.split()[1] for r in (demo.result, second) for line in r.stdout.splitlines()
           if line.startswith("run ")]
    assert ids[0] == demo.fields["run"] and len(ids) == 2
    result = runner.invoke(main, ["compare", *ids, "--ledger", str(ledger)])
    assert result.exit_code == 3
    assert "identit" in result.stderr


# rulebook on each bundled example (docs/example.md): tasks passed of 54 and the 95% interval
DEMO_FIGURES = {
    "coding-repair": ("coding-repair.tests.2026-12-04", 46, (0.7035, 0.9330)),
    "coding-repair-exact": ("coding-repair.example.2026-12-04", 36, (0.5043, 0.7973)),
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
def test_demo_prints_identity_n_mean_and_interval(demo: Demo) -> None:
    """`sealbench demo` with no options, as the README shows it (the module's demo)."""
    check_demo_output(demo.result, "coding-repair")


@pytest.mark.slow
def test_demo_of_the_exact_diff_example_prints_its_figures(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["demo", "--dir", str(tmp_path / "demo"),
                                       "--example", "coding-repair-exact"])
    check_demo_output(result, "coding-repair-exact")


def check_demo_output(result: Result, example: str) -> None:
    protocol_id, passed, ci95 = DEMO_FIGURES[example]
    assert result.exit_code == 0, result.stderr
    fields = demo_fields(result)
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


# --------------------------------------------------------------------------- trials (issue 11)

LOUD = """\
import sys
# a toy agent that talks: 6000 bytes on each stream, first and last lines marked
sys.stdout.write("FIRST-OUT\\n" + "o" * 79 + "\\n" + ("x" * 99 + "\\n") * 60 + "LAST-OUT\\n")
sys.stderr.write("FIRST-ERR\\n" + ("e" * 99 + "\\n") * 60 + "LAST-ERR\\n")
"""


def _loud_solver(tmp_path: Path) -> str:
    from toy import SOLVER, write_solver

    return write_solver(tmp_path / "loud", SOLVER + "\n" + LOUD)


def _runs(cli) -> list[dict[str, object]]:  # type: ignore[no-untyped-def]
    return json.loads(cli("runs", "--format", "json").stdout)  # type: ignore[no-any-return]


def test_acceptance_4_a_trial_of_two_tasks_prints_their_outcomes_and_no_rate(  # type: ignore[no-untyped-def]
        cli, toy: Path, toy_solver: str) -> None:
    assert cli("seal", toy).exit_code == 0
    result = cli("run", toy, "--solver", toy_solver, "--task", "toy-002", "--task",
                 "NP-SECRET-01")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split()[:2] == ["toy-002", "pass"]
    assert lines[1].split()[:2] == ["NP-SECRET-01", "refused"]
    assert "will not touch secrets" in lines[1]
    run_id = lines[2].split()[1].rstrip(":")
    assert lines[2] == (f"trial {run_id}: 2 attempts, no rate (a trial is never published); "
                        f"sealbench show {run_id} --task ID for logs")
    assert len(lines) == 3
    assert not RATE.search(result.stdout), result.stdout
    assert not RATE.search(result.stderr), result.stderr
    assert result.stderr.startswith(f"trial {run_id} (sandbox: ")
    [summary] = _runs(cli)
    assert summary["kind"] == "trial" and summary["state"] == "trial"
    assert summary["attempts"] == {"dataset": 1, "null_pack": 1}
    assert summary["n"] is None and summary["mean"] is None
    table = cli("runs").stdout
    assert "trial" in table and run_id[:10] in table
    # a trial has no rate anywhere: no report, no comparison, no export, no resume
    for args in (("report", run_id), ("compare", run_id, run_id), ("export", run_id),
                 ("export", run_id, "--format", "swebench-predictions"),
                 ("run", toy, "--solver", toy_solver, "--resume", run_id)):
        refused = cli(*args)
        assert refused.exit_code == 3, args
        assert "trial" in refused.stderr and len(refused.stderr.splitlines()) == 1
        assert not RATE.search(refused.stdout + refused.stderr)


def test_a_trial_of_a_failing_attempt_still_exits_0(cli, toy: Path,  # type: ignore[no-untyped-def]
                                                    tmp_path: Path) -> None:
    from toy import write_solver

    broken = write_solver(tmp_path / "broken", "import sys\nsys.exit(3)\n")
    assert cli("seal", toy).exit_code == 0
    result = cli("run", toy, "--solver", broken, "--task", "NP-STUB-01")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.split()[:2] == ["NP-STUB-01", "error"]
    assert "solver exited with status 3" in result.stdout
    assert "controls behaved" not in result.stderr  # no gate verdict, passed or failed


def test_limit_runs_the_first_dataset_tasks_in_file_order(cli, toy: Path,  # type: ignore[no-untyped-def]
                                                          toy_solver: str) -> None:
    assert cli("seal", toy).exit_code == 0
    result = cli("run", toy, "--solver", toy_solver, "--limit", "2", "--epochs", "2")
    assert result.exit_code == 0, result.stderr
    tasks = [line.split()[0] for line in result.stdout.splitlines()[:-1]]
    assert tasks == ["toy-000", "toy-000#1", "toy-001", "toy-001#1"]
    [summary] = _runs(cli)
    assert summary["expected"] == {"null_pack": 0, "dataset": 4}


@pytest.mark.parametrize("args,message", [
    (("--task", "toy-01"), "--task toy-01: no such task in the dataset or the null pack of "
                           "toy.v1 (did you mean toy-001"),
    (("--task", "zzz"), "--task zzz: no such task"),
    (("--task", "toy-001", "--limit", "1"), "--task and --limit: give one or the other"),
    (("--limit", "0"), "--limit must be >= 1"),
    (("--task", "toy-001", "--report", "r.json"), "a trial (--task, --limit) writes no report"),
    (("--task", "toy-001", "--resume", "x"), "cannot be given with --resume"),
])
def test_bad_trial_options_are_one_line_and_record_nothing(cli, toy: Path,  # type: ignore[no-untyped-def]
                                                           toy_solver: str,
                                                           args: tuple[str, ...],
                                                           message: str) -> None:
    assert cli("seal", toy).exit_code == 0
    result = cli("run", toy, "--solver", toy_solver, *args)
    assert result.exit_code == 2
    assert message in result.stderr and len(result.stderr.splitlines()) == 1
    assert _runs(cli) == []


def test_a_trial_as_large_as_a_run_is_refused(cli, toy: Path, toy_solver: str) -> None:  # type: ignore[no-untyped-def]
    assert cli("seal", toy).exit_code == 0
    result = cli("run", toy, "--solver", toy_solver, "--limit", "10")
    assert result.exit_code == 3
    assert "reaches publish.min_n (3)" in result.stderr
    assert len(result.stderr.splitlines()) == 1 and _runs(cli) == []


# --------------------------------------------------------------------------- show (issue 11)


def test_acceptance_5_show_task_full_prints_the_whole_output_and_json_parses(  # type: ignore[no-untyped-def]
        cli, toy: Path, tmp_path: Path) -> None:
    assert cli("seal", toy).exit_code == 0
    trial = cli("run", toy, "--solver", _loud_solver(tmp_path), "--task", "toy-001",
                "--task", "NP-SECRET-01")
    assert trial.exit_code == 0, trial.stderr
    run_id = trial.stdout.splitlines()[-1].split()[1].rstrip(":")
    short = cli("show", run_id, "--task", "toy-001")
    assert short.exit_code == 0
    for text in ("# toy-001 epoch 0 (dataset): pass", "exit code   0", "egress      none",
                 "LAST-OUT", "LAST-ERR", "the first", "cut (--full shows all)",
                 "+colour 1 is good"):
        assert text in short.stdout, text
    assert "FIRST-OUT" not in short.stdout and "FIRST-ERR" not in short.stdout
    full = cli("show", run_id, "--task", "toy-001", "--full")
    assert full.exit_code == 0
    out = "FIRST-OUT\n" + "o" * 79 + "\n" + ("x" * 99 + "\n") * 60 + "LAST-OUT\n"
    err = "FIRST-ERR\n" + ("e" * 99 + "\n") * 60 + "LAST-ERR\n"
    assert out in full.stdout and err in full.stdout
    assert "cut" not in full.stdout
    document = json.loads(cli("show", run_id, "--task", "toy-001", "--format", "json",
                              "--full").stdout)
    [attempt] = document["attempts"]
    assert attempt["logs"]["stdout"]["text"] == out
    assert attempt["logs"]["stderr"]["text"] == err
    assert attempt["logs"]["stdout"]["truncated"] is False
    assert "+colour 1 is good" in attempt["logs"]["diff"]["text"]
    tailed = json.loads(cli("show", run_id, "--task", "toy-001", "--format", "json").stdout)
    stdout = tailed["attempts"][0]["logs"]["stdout"]
    assert stdout["truncated"] is True and stdout["text"].endswith("LAST-OUT\n")
    assert stdout["bytes"] == len(out) and stdout["encoding"] == "utf-8"
    whole = json.loads(cli("show", run_id, "--format", "json").stdout)
    assert whole["format"] == "sealbench-show/v1"
    assert whole["run"]["kind"] == "trial" and whole["run"]["state"] == "trial"
    assert "attempt_secret" not in json.dumps(whole)
    assert {a["task_id"] for a in whole["attempts"]} == {"toy-001", "NP-SECRET-01"}
    assert all("logs" not in a for a in whole["attempts"])
    failed = json.loads(cli("show", run_id, "--failed", "--format", "json").stdout)
    assert [a["task_id"] for a in failed["attempts"]] == ["NP-SECRET-01"]
    passed = cli("show", run_id, "--task", "toy-001", "--failed")
    assert passed.exit_code == 0 and passed.stdout == "every attempt of toy-001 passed (--failed)\n"
    table = cli("show", run_id, "--failed")
    assert "NP-SECRET-01" in table.stdout and "toy-001" not in table.stdout
    assert cli("show", run_id, "--full").exit_code == 2
    missing = cli("show", run_id, "--task", "toy-01")
    assert missing.exit_code == 2 and "did you mean toy-001" in missing.stderr


def test_show_never_prints_the_run_secret_or_a_rate_of_a_refused_run(  # type: ignore[no-untyped-def]
        cli, toy: Path, tmp_path: Path) -> None:
    from toy import write_solver

    nothing = write_solver(tmp_path / "nothing", "import sys\n")
    assert cli("seal", toy).exit_code == 0
    assert cli("run", toy, "--solver", nothing).exit_code == 3
    [summary] = _runs(cli)
    run_id = str(summary["run_id"])
    from sealbench.ledger import Ledger, default_path

    secret = Ledger(default_path()).run(run_id).options["attempt_secret"]
    for args in ((), ("--format", "json"), ("--task", "NP-STUB-01"),
                 ("--task", "NP-STUB-01", "--format", "json")):
        shown = cli("show", run_id, *args)
        assert shown.exit_code == 0
        assert secret not in shown.stdout
        if "json" in args:  # records as stored (durations are fractions of seconds): no figure
            document = json.loads(shown.stdout)
            assert set(document) == {"format", "run", "attempts", "interrupted"}
            assert not {"report", "mean", "ci95", "n"} & set(document["run"])
        else:
            assert not RATE.search(shown.stdout), (args, shown.stdout)


def test_show_cuts_a_long_detail_at_a_word_with_an_ellipsis(  # type: ignore[no-untyped-def]
        cli, toy: Path, tmp_path: Path) -> None:
    """Issue 23, item 8: the table cut details mid-word with no mark."""
    from toy import write_solver

    words = " ".join(f"word{k:02d}" for k in range(40))
    loud = write_solver(tmp_path / "loud", f"import sys\nsys.stderr.write({words!r})\n"
                                           "sys.exit(1)\n")
    assert cli("seal", toy).exit_code == 0
    assert cli("run", toy, "--solver", loud).exit_code == 3
    [summary] = _runs(cli)
    shown = cli("show", str(summary["run_id"]))
    assert shown.exit_code == 0, shown.stderr
    rows = [line for line in shown.stdout.splitlines() if "solver exited with status 1" in line]
    assert rows, shown.stdout
    for row in rows:
        detail = row[row.index("solver exited"):].rstrip(" │|")
        assert detail.endswith("…"), detail
        last = detail.removesuffix("…").split()[-1]
        assert last == "status" or last.startswith("1:") or last in words.split(), detail
    whole = cli("show", str(summary["run_id"]), "--task", "NP-STUB-01")
    assert words in whole.stdout  # the whole detail is still one command away


# --------------------------------------------------------------------------- progress (issue 11)


def test_acceptance_6_off_a_terminal_one_line_per_attempt_and_no_rate_before_the_gate(  # type: ignore[no-untyped-def]
        cli, toy: Path, toy_solver: str) -> None:
    assert cli("seal", toy).exit_code == 0
    result = cli("run", toy, "--solver", toy_solver, "--jobs", "2")
    assert result.exit_code == 0, result.stderr
    lines = result.stderr.splitlines()
    attempts = [line for line in lines if re.match(r"\[\d+/7\] ", line)]
    assert [int(line[1:].split("/")[0]) for line in attempts] == list(range(1, 8))
    gate = lines.index("null pack passed: 3 of 3 controls behaved")
    for line in lines[:gate]:
        assert not RATE.search(line), line
        assert not re.search(r"\b(pass|fail|refused|error|violation|timeout)\b", line), line
    for line in lines[gate:]:
        if line in attempts:
            assert re.search(r"dataset attempt finished: pass \(dataset \d of 4", line), line


def test_quiet_prints_nothing_on_stderr_but_warnings(cli, toy: Path, toy_solver: str) -> None:  # type: ignore[no-untyped-def]
    assert cli("seal", toy).exit_code == 0
    result = cli("run", toy, "--solver", toy_solver, "--quiet")
    assert result.exit_code == 0
    assert result.stderr == ""
    assert "headline" in result.stdout
    none = cli("run", toy, "--solver", toy_solver, "--quiet", "--sandbox", "none")
    assert none.exit_code == 0
    assert none.stderr.startswith("warning: running WITHOUT a sandbox")
    assert len(none.stderr.splitlines()) == 1


@pytest.mark.parametrize("data,outcome", [
    ({"phase": "null_pack", "finished": 1, "total": 63, "phase_finished": 1, "phase_total": 9,
      "infrastructure_errors": 0, "interrupted": False, "outcome": None}, None),
    ({"phase": "dataset", "finished": 12, "total": 63, "phase_finished": 11,
      "phase_total": 54, "infrastructure_errors": 2, "interrupted": False, "outcome": None},
     None),
    ({"phase": "dataset", "finished": 60, "total": 63, "phase_finished": 51,
      "phase_total": 54, "infrastructure_errors": 0, "interrupted": False, "outcome": "fail"},
     "fail"),
    ({"phase": "dataset", "finished": 61, "total": 63, "phase_finished": 52,
      "phase_total": 54, "infrastructure_errors": 0, "interrupted": True, "outcome": None},
     None),
])
@pytest.mark.parametrize("elapsed", [0.4, 0.0, 59.99, 3600.5])
def test_an_attempt_line_is_counts_and_whole_seconds(data: dict[str, object],
                                                     outcome: str | None,
                                                     elapsed: float) -> None:
    from sealbench.cli import attempt_line

    line = attempt_line(data, elapsed)
    assert line.startswith(f"[{data['finished']}/{data['total']}] ")
    assert f"infra errors {data['infrastructure_errors']}" in line
    assert f"elapsed {int(elapsed)}s" in line
    assert not RATE.search(line), line
    assert (f"finished: {outcome} (" in line) == (outcome is not None)
    assert ("(interrupted)" in line) == bool(data["interrupted"])


@pytest.mark.parametrize("name", ["new\nline.sqlite", "tab\there.sqlite", "esc\x1b[2J.sqlite"])
@pytest.mark.parametrize("command", [["runs"], ["show", "r1"], ["report", "r1"],
                                     ["export", "r1"]])
def test_an_error_naming_a_path_with_a_newline_is_still_one_line(cli, tmp_path: Path, name: str,
                                                                  command: list[str]) -> None:  # type: ignore[no-untyped-def]
    """Attack (careless operator): a --ledger path holding a newline, a tab or an escape
    sequence; the error naming it must stay one line, the character shown as an escape."""
    result = cli(*command, "--ledger", tmp_path / name)
    assert result.exit_code in (2, 3)
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("sealbench: ")
    assert "\x1b" not in result.stderr


@pytest.mark.sandbox
@pytest.mark.parametrize("command", [["--help"], ["init", "{dir}/example"]])
def test_stdout_on_a_full_disk_is_one_line_not_a_traceback(tmp_path: Path,
                                                          command: list[str]) -> None:
    """Attack (careless operator): `sealbench ... > FILE` with FILE on a full disk (a real
    4 KiB tmpfs, filled) used to end in an OSError traceback, exit 1."""
    argv = [sys.executable, "-m", "sealbench.cli",
            *(arg.format(dir=tmp_path) for arg in command)]
    script = ("dd if=/dev/zero of=/full/fill bs=1k count=8 2>/dev/null; "
              'exec "$@" > /full/out')
    done = subprocess.run(["bwrap", "--dev-bind", "/", "/", "--size", "4096", "--tmpfs",
                           "/full", "sh", "-c", script, "sh", *argv],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1
    assert "standard output" in done.stderr and "No space left on device" in done.stderr


# ------------------------------------------------------------------------------ closed output


def _sealbench(*args: object, stdout: object = subprocess.PIPE, stderr: object = subprocess.PIPE,
               shell_redirect: str = "") -> subprocess.CompletedProcess[str]:
    """The real CLI in a subprocess; `shell_redirect` (e.g. `2>&-`) is applied by a shell."""
    argv = [sys.executable, "-m", "sealbench.cli", *map(str, args)]
    if shell_redirect:
        argv = ["sh", "-c", f'exec "$@" {shell_redirect}', "sh", *argv]
    return subprocess.run(argv, stdout=stdout, stderr=stderr, text=True, timeout=300)


def _closed_pipe() -> int:
    """The write end of a pipe whose reader has exited: every write to it is EPIPE."""
    read, write = os.pipe()
    os.close(read)
    return write


@pytest.fixture(scope="module")
def toy_ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ledger with one published toy run (r1)."""
    from toy import make_protocol, write_solver

    base = tmp_path_factory.mktemp("pipes")
    proto = make_protocol(base / "proto")
    ledger = base / "ledger.sqlite"
    assert _sealbench("seal", proto, "--ledger", ledger).returncode == 0
    done = _sealbench("run", proto, "--solver", write_solver(base / "agent"), "--quiet",
                      "--sandbox", "none", "--ledger", ledger, "--run-id", "r1")
    assert done.returncode == 0, done.stderr
    return ledger


@pytest.mark.parametrize("args", [("runs",), ("runs", "--format", "json"), ("show", "r1"),
                                  ("export", "r1"), ("report", "r1"), ("--help",),
                                  ("run", "--help"), ("--version",)])
def test_stdout_whose_reader_left_keeps_the_commands_own_status(toy_ledger: Path,
                                                                 args: tuple[str, ...]) -> None:
    """Attack (issue 22): `sealbench runs | head -0` exited 1, not a documented status. The
    reader leaving early is no error of the command: it ends as it would have, 0 when it
    succeeded, and says nothing."""
    pipe = _closed_pipe()
    try:
        ledger = ("--ledger", toy_ledger) if args[0] in ("runs", "show", "export", "report") \
            else ()
        done = _sealbench(*args, *ledger, stdout=pipe)
    finally:
        os.close(pipe)
    assert (done.returncode, done.stderr) == (0, "")


def test_stdout_whose_reader_left_after_a_failure_keeps_that_failure(toy_ledger: Path) -> None:
    pipe = _closed_pipe()
    try:
        done = _sealbench("report", "nope", "--ledger", toy_ledger, stdout=pipe)
    finally:
        os.close(pipe)
    assert done.returncode == 2
    assert done.stderr == (f"sealbench: {toy_ledger}: no run 'nope' in this ledger (see "
                           "`sealbench runs`)\n")


@pytest.mark.parametrize("args", [("seal", "/nonexistent/protocol"), ("run", "--bogus"),
                                  ("runs", "--ledger", "/nonexistent/l.sqlite")])
@pytest.mark.parametrize("how", ["closed-pipe", "2>&-"])
def test_stderr_that_cannot_be_written_is_exit_3(args: tuple[str, ...], how: str) -> None:
    """A command that cannot write its message (stderr a pipe whose reader exited, or closed
    with `2>&-`) ends 3, refused: it could not say what it had to. Never 1, no traceback."""
    if how == "2>&-":
        done = _sealbench(*args, shell_redirect="2>&-")
    else:
        pipe = _closed_pipe()
        try:
            done = _sealbench(*args, stderr=pipe)
        finally:
            os.close(pipe)
    assert done.returncode == 3
    assert done.stdout == ""


def test_stderr_closed_with_nothing_to_say_is_no_failure() -> None:
    done = _sealbench("--version", shell_redirect="2>&-")
    assert (done.returncode, done.stdout) == (0, "sealbench, version 0.1.0\n")


def test_stdout_closed_from_the_start_is_one_line_and_exit_3(toy_ledger: Path) -> None:
    done = _sealbench("runs", "--ledger", toy_ledger, shell_redirect=">&-")
    assert done.returncode == 3
    assert done.stderr == ("sealbench: cannot write to standard output (it is closed); redirect "
                           "it elsewhere and run the command again\n")


@pytest.mark.slow
def test_a_run_with_stderr_closed_finishes_and_says_3_without_harming_the_ledger(
        tmp_path: Path) -> None:
    """`run ... 2>&-`: the run's progress and warnings cannot be written, so it ends 3; its work
    is done and recorded. Closed descriptors are reopened on /dev/null first, so the ledger never
    gets fd 2 (a child's or a warning's writes to "stderr" would land in it): verify-report
    agrees with every figure afterwards. Its stdout's reader leaving is status 0."""
    from toy import make_protocol, write_solver

    proto = make_protocol(tmp_path / "proto")
    ledger = tmp_path / "ledger.sqlite"
    solver = write_solver(tmp_path / "agent")
    assert _sealbench("seal", proto, "--ledger", ledger).returncode == 0
    run = ("run", proto, "--solver", solver, "--sandbox", "none", "--ledger", ledger)
    closed = _sealbench(*run, "--run-id", "r1", shell_redirect="2>&-")
    assert closed.returncode == 3
    assert "headline" in closed.stdout  # the work was done, and printed where it could be
    pipe = _closed_pipe()
    try:
        cut = _sealbench(*run, "--run-id", "r2", stdout=pipe)
    finally:
        os.close(pipe)
    assert cut.returncode == 0, cut.stderr
    for run_id in ("r1", "r2"):
        checked = _sealbench("verify-report", tmp_path / "reports" / f"{run_id}.json",
                             "--ledger", ledger)
        assert checked.returncode == 0, checked.stderr


# ------------------------------------------------------------------------------ sealbench schema


@pytest.mark.parametrize("name", ["report", "comparison", "events", "export", "leaderboard"])
def test_schema_prints_the_shipped_schema(name: str) -> None:
    from sealbench.schemas import shipped_text

    result = CliRunner().invoke(main, ["schema", name])
    assert result.exit_code == 0
    assert result.stdout == shipped_text(name)
    schema = json.loads(result.stdout)
    assert schema["$id"].endswith(f"/{name}.schema.json")


def test_schema_of_an_unknown_format_is_a_usage_error() -> None:
    result = CliRunner().invoke(main, ["schema", "receipt"])
    assert result.exit_code == 2
    assert "'receipt' is not one of" in result.stderr
    assert "report" in result.stderr and result.stdout == ""


def test_schema_choices_are_the_registry() -> None:
    """Adding a format to sealbench.schemas.SCHEMAS is all `sealbench schema` needs."""
    from sealbench.schemas import SCHEMAS

    result = CliRunner().invoke(main, ["schema", "--help"])
    assert all(name in result.output for name in SCHEMAS)
