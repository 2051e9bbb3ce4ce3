"""What the tripwires cost per test-graded attempt (issue 22).

Both sides grade the same attempts of the bundled `coding-repair` example in this run, through
the harness's own verifier (fresh fixture, diff applied, hidden tests laid over, pytest in the
sandbox), interleaved in rounds so the machine's noise (2 shared cores) hits both alike:
- baseline: the hidden tests alone (tripwires switched off);
- tripwires: the same with the three tripwires planted (a parse of the hidden test file, three
  copied tests more for pytest to run).

Prints the verifier's wall time per attempt on each side, the ratio, and the planting alone.
Usage: python bench/bench_tripwires.py [attempts-per-round] [rounds]
"""

from __future__ import annotations

import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import sealbench.verifier as verifier_module
from sealbench.example import init
from sealbench.harness import Harness
from sealbench.ledger import Ledger
from sealbench.sandbox import detect
from sealbench.sealing import seal, verify
from sealbench.tripwires import plant
from sealbench.verifier import normalize_test_id


def main() -> None:
    per_round = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    base = Path(tempfile.mkdtemp(prefix="bench-tripwires-"))
    try:
        proto = init(base / "coding-repair")
        seal(proto, ledger=Ledger(base / "l.sqlite"), check_instrument=False)
        sealed = verify(proto)
        tasks = sealed.protocol.dataset[:per_round]
        sandbox = detect(want="auto")
        with Harness(sealed.protocol, sealed.lock.sealed_files(), sandbox,
                     environment=sealed.lock.environment,
                     shadow_names=sealed.lock.shadow_names) as harness:
            verifier = harness.verifier
            assert verifier is not None
            timings: dict[str, list[float]] = {"baseline": [], "tripwires": []}
            original = verifier_module.Verifier._with_tripwires
            for _ in range(rounds):
                for side in ("baseline", "tripwires"):
                    if side == "baseline":
                        verifier_module.Verifier._with_tripwires = (  # type: ignore[method-assign]
                            lambda _self, _task, tests, _argv: (tests, ()))
                    else:
                        verifier_module.Verifier._with_tripwires = (  # type: ignore[method-assign]
                            original)
                    for index, task in enumerate(tasks):
                        work = base / f"{side}-{index}-{len(timings[side])}"
                        start = time.perf_counter()
                        run = verifier.run(task, b"", work)
                        timings[side].append(time.perf_counter() - start)
                        assert run.problem is None, run.problem
                        assert bool(run.tripwires) == (side == "tripwires")
                        shutil.rmtree(work, ignore_errors=True)
            verifier_module.Verifier._with_tripwires = original  # type: ignore[method-assign]
            planting = []
            for task in tasks:
                files = {rel: e.data for rel, e in harness.tests_for(task).items()}
                listed = [normalize_test_id(t) for t in (*task.fail_to_pass,
                                                         *task.pass_to_pass)]
                start = time.perf_counter()
                plant(files, listed, random.Random(1))
                planting.append(time.perf_counter() - start)
        bare = statistics.median(timings["baseline"])
        wired = statistics.median(timings["tripwires"])
        print(f"sandbox {sandbox.kind}; {len(timings['baseline'])} attempts a side "
              f"({rounds} rounds of {per_round})")
        print(f"verifier per attempt, hidden tests alone: {bare * 1000:.1f} ms (median)")
        print(f"verifier per attempt, with tripwires:     {wired * 1000:.1f} ms (median)")
        print(f"ratio {wired / bare:.3f}x; tripwires cost {(wired - bare) * 1000:+.1f} ms "
              f"per test-graded attempt")
        print(f"planting alone (parse + copy, cached parse): "
              f"{statistics.median(planting) * 1000:.2f} ms")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
