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
3. **Honest.** A bootstrap that collapses to zero width (all outcomes equal) says nothing about
   uncertainty, so :func:`headline` never publishes it: it falls back to Wilson and says so.
   Clustered data (several tasks per repository) get a cluster bootstrap and a clustered
   standard error (Miller 2024, "Adding Error Bars to Evals", arXiv:2411.00640), because
   treating correlated tasks as independent understates the uncertainty.
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

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt
from scipy import stats as _sps  # type: ignore[import-untyped,unused-ignore]

__all__ = [
    "METHODS",
    "Headline",
    "Interval",
    "PairedComparison",
    "bootstrap_interval",
    "bootstrap_means",
    "clopper_pearson",
    "clustered_stderr",
    "derive_seed",
    "headline",
    "mcnemar_exact",
    "min_detectable_difference",
    "paired_comparison",
    "pass_at_k",
    "pass_hat_k",
    "stderr",
    "wilson",
]

Interval = tuple[float, float]
"""A closed interval ``(low, high)`` of plain floats."""

Scores = Sequence[float] | npt.NDArray[Any]
"""Per-task scores as a sequence or a 1-D numpy array."""

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]

METHODS: Final[tuple[str, ...]] = ("bootstrap", "wilson", "clopper-pearson")
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
    z = float(_sps.norm.ppf(0.5 + confidence / 2.0))
    p = successes / n
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2.0 * n)) / denom
    half = (z / denom) * math.sqrt(p * (1.0 - p) / n + z2 / (4.0 * n * n))
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return (float(low), float(high))


def clopper_pearson(successes: int, n: int, confidence: float = 0.95) -> Interval:
    """Exact (Clopper-Pearson) binomial interval from beta quantiles.

    Why: it guarantees at least nominal coverage for every true rate, so it is the conservative
    choice when a reviewer wants "no approximation anywhere". Bounds are
    ``Beta(alpha/2; k, n-k+1)`` and ``Beta(1-alpha/2; k+1, n-k)`` via ``scipy.stats.beta.ppf``,
    with 0 / 1 at the boundaries.
    """
    _check_binomial(successes, n, confidence)
    alpha = 1.0 - confidence
    low = 0.0 if successes == 0 else float(_sps.beta.ppf(alpha / 2.0, successes, n - successes + 1))
    high = (
        1.0
        if successes == n
        else float(_sps.beta.ppf(1.0 - alpha / 2.0, successes + 1, n - successes))
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
    arr = np.asarray(labels)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ValueError(f"{name} must be a flat sequence of length {n}, got shape {arr.shape}")
    uniq, inverse = np.unique(arr, return_inverse=True)
    return int(uniq.size), inverse.astype(np.intp).reshape(-1)


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

    Why it exists: the percentile interval of this distribution is the published interval, and
    the raw distribution is also what reproducibility checks compare bit for bit.

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

    Why percentile: it needs no normality assumption, respects the [0, 1] range of a success
    rate, and is what the paired and clustered variants below also use, so all published
    intervals are of one kind. It may have zero width on constant data: :func:`headline`
    guards against publishing that.
    """
    _check_confidence(confidence)
    means = bootstrap_means(
        scores, seed=seed, resamples=resamples, strata=strata, clusters=clusters
    )
    return _percentile_interval(means, confidence)


# ---------------------------------------------------------------------------------------------
# Standard errors
# ---------------------------------------------------------------------------------------------


def stderr(scores: Sequence[float] | npt.NDArray[Any]) -> float:
    """CLT standard error of the mean, ``std(ddof=1) / sqrt(n)``; 0.0 when n < 2.

    Why: it is the reference scale for comparing against the clustered standard error, and the
    input to power calculations. n < 2 has no sample variance, so 0.0 (not NaN) keeps reports
    printable; the interval, not this number, carries the uncertainty there.
    """
    arr = _as_scores(scores, unit=False)
    if arr.size < 2:
        return 0.0
    return float(np.std(arr, ddof=1) / math.sqrt(arr.size))


def clustered_stderr(scores: Sequence[float] | npt.NDArray[Any], clusters: Sequence[str]) -> float:
    """Cluster-robust standard error of the mean (Miller 2024, arXiv:2411.00640, eq. 4).

    ``SE = sqrt(Σ_c (Σ_{i∈c} (s_i - s̄))²) / n``.

    Why: tasks from the same repository (or generated from the same template) fail together;
    the CLT standard error assumes independence and can understate the uncertainty several-fold.
    With every task in its own cluster this reduces to the ``ddof=0`` CLT standard error.
    """
    arr = _as_scores(scores, unit=False)
    n = int(arr.size)
    _, codes = _codes(clusters, n, "clusters")
    residual_sums = np.bincount(codes, weights=arr - np.mean(arr))
    return float(math.sqrt(float(np.sum(residual_sums * residual_sums))) / n)


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
    result = _sps.binomtest(int(b), int(b + c), 0.5, alternative="two-sided")
    return float(result.pvalue)


def min_detectable_difference(
    scores_variance_of_paired_diff: float,
    n: int,
    *,
    power: float = 0.8,
    alpha: float = 0.05,
) -> float:
    """Smallest true difference a paired comparison on n tasks detects with the given power.

    Miller 2024 (arXiv:2411.00640, §4): ``MDD = (z_{1-alpha/2} + z_{power}) · sqrt(Var(d) / n)``,
    where d is the per-task difference of the two agents' scores and the z are standard normal
    quantiles (``scipy.stats.norm.ppf``).

    Why: it tells, before running, whether a benchmark of n tasks can possibly resolve the
    difference someone wants to claim; a comparison below this size is noise by design.
    """
    if scores_variance_of_paired_diff < 0 or not math.isfinite(scores_variance_of_paired_diff):
        raise ValueError("variance of the paired difference must be finite and >= 0")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if not 0.0 < power < 1.0:
        raise ValueError(f"power must be in (0, 1), got {power}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    z_alpha = float(_sps.norm.ppf(1.0 - alpha / 2.0))
    z_power = float(_sps.norm.ppf(power))
    return (z_alpha + z_power) * math.sqrt(scores_variance_of_paired_diff / n)


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


@dataclass(frozen=True)
class Headline:
    """The published success rate: never a bare mean, always with n and a 95% interval.

    ``method`` is the interval actually reported; ``method_requested`` what the caller asked
    for. ``degenerate`` is True when a requested bootstrap collapsed to zero width and Wilson
    was published instead (``note`` says why). ``resamples`` is the number of bootstrap
    resamples actually drawn (0 when the requested method needs none). ``wilson95`` is filled
    for 0/1 scores as a cross-check and ``None`` for fractional (multi-epoch) scores;
    ``clustered_stderr`` is filled only when clusters were given.
    """

    n: int
    mean: float
    ci95: Interval
    method: str
    method_requested: str
    degenerate: bool
    note: str | None
    seed: int
    resamples: int
    wilson95: Interval | None
    stderr: float
    clustered_stderr: float | None


def headline(
    scores: Sequence[float] | npt.NDArray[Any],
    *,
    seed: int,
    method: str = "bootstrap",
    resamples: int = 10_000,
    strata: Sequence[str] | None = None,
    clusters: Sequence[str] | None = None,
) -> Headline:
    """Compute the published figure for per-task scores in [0, 1].

    Why this shape: a reader must be able to see n, the interval and how it was obtained, and
    must never be shown a zero-width "interval". So:

    * ``method="bootstrap"`` (default): percentile bootstrap honouring strata/clusters. If it
      has zero width (all outcomes equal, constant strata, a single cluster; a width within
      1e-9 of zero counts as zero), Wilson on ``round(sum)`` of n is published instead, with
      ``method="wilson"``, ``degenerate=True`` and a note.
    * ``method="wilson"`` / ``"clopper-pearson"``: binomial intervals on ``round(sum)`` of n.
      For fractional scores that treats the total as a count, which is conservative because a
      [0, 1] score with mean p has variance at most p(1-p); the note says so. These methods
      ignore strata and clusters; when clusters are given the note points to the clustered SE.

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
    wilson95 = wilson(count, n) if binary else None
    cse = clustered_stderr(arr, clusters) if clusters is not None else None
    notes: list[str] = []
    degenerate = False
    drawn = 0

    if method == "bootstrap":
        drawn = resamples
        ci = bootstrap_interval(
            arr, seed=seed, resamples=resamples, strata=strata, clusters=clusters
        )
        # Zero width up to roundoff: a width no display precision can show is no interval.
        if ci[1] - ci[0] <= _ROUNDOFF:
            degenerate = True
            reason = (
                "all outcomes are equal" if np.ptp(arr) == 0.0 else "resampled means do not vary"
            )
            notes.append(
                f"bootstrap interval has zero width ({reason}); "
                f"reporting Wilson 95% on {count}/{n} instead"
            )
            if clusters is not None:
                notes.append("the Wilson fallback ignores clustering")
            ci = wilson(count, n)
            used = "wilson"
        else:
            used = "bootstrap"
    else:
        ci = wilson(count, n) if method == "wilson" else clopper_pearson(count, n)
        used = method
        if clusters is not None:
            notes.append(
                f"{method} treats tasks as independent and ignores clusters; "
                "compare stderr with clustered_stderr"
            )
    if not binary and used != "bootstrap":
        notes.append(
            f"fractional scores: binomial interval on round(sum) = {count} of {n} "
            "(conservative, since a [0, 1] score with mean p has variance <= p(1-p))"
        )

    return Headline(
        n=n,
        mean=mean,
        ci95=_contain(ci, mean),
        method=used,
        method_requested=method,
        degenerate=degenerate,
        note="; ".join(notes) if notes else None,
        seed=int(seed),
        resamples=drawn,
        wilson95=wilson95,
        stderr=stderr(arr),
        clustered_stderr=cse,
    )


@dataclass(frozen=True)
class PairedComparison:
    """Agent B versus agent A on the same tasks; ``diff = mean_b - mean_a``.

    ``table`` is ``((both pass, A only), (B only, both fail))`` for 0/1 outcomes; for fractional
    scores no such table exists and it is ``((0, 0), (0, 0))`` with ``mcnemar_p = None``.
    ``discordant_a_only`` / ``discordant_b_only`` count tasks where A (resp. B) scored strictly
    higher, which for 0/1 outcomes are exactly the McNemar discordant cells. ``correlation`` is
    Pearson's r between the two agents' task scores (None if either is constant): a high r is
    why a paired comparison is much tighter than two separate intervals.
    """

    n: int
    mean_a: float
    mean_b: float
    diff: float
    ci95: Interval
    method: str
    mcnemar_p: float | None
    table: tuple[tuple[int, int], tuple[int, int]]
    correlation: float | None
    discordant_a_only: int
    discordant_b_only: int


def paired_comparison(
    a: Sequence[float] | npt.NDArray[Any],
    b: Sequence[float] | npt.NDArray[Any],
    *,
    seed: int,
    resamples: int = 10_000,
    clusters: Sequence[str] | None = None,
) -> PairedComparison:
    """Compare two agents on the same tasks (``a[i]`` and ``b[i]`` are the same task).

    Why paired: both agents face the same task difficulties, so resampling task indices jointly
    cancels the shared difficulty and gives a far tighter interval for ``mean(b) - mean(a)``
    than two independent intervals would. Since the same indices are drawn for both agents,
    the resampled difference is the resampled mean of ``d = b - a``; its percentile interval is
    reported. With ``clusters``, whole clusters are resampled jointly ("cluster-bootstrap"),
    which widens the interval when outcomes are correlated within clusters.
    """
    arr_a = _as_scores(a, unit=True, name="a")
    arr_b = _as_scores(b, unit=True, name="b")
    if arr_a.shape != arr_b.shape:
        raise ValueError(f"a and b must be aligned by task, got lengths {arr_a.size}, {arr_b.size}")
    n = int(arr_a.size)
    mean_a = float(np.mean(arr_a))
    mean_b = float(np.mean(arr_b))
    diff = mean_b - mean_a
    d = arr_b - arr_a
    ci = _contain(
        bootstrap_interval(d, seed=seed, resamples=resamples, clusters=clusters),
        diff,
        lo=-1.0,
        hi=1.0,
    )
    a_only = int(np.count_nonzero(arr_a > arr_b))
    b_only = int(np.count_nonzero(arr_b > arr_a))
    binary = bool(
        np.all((arr_a == 0.0) | (arr_a == 1.0)) and np.all((arr_b == 0.0) | (arr_b == 1.0))
    )
    if binary:
        both_pass = int(np.count_nonzero((arr_a == 1.0) & (arr_b == 1.0)))
        both_fail = int(np.count_nonzero((arr_a == 0.0) & (arr_b == 0.0)))
        table = ((both_pass, a_only), (b_only, both_fail))
        p_value: float | None = mcnemar_exact(a_only, b_only)
    else:
        table = ((0, 0), (0, 0))
        p_value = None
    correlation: float | None = None
    if n >= 2 and np.ptp(arr_a) > 0.0 and np.ptp(arr_b) > 0.0:
        # Near-constant inputs (e.g. subnormal spreads) can underflow the standard deviation;
        # an undefined r is reported as None rather than as NaN or a warning.
        with np.errstate(all="ignore"):
            r = float(np.corrcoef(arr_a, arr_b)[0, 1])
        correlation = r if math.isfinite(r) else None
    return PairedComparison(
        n=n,
        mean_a=mean_a,
        mean_b=mean_b,
        diff=diff,
        ci95=ci,
        method="paired-bootstrap" if clusters is None else "cluster-bootstrap",
        mcnemar_p=p_value,
        table=table,
        correlation=correlation,
        discordant_a_only=a_only,
        discordant_b_only=b_only,
    )
