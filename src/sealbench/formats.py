"""The machine-readable formats sealbench writes, as pydantic models (docs/formats.md).

One leaf module: it imports pydantic and the standard library, nothing of sealbench, so the
writing modules and the schema generator read the keys from one place.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

# ---- leaderboard (sealbench leaderboard)

LEADERBOARD_VERSION: Final = "sealbench-leaderboard/v1"

_Rate = Annotated[float, Field(ge=0.0, le=1.0)]
_Difference = Annotated[float, Field(ge=-1.0, le=1.0)]
_P = Annotated[float, Field(ge=0.0, le=1.0)]


class _LeaderboardRecord(BaseModel):
    """Closed: a key the code adds without a new model (and schema, and version) fails."""

    model_config = ConfigDict(extra="forbid")


class LeaderboardRun(_LeaderboardRecord):
    """One published run on the board, with its published figures and its tier letters."""

    run_id: str
    ledger: str = Field(description="The ledger file the run was read from.")
    solver: str = Field(description="The solver command the run recorded.")
    n: int = Field(ge=1, description="Dataset tasks scored, as published.")
    mean: _Rate
    ci95: tuple[_Rate, _Rate] = Field(description="The published 95% interval [low, high].")
    ci_method: str
    letters: str = Field(
        pattern=r"^[a-z]+$",
        description="Compact letter display: two runs sharing a letter are not "
                    "distinguishable at the family-wise alpha.")


class LeaderboardPair(_LeaderboardRecord):
    """The paired comparison of run b against run a (`diff = mean_b - mean_a`) on the tasks
    both scored: `sealbench compare a b`'s test and interval."""

    a: str = Field(description="run_id of the run listed first (higher or equal mean).")
    b: str
    n: int = Field(ge=1, description="Tasks scored in both runs.")
    diff: _Difference
    ci95: tuple[_Difference, _Difference]
    method: str = Field(description="The interval: newcombe, cluster-t or paired-t.")
    test: str
    p: _P = Field(description="The test's two-sided p-value, unadjusted.")
    p_holm: _P = Field(description="Holm-adjusted over every pair on the board.")
    distinguishable: bool = Field(
        description="p_holm < alpha and the interval measures something (not zero width "
                    "around a non-zero difference).")
    unpaired: list[str] = Field(description="Task ids scored in one run only, left out.")


class LeaderboardLeftOut(_LeaderboardRecord):
    """A run of a ledger that is not on the board, and why."""

    run_id: str
    ledger: str
    why: str


class Leaderboard(_LeaderboardRecord):
    """`sealbench leaderboard --format json`: the published runs of one protocol identity."""

    model_config = ConfigDict(title="sealbench leaderboard (sealbench-leaderboard/v1)")

    format: Literal["sealbench-leaderboard/v1"]
    protocol_id: str
    identity: str = Field(pattern=r"^sha256:[0-9a-f]{64}$")
    alpha: float = Field(gt=0.0, lt=1.0, description="Family-wise error rate of the tiers.")
    correction: Literal["holm"]
    runs: list[LeaderboardRun] = Field(
        min_length=2, description="Ordered by mean, highest first; the order inside a tier "
                                  "is not a ranking.")
    pairs: list[LeaderboardPair]
    indistinguishable: list[tuple[str, str]] = Field(
        description="Pairs of run ids the data do not tell apart.")
    left_out: list[LeaderboardLeftOut]
