"""Per-attempt harness overhead against a bare bubblewrap start.

Both sides are measured in this run, the same number of times, interleaved in rounds so the
machine's noise (2 shared cores) hits both alike:
- baseline: `bwrap --ro-bind / / --dev /dev --proc /proc --unshare-pid --unshare-net
  --die-with-parent --new-session --cap-drop ALL true`, started with subprocess;
- sealbench: one full attempt of a do-nothing solver (`true`) on a 20-file fixture, sandbox on:
  fresh git workspace, sandboxed run with every mount and limit, harness diff, metric.

Target: ratio <= 1.5. Usage: python bench/bench_overhead.py [attempts-per-round] [rounds]
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sealbench.harness import Harness, InfraFailure, SealedFile
from sealbench.ledger import Ledger
from sealbench.protocol import load
from sealbench.sandbox import detect
from sealbench.sealing import manifest, seal
from sealbench.solver import CommandSolver

METRIC = ("def score(result_diff, oracle_path):\n"
          "    return {'pass': result_diff == open(oracle_path).read(), 'metric': 'eq'}\n")
PROTOCOL = """\
schema: agent-bench-protocol/v1
protocol_id: bench.overhead
dataset: {path: ./tasks.jsonl}
metric: {module: ./metric.py}
budget: {timeout_sec: 30}
null_pack: {path: ./null.jsonl, rules: {must_pass: [NP-PASS], must_fail: [NP-FAIL]}}
publish: {min_n: 1}
solver: {diff_source: workspace}
"""


def build_protocol(root: Path) -> Path:
    """One task whose fixture has 20 files, the size the overhead target is stated for."""
    fixture = root / "fixture"
    for i in range(20):
        sub = fixture / ("pkg" if i % 2 else "tests")
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"mod_{i:02d}.py").write_text("".join(f"x_{j} = {j}\n" for j in range(60)))
    (root / "oracle.patch").write_text(
        "diff --git a/pkg/mod_01.py b/pkg/mod_01.py\n--- a/pkg/mod_01.py\n+++ b/pkg/mod_01.py\n"
        "@@ -1 +1 @@\n-x_0 = 0\n+x_0 = 1\n")
    (root / "metric.py").write_text(METRIC)
    row = {"id": "t1", "repo": "fixture", "oracle": "oracle.patch"}
    (root / "tasks.jsonl").write_text(json.dumps(row) + "\n")
    controls = [{"id": f"NP-{cls}", "repo": "fixture", "oracle": "oracle.patch",
                 "expected_class": f"must_{cls.lower()}"} for cls in ("PASS", "FAIL")]
    (root / "null.jsonl").write_text("".join(json.dumps(c) + "\n" for c in controls))
    (root / "protocol.yaml").write_text(PROTOCOL)
    return root


def time_baseline(bwrap: str, count: int) -> float:
    argv = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid",
            "--unshare-net", "--die-with-parent", "--new-session", "--cap-drop", "ALL", "true"]
    started = time.perf_counter()
    for _ in range(count):
        subprocess.run(argv, check=True)
    return (time.perf_counter() - started) / count


def time_attempts(harness: Harness, count: int) -> float:
    task = harness.protocol.dataset[0]
    solver = CommandSolver(("true",))
    started = time.perf_counter()
    for _ in range(count):
        result = harness.attempt(task, solver)
        if isinstance(result, InfraFailure) or result.outcome != "fail":
            raise SystemExit(f"unexpected attempt result: {result}")
    return (time.perf_counter() - started) / count


def main() -> None:
    per_round = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    sandbox = detect()
    if sandbox.kind != "bwrap" or sandbox.bwrap is None:
        raise SystemExit(f"needs bubblewrap: {sandbox.reason}")
    tmp = Path(tempfile.mkdtemp(prefix="sealbench-bench-"))
    try:
        root = build_protocol(tmp / "proto")
        seal(root, ledger=Ledger(tmp / "ledger.sqlite"), check_instrument=False)
        protocol = load(root, sealed=True)
        sealed = [SealedFile(f.path, f.sha256, f.mode) for f in manifest(protocol)]
        places = {"default scratch": None}
        if Path("/dev/shm").is_dir():
            places["scratch on tmpfs (SEALBENCH_SCRATCH=/dev/shm)"] = Path("/dev/shm")
        harnesses = {name: Harness(protocol, sealed, sandbox, scratch=where)
                     for name, where in places.items()}
        for harness in harnesses.values():
            time_attempts(harness, 3)  # warm-up: the fixture record is built once per run
        base: list[float] = []
        ours: dict[str, list[float]] = {name: [] for name in harnesses}
        for _ in range(rounds):
            base.append(time_baseline(sandbox.bwrap, per_round))
            for name, harness in harnesses.items():
                ours[name].append(time_attempts(harness, per_round))
        for harness in harnesses.values():
            harness.__exit__(None, None, None)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    b = statistics.median(base)
    print(f"attempts: {rounds} rounds x {per_round}, 20-file fixture, sandbox bwrap "
          f"(scratch default: {tempfile.gettempdir()})")
    print(f"bare bwrap start:     {b * 1000:7.2f} ms (median of round means)")
    for name, times in ours.items():
        o = statistics.median(times)
        print(f"sealbench attempt, {name}: {o * 1000:7.2f} ms -> overhead ratio {o / b:.2f}x "
              "(target <= 1.5x)")


if __name__ == "__main__":
    main()
