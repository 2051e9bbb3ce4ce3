"""Statistics behind every number sealbench publishes.

A success rate is only published together with its sample size ``n`` and a 95% interval, so
this module is the single place where those intervals, standard errors and paired comparisons
are computed. The design goals, in order:

1. **Correct.** Distribution functions come from :mod:`scipy.stats`; nothing here hand-rolls a
   quantile function. Interval formulas are the textbook ones (Wilson 1927, Clopper & Pearson
   1934, Efron's percentile bootstrap) and the tests pin them to reference values and to
   statsmodels.
2. **Reproducible.** Every bootstrap draws from ``np.random.default_rng(seed)`` (PCG64) in a
   fixed order, so the same inputs and seed give bit-identical output on a given numpy version.
   Seeds are derived from stable identities with :func:`derive_seed` rather than picked by hand.
   Reductions use numpy's own summation (never BLAS ``dot``/``matmul``), because BLAS kernels
   are chosen per CPU (e.g. via ``OPENBLAS_CORETYPE``) and may sum in a different order.
3. **Honest.** The published interval must really cover 95%, measured by
   ``bench/bench_coverage.py``: Wilson for 0/1 scores of independent tasks (Wilson 1927), a
   cluster-robust t interval when tasks share clusters (Cameron & Miller 2015), never a
   stratified interval unless the strata were fixed by design, and never an interval narrower
   because labels were added. A zero-width bootstrap is never published. Paired comparisons
   use Newcombe's interval and the exact McNemar test, or a cluster-robust t test on clustered
   tasks. docs/statistics.md gives every choice and its references.
4. **Fast and memory-safe.** Resamples are vectorized and drawn in chunks that keep the working
   set to a few MB even at n = 100,000. Where the bootstrap distribution of a resampled sum has
   an exact closed form (0/1 outcomes: Binomial; few distinct values: Multinomial counts), the
   counts are drawn directly from that distribution. This is *the same* percentile bootstrap
   (identical distribution of every resampled mean), just without materializing n indices per
   resample.

All public functions return plain Python ``float``/``int`` values and round nothing; callers
round for display.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import math
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

__all__ = [
    "BOOTSTRAP_DRAWS",
    "METHODS",
    "ClusterT",
    "Headline",
    "Interval",
    "PairedComparison",
    "Stratified",
    "bootstrap_interval",
    "bootstrap_means",
    "clopper_pearson",
    "cluster_labels",
    "cluster_t_interval",
    "cluster_wilson_interval",
    "clustered_stderr",
    "cr1_stderr",
    "cr3_stderr",
    "derive_seed",
    "design_effect",
    "headline",
    "holm",
    "mcnemar_exact",
    "mcnemar_power",
    "mdd_cluster_t",
    "mdd_mcnemar",
    "mdd_mcnemar_against",
    "newcombe_paired",
    "normal_quantile",
    "paired_comparison",
    "pass_at_k",
    "pass_hat_k",
    "stderr",
    "stratified_interval",
    "t_quantile",
    "wilson",
]

Interval = tuple[float, float]
"""A closed interval ``(low, high)`` of plain floats."""

Scores = Sequence[float] | npt.NDArray[Any]
"""Per-task scores as a sequence or a 1-D numpy array."""

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]


def _scipy_stats() -> Any:
    """scipy.stats, imported on first use: it costs about half a second, and commands that
    print no figure (`--help`, `runs`, `verify`, every solver start-up) should not pay it."""
    from scipy import stats  # type: ignore[import-untyped,unused-ignore]

    return stats


def prefetch_scipy_stats() -> threading.Thread | None:
    """Start importing scipy.stats on a background thread, and return it (None when it is
    already imported).

    Why: a run's report needs it (the headline's quantile, the McNemar power behind the
    minimum detectable difference), and its import is about half a second of CPU — most of a
    small protocol's run after start-up (bench/bench_seed.py). Started when the attempts
    start, it overlaps with them: they spend their time waiting for sandboxed processes. A
    failed import here changes nothing: the report imports it again and says why.
    """
    if "scipy.stats" in sys.modules:
        return None
    thread = threading.Thread(target=_import_quietly, name="sealbench-prefetch-scipy-stats",
                              daemon=True)
    thread.start()
    return thread


def _import_quietly() -> None:
    with contextlib.suppress(Exception):
        _scipy_stats()


METHODS: Final[tuple[str, ...]] = ("auto", "wilson", "clopper-pearson", "bootstrap")
"""Interval methods :func:`headline` accepts."""

# Working-set budget for one chunk of index resamples. One resampled element costs 8 bytes of
# int64 index plus 8 bytes of gathered float64 score; 4 MiB keeps a chunk cache-friendly (it
# measured fastest) and bounds memory at any n, so n = 100,000 stays far below ~200 MB.
_CHUNK_BYTES: Final[int] = 4 * 1024 * 1024
_BYTES_PER_DRAW: Final[int] = 16

# Use Multinomial counts instead of index draws when a group has few distinct values,
# K <= m / 40. Multinomial costs ~K conditional binomial draws per resample (~0.1 us each),
# index resampling ~m bounded-integer draws (~3 ns each); the measured crossover is near m / 35.
_MULTINOMIAL_RATIO: Final[int] = 40

# Percentile intervals are computed from a finite sum in a different order than the point
# estimate; an endpoint can land a few ulps on the wrong side of the mean. Only excursions this
# small are treated as rounding and repaired when publishing; anything larger is left visible.
_ROUNDOFF: Final[float] = 1e-9


# ---------------------------------------------------------------------------------------------
# Binomial intervals
# ---------------------------------------------------------------------------------------------


def _check_binomial(successes: int, n: int, confidence: float) -> None:
    """Reject inputs for which a binomial interval is meaningless, rather than return junk."""
    if isinstance(successes, bool) or isinstance(n, bool):
        raise TypeError("successes and n must be int, not bool")
    if int(successes) != successes or int(n) != n:
        raise TypeError(f"successes and n must be integers, got {successes!r}, {n!r}")
    if n <= 0:
        raise ValueError(f"n must be positive, got {n}")
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be in [0, n={n}], got {successes}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


def wilson(successes: int, n: int, confidence: float = 0.95) -> Interval:
    """Wilson score interval for a binomial proportion.

    Why Wilson: unlike the Wald interval it never has zero width at 0/n or n/n and keeps close
    to nominal coverage for small n, which is exactly the regime of a 40-task benchmark. It is
    the fallback whenever a bootstrap would be degenerate.

    The bounds are ``(p + z²/2n ± z·sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)`` with
    ``z = norm.ppf(1 - alpha/2)`` from scipy; they are pinned to exactly 0 / 1 at the boundaries so
    rounding can never produce a bound outside [0, 1].
    """
    _check_binomial(successes, n, confidence)
    low, high = _wilson_real(successes / n, n, normal_quantile(0.5 + confidence / 2.0))
    return (0.0 if successes == 0 else float(low), 1.0 if successes == n else float(high))


def clopper_pearson(successes: int, n: int, confidence: float = 0.95) -> Interval:
    """Exact (Clopper-Pearson) binomial interval from beta quantiles.

    Why: it guarantees at least nominal coverage for every true rate, so it is the conservative
    choice when a reviewer wants "no approximation anywhere". Bounds are
    ``Beta(alpha/2; k, n-k+1)`` and ``Beta(1-alpha/2; k+1, n-k)`` via ``scipy.stats.beta.ppf``,
    with 0 / 1 at the boundaries.
    """
    _check_binomial(successes, n, confidence)
    alpha = 1.0 - confidence
    beta = _scipy_stats().beta
    low = 0.0 if successes == 0 else float(beta.ppf(alpha / 2.0, successes, n - successes + 1))
    high = (
        1.0
        if successes == n
        else float(beta.ppf(1.0 - alpha / 2.0, successes + 1, n - successes))
    )
    return (low, high)


# ---------------------------------------------------------------------------------------------
# Seeds
# ---------------------------------------------------------------------------------------------


def derive_seed(*parts: str) -> int:
    """Derive a 64-bit seed from stable identifiers, e.g. ``derive_seed(identity, run_id)``.

    Why: a published interval must be reproducible by anyone holding the run record, and a seed
    chosen by hand invites re-rolling until the interval looks nice. Hashing the identity makes
    the seed a function of *what* was measured. The parts are joined by ``"\\x00"`` (which cannot
    occur in ordinary identifiers), hashed with SHA-256, and the first 8 bytes read big-endian.
    """
    for part in parts:
        if not isinstance(part, str):
            raise TypeError(f"derive_seed parts must be str, got {type(part).__name__}")
    digest = hashlib.sha256("\x00".join(parts).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big")


# ---------------------------------------------------------------------------------------------
# Input handling
# ---------------------------------------------------------------------------------------------


def _as_scores(scores: Scores, *, unit: bool, name: str = "scores") -> FloatArray:
    """Return ``scores`` as a 1-D float64 array, refusing NaN/inf (and values outside [0, 1]
    when ``unit``) because a single bad score would silently poison every statistic."""
    arr = np.asarray(scores, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty: no interval exists for n == 0")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or infinite values")
    if unit and (np.any(arr < 0.0) or np.any(arr > 1.0)):
        raise ValueError(f"{name} must lie in [0, 1] (per-task success rates)")
    return arr


def _codes(labels: Sequence[str], n: int, name: str) -> tuple[int, IntArray]:
    """Map labels to dense integer codes in sorted-label order.

    Why sorted order: the group order decides which random draws each group receives, so it must
    depend only on the label values, never on incidental input order of first appearance.
    """
    values = [str(label) for label in labels]
    if len(values) != n:
        raise ValueError(f"{name} must be a flat sequence of length {n}, got {len(values)}")
    # Python's own string order, not numpy's: a numpy string array drops trailing NULs and
    # would merge labels that differ only there.
    index = {label: code for code, label in enumerate(sorted(set(values)))}
    return len(index), np.fromiter((index[v] for v in values), dtype=np.intp, count=n)


def _check_resamples(resamples: int) -> None:
    """A bootstrap with no resamples has no percentiles; fail loudly instead."""
    if isinstance(resamples, bool) or int(resamples) != resamples or resamples < 1:
        raise ValueError(f"resamples must be a positive integer, got {resamples!r}")


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


# ---------------------------------------------------------------------------------------------
# Bootstrap engine
# ---------------------------------------------------------------------------------------------


def _resampled_sums(values: FloatArray, rng: np.random.Generator, resamples: int) -> FloatArray:
    """Sums of ``resamples`` bootstrap resamples (size m, with replacement) of ``values``.

    Four exact strategies, chosen from the data alone so the choice is itself reproducible:

    * constant values: every resample has the same sum; no draws are spent.
    * 0/1 values with k ones: the resampled count of ones is exactly Binomial(m, k/m).
    * few distinct values (K <= m/40): the resampled counts per value are exactly
      Multinomial(m, freq); the sum is ``Σ count·value``.
    * otherwise: draw m indices per resample (chunked) and sum the gathered values.

    All four give draws from the identical bootstrap distribution; the first three only avoid
    materializing m indices per resample, which is what makes 0/1 benchmarks cheap at any n.
    """
    m = int(values.size)
    uniq, counts = np.unique(values, return_counts=True)
    if uniq.size == 1:
        return np.full(resamples, float(uniq[0]) * m, dtype=np.float64)
    if uniq.size == 2 and uniq[0] == 0.0 and uniq[1] == 1.0:
        ones = int(counts[1])
        drawn = rng.binomial(m, ones / m, size=resamples)
        return drawn.astype(np.float64)
    out = np.empty(resamples, dtype=np.float64)
    if uniq.size * _MULTINOMIAL_RATIO <= m:
        pvals = counts / m
        rows = max(1, _CHUNK_BYTES // (_BYTES_PER_DRAW * int(uniq.size)))
        for start in range(0, resamples, rows):
            stop = min(resamples, start + rows)
            drawn_counts = rng.multinomial(m, pvals, size=stop - start)
            out[start:stop] = np.sum(drawn_counts * uniq, axis=1)
        return out
    rows = max(1, _CHUNK_BYTES // (_BYTES_PER_DRAW * m))
    for start in range(0, resamples, rows):
        stop = min(resamples, start + rows)
        idx = rng.integers(0, m, size=(stop - start, m))
        out[start:stop] = np.sum(np.take(values, idx), axis=1)
    return out


def _resampled_cluster_means(
    values: FloatArray, cluster_codes: IntArray, rng: np.random.Generator, resamples: int
) -> FloatArray:
    """Means over all tasks of G clusters drawn with replacement from the G clusters present.

    Why a ratio: clusters differ in size, so the resampled mean is (sum of drawn cluster sums) /
    (sum of drawn cluster sizes), exactly the mean over every task the drawn clusters contain.
    Only the per-cluster sums and sizes are needed, so the cost is O(G) per resample.
    """
    _, codes = np.unique(cluster_codes, return_inverse=True)
    codes = codes.reshape(-1)
    sums = np.bincount(codes, weights=values)
    sizes = np.bincount(codes).astype(np.float64)
    g = int(sums.size)
    if g == 1:
        return np.full(resamples, float(sums[0] / sizes[0]), dtype=np.float64)
    out = np.empty(resamples, dtype=np.float64)
    rows = max(1, _CHUNK_BYTES // (2 * _BYTES_PER_DRAW * g))
    for start in range(0, resamples, rows):
        stop = min(resamples, start + rows)
        idx = rng.integers(0, g, size=(stop - start, g))
        out[start:stop] = np.sum(np.take(sums, idx), axis=1) / np.sum(np.take(sizes, idx), axis=1)
    return out


def bootstrap_means(
    scores: Sequence[float] | npt.NDArray[Any],
    *,
    seed: int,
    resamples: int = 10_000,
    strata: Sequence[str] | None = None,
    clusters: Sequence[str] | None = None,
) -> FloatArray:
    """Bootstrap distribution of the mean score (length ``resamples``, float64).

    Why it exists: its percentile interval is published when a protocol chooses
    ``publish.ci_method: bootstrap``, and the raw distribution is what reproducibility checks
    compare bit for bit.

    * plain: resample n tasks with replacement.
    * ``strata``: resample within each stratum, keeping each stratum's size, so the design's
      composition (e.g. difficulty mix) is not itself resampled; the overall mean is the
      stratum means weighted by stratum size.
    * ``clusters``: resample whole clusters (e.g. repositories) with replacement; each
      resampled mean is over all tasks of the drawn clusters. Use this when tasks in a cluster
      share failure causes, or the interval is too narrow.
    * both: clusters are resampled within each stratum. A cluster label that appears in several
      strata is treated as a separate cluster in each (correlation across strata is not
      modelled).

    Draws come from ``np.random.default_rng(seed)`` in a fixed order (strata and clusters in
    sorted-label order, chunks in sequence), so equal inputs give bit-identical output on a given
    numpy version. Resamples are drawn in chunks of a few MB, so memory stays bounded at any n.
    """
    arr = _as_scores(scores, unit=False)
    _check_resamples(resamples)
    n = int(arr.size)
    rng = np.random.default_rng(seed)
    if strata is None:
        groups: list[IntArray] = [np.arange(n, dtype=np.intp)]
    else:
        n_strata, strata_codes = _codes(strata, n, "strata")
        order = np.argsort(strata_codes, kind="stable")
        bounds = np.searchsorted(strata_codes[order], np.arange(n_strata + 1))
        groups = [order[bounds[h] : bounds[h + 1]] for h in range(n_strata)]
    total = np.zeros(resamples, dtype=np.float64)
    if clusters is None:
        for members in groups:
            total += _resampled_sums(arr[members], rng, resamples)
    else:
        _, cluster_codes = _codes(clusters, n, "clusters")
        for members in groups:
            stratum_mean = _resampled_cluster_means(
                arr[members], cluster_codes[members], rng, resamples
            )
            # n_h * mean_h summed, then / n: weights by stratum size, and because every step
            # rounds monotonically a mean of scores in [0, 1] can never leave [0, 1].
            total += members.size * stratum_mean
    total /= n
    return total


def _percentile_interval(means: FloatArray, confidence: float) -> Interval:
    """Percentile interval: (alpha/2, 1-alpha/2) quantiles, numpy's default linear interpolation."""
    alpha = 1.0 - confidence
    low, high = np.quantile(means, [alpha / 2.0, 1.0 - alpha / 2.0])
    return (float(low), float(high))


def bootstrap_interval(
    scores: Sequence[float] | npt.NDArray[Any],
    *,
    seed: int,
    resamples: int = 10_000,
    strata: Sequence[str] | None = None,
    clusters: Sequence[str] | None = None,
    confidence: float = 0.95,
) -> Interval:
    """Percentile bootstrap interval of the mean (see :func:`bootstrap_means` for the options).

    Why percentile: it needs no normality assumption and respects the [0, 1] range of a success
    rate; it is the seed article's choice, kept as ``publish.ci_method: bootstrap``. It
    under-covers small samples and few clusters (docs/statistics.md), and it may have zero width
    on constant data: :func:`headline` says the first and never publishes the second. pass@k
    and pass^k intervals use it over tasks (or whole clusters).
    """
    _check_confidence(confidence)
    means = bootstrap_means(
        scores, seed=seed, resamples=resamples, strata=strata, clusters=clusters
    )
    return _percentile_interval(means, confidence)


# ---------------------------------------------------------------------------------------------
# Standard errors and cluster-robust intervals
# ---------------------------------------------------------------------------------------------


@functools.cache
def normal_quantile(q: float) -> float:
    """Standard normal quantile (scipy), cached: the headline needs the same few values often."""
    return float(_scipy_stats().norm.ppf(q))


@functools.cache
def t_quantile(q: float, df: int) -> float:
    """Student t quantile with ``df`` degrees of freedom (scipy), cached."""
    return float(_scipy_stats().t.ppf(q, df))


def stderr(scores: Sequence[float] | npt.NDArray[Any]) -> float:
    """CLT standard error of the mean, ``std(ddof=1) / sqrt(n)``; 0.0 when n < 2.

    Why: it is the independent-tasks reference that the cluster-robust standard error is
    never allowed to undercut, and an input to power calculations. n < 2 has no sample
    variance, so 0.0 (not NaN) keeps reports printable; the interval carries the uncertainty.
    """
    arr = _as_scores(scores, unit=False)
    if arr.size < 2:
        return 0.0
    return float(np.std(arr, ddof=1) / math.sqrt(arr.size))


def _cluster_residual_sums(arr: FloatArray, clusters: Sequence[str]) -> tuple[int, FloatArray]:
    """Number of clusters G and the per-cluster sums of residuals around the overall mean."""
    g, codes = _codes(clusters, int(arr.size), "clusters")
    sums: FloatArray = np.bincount(codes, weights=arr - np.mean(arr), minlength=g).astype(
        np.float64)
    return g, sums


def clustered_stderr(scores: Sequence[float] | npt.NDArray[Any], clusters: Sequence[str]) -> float:
    """CR0 cluster-robust standard error of the mean (Miller 2024, arXiv:2411.00640, eq. 4).

    ``SE = sqrt(Σ_c (Σ_{i∈c} (s_i - s̄))²) / n``, without a small-sample correction; with every
    task in its own cluster it reduces to the ``ddof=0`` CLT standard error. The published
    interval uses :func:`cr1_stderr`, which corrects for few clusters.
    """
    arr = _as_scores(scores, unit=False)
    _, sums = _cluster_residual_sums(arr, clusters)
    return float(math.sqrt(float(np.sum(sums * sums))) / arr.size)


def cr1_stderr(scores: Sequence[float] | npt.NDArray[Any], clusters: Sequence[str]) -> float:
    """CR1 cluster-robust standard error of the mean: CR0 × sqrt(G / (G − 1)).

    Why CR1: CR0 is biased down when clusters are few (Cameron & Miller 2015, "A Practitioner's
    Guide to Cluster-Robust Inference", J. Human Resources 50(2)); CR1 is the Stata / statsmodels
    default (for a mean, the regression factor (N−1)/(N−K) is 1). Needs G >= 2.
    """
    arr = _as_scores(scores, unit=False)
    g, sums = _cluster_residual_sums(arr, clusters)
    if g < 2:
        raise ValueError("a cluster-robust standard error needs at least two clusters")
    return float(math.sqrt(g / (g - 1) * float(np.sum(sums * sums))) / arr.size)


def cr3_stderr(scores: Sequence[float] | npt.NDArray[Any], clusters: Sequence[str]) -> float:
    """Jackknife-over-clusters (CR3) standard error of the mean: ``sqrt((G−1)/G · Σ_g
    (m_(−g) − m̄_(·))²)``, where ``m_(−g)`` is the mean of all tasks outside cluster g.

    Why: CR1 is biased down when cluster sizes are unequal — one large cluster makes up most
    of the mean, so its own residual looks small. With one cluster of 30 and 20 single tasks
    (ICC 0.5) a CR1 interval covered 0.69; the jackknife, which drops each cluster in turn,
    covered 0.95 (docs/statistics.md; Cameron & Miller 2015, §VI.B; MacKinnon, Nielsen & Webb
    2023, "Cluster-robust inference: a guide to empirical practice", J. Econometrics 232).
    Needs G >= 2.
    """
    arr = _as_scores(scores, unit=False)
    g, codes = _codes(clusters, int(arr.size), "clusters")
    if g < 2:
        raise ValueError("a cluster-robust standard error needs at least two clusters")
    sums = np.bincount(codes, weights=arr, minlength=g)
    sizes = np.bincount(codes, minlength=g).astype(np.float64)
    left_out = (float(np.sum(sums)) - sums) / (float(arr.size) - sizes)
    spread = left_out - float(np.mean(left_out))
    return float(math.sqrt((g - 1) / g * float(np.sum(spread * spread))))


def cluster_labels(labels: Sequence[str | None],
                   task_ids: Sequence[str] | None = None) -> list[str] | None:
    """Cluster labels for statistics, or None when no cluster holds two or more tasks.

    Why: a task without a `cluster` is independent of every other task, i.e. a cluster of its
    own; a design whose clusters are all singletons is simply independent tasks. Singletons are
    named after their task id (or position) behind a NUL, which no label in a protocol can
    contain, so they never merge with a user's cluster and do not depend on task order.
    """
    ids = [str(t) for t in task_ids] if task_ids is not None else [str(i) for i in
                                                                     range(len(labels))]
    out = [str(label) if label is not None else f"\x00task:{tid}"
           for label, tid in zip(labels, ids, strict=True)]
    return out if len(set(out)) < len(out) else None


@dataclass(frozen=True)
class ClusterT:
    """A cluster-robust t interval: ``mean ± t_{G−1} · max(SE_iid, SE_CR1, SE_CR3)``, clipped."""

    interval: Interval
    se: float
    se_iid: float
    se_cr1: float
    se_cr3: float
    clusters: int
    df: int
    quantile: float
    effective_n: float | None = None


def cluster_t_interval(
    scores: Sequence[float] | npt.NDArray[Any],
    clusters: Sequence[str],
    *,
    confidence: float = 0.95,
    bounds: Interval = (0.0, 1.0),
) -> ClusterT:
    """Cluster-robust interval for a mean, never splitting a cluster.

    Why this form (Cameron & Miller 2015): a cluster-robust SE with a t quantile on G − 1
    degrees of freedom keeps close to nominal coverage down to about ten clusters, where a
    cluster bootstrap covers 0.87–0.93 (measured by ``bench/bench_coverage.py``). The SE is the
    largest of three: the independent-tasks SE, so that declaring clusters can never make a
    figure look *more* certain (a negative intra-cluster correlation would shrink CR1); CR1; and
    the jackknife CR3, which CR1 falls far below when cluster sizes are unequal. The interval
    is clipped to ``bounds`` (the range of the statistic).
    """
    _check_confidence(confidence)
    arr = _as_scores(scores, unit=False)
    se_iid = stderr(arr)
    se_cr1 = cr1_stderr(arr, clusters)
    se_cr3 = cr3_stderr(arr, clusters)
    g = len(set(clusters))
    df = g - 1
    q = t_quantile(0.5 + confidence / 2.0, df)
    se = max(se_iid, se_cr1, se_cr3)
    mean = float(np.mean(arr))
    low = max(bounds[0], mean - q * se)
    high = min(bounds[1], mean + q * se)
    return ClusterT((float(low), float(high)), se, se_iid, se_cr1, se_cr3, g, df, q)


def cluster_wilson_interval(
    scores: Sequence[float] | npt.NDArray[Any],
    clusters: Sequence[str],
    *,
    confidence: float = 0.95,
) -> ClusterT:
    """Cluster-robust interval for a success rate in Wilson's score form (the headline's).

    The same standard error and quantile as :func:`cluster_t_interval` — SE = max(iid, CR1,
    CR3 SE), t on G − 1 degrees of freedom — but put into Wilson's formula through the
    effective sample size ``n_eff = p̂(1 − p̂) / SE²`` (at most n), as survey statistics does
    for clustered proportions (Korn & Graubard 1998, "Confidence intervals for proportions with
    small expected number of positive counts estimated from survey data", Survey Methodology
    24:193). Why not the Wald form: it is symmetric and collapses when few clusters hold the
    passes; measured at 10 clusters of 10, ICC 0.3, it covered 0.83 at p = 0.1 and 0.9, the
    score form 0.92 (``bench/bench_coverage.py``). For fractional scores the same SE makes
    ``n_eff`` no larger than it should be. A rate of exactly 0 or 1 gives Wilson on n.
    """
    ct = cluster_t_interval(scores, clusters, confidence=confidence)
    arr = _as_scores(scores, unit=True)
    n = int(arr.size)
    p = float(np.mean(arr))
    n_eff = float(n) if ct.se <= 0.0 else min(float(n), p * (1.0 - p) / (ct.se * ct.se))
    if n_eff <= 0.0:  # p is 0 or 1: nothing varies, the count alone speaks
        n_eff = float(n)
    low, high = _wilson_real(p, n_eff, ct.quantile)
    bounds = (0.0 if p == 0.0 else low, 1.0 if p == 1.0 else high)
    return ClusterT(bounds, ct.se, ct.se_iid, ct.se_cr1, ct.se_cr3, ct.clusters, ct.df,
                    ct.quantile, n_eff)


def _hull(a: Interval, b: Interval) -> Interval:
    return (min(a[0], b[0]), max(a[1], b[1]))


def _wilson_real(p: float, n: float, z: float) -> Interval:
    """Wilson bounds for a proportion ``p`` and a (possibly fractional) sample size ``n``."""
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2.0 * n)) / denom
    half = (z / denom) * math.sqrt(max(0.0, p * (1.0 - p) / n + z2 / (4.0 * n * n)))
    return (max(0.0, centre - half), min(1.0, centre + half))


# ---------------------------------------------------------------------------------------------
# Stratified estimation (only for strata fixed by design)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stratified:
    """A stratified interval conditional on the stratum sizes, or why none could be formed."""

    interval: Interval | None
    method: str
    se: float
    df: int | None
    quantile: float
    effective_n: float | None
    why_not: str | None


def _stratum_groups(strata: Sequence[str], n: int) -> list[IntArray]:
    n_strata, codes = _codes(strata, n, "strata")
    return [np.flatnonzero(codes == h) for h in range(n_strata)]


def _nested(groups: list[IntArray], clusters: Sequence[str]) -> bool:
    """True when every cluster lies inside one stratum (a stratified cluster design)."""
    owner: dict[str, int] = {}
    for h, members in enumerate(groups):
        for i in members:
            if owner.setdefault(clusters[int(i)], h) != h:
                return False
    return True


def _stratum_variance(part: FloatArray, binary: bool) -> float:
    """Variance of one stratum's mean with n_h − 1 in the denominator.

    For 0/1 outcomes the proportion is shrunk to ``(x + 1/2) / (n_h + 1)`` first, so that a
    stratum whose tasks all passed (or all failed) still contributes its uncertainty: its
    sample variance would be 0, which is how a stratified interval over-claims.
    """
    m = int(part.size)
    if binary:
        shrunk = (float(np.sum(part)) + 0.5) / (m + 1)
        return shrunk * (1.0 - shrunk) / (m - 1)
    return float(np.var(part, ddof=1)) / m


def stratified_interval(
    scores: Sequence[float] | npt.NDArray[Any],
    strata: Sequence[str],
    *,
    clusters: Sequence[str] | None = None,
    confidence: float = 0.95,
) -> Stratified:
    """Interval of the stratified mean ``Σ_h W_h m_h`` (``W_h = n_h / n``), conditional on the
    stratum sizes — valid only when the protocol fixed them by design (``publish.strata: fixed``).

    Variance ``V = Σ_h W_h² v_h`` with ``v_h = s_h² / n_h`` (``s_h²`` with n_h − 1; for 0/1
    outcomes from the shrunk proportion of :func:`_stratum_variance`), or, with clusters nested
    in strata, the largest of that and the CR1 and CR3 variances of each stratum's mean (a
    stratum whose clusters agree must not contribute nothing).

    * 0/1 scores, no clusters: Wilson with the effective sample size ``p(1 − p) / V`` (the
      design-effect form of Wilson used for survey proportions, Korn & Graubard 1998), which,
      unlike a Wald interval, stays inside [0, 1] and does not collapse near the edges;
    * otherwise: ``mean ± t · sqrt(V)``, clipped, with Satterthwaite's degrees of freedom
      ``V² / Σ_h (W_h² v_h)² / (G_h − 1)`` — when one stratum carries most of the variance,
      its own few degrees of freedom rule, not the total.

    Returns ``interval=None`` with ``why_not`` when no stratified interval is meaningful (a
    stratum with fewer than 2 tasks or clusters, clusters crossing strata, zero variance).
    """
    _check_confidence(confidence)
    arr = _as_scores(scores, unit=True)
    n = int(arr.size)
    groups = _stratum_groups(strata, n)
    z = normal_quantile(0.5 + confidence / 2.0)
    binary = bool(np.all((arr == 0.0) | (arr == 1.0)))

    def refuse(why: str) -> Stratified:
        return Stratified(None, "stratified", 0.0, None, z, None, why)

    if clusters is not None and not _nested(groups, clusters):
        return refuse("clusters cross strata, so the strata cannot be treated as fixed")
    parts: list[tuple[float, int]] = []  # (W_h² v_h, degrees of freedom) per stratum
    for members in groups:
        part = arr[members]
        weight = members.size / n
        if members.size < 2:
            return refuse("a stratum has fewer than 2 tasks")
        v_h = _stratum_variance(part, binary)
        df_h = int(members.size) - 1
        if clusters is not None:
            labels = [clusters[int(i)] for i in members]
            g_h = len(set(labels))
            if g_h < 2:
                return refuse("a stratum has fewer than 2 clusters")
            v_h = max(v_h, cr1_stderr(part, labels) ** 2, cr3_stderr(part, labels) ** 2)
            df_h = g_h - 1
        parts.append((weight * weight * v_h, df_h))
    mean = float(np.mean(arr))
    if mean in (0.0, 1.0) or (all(np.ptp(arr[m]) == 0.0 for m in groups) and not binary):
        return refuse("every stratum's scores are constant: no variance to estimate")
    variance = sum(v for v, _ in parts)
    if variance <= 0.0:
        return refuse("the stratified variance is 0")
    se = math.sqrt(variance)
    df = max(1, math.floor(variance * variance / sum(v * v / d for v, d in parts)))
    if clusters is None and binary:
        n_eff = mean * (1.0 - mean) / variance
        return Stratified(_wilson_real(mean, n_eff, z), "stratified-wilson", se, None, z,
                          n_eff, None)
    q = t_quantile(0.5 + confidence / 2.0, df)
    interval = (max(0.0, mean - q * se), min(1.0, mean + q * se))
    return Stratified(interval, "stratified-t", se, df, q, None, None)


# ---------------------------------------------------------------------------------------------
# Power: the smallest difference `compare` can detect
# ---------------------------------------------------------------------------------------------


def mcnemar_power(n: int, discordance: float, diff: float, *, alpha: float = 0.05) -> float:
    """Exact power of the two-sided exact McNemar test at level ``alpha`` (rejecting when
    p < alpha, as `compare` does) on n paired tasks.

    ``discordance`` is the chance that a task is passed by exactly one agent, ``diff`` the true
    difference of pass rates (|diff| <= discordance). The number of discordant tasks D is
    Binomial(n, discordance); given D, the tasks B wins are Binomial(D, (1 + diff/disc) / 2) and
    the test rejects in both tails of Binomial(D, 1/2). Summed exactly over D.
    """
    if not 0.0 <= discordance <= 1.0 or abs(diff) > discordance + 1e-12:
        raise ValueError("need 0 <= |diff| <= discordance <= 1")
    if discordance == 0.0:
        return 0.0
    d = np.arange(n + 1)
    weight = _scipy_stats().binom.pmf(d, n, discordance)
    keep = weight > 1e-15
    d, weight = d[keep], weight[keep]
    # the largest c with 2·P(X <= c) < alpha under Binomial(D, 1/2), or -1
    c = _scipy_stats().binom.ppf(alpha / 2.0, d, 0.5).astype(np.int64)
    c = np.where(2.0 * _scipy_stats().binom.cdf(c, d, 0.5) < alpha, c, c - 1)
    q = min(1.0, max(0.0, 0.5 * (1.0 + diff / discordance)))
    binom = _scipy_stats().binom
    reject = np.where(c >= 0, binom.cdf(c, d, q) + binom.sf(d - c - 1, d, q), 0.0)
    return float(np.sum(weight * reject))


def mdd_mcnemar(n: int, discordance: float, *, power: float = 0.8,
                alpha: float = 0.05) -> float | None:
    """Smallest true difference the exact McNemar test detects with ``power`` on n tasks with
    the given discordance; None when even ``diff = discordance`` does not reach that power.

    Why exact: a z-test formula overstated the power of the test `compare` really runs (its
    nominal 80% was 0.69–0.89). Bisection on :func:`mcnemar_power`, monotone in diff.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return _smallest_reaching(lambda d: mcnemar_power(n, discordance, d, alpha=alpha),
                              discordance, power)


def _smallest_reaching(power_at: Callable[[float], float], room: float,
                       power: float) -> float | None:
    """The smallest d in (0, room] with ``power_at(d) >= power`` (power rises with d), by
    bisection; None when even d = room falls short."""
    if room <= 0.0 or power_at(room) < power:
        return None
    low, high = 0.0, room
    for _ in range(50):
        mid = (low + high) / 2.0
        low, high = (low, mid) if power_at(mid) >= power else (mid, high)
    return high


def mdd_mcnemar_against(n: int, rate: float, *, power: float = 0.8,
                        alpha: float = 0.05) -> float | None:
    """Smallest difference the exact McNemar test detects with ``power`` between an agent
    passing at ``rate`` and an independent other agent passing at ``rate ± d`` — the larger of
    the better and the worse direction — or None when one direction can never reach it.

    Why not :func:`mdd_mcnemar` at a fixed discordance: the discordance itself moves with the
    difference, ``2p(1 − p) + d(1 − 2p)``; holding it at ``2p(1 − p)`` overstated the power far
    from p = 0.5 (a stated 80% was 0.48 at p = 0.1, n = 50).
    """
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"rate must be in [0, 1], got {rate}")

    def smallest(sign: int) -> float | None:
        def power_at(d: float) -> float:
            return mcnemar_power(n, 2 * rate * (1 - rate) + sign * d * (1 - 2 * rate), d,
                                 alpha=alpha)

        return _smallest_reaching(power_at, 1.0 - rate if sign > 0 else rate, power)

    better, worse = smallest(+1), smallest(-1)
    return None if better is None or worse is None else max(better, worse)


def design_effect(scores: Sequence[float] | npt.NDArray[Any], clusters: Sequence[str]) -> float:
    """How much clustering inflates the variance of a mean: ``(max(CR1, CR3) / iid SE)²``, at
    least 1 (the same robust SE the intervals use); 1 when the scores do not vary."""
    iid = stderr(scores)
    if iid <= 0.0:
        return 1.0
    robust = max(cr1_stderr(scores, clusters), cr3_stderr(scores, clusters))
    return max(1.0, (robust / iid) ** 2)


def mdd_cluster_t(variance_of_diff: float, n: int, clusters: int, *, design_effect: float = 1.0,
                  power: float = 0.8, alpha: float = 0.05) -> float | None:
    """Smallest difference a cluster-robust paired t test (G − 1 df) detects with ``power``:
    ``(t_{1−α/2} + t_{power}) · sqrt(Var(d) · deff / n)`` — the usual normal-approximation
    power formula with t quantiles, inflated by the design effect of clustering. None when
    that exceeds 1: no difference between two success rates is large enough."""
    if variance_of_diff < 0 or not math.isfinite(variance_of_diff):
        raise ValueError("variance of the paired difference must be finite and >= 0")
    if n < 1 or clusters < 2:
        raise ValueError("need n >= 1 and at least two clusters")
    df = clusters - 1
    factor = t_quantile(1.0 - alpha / 2.0, df) + t_quantile(power, df)
    value = factor * math.sqrt(variance_of_diff * max(1.0, design_effect) / n)
    return value if value <= 1.0 else None


# ---------------------------------------------------------------------------------------------
# pass@k, pass^k
# ---------------------------------------------------------------------------------------------


def _check_pass_args(n: int, c: int, k: int) -> None:
    if n < 1:
        raise ValueError(f"n (attempts) must be >= 1, got {n}")
    if not 0 <= c <= n:
        raise ValueError(f"c (correct attempts) must be in [0, n={n}], got {c}")
    if not 1 <= k <= n:
        raise ValueError(f"k must be in [1, n={n}], got {k}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al. 2021): ``1 - C(n-c, k) / C(n, k)``.

    Why this form: the naive ``1 - (1 - c/n)^k`` is biased, and the binomial coefficients
    overflow floats for realistic n; the product ``Π_{i=n-c+1}^{n} (1 - k/i)`` from the paper
    equals the ratio and stays in [0, 1] throughout.
    """
    _check_pass_args(n, c, k)
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=np.float64)))


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k (tau-bench, Yao et al. 2024): ``C(c, k) / C(n, k)``, the chance that k attempts
    drawn without replacement *all* succeed.

    Why: pass@k rewards an agent for luck; pass^k measures reliability, which is what a user
    relying on one attempt actually experiences. Computed as ``Π_{i<k} (c-i)/(n-i)`` so it never
    overflows.
    """
    _check_pass_args(n, c, k)
    if c < k:
        return 0.0
    i = np.arange(k, dtype=np.float64)
    return float(np.prod((c - i) / (n - i)))


# ---------------------------------------------------------------------------------------------
# Tests and power for paired comparisons
# ---------------------------------------------------------------------------------------------


def mcnemar_exact(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value from the discordant pairs (b: A only, c: B only).

    Why exact: with the tens of discordant tasks typical of a benchmark, the chi-square
    approximation is unreliable. Under H0 each discordant task is equally likely to favour
    either agent, so ``scipy.stats.binomtest(b, b + c, 0.5)`` gives the exact p. No discordant
    pairs means no evidence either way: p = 1.
    """
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be non-negative, got b={b}, c={c}")
    if b + c == 0:
        return 1.0
    result = _scipy_stats().binomtest(int(b), int(b + c), 0.5, alternative="two-sided")
    return float(result.pvalue)



# ---------------------------------------------------------------------------------------------
# Published figures
# ---------------------------------------------------------------------------------------------


def _contain(interval: Interval, point: float, lo: float = 0.0, hi: float = 1.0) -> Interval:
    """Repair floating-point roundoff only: pull an endpoint that lies within ``_ROUNDOFF`` on
    the wrong side of the point estimate (or of the score range) onto it. The point and the
    resampled means are summed in different orders, so a few-ulp disagreement is arithmetic,
    not statistics; a larger excursion is left untouched so that tests can see it."""
    low, high = interval
    if point < low <= point + _ROUNDOFF:
        low = point
    if point - _ROUNDOFF <= high < point:
        high = point
    if lo - _ROUNDOFF <= low < lo:
        low = lo
    if hi < high <= hi + _ROUNDOFF:
        high = hi
    return (float(low), float(high))


BOOTSTRAP_DRAWS: Final[str] = (
    "numpy.random.default_rng(seed) (PCG64); groups (strata, then clusters) in sorted-label "
    "order; per resample of a group of m tasks: constant scores need no draw; 0/1 scores with k "
    "ones draw the count of ones from Binomial(m, k/m) (Generator.binomial, size=resamples); "
    "K distinct values with 40·K <= m draw Multinomial(m, freq) counts in chunks; otherwise "
    "Generator.integers(0, m, size=(rows, m)) indices in chunks of 4 MiB / (16·m) rows; whole "
    "clusters: Generator.integers(0, G, size=(rows, G)) and mean = Σ drawn sums / Σ drawn sizes; "
    "interval = numpy.quantile(means, [0.025, 0.975]) (linear interpolation)"
)
"""The random-draw procedure of the percentile bootstrap, recorded in every report that uses it
(docs/statistics.md spells it out so a third party can recompute the interval)."""


@dataclass(frozen=True)
class Headline:
    """The published success rate: never a bare mean, always with n and a 95% interval.

    ``method`` is the interval actually reported (``wilson``, ``clopper-pearson``, ``cluster-
    wilson``, ``stratified-wilson``, ``stratified-t`` or ``bootstrap``) and ``reason`` says why
    it was chosen; ``method_requested`` is what the protocol asked for (``auto`` by default).
    ``degenerate`` is True when a requested bootstrap collapsed to zero width and the automatic
    choice was published instead (``note`` says why). ``quantile`` and ``df`` are the normal or
    t quantile and degrees of freedom of a closed-form interval, so the figure can be recomputed
    with numpy alone; ``draws`` describes the bootstrap's random draws when one was used.
    ``wilson95`` is Wilson on k/n for 0/1 scores (None for fractional scores).
    """

    n: int
    mean: float
    ci95: Interval
    method: str
    method_requested: str
    reason: str
    degenerate: bool
    note: str | None
    seed: int
    resamples: int
    draws: str | None
    wilson95: Interval | None
    stderr: float
    cr1_stderr: float | None
    cr3_stderr: float | None
    clusters: int | None
    df: int | None
    quantile: float | None
    stratified: bool
    conditional_on_strata: bool
    effective_n: float | None


@dataclass(frozen=True)
class _Choice:
    ci: Interval
    method: str
    reason: str
    df: int | None = None
    quantile: float | None = None
    effective_n: float | None = None
    stratified: bool = False


def _distinct(labels: Sequence[str] | None) -> int:
    return len(set(labels)) if labels is not None else 0


def _automatic(arr: FloatArray, *, strata: Sequence[str] | None,
               clusters: Sequence[str] | None, notes: list[str]) -> _Choice:
    """The default interval (``ci_method: auto``), chosen from the design alone."""
    n = int(arr.size)
    binary = bool(np.all((arr == 0.0) | (arr == 1.0)))
    count = round(float(np.sum(arr)))
    wil = wilson(count, n)
    z = normal_quantile(0.975)
    if strata is not None:
        st = stratified_interval(arr, strata, clusters=clusters)
        if st.interval is not None:
            return _Choice(st.interval, st.method,
                           "publish.strata: fixed — stratified estimator with n_h − 1 variance, "
                           "conditional on the stratum sizes", st.df, st.quantile,
                           st.effective_n, stratified=True)
        notes.append(f"not stratified: {st.why_not}")
    g = _distinct(clusters)
    if clusters is not None and g >= 2:
        ct = cluster_wilson_interval(arr, clusters)
        return _Choice(_hull(ct.interval, wil), "cluster-wilson",
                       f"tasks share clusters ({g} clusters): SE = max(iid, CR1, CR3 SE), "
                       f"t(G−1 = {ct.df}) quantile, in Wilson's score form; never narrower "
                       "than Wilson", ct.df, ct.quantile, ct.effective_n)
    if clusters is not None:
        notes.append("all tasks share one cluster: the interval describes that cluster's tasks "
                     "only")
    if binary or n < 2:
        return _Choice(wil, "wilson", "0/1 scores of independent tasks: Wilson score interval",
                       quantile=z)
    ct = cluster_wilson_interval(arr, [str(i) for i in range(n)])
    return _Choice(_hull(ct.interval, wil), "cluster-wilson",
                   f"fractional scores: each task's attempts form one cluster; SE over tasks, "
                   f"t(n−1 = {ct.df}) quantile, in Wilson's score form; never narrower than "
                   f"Wilson on round(Σ) = {count} of {n}", ct.df, ct.quantile, ct.effective_n)


def headline(
    scores: Sequence[float] | npt.NDArray[Any],
    *,
    seed: int,
    method: str = "auto",
    resamples: int = 10_000,
    strata: Sequence[str] | None = None,
    strata_fixed: bool = False,
    clusters: Sequence[str] | None = None,
) -> Headline:
    """Compute the published figure for per-task scores in [0, 1].

    Why this shape: the interval must really cover 95% (docs/statistics.md), and a reader must
    see n, the interval and how it was obtained. Labels can only widen it:

    * ``strata`` change the headline only with ``strata_fixed`` (the protocol declared the
      stratum sizes fixed by design); otherwise they are ignored here and reported per stratum.
    * ``clusters`` (tasks sharing a label; use :func:`cluster_labels`) are never split.

    ``method="auto"`` (default): fixed strata → :func:`stratified_interval`; clusters →
    :func:`cluster_wilson_interval` joined with Wilson; 0/1 scores → Wilson; fractional scores
    (epochs) → the same over tasks (each task's attempts one cluster), joined with Wilson.
    ``"bootstrap"``: percentile bootstrap (cluster and fixed-strata aware), with a note below
    n = 100, and the automatic interval instead when it has zero width. ``"wilson"`` /
    ``"clopper-pearson"``: on round(Σ scores) of n, ignoring clusters (the note says so).

    Raises ValueError for n == 0, a score outside [0, 1], or an unknown method.
    """
    if method not in METHODS:
        raise ValueError(f"unknown interval method {method!r}; expected one of {METHODS}")
    arr = _as_scores(scores, unit=True)
    _check_resamples(resamples)
    n = int(arr.size)
    mean = float(np.mean(arr))
    binary = bool(np.all((arr == 0.0) | (arr == 1.0)))
    count = round(float(np.sum(arr)))
    groups = list(clusters) if clusters is not None and _distinct(clusters) < n else None
    if groups is not None and len(groups) != n:
        raise ValueError(f"clusters must have one label per task ({n}), got {len(groups)}")
    fixed = list(strata) if strata is not None and strata_fixed else None
    notes: list[str] = []
    degenerate = False
    drawn = 0
    draws: str | None = None

    if method == "auto":
        choice = _automatic(arr, strata=fixed, clusters=groups, notes=notes)
    elif method == "bootstrap":
        use_strata = fixed
        if fixed is not None and groups is not None and not _nested(
                _stratum_groups(fixed, n), groups):
            use_strata = None
            notes.append("not stratified: clusters cross strata")
        ci = bootstrap_interval(arr, seed=seed, resamples=resamples, strata=use_strata,
                                clusters=groups)
        if ci[1] - ci[0] <= _ROUNDOFF:
            degenerate = True
            reason = ("all outcomes are equal" if np.ptp(arr) == 0.0
                      else "resampled means do not vary")
            choice = _automatic(arr, strata=fixed, clusters=groups, notes=notes)
            notes.insert(0, f"bootstrap interval has zero width ({reason}); reporting the "
                            f"automatic {choice.method} interval instead")
        else:
            drawn, draws = resamples, BOOTSTRAP_DRAWS
            choice = _Choice(ci, "bootstrap", "publish.ci_method: bootstrap (percentile"
                             + (", whole clusters resampled" if groups else "")
                             + (", within fixed strata" if use_strata else "") + ")",
                             stratified=use_strata is not None)
            if n < 100:
                lo, hi = wilson(count, n)
                notes.append(f"the percentile bootstrap under-covers below n = 100 (minimum "
                             f"coverage 0.87 at n = 54); Wilson gives [{lo:.4f}, {hi:.4f}]")
            if groups is not None and _distinct(groups) < 30:
                notes.append("a cluster bootstrap under-covers with few clusters (0.87–0.93 at "
                             "10 clusters, ICC 0.3); the default cluster-wilson interval does not")
    else:
        ci = wilson(count, n) if method == "wilson" else clopper_pearson(count, n)
        choice = _Choice(ci, method, f"publish.ci_method: {method}",
                         quantile=normal_quantile(0.975) if method == "wilson" else None)
        if groups is not None:
            notes.append(f"{method} treats tasks as independent and ignores the "
                         f"{_distinct(groups)} clusters; compare stderr with cr1_stderr")
        if fixed is not None:
            notes.append(f"{method} ignores publish.strata: fixed")
        if not binary:
            notes.append(f"fractional scores: binomial interval on round(sum) = {count} of {n} "
                         "(conservative, since a [0, 1] score with mean p has variance <= "
                         "p(1-p))")
    reason = choice.reason
    if strata is not None and not strata_fixed:
        reason += ("; strata are reported one by one and do not narrow the headline "
                   "(publish.strata is not 'fixed')")
    g = _distinct(groups)
    return Headline(
        n=n,
        mean=mean,
        ci95=_contain(choice.ci, mean),
        method=choice.method,
        method_requested=method,
        reason=reason,
        degenerate=degenerate,
        note="; ".join(notes) if notes else None,
        seed=int(seed),
        resamples=drawn,
        draws=draws,
        wilson95=wilson(count, n) if binary else None,
        stderr=stderr(arr),
        cr1_stderr=cr1_stderr(arr, groups) if groups is not None and g >= 2 else None,
        cr3_stderr=cr3_stderr(arr, groups) if groups is not None and g >= 2 else None,
        clusters=g if groups is not None else None,
        df=choice.df,
        quantile=choice.quantile,
        stratified=choice.stratified,
        conditional_on_strata=choice.stratified,
        effective_n=choice.effective_n,
    )


# ---------------------------------------------------------------------------------------------
# Paired comparison
# ---------------------------------------------------------------------------------------------


def newcombe_paired(both: int, first_only: int, second_only: int, neither: int,
                    confidence: float = 0.95) -> Interval:
    """Newcombe's (1998, Stat. Med. 17:2635, method 10) interval for ``p_first − p_second`` on
    paired 0/1 outcomes: Wilson intervals of both margins combined by "square and add" with
    the (continuity-corrected) phi correlation of the 2×2 table.

    Why: the paired Wald interval and the percentile bootstrap both under-cover and collapse
    near 0 and 1; Newcombe's hybrid score interval keeps close to nominal coverage, and agrees
    with the exact McNemar test far more often than a bootstrap does.
    """
    n = both + first_only + second_only + neither
    if n <= 0:
        raise ValueError("an empty table has no interval")
    z = normal_quantile(0.5 + confidence / 2.0)
    k1, k2 = both + first_only, both + second_only
    p1, p2 = k1 / n, k2 / n
    l1, u1 = _wilson_real(p1, n, z) if 0 < k1 < n else wilson(k1, n, confidence)
    l2, u2 = _wilson_real(p2, n, z) if 0 < k2 < n else wilson(k2, n, confidence)
    margins = (k1, n - k1, k2, n - k2)
    phi = 0.0
    if all(m > 0 for m in margins):
        det = both * neither - first_only * second_only
        root = math.sqrt(float(np.prod(np.array(margins, dtype=np.float64))))
        if det > n / 2:
            phi = (det - n / 2) / root
        elif det < 0:
            phi = det / root
    theta = p1 - p2
    low = theta - math.sqrt(max(0.0, (p1 - l1) ** 2 + (u2 - p2) ** 2
                                - 2 * phi * (p1 - l1) * (u2 - p2)))
    high = theta + math.sqrt(max(0.0, (p2 - l2) ** 2 + (u1 - p1) ** 2
                                 - 2 * phi * (p2 - l2) * (u1 - p1)))
    return (max(-1.0, low), min(1.0, high))


def _t_test_p(estimate: float, se: float, df: int) -> float:
    """Two-sided p of ``estimate / se`` against Student t on ``df`` degrees of freedom."""
    if se <= 0.0:
        return 1.0 if estimate == 0.0 else 0.0
    return float(2.0 * _scipy_stats().t.sf(abs(estimate) / se, df))


@dataclass(frozen=True)
class PairedComparison:
    """Agent B versus agent A on the same tasks; ``diff = mean_b - mean_a``.

    ``method`` is the interval (``newcombe``, ``cluster-t`` or ``paired-t``) and ``test`` the
    test whose ``p_value`` is reported (exact McNemar without clusters, else the cluster-robust
    t test of the same standard error as the interval). ``table`` is ``((both pass, A only),
    (B only, both fail))`` for 0/1 outcomes and None for fractional scores.
    ``discordant_a_only`` / ``discordant_b_only`` count tasks where A (resp. B) scored higher.
    ``correlation`` is Pearson's r between the two agents' task scores (None if either is
    constant).
    """

    n: int
    mean_a: float
    mean_b: float
    diff: float
    ci95: Interval
    method: str
    test: str
    p_value: float
    df: int | None
    se: float | None
    clusters: int | None
    table: tuple[tuple[int, int], tuple[int, int]] | None
    correlation: float | None
    discordant_a_only: int
    discordant_b_only: int
    note: str | None


def paired_comparison(
    a: Sequence[float] | npt.NDArray[Any],
    b: Sequence[float] | npt.NDArray[Any],
    *,
    clusters: Sequence[str] | None = None,
) -> PairedComparison:
    """Compare two agents on the same tasks (``a[i]`` and ``b[i]`` are the same task).

    Why paired: both agents face the same task difficulties, so the per-task difference
    ``d = b - a`` cancels them. Without clusters, 0/1 outcomes get Newcombe's interval and the
    exact McNemar test. With clusters (tasks sharing a label), McNemar's independence
    assumption fails (it rejected 27% of the time at a nominal 5% on clustered tasks), so both
    the interval and the test come from the cluster-robust t of ``d``: one standard error,
    max(iid, CR1, CR3), on G − 1 degrees of freedom. Fractional scores use the same t over tasks.
    """
    arr_a = _as_scores(a, unit=True, name="a")
    arr_b = _as_scores(b, unit=True, name="b")
    if arr_a.shape != arr_b.shape:
        raise ValueError(f"a and b must be aligned by task, got lengths {arr_a.size}, {arr_b.size}")
    n = int(arr_a.size)
    mean_a, mean_b = float(np.mean(arr_a)), float(np.mean(arr_b))
    diff = mean_b - mean_a
    d = arr_b - arr_a
    a_only = int(np.count_nonzero(arr_a > arr_b))
    b_only = int(np.count_nonzero(arr_b > arr_a))
    binary = bool(np.all((arr_a == 0.0) | (arr_a == 1.0)) and
                  np.all((arr_b == 0.0) | (arr_b == 1.0)))
    table: tuple[tuple[int, int], tuple[int, int]] | None = None
    if binary:
        both_pass = int(np.count_nonzero((arr_a == 1.0) & (arr_b == 1.0)))
        both_fail = int(np.count_nonzero((arr_a == 0.0) & (arr_b == 0.0)))
        table = ((both_pass, a_only), (b_only, both_fail))
    groups = list(clusters) if clusters is not None and _distinct(clusters) < n else None
    note: str | None = None
    if groups is not None and _distinct(groups) < 2:
        note = "all tasks share one cluster: compared as independent tasks"
        groups = None
    if groups is None and binary:
        assert table is not None
        ci = newcombe_paired(table[0][0], b_only, a_only, table[1][1])
        method, test, p = "newcombe", "exact McNemar", mcnemar_exact(a_only, b_only)
        df = se = g = None
    elif n >= 2:
        labels = groups if groups is not None else [str(i) for i in range(n)]
        ct = cluster_t_interval(d, labels, bounds=(-1.0, 1.0))
        ci, df, se = ct.interval, ct.df, ct.se
        g = ct.clusters if groups is not None else None
        method = "cluster-t" if groups is not None else "paired-t"
        test = (f"cluster-robust t ({df} df)" if groups is not None
                else f"paired t ({df} df)")
        p = _t_test_p(diff, ct.se, ct.df)
    else:
        ci, method, test, p, df, se, g = (-1.0, 1.0), "paired-t", "none (one task)", 1.0, \
            None, None, None
    correlation: float | None = None
    if n >= 2 and np.ptp(arr_a) > 0.0 and np.ptp(arr_b) > 0.0:
        # Near-constant inputs (e.g. subnormal spreads) can underflow the standard deviation;
        # an undefined r is reported as None rather than as NaN or a warning.
        with np.errstate(all="ignore"):
            r = float(np.corrcoef(arr_a, arr_b)[0, 1])
        correlation = r if math.isfinite(r) else None
    return PairedComparison(
        n=n, mean_a=mean_a, mean_b=mean_b, diff=diff,
        ci95=_contain(ci, diff, lo=-1.0, hi=1.0), method=method, test=test, p_value=p,
        df=df, se=se, clusters=g, table=table, correlation=correlation,
        discordant_a_only=a_only, discordant_b_only=b_only, note=note,
    )


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's (1979) step-down adjusted p-values, in the input order.

    Why: a leaderboard of k runs makes k(k − 1)/2 pairwise tests; at 0.05 each, some pair of
    equal agents would look different far more often than 5% of the time. Holm controls the
    family-wise error at alpha with no assumption on how the tests depend on each other, and
    rejects everything Bonferroni rejects (and often more). Sorted ascending, the i-th
    (0-based) of m p-values is multiplied by m − i, made non-decreasing by a running maximum,
    and capped at 1 — statsmodels' ``multipletests(method="holm")`` gives the same values
    (tested). scipy has no Holm. A NaN p-value is refused: it would sort arbitrarily.
    """
    values = [float(p) for p in p_values]
    for p in values:
        if not 0.0 <= p <= 1.0:  # also False for NaN
            raise ValueError(f"p-values must lie in [0, 1], got {p!r}")
    m = len(values)
    order = sorted(range(m), key=lambda i: values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * values[i]))
        adjusted[i] = running
    return adjusted
