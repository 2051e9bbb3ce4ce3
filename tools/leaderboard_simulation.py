"""Simulate leaderboards to check their statistics (not a test: it takes minutes).

Boards of 3-4 agents on shared tasks, with known rates (equal under the null), built with the
library's own functions as `sealbench leaderboard` builds them (stats.paired_comparison per pair,
stats.holm, compare.measures_nothing, leaderboard.compact_tiers). Prints the family-wise rate
of "told apart" among agents with equal rates (must be at most 0.05), and asserts on every board
that two runs share a letter exactly when their pair is not told apart (no ranking inside a
tie). Task difficulty is a logit shift shared by all agents; clusters add a shared shift per
cluster; epochs > 1 give fractional scores. Usage: python tools/leaderboard_simulation.py [BOARDS]
"""

from __future__ import annotations

import itertools
import sys

import numpy as np

from sealbench.compare import measures_nothing
from sealbench.leaderboard import ALPHA, compact_tiers
from sealbench.stats import holm, paired_comparison


def board(scores: list[np.ndarray], clusters: list[str] | None) -> list[tuple[int, int]]:
    """The pairs told apart, checking the tiers against them."""
    order = sorted(range(len(scores)), key=lambda i: -float(np.mean(scores[i])))
    tested = [(i, j, paired_comparison(scores[i], scores[j], clusters=clusters))
              for i, j in itertools.combinations(order, 2)]
    adjusted = holm([r.p_value for _, _, r in tested])
    apart = [(i, j) for (i, j, r), p in zip(tested, adjusted, strict=True)
             if p < ALPHA and not measures_nothing(r.ci95, r.diff)]
    tiers = compact_tiers([str(i) for i in order], [(str(i), str(j)) for i, j in apart])
    for i, j in itertools.combinations(range(len(scores)), 2):
        share = bool(set(tiers[str(i)]) & set(tiers[str(j)]))
        assert share == ((i, j) not in apart and (j, i) not in apart), (tiers, apart)
    return apart


def simulate(label: str, rates: list[float], *, n: int = 50, boards: int = 400,
             epochs: int = 1, n_clusters: int = 0, spread: float = 2.0, seed: int = 1) -> None:
    rng = np.random.default_rng(seed)
    false_apart = any_apart = 0
    for _ in range(boards):
        difficulty = rng.normal(0.0, spread, n)
        clusters = None
        if n_clusters:
            members = rng.integers(0, n_clusters, n)
            difficulty = difficulty + rng.normal(0.0, 1.5, n_clusters)[members]
            clusters = [f"c{m}" for m in members]
        scores = [rng.binomial(epochs, 1 / (1 + np.exp(-(np.log(r / (1 - r)) + difficulty))))
                  / epochs for r in rates]
        apart = board([s.astype(float) for s in scores], clusters)
        false_apart += any(rates[i] == rates[j] for i, j in apart)
        any_apart += bool(apart)
    print(f"{label:52s} boards {boards}: FWER {false_apart / boards:.3f}, "
          f"any pair told apart {any_apart / boards:.3f}", flush=True)


def main() -> None:
    boards = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    simulate("null, 3 agents, p .5, n 50", [.5] * 3, boards=boards)
    simulate("null, 4 agents, p .5, n 50", [.5] * 4, boards=boards)
    simulate("null, 4 agents, p .5, n 50, no task spread", [.5] * 4, boards=boards, spread=0)
    simulate("null, 4 agents, p .3, n 100", [.3] * 4, n=100, boards=boards)
    simulate("null, 4 agents, p .5, n 50, 3 epochs", [.5] * 4, boards=boards, epochs=3)
    simulate("null, 4 agents, p .5, n 54, 10 clusters", [.5] * 4, n=54, boards=boards,
             n_clusters=10)
    simulate("partial null .5 .5 .5 .8, n 50", [.5, .5, .5, .8], boards=boards)
    simulate("alternative .4 .6 .8, n 100", [.4, .6, .8], n=100, boards=boards)


if __name__ == "__main__":
    main()
