"""Sealing's hashing throughput against `sha256sum` on the same files.

Target: sealbench's hashing reaches >= 80% of sha256sum's throughput, in constant memory.
Both read the same files from the page cache (one warm-up pass first), in the same run.
Usage: python bench/bench_seal.py [total-MiB]
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from sealbench.sealing import hash_file


def make_files(root: Path, total_mib: int) -> list[Path]:
    """A protocol-like mix: a few large files and many small ones."""
    files = []
    big = max(1, total_mib // 8)
    for i in range(6):
        path = root / f"big_{i}.bin"
        path.write_bytes(os.urandom(big * 1024 * 1024))
        files.append(path)
    for i in range(2000):
        path = root / "small" / f"f_{i:04d}.py"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(os.urandom(2048))
        files.append(path)
    return files


def best_of(n: int, fn: object) -> float:
    times = []
    for _ in range(n):
        started = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    total_mib = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    root = Path(tempfile.mkdtemp(prefix="sealbench-bench-seal-"))
    try:
        files = make_files(root, total_mib)
        size = sum(f.stat().st_size for f in files)
        args = ["sha256sum", *map(str, files)]

        def ours() -> None:
            for f in files:
                hash_file(f)

        def theirs() -> None:
            subprocess.run(args, check=True, stdout=subprocess.DEVNULL)

        theirs()
        ours()  # warm the page cache for both
        t_theirs, t_ours = best_of(3, theirs), best_of(3, ours)
        tracemalloc.start()
        ours()
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    mib = size / 2**20
    print(f"files: {len(files)}, {mib:.0f} MiB (6 large, 2000 small)")
    print(f"sha256sum:       {mib / t_theirs:8.1f} MiB/s")
    print(f"sealbench seal:  {mib / t_ours:8.1f} MiB/s (peak Python memory {peak / 2**20:.1f} MiB)")
    print(f"throughput ratio: {t_theirs / t_ours:.2f} of sha256sum (target >= 0.80)")


if __name__ == "__main__":
    main()
