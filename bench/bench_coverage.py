"""Benchmark: does the published 95% interval really cover 95%?

Why this exists: an interval is a promise about how often it contains the true pass rate, and
that promise can only be checked by simulation. This script calls the very function every
report uses (``sealbench.report.published_headline``) and the one `compare` uses
(``sealbench.stats.paired_comparison``) on simulated benchmarks whose true rate is known:

1. independent 0/1 tasks, p = 0.02 … 0.98 (step 0.02), n ∈ {20, 54, 100, 500}: coverage is
   computed *exactly* (the interval for every k = 0 … n, weighted by Binomial(n, p)), for the
   default method and for ``ci_method: bootstrap``;
2. clustered tasks: 10 and 30 clusters of 10 tasks, intra-cluster correlation 0.3 (beta-binomial
   clusters), p = 0.1 … 0.9;
3. stratified tasks: strata sampled at random (the default ignores strata) and strata fixed by
   design (``publish.strata: fixed``);
4. `compare` on a clustered null (both agents equally good overall, each better on some
   clusters): type-I error of its test at 0.05, beside plain exact McNemar;
5. the minimum detectable difference: simulated power of exact McNemar at the MDD the report
   states (should be about 0.80).

Targets (docs/statistics.md): minimum coverage >= 0.93 for n >= 54 without clusters; >= 0.93 at
10 clusters, ICC 0.3, 0.2 <= p <= 0.8 (coverage is symmetric in p, so this is "p <= 0.8" on
both sides; p = 0.05, 0.1, 0.9, 0.95 are printed too, and fall short: with ten clusters and a
rare outcome, most samples contain no cluster that passes often); compare's type-I error
<= 0.06 on a clustered null.

Run: ``python bench/bench_coverage.py [REPS]`` (default 1,000 replicates per simulated cell; a
few minutes on 2 cores). Monte Carlo error at 0.95 with 1,000 replicates is about ±0.007.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats as sps

try:
    from sealbench.report import published_headline
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from sealbench.report import published_headline
from sealbench.stats import derive_seed, mcnemar_exact, mdd_mcnemar, paired_comparison

TARGET = 0.93
TYPE1_TARGET = 0.06
SHOWN_P = (0.02, 0.06, 0.1, 0.2, 0.3, 0.5, 0.7, 0.8, 0.9, 0.94, 0.98)


def scores_of(values: np.ndarray, clusters: list[str] | None = None,
              strata: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """Per-task records in the shape the report builds from the ledger."""
    return {f"t{i:05d}": {"score": float(v),
                          "cluster": clusters[i] if clusters is not None else None,
                          "stratum": strata[i] if strata is not None else None}
            for i, v in enumerate(values)}


def interval(values: np.ndarray, *, seed: int, method: str = "auto",
             clusters: list[str] | None = None, strata: list[str] | None = None,
             fixed: bool = False) -> tuple[float, float]:
    head = published_headline(scores_of(values, clusters, strata), seed=seed, ci_method=method,
                              strata_fixed=fixed)
    return head.ci95


def summary(cov: np.ndarray) -> str:
    return f"min {cov.min():.3f}  share below {TARGET}: {np.mean(cov < TARGET):.2f}"


# ------------------------------------------------------------------------------- 1. iid


def exact_iid(n: int, method: str, grid: np.ndarray) -> np.ndarray:
    """Exact coverage over the grid: the interval for each count k, weighted by its pmf."""
    ks = np.arange(n + 1)
    bounds = np.array([interval(np.r_[np.ones(k), np.zeros(n - k)], method=method,
                                seed=derive_seed("coverage", str(n), str(k)))
                       for k in ks])
    return np.array([float(np.sum(sps.binom.pmf(ks, n, p)
                                  * ((bounds[:, 0] <= p) & (p <= bounds[:, 1])))) for p in grid])


def iid_tables() -> dict[str, float]:
    grid = np.round(np.arange(0.02, 0.981, 0.02), 2)
    shown = [int(np.argmin(np.abs(grid - p))) for p in SHOWN_P]
    print("1. Independent 0/1 tasks: exact coverage of the 95% interval")
    print("   p:        " + " ".join(f"{p:>5.2f}" for p in SHOWN_P))
    minima: dict[str, float] = {}
    for method in ("auto", "bootstrap"):
        for n in (20, 54, 100, 500):
            cov = exact_iid(n, method, grid)
            label = f"{method:<9} n={n:<4}"
            print(f"   {label} " + " ".join(f"{cov[i]:.3f}" for i in shown) + "   " + summary(cov))
            if n >= 54:
                minima[method] = min(minima.get(method, 1.0), float(cov.min()))
    return minima


# ------------------------------------------------------------------------------ 2. clusters


def clustered_sample(rng: np.random.Generator, p: float, groups: int, size: int,
                     icc: float) -> np.ndarray:
    """Beta-binomial clusters: each cluster's rate ~ Beta with mean p and ICC ``icc``."""
    ab = (1.0 - icc) / icc
    rates = rng.beta(p * ab, (1.0 - p) * ab, size=groups)
    return (rng.random((groups, size)) < rates[:, None]).astype(np.float64).ravel()


def unequal_sample(rng: np.random.Generator, p: float, sizes: list[int],
                   icc: float) -> tuple[np.ndarray, list[str | None]]:
    """Beta-binomial clusters of the given sizes; a size-1 cluster is an unlabelled task."""
    values = clustered_sample(rng, p, len(sizes), max(sizes), icc).reshape(len(sizes), -1)
    out = np.concatenate([values[g, :m] for g, m in enumerate(sizes)])
    labels: list[str | None] = [f"c{g}" if m > 1 else None
                                for g, m in enumerate(sizes) for _ in range(m)]
    return out, labels


UNEQUAL = {"one cluster of 30 + 20 single tasks, ICC 0.5": ([30] + [1] * 20, 0.5),
           "10 clusters of 20,5,5,4,4,3,3,2,2,2, ICC 0.3": ([20, 5, 5, 4, 4, 3, 3, 2, 2, 2], 0.3)}


def unequal_tables(reps: int) -> float:
    grid = (0.1, 0.3, 0.5, 0.7, 0.9)
    print(f"\n2b. Unequal cluster sizes ({reps} replicates each); p: "
          + " ".join(f"{p:.1f}" for p in grid))
    worst = 1.0
    for label, (sizes, icc) in UNEQUAL.items():
        row = []
        for p in grid:
            rng = np.random.default_rng(derive_seed("unequal", label, str(p)))
            hits = 0
            for r in range(reps):
                values, labels = unequal_sample(rng, p, sizes, icc)
                head = published_headline(
                    {f"t{i:03d}": {"score": float(v), "cluster": c, "stratum": None}
                     for i, (v, c) in enumerate(zip(values, labels, strict=True))},
                    seed=derive_seed("u", label, str(r)), ci_method="auto", strata_fixed=False)
                hits += head.ci95[0] <= p <= head.ci95[1]
            row.append(hits / reps)
        worst = min(worst, min(row[1:4]))
        print(f"   {label:<47} " + " ".join(f"{c:.3f}" for c in row))
    return worst


def cluster_tables(reps: int) -> dict[int, float]:
    grid = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)
    print(f"\n2. Clustered tasks, ICC 0.3, clusters of 10 ({reps} replicates each, {reps // 2} "
          "for the bootstrap)")
    print("   p:                     " + " ".join(f"{p:>5.2f}" for p in grid))
    worst: dict[int, float] = {}
    for groups in (10, 30):
        labels = [f"c{g}" for g in range(groups) for _ in range(10)]
        for method in ("auto", "bootstrap"):
            runs = reps if method == "auto" else reps // 2  # the contrast needs less precision
            row = []
            for p in grid:
                rng = np.random.default_rng(derive_seed("clusters", str(groups), str(p)))
                hits = 0
                for r in range(runs):
                    values = clustered_sample(rng, p, groups, 10, 0.3)
                    lo, hi = interval(values, method=method, clusters=labels,
                                      seed=derive_seed("c", str(groups), str(p), str(r)))
                    hits += lo <= p <= hi
                row.append(hits / runs)
            cov = np.array(row)
            middle = cov[[i for i, p in enumerate(grid) if 0.2 <= p <= 0.8]]
            print(f"   {method:<9} {groups:>2} clusters    " + " ".join(f"{c:.3f}" for c in cov)
                  + f"   min on 0.2-0.8: {middle.min():.3f}")
            if method == "auto":
                worst[groups] = float(middle.min())
    return worst


# ------------------------------------------------------------------------------- 3. strata


STRATA = {"easy": (0.2, 0.95), "medium": (0.3, 0.6), "hard": (0.5, 0.15)}  # share, pass rate


def strata_tables(reps: int) -> dict[str, float]:
    n = 54
    names = list(STRATA)
    shares = np.array([STRATA[s][0] for s in names])
    rates = np.array([STRATA[s][1] for s in names])
    population = float(np.sum(shares * rates))
    fixed_sizes = np.round(shares * n).astype(int)
    fixed_sizes[-1] = n - fixed_sizes[:-1].sum()
    fixed_target = float(np.sum(fixed_sizes * rates) / n)
    print(f"\n3. Strata (easy/medium/hard, shares {shares.tolist()}, pass rates "
          f"{rates.tolist()}), n = {n}, {reps} replicates")
    rng = np.random.default_rng(derive_seed("strata"))
    out: dict[str, float] = {}
    cases: list[tuple[str, str, bool, Callable[[], tuple[list[str], float]]]] = [
        ("random allocation, default (strata descriptive)", "auto", False,
         lambda: (list(rng.choice(names, size=n, p=shares)), population)),
        ("random allocation, strata wrongly declared fixed", "auto", True,
         lambda: (list(rng.choice(names, size=n, p=shares)), population)),
        ("fixed allocation, strata fixed (conditional)", "auto", True,
         lambda: ([s for s, k in zip(names, fixed_sizes, strict=True) for _ in range(k)],
                  fixed_target)),
        ("fixed allocation, default (strata descriptive)", "auto", False,
         lambda: ([s for s, k in zip(names, fixed_sizes, strict=True) for _ in range(k)],
                  fixed_target)),
    ]
    for label, method, fixed, draw in cases:
        hits = 0
        widths = []
        for r in range(reps):
            strata, target = draw()
            if fixed and min(strata.count(s) for s in set(strata)) < 2:
                strata, target = draw()  # seal refuses strata of one task; redraw
            values = (rng.random(n) < np.array([STRATA[s][1] for s in strata])).astype(float)
            lo, hi = interval(values, method=method, strata=strata, fixed=fixed,
                              seed=derive_seed("s", label, str(r)))
            hits += lo <= target <= hi
            widths.append(hi - lo)
        out[label] = hits / reps
        print(f"   {label:<50} coverage {hits / reps:.3f}  mean width {np.mean(widths):.3f}")
    return out


# ------------------------------------------------------------------------------- 4. compare


def compare_type1(reps: int) -> dict[int, float]:
    print(f"\n4. compare on a clustered null (ICC 0.3 per agent and cluster, p = 0.5, clusters of "
          f"10; {reps} replicates): rejection rate at 0.05")
    out: dict[int, float] = {}
    for groups in (10, 30):
        labels = [f"c{g}" for g in range(groups) for _ in range(10)]
        rng = np.random.default_rng(derive_seed("type1", str(groups)))
        ours = plain = 0
        for _ in range(reps):
            a = clustered_sample(rng, 0.5, groups, 10, 0.3)
            b = clustered_sample(rng, 0.5, groups, 10, 0.3)
            result = paired_comparison(a, b, clusters=labels)
            ours += result.p_value < 0.05
            plain += mcnemar_exact(result.discordant_a_only, result.discordant_b_only) < 0.05
        out[groups] = ours / reps
        print(f"   {groups:>2} clusters: compare ({result.test}) {ours / reps:.3f}   "
              f"plain exact McNemar {plain / reps:.3f}")
    for label, (sizes, icc) in UNEQUAL.items():
        rng = np.random.default_rng(derive_seed("type1-unequal", label))
        rejected = 0
        for _ in range(reps):
            a, labels = unequal_sample(rng, 0.5, sizes, icc)
            b, _ = unequal_sample(rng, 0.5, sizes, icc)
            named = [c if c is not None else f"single{i}" for i, c in enumerate(labels)]
            rejected += paired_comparison(a, b, clusters=named).p_value < 0.05
        print(f"   {label}: compare {rejected / reps:.3f}")
    return out


# ------------------------------------------------------------------------------- 5. MDD


def mdd_power(reps: int) -> None:
    print(f"\n5. Power of exact McNemar at the stated MDD ({reps * 2} replicates)")
    for n, p in ((54, 0.667), (200, 0.5)):
        psi = 2 * p * (1 - p)
        mdd = mdd_mcnemar(n, psi)
        assert mdd is not None
        rng = np.random.default_rng(derive_seed("mdd", str(n)))
        cells = rng.multinomial(n, [(psi + mdd) / 2, (psi - mdd) / 2, 1 - psi], size=reps * 2)
        power = np.mean([mcnemar_exact(int(c[1]), int(c[0])) < 0.05 for c in cells])
        print(f"   n = {n}, discordance {psi:.3f}: MDD {mdd:.4f}, simulated power {power:.3f} "
              "(stated 0.80)")


def main() -> int:
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000
    start = time.perf_counter()
    iid = iid_tables()
    clusters = cluster_tables(reps)
    unequal = unequal_tables(reps)
    strata_tables(reps)
    type1 = compare_type1(reps * 4)
    mdd_power(reps)
    print("\nTargets")
    checks = [
        (f"minimum coverage, independent tasks, n >= 54 (auto): {iid['auto']:.3f}",
         iid["auto"] >= TARGET),
        (f"minimum coverage, 10 clusters, ICC 0.3, 0.2 <= p <= 0.8 (the mirror image of "
         f"p <= 0.8; every method here is symmetric in p): {clusters[10]:.3f}",
         clusters[10] >= TARGET),
        (f"compare type-I error, 10 clusters: {type1[10]:.3f} (<= {TYPE1_TARGET})",
         type1[10] <= TYPE1_TARGET),
    ]
    for text, ok in checks:
        print(f"   {'met    ' if ok else 'NOT MET'} {text}")
    print(f"   (bootstrap, for contrast: minimum coverage n >= 54: {iid['bootstrap']:.3f})")
    print(f"   (unequal cluster sizes, p = 0.3-0.7: minimum coverage {unequal:.3f})")
    print(f"\nwall time {time.perf_counter() - start:.0f} s")
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
