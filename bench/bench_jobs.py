"""`--jobs 8` with a sleep-bound solver against ideal throughput.

Each attempt is `sleep S` inside the full sandbox; ideal wall time for N attempts on 8 workers
is ceil(N/8) * S. Target: >= 90% of ideal throughput. Usage: python bench/bench_jobs.py [N] [S]
"""

from __future__ import annotations

import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

from benchlib import controls, protocol_yaml, write_protocol

from sealbench.harness import Finished, Harness
from sealbench.ledger import Ledger
from sealbench.protocol import Task, load
from sealbench.sandbox import detect
from sealbench.sealing import Lock, seal
from sealbench.solver import CommandSolver

PROTOCOL = protocol_yaml("bench.jobs", timeout_sec=60, solver="{diff_source: workspace}")


def build(root: Path, n: int) -> Path:
    (root / "fixture").mkdir(parents=True)
    (root / "fixture" / "a.txt").write_text("a\n")
    (root / "oracle.patch").write_text("x")
    rows = [{"id": f"t{i}", "repo": "fixture", "oracle": "oracle.patch"} for i in range(n)]
    return write_protocol(root, PROTOCOL,
                          "def score(d, o):\n    return {'pass': False, 'metric': 'm'}\n",
                          rows, controls("oracle.patch"))


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 48
    sleep = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    tmp = Path(tempfile.mkdtemp(prefix="sealbench-bench-jobs-"))
    try:
        root = build(tmp / "proto", n)
        seal(root, ledger=Ledger(tmp / "l.sqlite"), check_instrument=False)
        lock = Lock.model_validate_json((root / "protocol.lock").read_bytes())
        protocol = load(root, sealed=True)
        solver = CommandSolver(("sh", "-c", f"sleep {sleep}"))
        with Harness(protocol, lock.sealed_files(), detect()) as harness:
            outcomes: list[str] = []

            def done(_t: Task, _e: int, result: Finished) -> None:
                outcomes.append(getattr(result, "outcome", "infrastructure_error"))

            started = time.perf_counter()
            harness.run_all([(t, 0) for t in protocol.dataset], solver, 8, done)
            wall = time.perf_counter() - started
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    ideal = math.ceil(n / 8) * sleep
    print(f"attempts: {n} x sleep {sleep:g} s, --jobs 8, sandbox {detect().kind}")
    print(f"outcomes: {sorted(set(outcomes))}")
    print(f"wall {wall:.2f} s, ideal {ideal:.2f} s")
    print(f"throughput: {100 * ideal / wall:.1f}% of ideal (target >= 90%)")


if __name__ == "__main__":
    main()
