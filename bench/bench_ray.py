"""`--executor ray` on a local two-node cluster, sleep-bound solver, against ideal throughput.

Each attempt is `sleep S` inside the full sandbox, run through the whole runner (ledger, gate,
report) with `RunOptions(executor="ray")` on a Ray cluster of two nodes started here, then with
the local executor on as many threads, in the same process, interleaved (ray, local, ray,
local): the machine is shared, so only the figures of one run compare. Ideal wall time for N
attempts on SLOTS slots is ceil(N / SLOTS) * S; the null pack's two controls are counted as
attempts. Target (issue 13): >= 90% of ideal under Ray.

Usage: python bench/bench_ray.py [N] [S] [CPUS_PER_NODE]   (defaults 24, 1.0, 2)
"""

from __future__ import annotations

import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

import ray
from benchlib import controls, protocol_yaml, write_protocol
from ray.cluster_utils import Cluster

from sealbench.ledger import Ledger
from sealbench.runner import RunOptions, run
from sealbench.sandbox import detect
from sealbench.sealing import seal

PROTOCOL = protocol_yaml("bench.ray", timeout_sec=60,
                         solver="{diff_source: stdout, task_ids: visible}")
SOLVER = """#!/bin/sh
sleep {sleep}
case "$1" in NP-PASS|t*) printf 'ok' ;; esac
"""
STORE_BYTES = 80 * 1024 * 1024


def build(root: Path, n: int) -> Path:
    """A protocol whose metric passes a diff of `ok`: every attempt is one sleep."""
    (root / "fixture").mkdir(parents=True)
    (root / "fixture" / "a.txt").write_text("a\n")
    (root / "oracle.patch").write_text("ok")
    rows = [{"id": f"t{i}", "repo": "fixture", "oracle": "oracle.patch"} for i in range(n)]
    return write_protocol(root, PROTOCOL,
                          "def score(d, o):\n    return {'pass': d == 'ok', 'metric': 'm'}\n",
                          rows, controls("oracle.patch"))


def timed(root: Path, command: str, ledger: Ledger, options: RunOptions) -> float:
    started = time.perf_counter()
    result = run(root, command, ledger=ledger, options=options)
    wall = time.perf_counter() - started
    assert result.report["mean"] == 1.0, result.report["mean"]
    return wall


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 24
    sleep = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    cpus = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    slots = 2 * cpus
    tmp = Path(tempfile.mkdtemp(prefix="sealbench-bench-ray-"))
    cluster = Cluster(initialize_head=True,
                      head_node_args={"num_cpus": cpus, "object_store_memory": STORE_BYTES})
    try:
        cluster.add_node(num_cpus=cpus, object_store_memory=STORE_BYTES)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False, logging_level="ERROR")
        root = build(tmp / "proto", n)
        ledger = Ledger(tmp / "l.sqlite")
        seal(root, ledger=ledger, check_instrument=False)
        agent = tmp / "solve.sh"
        agent.write_text(SOLVER.format(sleep=sleep))
        agent.chmod(0o755)
        walls: dict[str, list[float]] = {"ray": [], "local": []}
        timed(root, str(agent), ledger, RunOptions(jobs=slots, executor="ray"))  # warm-up
        for _ in range(2):
            for name in ("ray", "local"):
                walls[name].append(timed(root, str(agent), ledger,
                                         RunOptions(jobs=slots, executor=name)))
    finally:
        ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    ideal = math.ceil((n + 2) / slots) * sleep
    print(f"attempts: {n} + 2 controls x sleep {sleep:g} s, 2 nodes x {cpus} CPUs = {slots} "
          f"slots (--jobs {slots}), sandbox {detect().kind}; whole runs (ledger, gate, report)")
    print(f"ideal {ideal:.2f} s; best of 2 after a warm-up, interleaved")
    for name, times in walls.items():
        best = min(times)
        print(f"{name:5} wall {best:.2f} s (runs {', '.join(f'{t:.2f}' for t in times)}): "
              f"{100 * ideal / best:.1f}% of ideal")
    print(f"target: ray >= 90% of ideal; ray/local throughput ratio "
          f"{min(walls['local']) / min(walls['ray']):.2f}")


if __name__ == "__main__":
    main()
