"""The ledger as the single source of truth (issue 5 items 2, 4, 6)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from toy import SOLVER, make_protocol, write_solver

from sealbench.example import init
from sealbench.ledger import SCHEMA_VERSION, Ledger
from sealbench.report import build_report
from sealbench.runner import RunOptions, run
from sealbench.sealing import seal
from sealbench.stats import cluster_labels, derive_seed, headline


@pytest.fixture
def published(tmp_path: Path) -> tuple[Path, Path, str]:
    """A toy protocol with one published run; returns (ledger path, report path, run id)."""
    proto = make_protocol(tmp_path / "proto", n=6, min_n=5)
    body = SOLVER + "if sys.argv[-1] in ('toy-002', 'toy-005'):\n" \
                    "    open('app.txt', 'a').write('x')\n"
    command = write_solver(tmp_path / "agent", body)
    ledger_path = tmp_path / "ledger.sqlite"
    ledger = Ledger(ledger_path)
    seal(proto, ledger=ledger)
    result = run(proto, command, ledger=ledger, options=RunOptions(jobs=2))
    ledger.close()
    return ledger_path, result.report_path, result.run_id


def _verify(cli, report: Path, ledger: Path):  # type: ignore[no-untyped-def]
    return cli("verify-report", report, "--ledger", ledger)


def test_unchanged_ledger_verifies(cli, published) -> None:  # type: ignore[no-untyped-def]
    ledger, report, run_id = published
    result = _verify(cli, report, ledger)
    assert result.exit_code == 0, result.stderr
    assert f"run {run_id}, 9 attempts" in result.output


def _db(ledger: Path) -> sqlite3.Connection:
    return sqlite3.connect(ledger, isolation_level=None)


def test_one_changed_byte_in_a_record_is_named(cli, published) -> None:  # type: ignore[no-untyped-def]
    ledger, report, run_id = published
    db = _db(ledger)
    record = db.execute("SELECT record FROM attempts WHERE run_id=? AND seq=4", (run_id,))
    text = record.fetchone()[0]
    forged = text.replace('"outcome": "fail"', '"outcome": "pass"') if '"fail"' in text \
        else text.replace('"duration": ', '"duration": 1')
    assert forged != text
    db.execute("UPDATE attempts SET record=? WHERE run_id=? AND seq=4", (forged, run_id))
    result = _verify(cli, report, ledger)
    assert result.exit_code == 3
    assert "link 4 (attempt" in result.stderr and "edited" in result.stderr


def test_a_deleted_record_is_named(cli, published) -> None:  # type: ignore[no-untyped-def]
    ledger, report, run_id = published
    _db(ledger).execute("DELETE FROM attempts WHERE run_id=? AND seq=5", (run_id,))
    result = _verify(cli, report, ledger)
    assert result.exit_code == 3
    assert "link 6 (attempt" in result.stderr and "deleted" in result.stderr


def test_two_swapped_records_are_named(cli, published) -> None:  # type: ignore[no-untyped-def]
    ledger, report, run_id = published
    db = _db(ledger)
    rows = db.execute("SELECT seq, phase, task_id, epoch, record FROM attempts WHERE run_id=? "
                      "AND seq IN (6, 7) ORDER BY seq", (run_id,)).fetchall()
    db.execute("DROP INDEX attempts_task")
    for (seq, *_), (_, phase, task, epoch, record) in zip(rows, reversed(rows), strict=True):
        db.execute("UPDATE attempts SET phase=?, task_id=?, epoch=?, record=? WHERE run_id=? "
                   "AND seq=?", (phase, task, epoch, record, run_id, seq))
    result = _verify(cli, report, ledger)
    assert result.exit_code == 3
    assert "link 6 (attempt" in result.stderr and "link 7 (attempt" in result.stderr


def test_an_edited_figure_in_the_report_is_named(cli, published, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ledger, report, _ = published
    data = json.loads(report.read_text())
    data["mean"] = 0.99
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(data))
    result = _verify(cli, forged, ledger)
    assert result.exit_code == 3
    assert "figure 'mean': the report says 0.99" in result.stderr


def test_export_alone_recomputes_the_headline(cli, published, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ledger, report_path, run_id = published
    out = tmp_path / "run.jsonl"
    assert cli("export", run_id, "--ledger", ledger, "-o", out).exit_code == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 9 and all(line["run_id"] == run_id for line in lines)
    dataset = [line for line in lines if line["phase"] == "dataset"]
    first = dataset[0]
    scores = [1.0 if line["record"]["outcome"] == "pass" else 0.0 for line in dataset]
    assert first["format"] == "sealbench-export/v2" and first["strata"] == "descriptive"
    head = headline(scores, seed=derive_seed(first["identity"], first["run_id"]),
                    method=first["ci_method"],
                    strata=[line["record"]["stratum"] for line in dataset],
                    strata_fixed=first["strata"] == "fixed",
                    clusters=cluster_labels([line["record"]["cluster"] for line in dataset]))
    report = json.loads(report_path.read_text())
    assert (head.n, head.mean, list(head.ci95)) == (report["n"], report["mean"], report["ci95"])
    assert report["mean"] == pytest.approx(4 / 6)


def test_report_twice_is_byte_identical(cli, published) -> None:  # type: ignore[no-untyped-def]
    ledger, report_path, run_id = published
    first = cli("report", run_id, "--ledger", ledger)
    second = cli("report", run_id, "--ledger", ledger)
    assert first.exit_code == 0
    assert first.output == second.output == report_path.read_text()


def test_schema_version_is_recorded_and_newer_ledgers_refused(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite"
    Ledger(path).close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    db.commit()
    result = subprocess.run([sys.executable, "-m", "sealbench.cli", "runs", "--ledger", str(path)],
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert "newer than this sealbench" in result.stderr


@pytest.mark.slow
def test_two_concurrent_runs_of_the_example_on_one_ledger_lose_nothing(tmp_path: Path) -> None:
    # the exact-diff example: this is about the ledger, and it runs without a verifier
    proto = init(tmp_path / "coding-repair-exact", "coding-repair-exact")
    ledger_path = tmp_path / "shared.sqlite"
    seal(proto, ledger=Ledger(ledger_path))
    cmd = [sys.executable, "-m", "sealbench.cli", "run", str(proto), "--solver", "rulebook",
           "--ledger", str(ledger_path), "--jobs", "2"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for _ in range(2)]
    outputs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    ledger = Ledger(ledger_path)
    runs = ledger.runs()
    assert len(runs) == 2 and {r.state for r in runs} == {"published"}
    for r in runs:
        assert ledger.attempt_counts(r.run_id) == {"null_pack": 5, "dataset": 54}
        assert ledger.verify_chain(r.run_id) == []
    assert all(b"database is locked" not in err for _, err in outputs)


def _v2_module(tmp_path: Path) -> Any:
    """The ledger module as it was at schema v2 (a copy of src/sealbench/ledger.py at commit
    e423c17, kept in tests/data), to write a real v2 ledger."""
    source = (Path(__file__).parent / "data" / "ledger_v2.py.txt").read_text()
    assert "SCHEMA_VERSION = 2" in source
    path = tmp_path / "ledger_v2.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("ledger_v2", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["ledger_v2"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_a_v2_ledger_is_migrated_in_place(tmp_path: Path) -> None:
    """A v2 ledger written by the v2 code: every run gets a header link (marked
    migrated_from 2) after its records, its interrupted attempts chained, a log entry; its
    state and settings read as before; the chain verifies."""
    old = _v2_module(tmp_path)
    path = tmp_path / "v2.sqlite"
    ledger = old.Ledger(path)
    options = {"kind": "run", "epochs": 1, "min_n": 1, "timeout_scale": 2.0,
               "expected": {"null_pack": 0, "dataset": 1}, "pid": 4242, "host": "h"}
    ledger.create_run("old-1", "toy.bench", "sha256:x", "agent", "bwrap", options)
    ledger.add_attempt("old-1", "dataset", "t1", 0, {"outcome": "pass", "duration": 1.0})
    ledger.begin_attempt("old-1", "dataset", "t2", 0)
    ledger.note_interrupted("old-1", "dataset", "t2", 0, "killed")
    ledger.set_run_state("old-1", "interrupted", "stopped by the user")
    ledger.close()
    migrated = Ledger(path)
    assert migrated.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3
    assert migrated.chain_problems("old-1") == []
    assert migrated.integrity("old-1") == []
    links = migrated.links("old-1")
    assert [link.kind for link in links] == ["attempt", "header", "interrupted_attempt"]
    assert links[1].body["migrated_from"] == 2
    row = migrated.run("old-1")
    assert (row.state, row.reason, row.migrated) == ("interrupted", "stopped by the user", True)
    assert row.options == options and row.sandbox == "bwrap"
    assert [i["how"] for i in migrated.interrupted("old-1")] == ["killed"]
    assert migrated.deleted_runs() == []
    migrated.close()
    again = Ledger(path)  # opening a v3 ledger again migrates nothing
    assert len(again.links("old-1")) == 3
    again.db.execute("DELETE FROM runs WHERE run_id='old-1'")
    assert again.deleted_runs() == ["old-1"]


def test_a_published_v2_run_still_reports_after_migration(published, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The records of a real published run, written into a v2 ledger by the v2 code, migrate
    and report the same figures, saying the settings are chained only since migration."""
    ledger_path, report_path, run_id = published
    report = json.loads(report_path.read_text())
    source = Ledger(ledger_path)
    row = source.run(run_id)
    old = _v2_module(tmp_path)
    v2 = old.Ledger(tmp_path / "v2.sqlite")
    v2.create_run(run_id, row.protocol_id, row.identity, row.solver, row.sandbox, row.options)
    for a in source.attempts(run_id):
        v2.add_attempt(run_id, a.phase, a.task_id, a.epoch, a.record)
    v2.finish_run(run_id, "finished")
    v2.finish_run(run_id, "published", None, report)
    v2.close()
    shutil.copytree(source.artifacts, tmp_path / "v2.sqlite.artifacts")
    migrated = Ledger(tmp_path / "v2.sqlite")
    assert migrated.integrity(run_id) == []
    again = build_report(migrated, run_id)
    assert (again["n"], again["mean"], again["ci95"]) == (report["n"], report["mean"],
                                                          report["ci95"])
    assert again["records"]["settings_chained"] == "since migration from ledger v2"
