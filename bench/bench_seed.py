"""The seed article's protocol, run whole: `sealbench run` against the seed's own runner.

Both sides run the same protocol — the bundled copy tests/test_seed.py builds (the article's
protocol.yaml verbatim, its metric verbatim, 40 dataset rows and five controls) — with the
same seed-style agent `solve.sh` (answers 30 of 40 and the two stubs, refuses the secrets
task), on the same machine, in interleaved rounds:
- sealbench: `sealbench run PROTO --solver "bash ./solve.sh"` as a subprocess, the real CLI as
  a user runs it (sandbox, ledger, null-pack gate, report), with a fresh ledger each round;
  sealing happens once, before the rounds (it is not part of a run);
- the seed: the article's `run_protocol.py` (SEED_RUNNER below, verbatim from the article, kept
  here and never in src/), unsandboxed, on the sealed protocol file.

Both run with Python's bytecode cache on (PYTHONDONTWRITEBYTECODE removed from their
environment) after one warm-up round that is not counted, as an installed sealbench runs (pip
compiles a package's modules when it installs it): without the cache every one of sealbench's
modules is compiled again at each start, which measures the compiler.

Printed: medians of both, their ratio (target <= 3x), and the ratio again with
`sealbench --version` (interpreter and import start-up, which the startup part of issue 13
works on) taken off sealbench's side. Usage: python bench/bench_seed.py [rounds] [jobs]
(jobs: sealbench's --jobs, default 1 as the CLI's; the seed's runner is sequential).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from test_seed import CORRECT, build_seed_protocol  # the bundled seed protocol

BIN = Path(sys.executable).parent
# the children's environment: the bytecode cache on, as an installed package has it
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
SEALBENCH = str(BIN / "sealbench")

# The article's runner, verbatim (seed/agent-scores-without-a-null-pack.md, "run_protocol.py").
SEED_RUNNER = '''\
# run_protocol.py — proposed example; prints no headline until gates pass
import json, random, statistics, subprocess, sys, time, yaml
from pathlib import Path
from metric_exact_diff import score

def load_jsonl(path):
    rows = []
    with open(path) as handle:
        for line in handle:
            rows.append(json.loads(line))
    return rows

def run_solver(task, timeout):
    started = time.time()
    proc = subprocess.run(
        ["bash", "./solve.sh", task["id"]],
        capture_output=True, text=True, timeout=timeout,
    )
    return proc.stdout, time.time() - started, proc.returncode

def bootstrap_ci(flags, rounds=1000):
    means = []
    n = len(flags)
    for _ in range(rounds):
        sample = [flags[random.randrange(n)] for _ in range(n)]
        means.append(sum(sample) / n)
    means.sort()
    lo = means[int(0.025 * rounds)]
    hi = means[int(0.975 * rounds)]
    return lo, hi, statistics.mean(flags)

def main(protocol_path):
    proto = yaml.safe_load(Path(protocol_path).read_text())
    if "PENDING_SEAL" in Path(protocol_path).read_text():
        sys.exit("refuse: protocol is not sealed")
    null_rows = load_jsonl(proto["null_pack"]["path"])
    for row in null_rows:
        diff, _, _ = run_solver(row, proto["budget"]["timeout_sec"])
        passed = score(diff, row["oracle"])["pass"]
        expected = row["expected_class"]
        if expected == "must_pass" and not passed:
            sys.exit(f"null pack failed open: {row['id']}")
        if expected in {"must_fail", "must_refuse"} and passed:
            sys.exit(f"null pack failed closed: {row['id']}")
    tasks = load_jsonl(proto["dataset"]["path"])
    if len(tasks) < proto["publish"]["min_n"]:
        sys.exit("refuse: sample smaller than publish.min_n")
    flags = []
    for task in tasks:
        diff, elapsed, code = run_solver(task, proto["budget"]["timeout_sec"])
        flags.append(1.0 if score(diff, task["oracle"])["pass"] else 0.0)
    lo, hi, mean = bootstrap_ci(flags)
    report = {
        "protocol_id": proto["protocol_id"],
        "n": len(flags),
        "mean": round(mean, 4),
        "ci95": [round(lo, 4), round(hi, 4)],
        "null_pack": "pass",
    }
    Path("report.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report))

if __name__ == "__main__":
    main(sys.argv[1])
'''

# The seed-style agent (docs/protocol.md, "The seed's protocol"): under sealbench the task is
# the one the prompt names (the attempt id is opaque); under the seed's runner, which shows no
# prompt, it is the id the runner appends.
SOLVE_SH = r'''#!/usr/bin/env bash
set -euo pipefail
if [ -n "${SEALBENCH_PROMPT_FILE:-}" ]; then
  task="$(sed -n 's/^Repair \(.*\)\.$/\1/p' "$SEALBENCH_PROMPT_FILE")"
  if grep -qi secret "$SEALBENCH_PROMPT_FILE"; then
    echo "secrets are out of scope" > "$SEALBENCH_REFUSE_FILE"
    exit 0
  fi
else
  task="$1"
fi
here="$(cd "$(dirname "$0")" && pwd)"
if [ -f "$here/answers/$task.patch" ]; then
  cat "$here/answers/$task.patch"
fi
'''


def prepare(tmp: Path) -> tuple[Path, Path]:
    """The sealed seed protocol with the article's runner beside it, and the agent's dir."""
    proto = tmp / "seed"
    oracles = build_seed_protocol(proto, tmp / "oracle-scratch")
    agent = tmp / "agent"
    (agent / "answers").mkdir(parents=True)
    (agent / "solve.sh").write_text(SOLVE_SH)
    (agent / "solve.sh").chmod(0o755)
    for tid, patch in oracles.items():
        if tid.startswith("NP-STUB") or (tid.startswith("R-") and int(tid[2:]) < CORRECT):
            (agent / "answers" / f"{tid}.patch").write_bytes(patch)
    subprocess.run([SEALBENCH, "seal", str(proto), "--ledger", str(tmp / "seal.sqlite")],
                   check=True, capture_output=True)
    # the seed's runner: beside its metric (it imports it), its agent in the working dir
    (proto / "run_protocol.py").write_text(SEED_RUNNER)
    shutil.copy(agent / "solve.sh", proto / "solve.sh")
    shutil.copytree(agent / "answers", proto / "answers")
    return proto, agent


def time_sealbench(proto: Path, agent: Path, ledger: Path, jobs: int) -> float:
    argv = [SEALBENCH, "run", str(proto), "--solver", "bash ./solve.sh", "--ledger",
            str(ledger), "--quiet", "--jobs", str(jobs)]
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=agent, capture_output=True, text=True, check=False,
                          env=CHILD_ENV)
    elapsed = time.perf_counter() - started
    if done.returncode != 0 or f'"mean": {CORRECT / 40}' not in _report(ledger):
        raise SystemExit(f"sealbench run failed ({done.returncode}): {done.stderr[-2000:]}")
    return elapsed


def _report(ledger: Path) -> str:
    reports = sorted((ledger.parent / "reports").glob("*.json"))
    return reports[-1].read_text() if reports else ""


def time_seed(proto: Path) -> float:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "run_protocol.py", "protocol.sealed.yaml"],
                          cwd=proto, capture_output=True, text=True, check=False,
                          env=CHILD_ENV)
    elapsed = time.perf_counter() - started
    if done.returncode != 0 or f'"mean": {CORRECT / 40}' not in done.stdout:
        raise SystemExit(f"the seed's runner failed ({done.returncode}): {done.stderr[-2000:]}")
    return elapsed


def time_version() -> float:
    started = time.perf_counter()
    subprocess.run([SEALBENCH, "--version"], check=True, capture_output=True, env=CHILD_ENV)
    return time.perf_counter() - started


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    jobs = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    tmp = Path(tempfile.mkdtemp(prefix="sealbench-bench-seed-"))
    try:
        proto, agent = prepare(tmp)
        ours: list[float] = []
        seed: list[float] = []
        version: list[float] = []
        time_sealbench(proto, agent, tmp / "warm-up" / "ledger.sqlite", jobs)  # not counted
        time_seed(proto)
        for number in range(rounds):
            ours.append(time_sealbench(proto, agent, tmp / f"run-{number}" / "ledger.sqlite",
                                       jobs))
            seed.append(time_seed(proto))
            version.append(time_version())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    o, s, v = statistics.median(ours), statistics.median(seed), statistics.median(version)
    print(f"seed protocol (40 tasks + 5 controls), {rounds} interleaved rounds, "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; medians:")
    print(f"seed's unsandboxed run_protocol.py: {s:6.2f} s")
    print(f"sealbench run --jobs {jobs} (sandbox {'bwrap' if shutil.which('bwrap') else 'none'}): "
          f"{o:6.2f} s -> ratio {o / s:.2f}x (target <= 3x)")
    print(f"sealbench --version:                {v:6.2f} s -> without it {o - v:5.2f} s, "
          f"ratio {(o - v) / s:.2f}x")


if __name__ == "__main__":
    main()
