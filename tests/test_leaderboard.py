"""`sealbench leaderboard`: Holm, the compact letter display, and boards of real runs of the
bundled exact-diff example (no mocks: real ledgers, real sandboxed runs, a real browser)."""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import re
import sqlite3
import sys
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from browser_helpers import chromium, rendered
from click.testing import CliRunner, Result
from statsmodels.stats.multitest import multipletests
from toy import SOLVER, make_protocol, write_solver

from sealbench.cli import main
from sealbench.compare import compare_runs
from sealbench.errors import Refused
from sealbench.example import init
from sealbench.formats import (
    Leaderboard,
    LeaderboardLeftOut,
    LeaderboardPair,
    LeaderboardRun,
)
from sealbench.leaderboard import (
    build_leaderboard,
    compact_tiers,
    to_html,
    to_json,
    to_markdown,
    to_text,
)
from sealbench.ledger import Ledger
from sealbench.report import build_report
from sealbench.stats import holm

# ------------------------------------------------------------------------------ Holm


@pytest.mark.parametrize("seed", range(40))
def test_holm_matches_statsmodels_on_random_p_vectors(seed: int) -> None:
    rng = random.Random(seed)
    m = rng.randint(1, 30)
    # a mix of tiny, moderate, repeated and exactly-1 p-values
    p = [rng.choice([rng.random() ** 4, rng.random(), 1.0, 0.0, 0.01]) for _ in range(m)]
    reference = multipletests(p, alpha=0.05, method="holm")[1]
    assert holm(p) == pytest.approx(list(reference), abs=1e-12)


@pytest.mark.parametrize("p,expected", [
    ([], []),
    ([0.04], [0.04]),
    ([0.01, 0.04, 0.03], [0.03, 0.06, 0.06]),  # 3·0.01, then max(2·0.03, 0.03), 1·0.04 → 0.06
    ([0.5, 0.5], [1.0, 1.0]),                   # capped at 1
])
def test_holm_by_hand(p: list[float], expected: list[float]) -> None:
    assert holm(p) == pytest.approx(expected)


@pytest.mark.parametrize("bad", [[float("nan")], [1.5], [-0.1]])
def test_holm_refuses_what_is_not_a_p_value(bad: list[float]) -> None:
    with pytest.raises(ValueError, match="p-values"):
        holm(bad)


# -------------------------------------------------------------- the compact letter display


@pytest.mark.parametrize("names,different,expected", [
    # a chain: A~B, B~C, A≠C
    ("ABC", [("A", "C")], {"A": (1,), "B": (1, 2), "C": (2,)}),
    # all tied
    ("ABCD", [], {"A": (1,), "B": (1,), "C": (1,), "D": (1,)}),
    # all distinct
    ("ABC", [("A", "B"), ("A", "C"), ("B", "C")], {"A": (1,), "B": (2,), "C": (3,)}),
    # two tiers of two
    ("ABCD", [("A", "C"), ("A", "D"), ("B", "C"), ("B", "D")],
     {"A": (1,), "B": (1,), "C": (2,), "D": (2,)}),
    # the order of the significant pairs does not matter
    ("ABCD", [("B", "D"), ("A", "D"), ("B", "C"), ("A", "C")],
     {"A": (1,), "B": (1,), "C": (2,), "D": (2,)}),
    # one outlier at the bottom
    ("ABC", [("A", "C"), ("B", "C")], {"A": (1,), "B": (1,), "C": (2,)}),
    # a longer chain, A~B~C~D, every other pair differs
    ("ABCD", [("A", "C"), ("A", "D"), ("B", "D")],
     {"A": (1,), "B": (1, 2), "C": (2, 3), "D": (3,)}),
    ("A", [], {"A": (1,)}),
])
def test_tiers_by_hand(names: str, different: list[tuple[str, str]],
                       expected: dict[str, tuple[int, ...]]) -> None:
    assert compact_tiers(list(names), different) == expected


@pytest.mark.parametrize("seed", range(60))
def test_tiers_share_exactly_when_a_pair_is_not_different(seed: int) -> None:
    rng = random.Random(seed)
    names = [f"r{i}" for i in range(rng.randint(2, 7))]
    pairs = list(itertools.combinations(names, 2))
    different = {pair for pair in pairs if rng.random() < rng.random()}
    tiers = compact_tiers(names, list(different))
    for a, b in pairs:
        shares = bool(set(tiers[a]) & set(tiers[b]))
        assert shares == ((a, b) not in different), (a, b, tiers, different)
    assert all(tiers[name] for name in names)
    assert tiers[names[0]][0] == 1
    assert all(list(t) == sorted(set(t)) for t in tiers.values())


def test_tiers_refuse_a_name_twice() -> None:
    with pytest.raises(ValueError, match="distinct"):
        compact_tiers(["A", "A"], [])


def test_more_tiers_than_the_alphabet_has_letters_are_still_numbered() -> None:
    names = [f"r{i}" for i in range(30)]
    tiers = compact_tiers(names, list(itertools.combinations(names, 2)))
    assert [tiers[n] for n in names] == [(k,) for k in range(1, 31)]


# ------------------------------------------------------------------ boards of real runs

SOLVER_GIVING_UP = """\
import hashlib, os, sys
# rulebook, except that it gives up (changes nothing) on the tasks whose prompt's sha256 is
# listed: the attempt says nothing else about the task
GIVE_UP = {give_up!r}
with open(os.environ["SEALBENCH_PROMPT_FILE"], "rb") as f:
    if hashlib.sha256(f.read()).hexdigest() in GIVE_UP:
        sys.exit(0)
os.execv(sys.executable, [sys.executable, "-m", "sealbench.solvers.rulebook", sys.argv[-1]])
"""


@dataclass(frozen=True)
class Board:
    proto: Path
    ledger: Path   # rulebook, weaker, a trial, a run of another exam
    second: Path   # near-copy (a copy of the ledger made after sealing)
    runs: dict[str, str]
    identity: str


def _cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def _run_id(result: Result) -> str:
    assert result.exit_code == 0, result.stderr
    return next(line.split()[1].rstrip(":") for line in result.stdout.splitlines()
                if line.startswith(("run ", "trial ")))


def _solver_giving_up(directory: Path, proto: Path, task_ids: list[str]) -> str:
    rows = [json.loads(line) for line in
            (proto / "tasks" / "repair_v1.jsonl").read_text().splitlines() if line.strip()]
    prompts = {row["id"]: row["prompt"] for row in rows}
    give_up = sorted(hashlib.sha256(prompts[t].encode()).hexdigest() for t in task_ids)
    return write_solver(directory, SOLVER_GIVING_UP.format(give_up=give_up))


def _backup(source: Path, dest: Path) -> None:
    with sqlite3.connect(source) as src, sqlite3.connect(dest) as dst:
        src.backup(dst)
    src.close()
    dst.close()


@pytest.fixture(scope="module")
def board(tmp_path_factory: pytest.TempPathFactory) -> Board:
    """rulebook, a weaker variant (gives up on every other task rulebook solves, spread over
    all the libraries), and a near-copy (gives up on one of them) — three published runs of
    `coding-repair-exact`, the near-copy in a second ledger; plus a trial and a run of
    another exam in the first."""
    root = tmp_path_factory.mktemp("leaderboard")
    proto = init(root / "proto", "coding-repair-exact")
    ledger, second = root / "ledger.sqlite", root / "second.sqlite"
    assert _cli("seal", str(proto), "--ledger", str(ledger)).exit_code == 0
    _backup(ledger, second)
    runs = {"rulebook": _run_id(_cli("run", str(proto), "--solver", "rulebook", "--ledger",
                                     str(ledger), "--jobs", "2"))}
    with closing(Ledger(ledger, create=False)) as opened:
        identity = opened.run(runs["rulebook"]).identity
        solved = sorted(r.task_id for r in opened.attempts(runs["rulebook"], "dataset")
                        if r.record["outcome"] == "pass")
    assert len(solved) == 36  # docs/example.md
    weaker = _solver_giving_up(root / "weaker", proto, solved[::2])
    near = _solver_giving_up(root / "near", proto, solved[:1])
    runs["weaker"] = _run_id(_cli("run", str(proto), "--solver", weaker, "--ledger",
                                  str(ledger), "--jobs", "2"))
    runs["near"] = _run_id(_cli("run", str(proto), "--solver", near, "--ledger", str(second),
                                "--jobs", "2"))
    runs["trial"] = _run_id(_cli("run", str(proto), "--solver", "rulebook", "--ledger",
                                 str(ledger), "--limit", "2"))
    toy = make_protocol(root / "toy", n=4, min_n=3)
    assert _cli("seal", str(toy), "--ledger", str(ledger)).exit_code == 0
    runs["other"] = _run_id(_cli("run", str(toy), "--solver",
                                 write_solver(root / "toy-solver", SOLVER), "--ledger",
                                 str(ledger)))
    return Board(proto, ledger, second, runs, identity)


@pytest.fixture()
def ledgers(board: Board) -> Iterator[list[Ledger]]:
    opened = [Ledger(board.ledger, create=False, readonly=True),
              Ledger(board.second, create=False, readonly=True)]
    yield opened
    for ledger in opened:
        ledger.close()


@pytest.mark.slow
@pytest.mark.sandbox
def test_each_run_s_report_is_recomputed_once_not_once_per_pair(
        board: Board, ledgers: list[Ledger], monkeypatch: pytest.MonkeyPatch) -> None:
    """The board checks each run's stored figures against its records (a whole report
    recomputed) once per run: per pair, a ledger of k runs recomputed k² reports."""
    import sealbench.report

    recomputed: list[str] = []
    real = sealbench.report.build_report

    def counting(ledger: Ledger, run_id: str, *args: Any, **kwargs: Any) -> Any:
        recomputed.append(run_id)
        return real(ledger, run_id, *args, **kwargs)

    monkeypatch.setattr(sealbench.report, "build_report", counting)
    result = build_leaderboard(ledgers, board.identity)
    assert len(result.runs) == 3 and len(result.pairs) == 3
    assert sorted(recomputed) == sorted(r.run_id for r in result.runs)


@pytest.mark.slow
@pytest.mark.sandbox
def test_acceptance_3_rulebook_and_its_near_copy_share_a_tier_the_weaker_one_does_not(
        board: Board, ledgers: list[Ledger]) -> None:
    result = build_leaderboard(ledgers, board.identity)
    runs = {r.run_id: r for r in result.runs}
    rulebook, near, weaker = (runs[board.runs[k]] for k in ("rulebook", "near", "weaker"))
    assert (rulebook.n, near.n, weaker.n) == (54, 54, 54)
    assert (rulebook.mean, near.mean, weaker.mean) == (36 / 54, 35 / 54, 18 / 54)
    assert [r.run_id for r in result.runs] == [rulebook.run_id, near.run_id, weaker.run_id]
    # what the data say: p-values, raw and Holm-corrected
    pairs = {frozenset((p.a, p.b)): p for p in result.pairs}
    tie = pairs[frozenset((rulebook.run_id, near.run_id))]
    assert tie.p_holm >= 0.05 and not tie.distinguishable
    for other in (rulebook, near):
        apart = pairs[frozenset((other.run_id, weaker.run_id))]
        assert apart.p_holm < 0.05 and apart.distinguishable
        assert apart.method == "cluster-t" and apart.test == "cluster-robust t (7 df)"
        assert apart.ci95[1] < 0  # the weaker one is listed second: b − a < 0
    raw = [p.p for p in result.pairs]
    assert [p.p_holm for p in result.pairs] == pytest.approx(
        list(multipletests(raw, method="holm")[1]), abs=1e-12)
    # the tiers: one for rulebook and its near-copy, another for the weaker one
    assert rulebook.tiers == near.tiers == [1] and weaker.tiers == [2]
    assert result.indistinguishable == [(rulebook.run_id, near.run_id)]
    # the same test as `compare` (rulebook and weaker share a ledger)
    same = compare_runs(ledgers[0], rulebook.run_id, weaker.run_id)
    apart = pairs[frozenset((rulebook.run_id, weaker.run_id))]
    assert (apart.p, apart.diff, list(apart.ci95)) == (
        same["paired"]["p"], same["paired"]["diff"], same["paired"]["ci95"])
    # every other run is named, with why
    left = {o.run_id: o.why for o in result.left_out}
    assert left[board.runs["trial"]] == "a trial: it has no rate"
    assert left[board.runs["other"]].startswith("another exam: protocol 'toy.v1'")
    print(to_text(result))


def _board_cli(board: Board, *extra: str) -> Result:
    return _cli("leaderboard", str(board.proto), "--ledger", str(board.ledger), "--ledger",
                str(board.second), *extra)


@pytest.mark.slow
@pytest.mark.sandbox
def test_text_md_and_json_outputs_and_the_json_validates_against_the_shipped_schema(
        board: Board) -> None:
    text = _board_cli(board)
    assert text.exit_code == 0, text.stderr
    for key in ("rulebook", "near", "weaker"):
        assert board.runs[key] in text.stdout
    assert "family-wise alpha = 0.05" in text.stdout
    assert "not a ranking" in text.stdout
    assert f"not told apart  {board.runs['rulebook']} ~ {board.runs['near']} (p Holm = " \
        in text.stdout
    assert "1st" not in text.stdout and "rank " not in text.stdout
    assert f"{board.runs['trial']} ({board.ledger}): a trial" in text.stdout
    # tiers are numbers, the pair sides letters: no row's tier reads as a side "a" or "b"
    # (issue 23, item 7: `agent-b-1 vs agent-a-1: b − a` beside two runs of tier "a")
    lines = text.stdout.splitlines()
    head = next(k for k, line in enumerate(lines) if line.startswith("tier "))
    tier_cells = [line[:4].strip() for line in lines[head + 1:head + 4]]
    assert tier_cells == ["1", "1", "2"], text.stdout

    md = _board_cli(board, "--format", "md")
    assert md.exit_code == 0, md.stderr
    assert "| tier | mean | 95% CI | n | run | solver |" in md.stdout
    assert md.stdout.count("| **1** |") == 2 and md.stdout.count("| **2** |") == 1

    out = _board_cli(board, "--format", "json")
    assert out.exit_code == 0, out.stderr
    data = json.loads(out.stdout)
    # what `sealbench schema leaderboard` prints (generated from the model: test_formats)
    schema = json.loads(_cli("schema", "leaderboard").stdout)
    jsonschema.validators.validator_for(schema).check_schema(schema)
    jsonschema.validate(data, schema)
    assert data["format"] == "sealbench-leaderboard/v2"
    assert [r["tiers"] for r in data["runs"]] == [[1], [1], [2]]
    # the identity itself names the same board
    by_identity = _cli("leaderboard", board.identity, "--ledger", str(board.ledger),
                       "--ledger", str(board.second), "--format", "json")
    assert json.loads(by_identity.stdout) == data


@pytest.mark.slow
@pytest.mark.sandbox
@pytest.mark.parametrize("key,why", [
    ("trial", "a trial: it has no rate"),
    ("other", "another exam: protocol 'toy.v1'"),
    (None, "it is in none of the ledgers"),
])
def test_an_explicit_run_that_is_not_a_published_run_of_the_identity_is_refused(
        board: Board, key: str | None, why: str) -> None:
    run_id = board.runs[key] if key else "no-such-run"
    result = _board_cli(board, "--run", board.runs["rulebook"], "--run", run_id)
    assert result.exit_code == 3
    assert f"run {run_id} is not a published run of identity {board.identity}: {why}" \
        in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.slow
@pytest.mark.sandbox
def test_runs_not_selected_are_named_and_fewer_than_two_runs_are_refused(
        board: Board, ledgers: list[Ledger]) -> None:
    two = build_leaderboard(ledgers, board.identity, [board.runs["weaker"], board.runs["near"]])
    assert [r.run_id for r in two.runs] == [board.runs["near"], board.runs["weaker"]]
    assert {o.run_id: o.why for o in two.left_out}[board.runs["rulebook"]] == \
        "published, not selected with --run"
    assert len(two.pairs) == 1 and two.pairs[0].p_holm == two.pairs[0].p  # one test: no Holm
    with pytest.raises(Refused, match=r"at least 2 published runs .* found 1 "):
        build_leaderboard(ledgers[:1], board.identity, [board.runs["rulebook"]])
    alone = _cli("leaderboard", str(board.proto), "--ledger", str(board.second))
    assert alone.exit_code == 3
    assert "needs at least 2 published runs" in alone.stderr and "found 1" in alone.stderr


@pytest.mark.slow
@pytest.mark.sandbox
def test_the_same_ledger_twice_counts_each_run_once(board: Board, tmp_path: Path) -> None:
    copy = tmp_path / "copy.sqlite"
    _backup(board.ledger, copy)
    with closing(Ledger(board.ledger, create=False, readonly=True)) as a, \
            closing(Ledger(copy, create=False, readonly=True)) as b:
        result = build_leaderboard([a, b], board.identity)
    assert len(result.runs) == 2
    assert {o.run_id for o in result.left_out if "counted once" in o.why} == \
        {board.runs["rulebook"], board.runs["weaker"]}
    same_path = _cli("leaderboard", str(board.proto), "--ledger", str(board.ledger),
                     "--ledger", str(board.ledger), "--format", "json")
    assert same_path.exit_code == 0, same_path.stderr
    assert len(json.loads(same_path.stdout)["runs"]) == 2


@pytest.mark.slow
@pytest.mark.sandbox
def test_two_different_runs_under_one_id_in_two_ledgers_are_refused(
        board: Board, tmp_path: Path) -> None:
    """Recorded through the ledger API (both chains intact): which one is meant is unclear."""
    copy = tmp_path / "clash.sqlite"
    _backup(board.second, copy)
    with closing(Ledger(board.ledger, create=False, readonly=True)) as first, \
            closing(Ledger(copy, create=False)) as ledger:
        src = first.run(board.runs["weaker"])
        ledger.create_run(src.run_id, src.protocol_id, src.identity, src.solver, src.sandbox,
                          src.options)
        for row in first.attempts(src.run_id):
            ledger.add_attempt(src.run_id, row.phase, row.task_id, row.epoch, row.record)
        ledger.finish_run(src.run_id, "finished")
        ledger.finish_run(src.run_id, "published", None, build_report(ledger, src.run_id))
        assert ledger.integrity(src.run_id) == []
        with pytest.raises(Refused, match=f"run {src.run_id} is in ledger .* with different "
                                          "records"):
            build_leaderboard([first, ledger], board.identity)


@pytest.mark.slow
@pytest.mark.sandbox
def test_a_ledger_with_a_deleted_run_is_refused(board: Board, tmp_path: Path) -> None:
    """Dropping the run where an agent did badly is how a leaderboard would be cherry-picked."""
    copy = tmp_path / "edited.sqlite"
    _backup(board.ledger, copy)
    with sqlite3.connect(copy) as db:
        for table in ("runs", "run_events", "attempts"):
            db.execute(f"DELETE FROM {table} WHERE run_id=?", (board.runs["weaker"],))
    db.close()
    result = _cli("leaderboard", str(board.proto), "--ledger", str(copy), "--ledger",
                  str(board.second))
    assert result.exit_code == 3
    assert f"run {board.runs['weaker']} was deleted" in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.slow
@pytest.mark.sandbox
def test_a_published_run_whose_stored_figures_were_edited_is_refused(
        board: Board, tmp_path: Path) -> None:
    """The weaker run's stored mean raised to rulebook's: the board must not show it."""
    copy = tmp_path / "figures.sqlite"
    _backup(board.ledger, copy)
    with sqlite3.connect(copy) as db:
        (text,) = db.execute("SELECT report FROM runs WHERE run_id=?",
                             (board.runs["weaker"],)).fetchone()
        report = {**json.loads(text), "mean": 36 / 54}
        db.execute("UPDATE runs SET report=? WHERE run_id=?",
                   (json.dumps(report), board.runs["weaker"]))
    db.close()
    result = _cli("leaderboard", str(board.proto), "--ledger", str(copy), "--format", "json")
    assert result.exit_code == 3
    assert board.runs["weaker"] in result.stderr and "edited" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("argument,why", [
    ("sha256:abc", "neither a sealed protocol directory nor a protocol identity"),
    ("{tmp}", "protocol.lock"),  # a directory that was never sealed
])
def test_a_protocol_argument_that_names_no_identity_is_one_line(
        tmp_path: Path, argument: str, why: str) -> None:
    result = _cli("leaderboard", argument.format(tmp=tmp_path), "--ledger",
                  str(tmp_path / "none.sqlite"))
    assert result.exit_code in (2, 3)
    assert why in result.stderr and "Traceback" not in result.output
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.slow
@pytest.mark.sandbox
def test_a_pair_compare_refuses_makes_the_leaderboard_refuse_naming_it(
        board: Board, tmp_path: Path) -> None:
    """A run under a doubled timeout next to the others: compare refuses the pair (other
    conditions), so the board must not rank it."""
    copy = tmp_path / "conditions.sqlite"
    _backup(board.ledger, copy)
    with closing(Ledger(copy, create=False)) as ledger:
        src = ledger.run(board.runs["rulebook"])
        slow = f"{src.run_id}-slow"
        ledger.create_run(slow, src.protocol_id, src.identity, src.solver, src.sandbox,
                          {**src.options, "timeout_scale": 2.0})
        for row in ledger.attempts(src.run_id):
            ledger.add_attempt(slow, row.phase, row.task_id, row.epoch, row.record)
        ledger.finish_run(slow, "finished")
        ledger.finish_run(slow, "published", None, build_report(ledger, slow))
    result = _cli("leaderboard", str(board.proto), "--ledger", str(copy))
    assert result.exit_code == 3
    assert "is not comparable" in result.stderr and slow in result.stderr
    assert "timeout scale" in result.stderr


# ------------------------------------------------------------------ rendering, pure


def _made_up(solver: str = "python agent.py") -> Leaderboard:
    def run(run_id: str, mean: float, tiers: list[int]) -> LeaderboardRun:
        return LeaderboardRun(run_id=run_id, ledger="l.sqlite", solver=solver, n=50,
                              mean=mean, ci95=(mean - 0.1, mean + 0.1),
                              ci_method="wilson", tiers=tiers)

    def pair(a: str, b: str, p: float, apart: bool) -> LeaderboardPair:
        return LeaderboardPair(a=a, b=b, n=50, diff=-0.1, ci95=(-0.2, 0.0), method="newcombe",
                               test="exact McNemar", p=p, p_holm=p, distinguishable=apart,
                               unpaired=[])

    return Leaderboard(
        format="sealbench-leaderboard/v2", protocol_id="p", identity="sha256:" + "0" * 64,
        alpha=0.05, correction="holm",
        runs=[run("A", 0.6, [1]), run("B", 0.5, [1, 2]), run("C", 0.4, [2])],
        pairs=[pair("A", "B", 0.2, False), pair("A", "C", 0.01, True),
               pair("B", "C", 0.3, False)],
        indistinguishable=[("A", "B"), ("B", "C")],
        left_out=[LeaderboardLeftOut(run_id="D", ledger="l.sqlite", why="a trial")])


def test_a_hostile_solver_label_is_shown_not_obeyed() -> None:
    label = '<script>fetch("http://x")</script><img src=x onerror=1>\x1b[2J|`'
    board = _made_up(label)
    page = to_html(board)
    assert "<script" not in page and "<img" not in page and "&lt;script&gt;" in page
    assert "default-src 'none'" in page
    assert "\x1b" not in to_text(board) and "\\x1b[2J" in to_text(board)
    assert "| `<script>" in to_markdown(board) and "\\|'" in to_markdown(board)
    assert json.loads(to_json(board))["runs"][0]["solver"] == label


def test_the_text_aligns_tiers_in_their_columns_and_never_ranks_a_row() -> None:
    text = to_text(_made_up())
    rows = [line for line in text.splitlines() if line.endswith("python agent.py")]
    assert [row[:4].rstrip() for row in rows] == ["1", "1 2", "  2"]
    assert "not told apart  A ~ B (p Holm = 0.2); B ~ C (p Holm = 0.3)" in text
    assert "told apart      A > C (p Holm = 0.01)" in text


def test_a_zero_width_pair_is_not_told_apart_and_says_why() -> None:
    board = _made_up()
    board.pairs[0] = board.pairs[0].model_copy(update={"p": 0.0, "p_holm": 0.0,
                                                       "ci95": (-0.1, -0.1)})
    assert "A ~ B (p Holm = 0.0e+00; no claim: the interval has zero width)" in to_text(board)


# ------------------------------------------------------------------ in a real browser


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as launched:
        yield launched


@pytest.mark.slow
@pytest.mark.sandbox
@pytest.mark.browser
def test_the_html_page_shows_each_run_its_tiers_and_interval_and_loads_nothing(
        board: Board, browser: Any, tmp_path: Path) -> None:
    result = _board_cli(board, "--format", "html")
    assert result.exit_code == 0, result.stderr
    page_path = tmp_path / "leaderboard.html"
    page_path.write_text(result.stdout, encoding="utf-8")
    shot = tmp_path / "leaderboard.png"
    with rendered(browser, page_path, shot) as page:
        assert page.outside_requests(page_path) == []
        rows = page.page.locator("#runs tbody tr.run")
        assert rows.count() == 3
        seen = [(rows.nth(i).get_attribute("data-run"),
                 rows.nth(i).locator("td.tiers").inner_text().strip())
                for i in range(3)]
        assert seen == [(board.runs["rulebook"], "1"), (board.runs["near"], "1"),
                        (board.runs["weaker"], "2")]
        for i in range(3):
            row = rows.nth(i)
            assert row.locator("svg.interval line.ci").count() == 1
            assert "54" in row.inner_text() and "%" in row.inner_text()
        assert page.page.locator("#pairs tbody tr").count() == 3
        text = page.text()
        assert "family-wise alpha = 0.05" in text and "not a ranking" in text
        assert f"{board.runs['rulebook']} ~ {board.runs['near']}" in text
        assert "a trial: it has no rate" in text
    assert shot.stat().st_size > 0
    print(f"leaderboard screenshot: {shot}")
    sys.stdout.flush()


@pytest.mark.parametrize("render", [to_text, to_markdown, to_html, to_json])
def test_each_renderer_takes_the_json_document_as_well_as_the_model(render: Any) -> None:
    board = _made_up('agent "x" <y>')
    assert render(json.loads(to_json(board))) == render(board)


# an OSC 8 hyperlink, a screen clear and a bidi override, in the solver's command line
ESCAPES = "'\x1b]8;;http://evil\x1b\\x\x1b]8;;\x1b\\ \x1b[2J\u202e'"


@pytest.mark.slow
@pytest.mark.sandbox
def test_a_solver_label_cannot_drive_the_terminal_in_leaderboard_or_compare_output(
        tmp_path: Path) -> None:
    """Two published toy runs whose solver command holds terminal escapes: no output of
    `leaderboard` (text, md, html) or `compare` (text, md, html) carries them raw."""
    proto = make_protocol(tmp_path / "toy", n=3, min_n=3)
    ledger = str(tmp_path / "ledger.sqlite")
    assert _cli("seal", str(proto), "--ledger", ledger).exit_code == 0
    label = write_solver(tmp_path / "agent", SOLVER) + " " + ESCAPES
    runs = [_run_id(_cli("run", str(proto), "--solver", label, "--ledger", ledger))
            for _ in range(2)]
    outputs = {f"leaderboard {fmt}": _cli("leaderboard", str(proto), "--ledger", ledger,
                                          "--format", fmt) for fmt in ("text", "md", "html")}
    outputs |= {f"compare {fmt}": _cli("compare", *runs, "--ledger", ledger, "--format", fmt)
                for fmt in ("text", "md", "html")}
    for name, result in outputs.items():
        assert result.exit_code == 0, (name, result.stderr)
        assert "\\x1b]8;;http://evil" in result.stdout, name  # shown, as an escape
        assert "\x1b" not in result.stdout and "\u202e" not in result.stdout, name


class _BareRates(HTMLParser):
    """Text holding a percentage (not "95% CI") outside every element carrying data-n,
    data-lo and data-hi: the pages' rule (tests/test_html.py checks it in a browser)."""

    VOID = frozenset({"meta", "br", "line", "circle", "input", "img"})

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[bool] = []
        self.bare: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.VOID:
            return
        names = {name for name, _ in attrs}
        self.stack.append({"data-n", "data-lo", "data-hi"} <= names)

    def handle_endtag(self, tag: str) -> None:
        if tag not in self.VOID and self.stack:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        if re.search(r"\d+(\.\d+)?\s*%(?!\s*(CI|interval|confidence))", data) \
                and not any(self.stack):
            self.bare.append(data)


def test_every_rate_on_the_leaderboard_page_carries_its_n_and_interval() -> None:
    found = _BareRates()
    found.feed(to_html(_made_up()).split("<body>", 1)[1])
    assert found.bare == []
    assert '<tr class="run" data-run="A" data-mean="0.6" data-lo=' in to_html(_made_up())
