"""What checking documents against their formats costs (sealbench/formats.py, errors.conforming).

`export` validates every line it writes against ExportLine (strict, from the JSON it already
dumped), and a report is validated once before it is written. Both are measured against what
writing costs anyway, in the same run, interleaved in rounds so the machine's noise (2 shared
cores) hits both sides alike: per export line, `json.dumps` alone (the baseline) against
`json.dumps` plus validation; per report, `json.dumps(indent=2)` against that plus
`conforming(Report, ...)`. Figures are medians over the rounds; the ratio is to the baseline.

Usage: python bench/bench_formats.py [rounds]
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sealbench.errors import conforming, conforming_json
from sealbench.formats import ExportLine, Report

GOLDEN = Path(__file__).resolve().parents[1] / "tests" / "data" / "golden_report.json"
LINES = 2000


def export_line(seq: int) -> dict[str, Any]:
    """A line as a tests_v1 run exports it (the example in docs/formats.md), 21 test results."""
    return {
        "ci_method": "auto", "digest": f"{seq:064x}", "epoch": 0, "epochs": 1,
        "format": "sealbench-export/v2", "identity": "sha256:" + "a" * 64, "min_n": 40,
        "phase": "dataset", "prev_digest": f"{seq + 1:064x}", "protocol_id": "p.2026",
        "record": {"attempt_id": f"attempt-{seq:016x}", "cluster": "statskit", "detail": "ok",
                   "diff": "e" * 64, "duration": 0.1356, "files_touched": 1,
                   "forbidden_written": [], "metric": {"pass": True, "metric": "tests_v1"},
                   "outcome": "pass", "returncode": 0, "score": 1, "stderr": "2" * 64,
                   "stdout": "e" * 64, "stratum": "wrong-operator",
                   "tests": {"duration": 0.59, "exit_code": 0, "junit": "1" * 64,
                             "problem": None, "report_problem": None, "stderr": "e" * 64,
                             "stdout": "d" * 64,
                             "results": {f"tests.t.test_{i}": "passed" for i in range(21)}}},
        "rules": {"NP-STUB-01": "must_pass", "NP-POISON-01": "must_fail"}, "run_id": "r",
        "sandbox": "bwrap", "seq": seq, "solver": "python solve.py", "strata": "descriptive",
        "task_id": f"statskit-{seq:03d}"}


def report() -> dict[str, Any]:
    filled: dict[str, Any] = json.loads(GOLDEN.read_text())
    filled["timings"] = {"started_at": "a", "finished_at": "b", "attempts": 7,
                         "attempt_seconds_total": 1.0}
    filled["records"].update(ledger="/l", artifacts="/a", chain_head="a" * 64)
    filled["solver"]["command"] = "python solve.py"
    filled["sealbench_version"] = "0.1.0"
    filled["versions"] = {"python": "3", "numpy": "2", "scipy": "1", "sealbench": "0.1.0"}
    return filled


def timed(work: Callable[[], object]) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def main(rounds: int) -> None:
    lines = [export_line(i) for i in range(LINES)]
    doc = report()

    def dumps_lines() -> None:
        for line in lines:
            json.dumps(line, sort_keys=True)

    def checked_lines() -> None:
        for line in lines:
            conforming_json(ExportLine, json.dumps(line, sort_keys=True), "a line")

    def dumps_report() -> None:
        for _ in range(200):
            json.dumps(doc, indent=2, sort_keys=True)

    def checked_report() -> None:
        for _ in range(200):
            json.dumps(conforming(Report, doc, "a report"), indent=2, sort_keys=True)

    cases = {"export line": (dumps_lines, checked_lines, LINES),
             "report": (dumps_report, checked_report, 200)}
    checked_lines()  # warm-up: pydantic builds its validators on first use
    checked_report()
    for name, (base, checked, count) in cases.items():
        plain, with_check = [], []
        for _ in range(rounds):
            plain.append(timed(base))
            with_check.append(timed(checked))
        b, c = statistics.median(plain) / count, statistics.median(with_check) / count
        print(f"{name:12s} dumps {b * 1e6:8.1f} us   dumps+validate {c * 1e6:8.1f} us   "
              f"ratio {c / b:4.2f}x   (+{(c - b) * 1e6:.1f} us each; {rounds} rounds)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 7)
