"""A large protocol end to end: seal, run (do-nothing solver, no sandbox), report.

Target: a 100,000-task protocol in < 1 GB of memory. Prints, per stage, its wall time, its rate
(tasks per second) and the peak resident memory of this process so far (ru_maxrss), and the
largest child process (the solver and metric workers are separate, small processes). While the
run stage goes, a progress line every `N/10` attempts (stderr, flushed) says how far it got, so
a run cut short still leaves a measured figure, never an extrapolated one.
Usage: python bench/bench_scale.py [N]   (default 2,000; 100,000 takes tens of minutes here)
       python bench/bench_scale.py N --report-only   the report stage alone, over a ledger of
       N dataset attempts written straight through Ledger.add_attempt (records of the shape
       `run` writes for this solver, in a real hash chain), when the run stage cannot be
       waited for; it says so in its output
"""

from __future__ import annotations

import json
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sealbench.ledger import Ledger
from sealbench.report import build_report
from sealbench.runner import RunOptions, run
from sealbench.sealing import seal

PROTOCOL = """\
schema: agent-bench-protocol/v1
protocol_id: bench.scale.{n}
dataset: {{path: ./tasks.jsonl}}
metric: {{module: ./metric.py}}
budget: {{timeout_sec: 60}}
null_pack:
  path: ./null.jsonl
  rules: {{must_pass: [NP-PASS], must_fail: [NP-FAIL]}}
publish: {{min_n: 1}}
solver: {{diff_source: stdout}}
"""
METRIC = ("def score(result_diff, oracle_path):\n"
          "    return {'pass': result_diff == open(oracle_path).read(), 'metric': 'eq'}\n")


def build(root: Path, n: int) -> None:
    (root / "oracles").mkdir(parents=True)
    rows = []
    for i in range(n):
        (root / "oracles" / f"t{i}.patch").write_text(f"diff for task {i}\n")
        rows.append(json.dumps({"id": f"t{i}", "oracle": f"oracles/t{i}.patch",
                                "stratum": f"s{i % 7}", "cluster": f"c{i % 97}"}))
    (root / "tasks.jsonl").write_text("\n".join(rows) + "\n")
    (root / "oracles" / "np.patch").write_text("poison\n")
    (root / "oracles" / "empty.patch").write_text("")  # the do-nothing solver prints nothing
    (root / "null.jsonl").write_text("".join(json.dumps(row) + "\n" for row in (
        {"id": "NP-FAIL", "oracle": "oracles/np.patch", "expected_class": "must_fail"},
        {"id": "NP-PASS", "oracle": "oracles/empty.patch", "expected_class": "must_pass"})))
    (root / "metric.py").write_text(METRIC)
    (root / "protocol.yaml").write_text(PROTOCOL.format(n=n))


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def children_peak_mib() -> float:
    """The largest resident size any waited-for child reached (ru_maxrss of RUSAGE_CHILDREN
    is the maximum over them, not a sum)."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def rss_now_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def progress(started: float, every: int) -> Callable[[str, dict[str, Any]], None]:
    """An on_event hook printing one line per `every` finished attempts (counts only)."""
    def on_event(kind: str, data: dict[str, Any]) -> None:
        if kind != "attempt" or data["finished"] % every:
            return
        seconds = time.perf_counter() - started
        print(f"  run: {data['finished']}/{data['total']} attempts after {seconds:.0f} s "
              f"({data['finished'] / seconds:.1f}/s), RSS {rss_now_mib():.0f} MiB, "
              f"peak {peak_mib():.0f} MiB", file=sys.stderr, flush=True)
    return on_event


EMPTY = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"  # sha256 of b""


def record(i: int) -> dict[str, Any]:
    """An attempt record as `run` writes it for the do-nothing solver (runner.attempt_record);
    every third one passes, so the figures are not degenerate."""
    passed = i % 3 == 0
    return {"attempt_id": f"attempt-{i:016x}", "cluster": f"c{i % 97}", "detail": "eq",
            "diff": EMPTY, "duration": 0.02, "files_touched": 0, "forbidden_written": [],
            "metric": {"metric": "eq", "pass": passed}, "metric_log": EMPTY,
            "outcome": "pass" if passed else "fail", "returncode": 0, "score": int(passed),
            "stderr": EMPTY, "stdout": EMPTY, "stratum": f"s{i % 7}", "tests": None}


def report_only(n: int) -> None:
    """The report stage alone over n recorded dataset attempts (and the two controls)."""
    tmp = Path(tempfile.mkdtemp(prefix="sealbench-bench-scale-"))
    try:
        ledger = Ledger(tmp / "ledger.sqlite")
        options = {"kind": "run", "epochs": 1, "timeout_scale": 1.0, "min_n": 1,
                   "require_ci": True, "ci_method": "auto", "strata": "descriptive",
                   "rules": {"NP-PASS": "must_pass", "NP-FAIL": "must_fail"},
                   "task_ids": "blind", "max_infrastructure_errors": 0,
                   "expected": {"null_pack": 2, "dataset": n}}
        ledger.create_run("scale", f"bench.scale.{n}", "sha256:" + "0" * 64, "true", "none",
                          options)
        started = time.perf_counter()
        ledger.add_attempt("scale", "null_pack", "NP-PASS", 0, {**record(0), "outcome": "pass"})
        ledger.add_attempt("scale", "null_pack", "NP-FAIL", 0, {**record(1), "outcome": "fail"})
        for i in range(n):
            ledger.add_attempt("scale", "dataset", f"t{i}", 0, record(i))
        ledger.finish_run("scale", "finished")
        written = time.perf_counter() - started
        print(f"  ledger: {n} attempts recorded in {written:.1f} s ({n / written:.0f}/s), peak "
              f"{peak_mib():.0f} MiB", file=sys.stderr, flush=True)
        started = time.perf_counter()
        report = build_report(ledger, "scale")
        seconds = time.perf_counter() - started
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    assert report["n"] == n
    print(f"tasks: {n} (REPORT STAGE ONLY: attempts written through Ledger.add_attempt, no "
          "solver run)")
    print(f"recording {n} attempts        {written:8.1f} s  {n / written:8.1f} attempts/s")
    print(f"report (recomputed)          {seconds:8.1f} s  {n / seconds:8.1f} tasks/s   "
          f"peak RSS {peak_mib():7.1f} MiB")


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    if "--report-only" in sys.argv[2:]:
        report_only(n)
        return
    tmp = Path(tempfile.mkdtemp(prefix="sealbench-bench-scale-"))
    try:
        build(tmp / "proto", n)
        ledger = Ledger(tmp / "ledger.sqlite")
        stages: list[tuple[str, float, float]] = []
        print(f"tasks: {n} (stdout diffs, do-nothing solver `true`, no sandbox, --jobs 2); "
              f"protocol built, RSS {rss_now_mib():.0f} MiB", file=sys.stderr, flush=True)
        started = time.perf_counter()
        # the do-nothing solver passes the empty must_pass control by design: no instrument check
        seal(tmp / "proto", ledger=ledger, jobs=2, check_instrument=False)
        stages.append(("seal (no instrument check)", time.perf_counter() - started, peak_mib()))
        print(f"  seal: {stages[-1][1]:.1f} s, peak {peak_mib():.0f} MiB", file=sys.stderr,
              flush=True)
        started = time.perf_counter()
        result = run(tmp / "proto", "true", ledger=ledger,
                     options=RunOptions(jobs=2, sandbox="none"), run_id="scale",
                     on_event=progress(started, max(1, n // 10)))
        stages.append(("run (incl. its report)", time.perf_counter() - started, peak_mib()))
        started = time.perf_counter()
        report = build_report(ledger, "scale")
        stages.append(("report (recomputed)", time.perf_counter() - started, peak_mib()))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"tasks: {n} (stdout diffs, do-nothing solver `true`, no sandbox, --jobs 2)")
    for name, seconds, peak in stages:
        print(f"{name:28s} {seconds:8.1f} s  {n / seconds:8.1f} tasks/s   "
              f"peak RSS so far {peak:7.1f} MiB")
    assert report["n"] == n and result.report["n"] == n
    total = sum(seconds for _, seconds, _ in stages)
    print(f"total {total:.1f} s; peak memory: {peak_mib():.0f} MiB for {n} tasks (target < "
          f"1024 MiB at 100,000); largest child process {children_peak_mib():.0f} MiB")


if __name__ == "__main__":
    main()
