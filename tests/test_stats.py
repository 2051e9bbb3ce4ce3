"""Tests for sealbench.stats: reference values, live cross-checks against statsmodels/scipy,
reproducibility, degenerate cases, memory bounds and hypothesis properties.

Reference values are textbook numbers (to 4 decimals); the live cross-checks guard against
both this module and the reference table being wrong in the same way.
"""

from __future__ import annotations

import hashlib
import math
import tracemalloc
import warnings
from typing import Any

import numpy as np
import pytest
import statsmodels.api as sm
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.proportion import proportion_confint

from sealbench.stats import (
    METHODS,
    Headline,
    PairedComparison,
    bootstrap_interval,
    bootstrap_means,
    clopper_pearson,
    cluster_labels,
    cluster_t_interval,
    cluster_wilson_interval,
    clustered_stderr,
    cr1_stderr,
    cr3_stderr,
    derive_seed,
    headline,
    mcnemar_exact,
    mcnemar_power,
    mdd_cluster_t,
    mdd_mcnemar,
    mdd_mcnemar_against,
    newcombe_paired,
    paired_comparison,
    pass_at_k,
    pass_hat_k,
    stderr,
    stratified_interval,
    wilson,
)

TOL = 5e-5  # "to 4 decimals"

# ---------------------------------------------------------------------------------------------
# Binomial intervals
# ---------------------------------------------------------------------------------------------

WILSON_REF = [
    (0, 40, (0.0, 0.087622)),
    (20, 40, (0.351995, 0.648005)),
    (38, 40, (0.834961, 0.986179)),
    (40, 40, (0.912378, 1.0)),
    (7, 12, (0.319511, 0.806740)),
]
CP_REF = [
    (0, 40, (0.0, 0.088097)),
    (20, 40, (0.338018, 0.661982)),
    (38, 40, (0.830803, 0.993886)),
    (40, 40, (0.911903, 1.0)),
    (7, 12, (0.276670, 0.848348)),
]


@pytest.mark.parametrize(("k", "n", "expected"), WILSON_REF)
def test_wilson_reference_values(k: int, n: int, expected: tuple[float, float]) -> None:
    low, high = wilson(k, n)
    assert low == pytest.approx(expected[0], abs=TOL)
    assert high == pytest.approx(expected[1], abs=TOL)
    assert type(low) is float and type(high) is float


@pytest.mark.parametrize(("k", "n", "expected"), CP_REF)
def test_clopper_pearson_reference_values(k: int, n: int, expected: tuple[float, float]) -> None:
    low, high = clopper_pearson(k, n)
    assert low == pytest.approx(expected[0], abs=TOL)
    assert high == pytest.approx(expected[1], abs=TOL)
    assert type(low) is float and type(high) is float


def test_binomial_intervals_match_statsmodels_on_a_grid() -> None:
    for n in (1, 2, 5, 12, 40, 100, 523):
        for k in sorted({0, 1, n // 3, n // 2, n - 1, n}):
            for conf in (0.9, 0.95, 0.99):
                sm_w = proportion_confint(k, n, alpha=1 - conf, method="wilson")
                sm_b = proportion_confint(k, n, alpha=1 - conf, method="beta")
                assert wilson(k, n, conf) == pytest.approx(tuple(map(float, sm_w)), abs=1e-9)
                assert clopper_pearson(k, n, conf) == pytest.approx(
                    tuple(map(float, sm_b)), abs=1e-9
                )


def test_binomial_intervals_reject_bad_input() -> None:
    for bad in [(-1, 10), (11, 10), (0, 0)]:
        with pytest.raises(ValueError):
            wilson(*bad)
        with pytest.raises(ValueError):
            clopper_pearson(*bad)
    with pytest.raises(ValueError):
        wilson(3, 10, confidence=1.0)


# ---------------------------------------------------------------------------------------------
# pass@k / pass^k
# ---------------------------------------------------------------------------------------------

CORRECT = [8, 6, 4, 1, 0]


@pytest.mark.parametrize(("k", "expected"), [(2, 0.6000), (4, 0.6971), (8, 0.8000)])
def test_pass_at_k_reference(k: int, expected: float) -> None:
    assert float(np.mean([pass_at_k(8, c, k) for c in CORRECT])) == pytest.approx(expected, abs=TOL)


@pytest.mark.parametrize(("k", "expected"), [(2, 0.3500), (4, 0.2457), (8, 0.2000)])
def test_pass_hat_k_reference(k: int, expected: float) -> None:
    assert float(np.mean([pass_hat_k(8, c, k) for c in CORRECT])) == pytest.approx(
        expected, abs=TOL
    )


def test_pass_k_match_exact_combinatorics() -> None:
    for n in range(1, 25):
        for c in range(n + 1):
            for k in range(1, n + 1):
                exact_at = 1 - math.comb(n - c, k) / math.comb(n, k)
                exact_hat = math.comb(c, k) / math.comb(n, k)
                assert pass_at_k(n, c, k) == pytest.approx(exact_at, abs=1e-12)
                assert pass_hat_k(n, c, k) == pytest.approx(exact_hat, abs=1e-12)
    # Large n: binomial coefficients would overflow a float; the product form must not.
    assert 0.0 <= pass_at_k(2000, 7, 500) <= 1.0
    assert type(pass_at_k(8, 3, 2)) is float and type(pass_hat_k(8, 3, 2)) is float


def test_pass_k_rejects_bad_input() -> None:
    for args in [(0, 0, 1), (5, 6, 1), (5, 2, 0), (5, 2, 6)]:
        with pytest.raises(ValueError):
            pass_at_k(*args)
        with pytest.raises(ValueError):
            pass_hat_k(*args)


# ---------------------------------------------------------------------------------------------
# McNemar, MDD
# ---------------------------------------------------------------------------------------------


def test_mcnemar_reference_and_statsmodels() -> None:
    p = mcnemar_exact(3, 11)
    assert p == pytest.approx(0.05737, abs=TOL)
    assert p == pytest.approx(float(mcnemar([[27, 3], [11, 9]], exact=True).pvalue), abs=1e-12)
    for b, c in [(0, 0), (0, 5), (5, 5), (12, 30), (40, 2)]:
        sm = float(mcnemar([[10, b], [c, 10]], exact=True).pvalue)
        assert mcnemar_exact(b, c) == pytest.approx(sm, abs=1e-12)


def _table_to_pairs(both: int, a_only: int, b_only: int, neither: int) -> tuple[list[float], ...]:
    a = [1.0] * both + [1.0] * a_only + [0.0] * b_only + [0.0] * neither
    b = [1.0] * both + [0.0] * a_only + [1.0] * b_only + [0.0] * neither
    return a, b


def test_paired_comparison_table_newcombe_and_mcnemar() -> None:
    a, b = _table_to_pairs(27, 3, 11, 9)
    cmp = paired_comparison(a, b)
    assert isinstance(cmp, PairedComparison)
    assert cmp.n == 50
    assert cmp.table == ((27, 3), (11, 9))
    assert (cmp.discordant_a_only, cmp.discordant_b_only) == (3, 11)
    assert cmp.test == "exact McNemar" and cmp.method == "newcombe"
    assert cmp.p_value == pytest.approx(0.05737, abs=TOL)
    assert cmp.diff == pytest.approx((38 - 30) / 50)
    assert cmp.mean_a == pytest.approx(30 / 50) and cmp.mean_b == pytest.approx(38 / 50)
    # B first: both 27, B only 11, A only 3, neither 9
    assert cmp.ci95 == pytest.approx(newcombe_paired(27, 11, 3, 9))
    assert cmp.correlation == pytest.approx(float(np.corrcoef(a, b)[0, 1]))
    assert type(cmp.diff) is float and type(cmp.ci95[0]) is float


# Newcombe (1998) method 10, reference values: the Cavo et al. (2012) table used in Fagerland,
# Lydersen & Laake, "Statistical Analysis of Contingency Tables" (2017), ch. 8: -0.0621
# (95% CI -0.1186 to -0.0046).
def test_newcombe_paired_reference_value() -> None:
    low, high = newcombe_paired(59, 6, 16, 80)
    assert pytest.approx(-0.0621, abs=TOL) == (6 - 16) / 161
    assert low == pytest.approx(-0.1186, abs=TOL)
    assert high == pytest.approx(-0.0046, abs=TOL)
    # Symmetry: swapping the two agents mirrors the interval.
    assert newcombe_paired(59, 16, 6, 80) == pytest.approx((-high, -low))
    # No discordance: the interval still has width (it is not a zero-width claim).
    low0, high0 = newcombe_paired(20, 0, 0, 20)
    assert low0 < 0.0 < high0


def test_paired_comparison_fractional_and_constant() -> None:
    a = [0.25, 0.5, 0.75, 1.0]
    b = [0.5, 0.5, 1.0, 1.0]
    cmp = paired_comparison(a, b)
    assert cmp.table is None and cmp.method == "paired-t" and cmp.df == 3
    assert (cmp.discordant_a_only, cmp.discordant_b_only) == (0, 2)
    d = np.asarray(b) - np.asarray(a)
    t = float(np.mean(d) / (np.std(d, ddof=1) / 2))
    assert cmp.p_value == pytest.approx(float(sps.ttest_1samp(d, 0.0).pvalue))
    assert cmp.p_value == pytest.approx(2 * float(sps.t.sf(t, 3)))
    same = paired_comparison([1.0] * 5, [1.0] * 5)
    assert same.correlation is None
    assert same.p_value == 1.0
    with pytest.raises(ValueError):
        paired_comparison([1.0, 0.0], [1.0])


def rejection_rate(discordant: np.ndarray) -> float:
    """The share of simulated (b, c) discordant counts, one row each, that the exact McNemar
    test rejects at 5%. A simulation draws the same few hundred pairs thousands of times, so
    each distinct pair is tested once and weighted by how often it was drawn."""
    pairs, drawn = np.unique(discordant, axis=0, return_counts=True)
    rejects = np.array([mcnemar_exact(int(b), int(c)) < 0.05 for b, c in pairs])
    return float(np.sum(drawn * rejects) / np.sum(drawn))


def test_mdd_mcnemar_power_is_what_it_claims() -> None:
    """The MDD is the smallest difference at which the exact test has 80% power (exactly),
    and the exact power agrees with a simulation of the test itself."""
    mdd = mdd_mcnemar(54, 0.444)
    assert mdd is not None and 0.2 < mdd < 0.3
    assert mcnemar_power(54, 0.444, mdd) == pytest.approx(0.8, abs=1e-6)
    assert mcnemar_power(54, 0.444, mdd - 0.02) < 0.8
    rng = np.random.default_rng(5)
    psi, delta = 0.444, 0.2
    cells = rng.multinomial(54, [(psi + delta) / 2, (psi - delta) / 2, 1 - psi], size=4000)
    simulated = rejection_rate(cells[:, [1, 0]])
    assert simulated == pytest.approx(mcnemar_power(54, psi, delta), abs=0.025)
    assert mcnemar_power(54, 0.444, 0.0) < 0.05  # the test's own size, exact
    assert mdd_mcnemar(5, 0.1) is None  # unreachable: too few tasks
    assert mdd_mcnemar(54, 0.0) is None


def test_mdd_against_another_agent_moves_the_discordance_with_the_difference() -> None:
    """At p = 0.5 the discordance does not move with d; elsewhere it does, and the power
    stated at the MDD holds for an independent agent better (or worse) by that much."""
    at_half = mdd_mcnemar_against(60, 0.5)
    assert at_half == pytest.approx(mdd_mcnemar(60, 0.5), rel=1e-6)
    mdd = mdd_mcnemar_against(200, 0.3)
    assert mdd is not None
    rng = np.random.default_rng(9)
    for d in (mdd, -mdd):
        a = rng.random((3000, 200)) < 0.3
        b = rng.random((3000, 200)) < 0.3 + d
        power = rejection_rate(np.stack([np.sum(a & ~b, axis=1), np.sum(~a & b, axis=1)],
                                        axis=1))
        assert power >= 0.8 - 0.025, (d, power)
    assert mdd_mcnemar_against(50, 0.1) is None  # a worse agent can never be told apart


def test_mdd_cluster_t_formula() -> None:
    q = float(sps.t.ppf(0.975, 9) + sps.t.ppf(0.8, 9))
    assert mdd_cluster_t(0.25, 100, 10) == pytest.approx(q * math.sqrt(0.25 / 100))
    base = mdd_cluster_t(0.25, 100, 10)
    assert base is not None
    assert mdd_cluster_t(0.25, 100, 10, design_effect=4.0) == pytest.approx(2 * base)
    assert mdd_cluster_t(0.25, 4, 2) is None  # beyond any difference of two rates
    assert mdd_cluster_t(0.25, 100, 10, design_effect=0.5) == mdd_cluster_t(0.25, 100, 10)
    with pytest.raises(ValueError):
        mdd_cluster_t(-0.1, 10, 5)
    with pytest.raises(ValueError):
        mdd_cluster_t(0.1, 10, 1)


# ---------------------------------------------------------------------------------------------
# Standard errors
# ---------------------------------------------------------------------------------------------


def test_stderr_matches_numpy() -> None:
    rng = np.random.default_rng(3)
    x = rng.random(57)
    assert stderr(x) == pytest.approx(float(np.std(x, ddof=1) / math.sqrt(57)), rel=1e-12)
    assert stderr([0.3]) == 0.0
    assert type(stderr(x)) is float


def test_clustered_stderr_matches_direct_formula() -> None:
    rng = np.random.default_rng(4)
    scores = rng.integers(0, 2, size=60).astype(float).tolist()
    clusters = [f"repo{rng.integers(0, 9)}" for _ in range(60)]
    mean = sum(scores) / len(scores)
    per_cluster: dict[str, float] = {}
    for s, c in zip(scores, clusters, strict=True):
        per_cluster[c] = per_cluster.get(c, 0.0) + (s - mean)
    direct = math.sqrt(sum(v * v for v in per_cluster.values())) / len(scores)
    assert clustered_stderr(scores, clusters) == pytest.approx(direct, rel=1e-12)
    # Singleton clusters: the ddof=0 CLT standard error.
    singletons = [str(i) for i in range(60)]
    assert clustered_stderr(scores, singletons) == pytest.approx(
        float(np.std(scores) / math.sqrt(60)), rel=1e-12
    )


def _statsmodels_cr1(scores: list[float], clusters: list[str]) -> float:
    """CR1 standard error of a mean from statsmodels: OLS on a constant, cluster covariance."""
    codes = np.unique(np.asarray(clusters), return_inverse=True)[1]
    fit = sm.OLS(np.asarray(scores), np.ones((len(scores), 1))).fit(
        cov_type="cluster", cov_kwds={"groups": codes})
    return float(fit.bse[0])


@pytest.mark.parametrize("seed", range(6))
def test_cr1_stderr_matches_statsmodels(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(20, 120))
    g = int(rng.integers(2, 15))
    scores = (rng.random(n) < rng.random()).astype(float).tolist()
    if len(set(scores)) == 1:
        scores[0] = 1.0 - scores[0]
    clusters = [f"r{rng.integers(0, g)}" for _ in range(n)]
    if len(set(clusters)) < 2:
        clusters[0] = "other"
    assert cr1_stderr(scores, clusters) == pytest.approx(_statsmodels_cr1(scores, clusters),
                                                         rel=1e-10)
    groups = len(set(clusters))
    assert cr1_stderr(scores, clusters) == pytest.approx(
        clustered_stderr(scores, clusters) * math.sqrt(groups / (groups - 1)), rel=1e-12)


def test_cr3_is_the_leave_one_cluster_out_jackknife() -> None:
    rng = np.random.default_rng(8)
    scores = (rng.random(50) < 0.4).astype(float)
    clusters = ["big"] * 30 + [f"s{i}" for i in range(20)]
    labels = sorted(set(clusters))
    left_out = [float(np.mean([s for s, c in zip(scores, clusters, strict=True) if c != g]))
                for g in labels]
    g = len(labels)
    expected = math.sqrt((g - 1) / g * sum((m - np.mean(left_out)) ** 2 for m in left_out))
    assert cr3_stderr(scores, clusters) == pytest.approx(expected, rel=1e-10)
    # one dominant cluster: CR1 understates what the jackknife sees
    assert cr3_stderr(scores, clusters) > 1.2 * cr1_stderr(scores, clusters)
    assert cluster_t_interval(scores, clusters).se == pytest.approx(
        max(stderr(scores), cr1_stderr(scores, clusters), cr3_stderr(scores, clusters)))


def test_cluster_labels_are_coded_as_python_sees_them() -> None:
    """numpy string arrays drop trailing NULs; labels that differ only there stay apart."""
    labels = ["a", "a\x00", "a", "a\x00", "a"]
    assert cr1_stderr([1.0, 0.0, 1.0, 0.0, 1.0], labels) > 0.0
    assert headline([1.0, 0.0, 1.0, 0.0, 1.0], seed=1, clusters=labels).clusters == 2
    named = cluster_labels([None, "x", "x"], ["t9", "t1", "t2"])
    assert named is not None and named[0].endswith("t9")  # by task id, not position


def test_cluster_t_interval_form() -> None:
    a, _, clusters = _clustered_case()
    ct = cluster_t_interval(a, clusters)
    se = max(stderr(a), _statsmodels_cr1(a, clusters), cr3_stderr(a, clusters))
    q = float(sps.t.ppf(0.975, 9))
    assert ct.df == 9 and ct.clusters == 10 and ct.quantile == pytest.approx(q)
    assert ct.se == pytest.approx(se)
    assert ct.interval == pytest.approx((max(0.0, np.mean(a) - q * se),
                                         min(1.0, np.mean(a) + q * se)))
    # Declaring clusters that are anti-correlated can never make the SE smaller than iid.
    alternating = [1.0, 0.0] * 20
    pairs = [f"p{i // 2}" for i in range(40)]
    assert cr1_stderr(alternating, pairs) < stderr(alternating)
    assert cluster_t_interval(alternating, pairs).se == stderr(alternating)


def test_cluster_wilson_interval_is_wilson_with_the_design_effect() -> None:
    a, _, clusters = _clustered_case()
    cw = cluster_wilson_interval(a, clusters)
    p = float(np.mean(a))
    n_eff = p * (1 - p) / cw.se ** 2
    q = cw.quantile
    centre = (p + q * q / (2 * n_eff)) / (1 + q * q / n_eff)
    half = q / (1 + q * q / n_eff) * math.sqrt(p * (1 - p) / n_eff + q * q / (4 * n_eff ** 2))
    assert cw.effective_n == pytest.approx(n_eff)
    assert cw.interval == pytest.approx((centre - half, centre + half))
    assert cw.effective_n is not None and cw.effective_n < len(a)  # clustering costs tasks


def test_cluster_labels() -> None:
    assert cluster_labels([None, None, None]) is None
    assert cluster_labels(["a", "b", None]) is None  # every cluster a singleton
    labels = cluster_labels(["a", "a", None, None])
    assert labels is not None and labels[:2] == ["a", "a"]
    assert len(set(labels)) == 3  # unlabelled tasks are clusters of their own


# ---------------------------------------------------------------------------------------------
# Seeds and reproducibility
# ---------------------------------------------------------------------------------------------


def test_derive_seed() -> None:
    expected = int.from_bytes(hashlib.sha256(b"task-set-v1\x00run-42").digest()[:8], "big")
    assert derive_seed("task-set-v1", "run-42") == expected
    assert 0 <= expected < 2**64
    assert derive_seed("a", "b") != derive_seed("b", "a")
    assert derive_seed("ab", "c") != derive_seed("a", "bc")
    with pytest.raises(TypeError):
        derive_seed("a", 3)  # type: ignore[arg-type]


def _cases() -> dict[str, dict[str, Any]]:
    """One input per sampling strategy, so each code path is checked for reproducibility."""
    rng = np.random.default_rng(11)
    binary = rng.integers(0, 2, size=300).astype(float)
    epochs = rng.integers(0, 5, size=300) / 4.0
    continuous = rng.random(300)
    strata = [f"s{i % 3}" for i in range(300)]
    clusters = [f"c{i // 7}" for i in range(300)]
    return {
        "binary": {"scores": binary},
        "multinomial": {"scores": epochs},
        "indexed": {"scores": continuous},
        "strata": {"scores": epochs, "strata": strata},
        "clusters": {"scores": binary, "clusters": clusters},
        "strata+clusters": {"scores": continuous, "strata": strata, "clusters": clusters},
    }


@pytest.mark.parametrize("case", list(_cases()))
def test_bootstrap_is_bit_reproducible(case: str) -> None:
    kwargs = _cases()[case]
    first = bootstrap_means(seed=123, resamples=3000, **kwargs)
    again = bootstrap_means(seed=123, resamples=3000, **kwargs)
    other = bootstrap_means(seed=124, resamples=3000, **kwargs)
    assert first.dtype == np.float64 and first.shape == (3000,)
    assert first.tobytes() == again.tobytes()
    assert first.tobytes() != other.tobytes()
    i1 = bootstrap_interval(seed=123, resamples=3000, **kwargs)
    i2 = bootstrap_interval(seed=123, resamples=3000, **kwargs)
    assert i1 == i2
    assert type(i1[0]) is float


def test_headline_is_reproducible() -> None:
    scores = [1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0] * 3
    seed = derive_seed("bench-id", "run-1")
    assert headline(scores, seed=seed) == headline(scores, seed=seed)
    assert headline(scores, seed=seed).seed == seed


def _reference_index_bootstrap(x: np.ndarray, seed: int, resamples: int) -> np.ndarray:
    """The textbook bootstrap (draw n indices, take the mean), for distribution comparison."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(resamples, x.size))
    return x[idx].mean(axis=1)


@pytest.mark.parametrize("case", ["binary", "multinomial", "indexed"])
def test_shortcut_paths_have_the_bootstrap_distribution(case: str) -> None:
    """Binomial/multinomial count draws must be the *same* distribution as index resampling."""
    x = np.asarray(_cases()[case]["scores"])
    ours = bootstrap_means(x, seed=5, resamples=4000)
    ref = _reference_index_bootstrap(x, seed=6, resamples=4000)
    assert sps.ks_2samp(ours, ref).pvalue > 0.001
    plug_in_sd = float(np.std(x) / math.sqrt(x.size))
    assert float(np.std(ours)) == pytest.approx(plug_in_sd, rel=0.06)
    assert float(np.mean(ours)) == pytest.approx(float(np.mean(x)), abs=plug_in_sd / 10)


# ---------------------------------------------------------------------------------------------
# Strata and clusters
# ---------------------------------------------------------------------------------------------


def test_stratified_bootstrap_keeps_stratum_sizes() -> None:
    scores = [1.0] * 20 + [0.0] * 30
    strata = ["easy"] * 20 + ["hard"] * 30
    means = bootstrap_means(scores, seed=1, resamples=2000, strata=strata)
    assert np.all(means == 20 / 50)
    assert float(np.ptp(means)) == 0.0  # zero spread: every resample is the same
    # Unstratified, the same data does vary.
    assert float(np.var(bootstrap_means(scores, seed=1, resamples=2000))) > 0.0
    # And headline refuses to publish the zero-width stratified bootstrap.
    h = headline(scores, seed=1, method="bootstrap", resamples=2000, strata=strata,
                 strata_fixed=True)
    assert h.degenerate and h.method == "stratified-wilson"
    assert h.note is not None and "zero width" in h.note
    assert h.ci95[1] - h.ci95[0] > 0.05


def test_stratified_weights_by_stratum_size() -> None:
    rng = np.random.default_rng(9)
    scores = np.concatenate([rng.random(10), rng.random(90) * 0.2])
    strata = ["a"] * 10 + ["b"] * 90
    means = bootstrap_means(scores, seed=2, resamples=4000, strata=strata)
    assert float(np.mean(means)) == pytest.approx(float(np.mean(scores)), abs=2e-3)
    assert float(np.var(means)) < float(np.var(bootstrap_means(scores, seed=2, resamples=4000)))


def _clustered_case() -> tuple[list[float], list[float], list[str]]:
    """10 repositories x 5 tasks; outcomes move together within a repository.

    Agent B fixes three repositories wholesale that A fails, A wins one repository wholesale,
    and the remaining six repositories go the same way for both. Task-level, 20 of 50 tasks
    are discordant 15:5 and look decisive; repository-level, it is 3:1 out of 10 repositories.
    """
    a: list[float] = []
    b: list[float] = []
    clusters: list[str] = []
    pattern = [
        ([0, 0, 0, 0, 0], [1, 1, 1, 1, 1]),
        ([0, 0, 0, 0, 0], [1, 1, 1, 1, 1]),
        ([0, 0, 0, 0, 1], [1, 1, 1, 1, 1]),
        ([1, 1, 1, 1, 1], [0, 0, 0, 0, 1]),
        ([1, 1, 1, 1, 1], [1, 1, 1, 1, 1]),
        ([1, 1, 1, 1, 0], [1, 1, 1, 1, 0]),
        ([1, 1, 0, 0, 0], [1, 1, 0, 0, 0]),
        ([0, 0, 0, 0, 0], [0, 0, 0, 0, 0]),
        ([0, 0, 0, 0, 0], [0, 0, 0, 0, 0]),
        ([1, 0, 0, 0, 0], [1, 0, 0, 0, 0]),
    ]
    for r, (ra, rb) in enumerate(pattern):
        a += [float(v) for v in ra]
        b += [float(v) for v in rb]
        clusters += [f"repo{r}"] * 5
    return a, b, clusters


def test_clustered_compare_uses_the_cluster_test_and_does_not_reject() -> None:
    """Task-level, 15:5 discordant looks decisive; repository-level it is 3:1 of 10 repos."""
    a, b, clusters = _clustered_case()
    plain = paired_comparison(a, b)
    clustered = paired_comparison(a, b, clusters=clusters)
    assert plain.method == "newcombe" and plain.test == "exact McNemar"
    assert clustered.method == "cluster-t" and clustered.test.startswith("cluster-robust t")
    assert clustered.df == 9 and clustered.clusters == 10
    assert plain.diff == clustered.diff == pytest.approx(0.2)
    assert plain.p_value < 0.05 and plain.ci95[0] > 0.0  # task-level: "significant"
    assert clustered.p_value > 0.05  # repo-level: not
    assert clustered.ci95[0] < 0.0 < clustered.ci95[1], clustered.ci95
    assert clustered.ci95[1] - clustered.ci95[0] > 1.5 * (plain.ci95[1] - plain.ci95[0])
    d = np.asarray(b) - np.asarray(a)
    assert clustered.se == pytest.approx(max(stderr(d), _statsmodels_cr1(list(d), clusters),
                                             cr3_stderr(d, clusters)))
    assert clustered.p_value == pytest.approx(
        2 * float(sps.t.sf(0.2 / clustered.se, 9)))


def test_cluster_bootstrap_mean_over_drawn_tasks() -> None:
    # Unequal cluster sizes: one cluster of 1 pass, one cluster of 3 fails. Each resample draws
    # two clusters: means are 1 (both the pass), 0 (both fails) or 1/4 (one of each).
    means = bootstrap_means([1.0, 0.0, 0.0, 0.0], seed=3, resamples=4000, clusters=list("abbb"))
    assert set(np.unique(means).tolist()) == {0.0, 0.25, 1.0}
    assert float(np.mean(means == 0.25)) == pytest.approx(0.5, abs=0.03)


def test_single_cluster_gives_wilson_with_a_note() -> None:
    h = headline([1.0, 0.0, 1.0, 1.0], seed=1, clusters=["r"] * 4)
    assert h.method == "wilson" and h.ci95 == wilson(3, 4)
    assert h.note is not None and "one cluster" in h.note
    boot = headline([1.0, 0.0, 1.0, 1.0], seed=1, method="bootstrap", resamples=500,
                    clusters=["r"] * 4)
    assert boot.degenerate and boot.method == "wilson" and boot.method_requested == "bootstrap"


# ---------------------------------------------------------------------------------------------
# headline
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scores", "expected"), [([1.0] * 40, (0.912378, 1.0)), ([0.0] * 40, (0.0, 0.087622))]
)
def test_degenerate_bootstrap_falls_back_to_the_automatic_interval(
    scores: list[float], expected: tuple[float, float]
) -> None:
    h = headline(scores, seed=derive_seed("all", "same"), method="bootstrap")
    assert isinstance(h, Headline)
    assert h.n == 40 and h.degenerate
    assert h.method == "wilson" and h.method_requested == "bootstrap"
    assert h.ci95[0] == pytest.approx(expected[0], abs=TOL)
    assert h.ci95[1] == pytest.approx(expected[1], abs=TOL)
    assert h.ci95[1] > h.ci95[0]
    assert h.note is not None and "zero width" in h.note
    assert h.wilson95 == h.ci95


def test_near_constant_scores_count_as_degenerate() -> None:
    h = headline([0.5, 0.5000000000000001, 0.5], seed=1, method="bootstrap", resamples=500)
    assert h.degenerate and h.method == "cluster-wilson"
    assert h.wilson95 is None  # fractional scores
    assert h.ci95[0] <= h.mean <= h.ci95[1] and h.ci95[1] - h.ci95[0] > 0.5


def test_headline_fields_and_types() -> None:
    scores = [1.0] * 23 + [0.0] * 17
    h = headline(scores, seed=9)
    assert h.method == "wilson" and h.method_requested == "auto" and not h.degenerate
    assert h.ci95 == wilson(23, 40) and h.note is None and h.resamples == 0
    assert h.quantile == pytest.approx(float(sps.norm.ppf(0.975)))
    assert h.mean == pytest.approx(23 / 40) and type(h.mean) is float
    assert h.wilson95 == wilson(23, 40)
    assert h.stderr == pytest.approx(stderr(scores))
    assert h.cr1_stderr is None and h.clusters is None
    assert all(type(v) is float for v in h.ci95)
    boot = headline(scores, seed=9, method="bootstrap", resamples=2000)
    assert boot.method == "bootstrap" and boot.resamples == 2000 and boot.seed == 9
    assert boot.draws is not None and "default_rng" in boot.draws
    assert boot.note is not None and "under-covers below n = 100" in boot.note
    big = headline([1.0] * 230 + [0.0] * 170, seed=9, method="bootstrap", resamples=500)
    assert big.note is None
    cp = headline(scores, seed=9, method="clopper-pearson")
    assert cp.ci95 == clopper_pearson(23, 40) and cp.method == "clopper-pearson"
    frac = headline([0.25, 0.5, 0.75, 1.0, 0.5], seed=9)
    assert frac.wilson95 is None and frac.method == "cluster-wilson" and frac.df == 4


def test_headline_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        headline([], seed=1)
    with pytest.raises(ValueError):
        headline([0.5, 1.2], seed=1)
    with pytest.raises(ValueError):
        headline([0.5, -0.1], seed=1)
    with pytest.raises(ValueError):
        headline([0.5, float("nan")], seed=1)
    with pytest.raises(ValueError):
        headline([0.5], seed=1, method="wald")
    with pytest.raises(ValueError):
        headline([0.5, 1.0], seed=1, strata=["a"], strata_fixed=True)


def test_easy_and_hard_strata_publish_wilson_by_default() -> None:
    """20 easy tasks all pass, 30 hard ones 1 passes: labels must not narrow the headline."""
    scores = [1.0] * 20 + [1.0] + [0.0] * 29
    strata = ["easy"] * 20 + ["hard"] * 30
    h = headline(scores, seed=3, strata=strata)
    assert h.ci95 == wilson(21, 50) and not h.stratified
    assert "do not narrow the headline" in h.reason
    fixed = headline(scores, seed=3, strata=strata, strata_fixed=True)
    assert fixed.stratified and fixed.conditional_on_strata
    assert fixed.method == "stratified-wilson"
    assert fixed.ci95[1] - fixed.ci95[0] < h.ci95[1] - h.ci95[0]  # by design, and labelled


def test_stratified_interval_uses_n_h_minus_one_variance() -> None:
    rng = np.random.default_rng(2)
    scores = rng.random(30).round(2)
    strata = ["a"] * 10 + ["b"] * 20
    st_ = stratified_interval(scores, strata)
    v = sum((len(part) / 30) ** 2 * float(np.var(part, ddof=1)) / len(part)
            for part in (scores[:10], scores[10:]))
    parts = [(len(part) / 30) ** 2 * float(np.var(part, ddof=1)) / len(part)
             for part in (scores[:10], scores[10:])]
    satterthwaite = math.floor(v * v / (parts[0] ** 2 / 9 + parts[1] ** 2 / 19))
    assert st_.method == "stratified-t" and st_.df == satterthwaite < 28
    assert st_.se == pytest.approx(math.sqrt(v))
    q = float(sps.t.ppf(0.975, satterthwaite))
    assert st_.interval == pytest.approx((np.mean(scores) - q * math.sqrt(v),
                                          np.mean(scores) + q * math.sqrt(v)))
    lonely = stratified_interval([1.0, 0.0, 1.0], ["a", "a", "b"])
    assert lonely.interval is None and lonely.why_not is not None
    crossing = stratified_interval([1.0, 0.0, 1.0, 0.0], ["a", "a", "b", "b"],
                                   clusters=["c", "d", "c", "d"])
    assert crossing.interval is None and "cross" in (crossing.why_not or "")


# ---------------------------------------------------------------------------------------------
# Memory and scale
# ---------------------------------------------------------------------------------------------


def test_bootstrap_memory_is_bounded_at_100k() -> None:
    rng = np.random.default_rng(0)
    n = 100_000
    continuous = rng.random(n)  # forces the index-resampling path (no count shortcut)
    binary = (rng.random(n) < 0.3).astype(float)
    clusters = [str(i // 10) for i in range(n)]
    tracemalloc.start()
    try:
        bootstrap_means(continuous, seed=1, resamples=300)
        bootstrap_means(binary, seed=1, resamples=10_000)
        bootstrap_means(binary, seed=1, resamples=300, clusters=clusters)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 200 * 1024 * 1024, f"peak {peak / 2**20:.1f} MiB"


# ---------------------------------------------------------------------------------------------
# Properties
# ---------------------------------------------------------------------------------------------

binary_scores = st.lists(st.sampled_from([0.0, 1.0]), min_size=1, max_size=200)
fractional_scores = st.lists(st.floats(0.0, 1.0), min_size=1, max_size=200)
epoch_scores = st.lists(st.integers(0, 4).map(lambda k: k / 4.0), min_size=1, max_size=200)
any_scores = st.one_of(binary_scores, fractional_scores, epoch_scores)
seeds = st.integers(0, 2**64 - 1)


def _assert_published(h: Headline) -> None:
    low, high = h.ci95
    assert 0.0 <= low <= h.mean <= high <= 1.0, h
    assert high - low > 1e-9 or h.method != "bootstrap", h  # never a zero-width bootstrap


@settings(max_examples=60, deadline=None)
@given(scores=any_scores, seed=seeds)
def test_headline_interval_contains_estimate(scores: list[float], seed: int) -> None:
    for method in METHODS:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            h = headline(scores, seed=seed, method=method, resamples=2000)
        _assert_published(h)
        assert h.n == len(scores)


@settings(max_examples=40, deadline=None)
@given(data=st.data(), scores=any_scores, seed=seeds)
def test_headline_with_design_contains_estimate(
    data: st.DataObject, scores: list[float], seed: int
) -> None:
    n = len(scores)
    strata = data.draw(st.lists(st.sampled_from("xy"), min_size=n, max_size=n))
    clusters = data.draw(st.lists(st.sampled_from("abcdef"), min_size=n, max_size=n))
    designs: list[dict[str, Any]] = [
        {"strata": strata},
        {"clusters": clusters},
        {"strata": strata, "clusters": clusters},
        {"strata": strata, "strata_fixed": True},
        {"strata": strata, "clusters": clusters, "strata_fixed": True},
    ]
    for method in METHODS:
        for kwargs in designs:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                if "strata_fixed" in kwargs and min(strata.count(x) for x in set(strata)) < 2:
                    continue  # seal refuses one-task strata under publish.strata: fixed
                _assert_published(headline(scores, seed=seed, method=method, resamples=2000,
                                           **kwargs))


@settings(max_examples=80, deadline=None)
@given(data=st.data(), scores=any_scores, seed=seeds)
def test_labels_never_narrow_the_published_interval(
    data: st.DataObject, scores: list[float], seed: int
) -> None:
    """Adding a distinct stratum to each task, or any strata without publish.strata: fixed,
    leaves the interval as it was; adding clusters can only widen it."""
    n = len(scores)
    plain = headline(scores, seed=seed)
    distinct = [f"s{i}" for i in range(n)]
    some = data.draw(st.lists(st.sampled_from("xyz"), min_size=n, max_size=n))
    clusters = data.draw(st.lists(st.sampled_from("abcdef"), min_size=n, max_size=n))
    for strata in (distinct, some):
        assert headline(scores, seed=seed, strata=strata).ci95 == plain.ci95
    labels = cluster_labels(clusters)
    clustered = headline(scores, seed=seed, clusters=labels)
    both = headline(scores, seed=seed, clusters=labels, strata=some)
    assert both.ci95 == clustered.ci95
    assert clustered.ci95[0] <= plain.ci95[0] + 1e-12
    assert clustered.ci95[1] >= plain.ci95[1] - 1e-12


@settings(max_examples=60, deadline=None)
@given(data=st.data(), use_clusters=st.booleans())
def test_paired_ci_contains_diff(data: st.DataObject, use_clusters: bool) -> None:
    a = data.draw(any_scores)
    n = len(a)
    elem = st.sampled_from([0.0, 1.0]) if set(a) <= {0.0, 1.0} else st.floats(0.0, 1.0)
    b = data.draw(st.lists(elem, min_size=n, max_size=n))
    clusters = (
        data.draw(st.lists(st.sampled_from("abcde"), min_size=n, max_size=n))
        if use_clusters
        else None
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no NaN/divide warnings leak out on odd inputs
        cmp = paired_comparison(a, b, clusters=clusters)
    assert -1.0 <= cmp.ci95[0] <= cmp.diff <= cmp.ci95[1] <= 1.0, cmp
    assert cmp.correlation is None or -1.0 <= cmp.correlation <= 1.0
    assert 0.0 <= cmp.p_value <= 1.0
    binary = (set(a) | set(b)) <= {0.0, 1.0}
    assert (cmp.table is None) == (not binary)


def test_prefetch_imports_scipy_stats_in_the_background() -> None:
    """A run starts importing scipy.stats while its attempts run (the report needs it); in a
    fresh interpreter the import happens on another thread, and once done it is not redone."""
    import subprocess
    import sys

    code = ("import sys, threading\n"
            "from sealbench.stats import prefetch_scipy_stats\n"
            "assert 'scipy.stats' not in sys.modules\n"
            "thread = prefetch_scipy_stats()\n"
            "assert thread is not None and thread is not threading.current_thread()\n"
            "thread.join()\n"
            "assert 'scipy.stats' in sys.modules\n"
            "assert prefetch_scipy_stats() is None\n"
            "print('ok')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False, timeout=120)
    assert done.stdout.strip() == "ok", done.stderr
