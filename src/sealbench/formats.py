"""The machine-readable formats sealbench writes, as pydantic models (docs/formats.md).

One leaf module — it imports pydantic and the standard library, nothing of sealbench — so every
module that hands a record to another (report.py, compare.py, ledger export, runner.py) and the
schema generator (sealbench/schemas) read the keys from one place instead of spelling them out.
Each top-level model carries its format version as a Literal equal to the constant the writing
module already has (REPORT_FORMAT, COMPARE_FORMAT, ...): tests/test_formats.py checks they agree.

Closed formats (`extra="forbid"`) refuse an unknown key, so a key added by the code without a
new model (and schema, and version) fails the tests instead of shipping silently. Optional keys
that older runs lack are fields with a default: absent in the JSON, never filled in — the
models validate what was written, the bytes come from the writing module (a golden test pins
them).

pydantic is imported here, so importing this module costs what the protocol model costs: the
light commands (`runs`, `show`, `--help`) never import it (tests/test_startup.py).
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

REPORT_VERSION = "sealbench-report/v3"
COMPARE_VERSION = "sealbench-compare/v2"
EXPORT_VERSION = "sealbench-export/v2"

Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$", description="sha256, lowercase hex.")]
Identity = Annotated[str, Field(pattern=r"^sha256:[0-9a-f]{64}$",
                                description="The protocol identity (docs/sealing.md).")]
Probability = Annotated[float, Field(ge=0.0, le=1.0)]
Interval = Annotated[tuple[Probability, Probability],
                     Field(description="A 95% interval [low, high].")]
Count = Annotated[int, Field(ge=0)]
Phase = Literal["null_pack", "dataset"]
Outcome = Literal["pass", "fail", "refused", "timeout", "violation", "error"]
HeadlineMethod = Literal["wilson", "cluster-wilson", "stratified-wilson", "stratified-t",
                         "clopper-pearson", "bootstrap"]
RequestedMethod = Literal["auto", "wilson", "clopper-pearson", "bootstrap"]
Network = Literal["none", "model-api", "open"]


class Closed(BaseModel):
    """A record whose keys are all known: an unknown one is an error, not a pass-through.
    Strict: what is checked is the JSON as written (validate with model_validate_json), so a
    count written as "3" is wrong rather than coerced."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True)


# ------------------------------------------------------------------------- the attempt record


class EgressConnection(Closed):
    """One connection an attempt made to the egress proxy (budget.network: model-api)."""

    host: str | None
    port: int | None
    allowed: bool
    bytes_up: Count
    bytes_down: Count
    duration: float = Field(ge=0.0)
    reason: str | None


class TripwireRecord(Closed):
    """One planted tripwire: its test id, what it must report, the listed test it copies, and
    what the runner reported for it."""

    id: str
    kind: Literal["pass", "fail", "error"]
    source: str
    outcome: Literal["passed", "failed", "error", "skipped", "missing"]


class TestsRecord(Closed):
    """The hidden tests' run (a protocol with a verifier): outcomes inline, logs as artifacts."""

    exit_code: int | None
    problem: str | None
    report_problem: str | None
    results: dict[str, Literal["passed", "failed", "error", "skipped"]]
    junit: Sha256
    stdout: Sha256
    stderr: Sha256
    duration: float = Field(ge=0.0)
    # the tests planted to catch a tampered runner (docs/threat-model.md#tripwires); absent
    # when none were planted, and in records written before them
    tripwires: list[TripwireRecord] | None = None


class ScoredAttempt(Closed):
    """An attempt that reached an outcome (the ledger's `attempts.record`). Keys newer than
    the first ledger (`attempt_id`, `tests`, `metric_log`, `egress`, ...) are optional: a
    record written before them has none, and gets none."""

    outcome: Outcome
    detail: str
    score: Literal[0, 1]
    diff: Sha256
    stdout: Sha256
    stderr: Sha256
    metric: dict[str, Any] | None = Field(description="What the metric's score() returned.")
    metric_log: Sha256 | None = None
    files_touched: Count
    forbidden_written: list[str]
    returncode: int | None
    duration: float = Field(ge=0.0)
    stratum: str | None = None
    cluster: str | None = None
    attempt_id: str | None = None
    tests: TestsRecord | None = None
    egress: list[EgressConnection] | None = None
    egress_unlogged: Count | None = None


class InfrastructureErrorAttempt(Closed):
    """An attempt the harness could not run (never scored; `run --resume` re-runs it)."""

    outcome: Literal["infrastructure_error"]
    detail: str
    tries: Count
    duration: float = Field(ge=0.0)
    stratum: str | None = None
    cluster: str | None = None
    attempt_id: str | None = None


AttemptRecord = Annotated[ScoredAttempt | InfrastructureErrorAttempt,
                          Field(discriminator="outcome")]


class ExportLine(Closed):
    """One line of `sealbench export` (JSON Lines): an attempt with what is needed to recompute
    its run's figures and chain."""

    model_config = ConfigDict(title="sealbench export line (sealbench-export/v2)")

    format: Literal["sealbench-export/v2"]
    run_id: str
    protocol_id: str
    identity: Identity
    solver: str
    sandbox: Literal["bwrap", "none"]
    ci_method: RequestedMethod
    strata: Literal["descriptive", "fixed"]
    min_n: Count
    epochs: int = Field(ge=1)
    rules: dict[str, str]
    seq: Count
    phase: Phase
    task_id: str
    epoch: Count
    record: AttemptRecord
    prev_digest: Sha256
    digest: Sha256


# ----------------------------------------------------------------------------- the run header


class HomeFrom(Closed):
    """`run --home-from DIR`: where the solver's HOME was seeded from, and its content's digest."""

    path: str
    sha256: Sha256
    entries: Count
    bytes: Count


class Versions(Closed):
    python: str
    numpy: str
    scipy: str
    sealbench: str


class Trial(Closed):
    tasks: list[str]
    limit: int | None


class RunOptions(Closed):
    """The run's settings as the header (ledger link 0) holds them. Keys absent in runs
    recorded by older versions are optional; `pid` and `host` belong to the owner (the
    `created`/`resumed` links), never to the header."""

    kind: Literal["run", "trial"] = "run"
    trial: Trial | None = None
    jobs: int = Field(ge=1)
    timeout_scale: float = Field(gt=0.0)
    epochs: int = Field(ge=1)
    min_n: Count
    require_ci: bool
    ci_method: RequestedMethod
    strata: Literal["descriptive", "fixed"] = "descriptive"
    rules: dict[str, Literal["must_pass", "must_fail", "must_refuse"]]
    task_ids: Literal["blind", "visible"] = "visible"
    max_infrastructure_errors: Count | None = None
    attempt_secret: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] | None = None
    protocol_dir: str | None = None
    sandbox_reason: str | None = None
    expose: list[str] = []
    env_names: list[str] | None = None
    home_from: HomeFrom | None = None
    solver_argv: list[str] | None = None
    network: Network | None = None
    allow_hosts: list[str] = []
    expected: dict[Phase, Count] | None = None
    solver_files: dict[str, Sha256] | None = None
    hide: list[str] = []
    versions: Versions | None = None
    signing_key: Sha256 | None = None


class RunHeader(Closed):
    """Ledger link 0 of a run's chain (docs/formats.md#the-ledger): what ran, where, how."""

    protocol_id: str
    identity: Identity
    solver: str
    sandbox: Literal["bwrap", "none"]
    started_at: str
    options: RunOptions
    at: str | None = None
    migrated_from: int | None = None


# --------------------------------------------------------------------------------- the report


class Solver(Closed):
    command: str
    env_names: list[str] | None
    home_from: HomeFrom | None


class IntervalSection(Closed):
    """How the headline interval was obtained, enough to recompute it (docs/statistics.md)."""

    confidence: float = Field(ge=0.95, le=0.95, description="Always 0.95.")
    method_requested: RequestedMethod
    reason: str
    note: str | None
    degenerate: bool
    quantile: float | None
    df: int | None
    clusters: int | None
    stderr: float | None
    cr1_stderr: float | None
    cr3_stderr: float | None
    stratified: bool
    conditional_on_strata: bool
    effective_n: float | None
    wilson95: Interval | None
    seed: int
    resamples: Count
    draws: str | None


class Stratum(Closed):
    n: Count
    mean: Probability
    ci95: Interval
    ci_method: Literal["wilson", "cluster-wilson"]


class MinimumDetectableDifference(Closed):
    value: float | None
    power: float
    alpha: float
    test: Literal["exact McNemar", "cluster-robust t", "paired t", "none"]
    assumes: str


class PassAtK(Closed):
    k: int = Field(ge=1)
    n: Count
    pass_at_k: Probability
    pass_at_k_ci95: Interval
    pass_hat_k: Probability
    pass_hat_k_ci95: Interval
    ci_method: HeadlineMethod


class Outcomes(Closed):
    """Dataset attempts per outcome (K per task with epochs)."""

    pass_: Count = Field(alias="pass")
    fail: Count
    refused: Count
    timeout: Count
    violation: Count
    error: Count


class InfrastructureListing(Closed):
    phase: Phase
    task_id: str
    epoch: Count
    detail: str


class Control(Closed):
    id: str
    rule: Literal["must_pass", "must_fail", "must_refuse"]
    outcome: str
    ok: bool
    reason: str | None


class PassedNullPack(Closed):
    """A report exists only for a run whose null pack passed: `passed` is always true."""

    passed: Literal[True]
    controls: list[Control] = Field(min_length=1)


class Publish(Closed):
    min_n: Count
    require_ci: bool


class Timings(Closed):
    started_at: str
    finished_at: str | None
    attempts: Count
    attempt_seconds_total: float = Field(ge=0.0)


class Records(Closed):
    ledger: str
    artifacts: str
    run_id: str
    attempts: Count
    links: Count
    chain_head: Sha256
    settings_chained: Literal["since the run was created", "since migration from ledger v2"]


class HistoryEntry(Closed):
    phase: Phase
    task_id: str
    epoch: Count
    how: str


class AttemptHistory(Closed):
    interrupted: list[HistoryEntry]
    rerun: list[HistoryEntry]


class Signature(Closed):
    """`run --sign` / `report --sign`: an Ed25519 signature of the rest of the report."""

    algorithm: Literal["ed25519"]
    key_fingerprint: Sha256
    public_key: str
    value: str


class Report(Closed):
    """report.json: a published run's figures, recomputed from the ledger alone."""

    model_config = ConfigDict(title="sealbench report (sealbench-report/v3)")

    format: Literal["sealbench-report/v3"]
    protocol_id: str
    identity: Identity
    run_id: str
    solver: Solver
    sandbox: Literal["bwrap", "none"]
    exposed: list[str]
    network: Network | None = Field(default=None, description="Absent for runs recorded before "
                                    "the run header had a network policy.")
    allow_hosts: list[str] | None = None
    n: Count
    mean: Probability
    ci95: Interval
    ci_method: HeadlineMethod
    interval: IntervalSection
    epochs: int = Field(ge=1)
    timeout_scale: float = Field(gt=0.0)
    strata: dict[str, Stratum]
    min_detectable_difference: MinimumDetectableDifference
    pass_at_k: list[PassAtK]
    outcomes: Outcomes
    infrastructure_errors: Count
    infrastructure_error_attempts: list[InfrastructureListing]
    task_ids: Literal["blind", "visible"]
    null_pack: PassedNullPack
    publish: Publish
    timings: Timings
    attempt_history: AttemptHistory
    records: Records
    sealbench_version: str
    versions: Versions
    signature: Signature | None = None


# ----------------------------------------------------------------------------- the comparison


class ComparedRun(Closed):
    run_id: str
    solver: str
    n: Count
    mean: Probability
    ci95: Interval
    ci_method: HeadlineMethod


class ComparedRuns(Closed):
    a: ComparedRun
    b: ComparedRun


class PairedMdd(Closed):
    value: float | None
    power: float
    alpha: float
    test: str
    assumes: str


class Paired(Closed):
    n: Count
    mean_a: Probability
    mean_b: Probability
    diff: Annotated[float, Field(ge=-1.0, le=1.0)]
    ci95: tuple[Annotated[float, Field(ge=-1.0, le=1.0)], Annotated[float, Field(ge=-1.0, le=1.0)]]
    method: Literal["newcombe", "cluster-t", "paired-t"]
    test: str
    p: Probability | None
    df: float | None
    se: float | None
    clusters: int | None
    table: tuple[tuple[Count, Count], tuple[Count, Count]] | None
    correlation: float | None
    note: str | None
    mdd: PairedMdd


class Disagreements(Closed):
    a_only: list[str]
    b_only: list[str]


class Comparison(Closed):
    """`sealbench compare RUN_A RUN_B --format json`: B against A on the tasks both scored."""

    model_config = ConfigDict(title="sealbench comparison (sealbench-compare/v2)")

    format: Literal["sealbench-compare/v2"]
    protocol_id: str
    identity: Identity
    runs: ComparedRuns
    paired: Paired
    disagreements: Disagreements
    unpaired: list[str]
    verdict: str


# ---- leaderboard (sealbench leaderboard)

LEADERBOARD_VERSION: Final = "sealbench-leaderboard/v2"

_Rate = Annotated[float, Field(ge=0.0, le=1.0)]
_Difference = Annotated[float, Field(ge=-1.0, le=1.0)]
_P = Annotated[float, Field(ge=0.0, le=1.0)]


class _LeaderboardRecord(BaseModel):
    """Closed: a key the code adds without a new model (and schema, and version) fails."""

    model_config = ConfigDict(extra="forbid")


class LeaderboardRun(_LeaderboardRecord):
    """One published run on the board, with its published figures and its tier numbers."""

    run_id: str
    ledger: str = Field(description="The ledger file the run was read from.")
    solver: str = Field(description="The solver command the run recorded.")
    n: int = Field(ge=1, description="Dataset tasks scored, as published.")
    mean: _Rate
    ci95: tuple[_Rate, _Rate] = Field(description="The published 95% interval [low, high].")
    ci_method: str
    tiers: list[Annotated[int, Field(ge=1)]] = Field(
        min_length=1,
        description="Compact letter display written as numbers, ascending: two runs sharing "
                    "a tier number are not distinguishable at the family-wise alpha.")


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

    model_config = ConfigDict(title="sealbench leaderboard (sealbench-leaderboard/v2)")

    format: Literal["sealbench-leaderboard/v2"]
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
