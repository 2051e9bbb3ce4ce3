"""The renderer registry (sealbench/render.py): each (kind, format) renders, an unknown one is
a clear error, and the CLI's --format choices come from it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_formats import golden_report

from sealbench import render
from sealbench.render import (
    PROVIDERS,
    UnknownRenderer,
    formats_for,
    lookup,
    renderer,
)

DATA = Path(__file__).parent / "data"


def comparison() -> dict[str, Any]:
    """A comparison as compare_runs returns it (the example from docs/formats.md)."""
    run = {"ci95": [0.375, 0.779], "ci_method": "cluster-wilson", "mean": 0.59, "n": 54,
           "solver": "python agents/weaker.py"}
    return {
        "disagreements": {"a_only": [], "b_only": ["textkit-002", "textkit-003"]},
        "format": "sealbench-compare/v2",
        "identity": "sha256:" + "7" * 64,
        "paired": {"ci95": [-0.10, 0.25], "clusters": 8, "correlation": 0.85, "df": 7,
                   "diff": 0.074, "mean_a": 0.59, "mean_b": 0.67, "method": "cluster-t",
                   "mdd": {"alpha": 0.05, "assumes": "the observed Var(d)", "power": 0.8,
                           "test": "cluster-robust t (7 df)", "value": 0.24},
                   "n": 54, "note": None, "p": 0.35, "se": 0.074, "table": [[32, 0], [4, 18]],
                   "test": "cluster-robust t (7 df)"},
        "protocol_id": "coding-repair.example.2026-11-30",
        "runs": {"a": {**run, "run_id": "weaker-1"},
                 "b": {**run, "run_id": "rulebook-1", "mean": 0.67}},
        "unpaired": [],
        "verdict": "inconclusive — the data do not tell A and B apart",
    }


def leaderboard() -> dict[str, Any]:
    """A two-run board as build_leaderboard dumps it (validated by its model here)."""
    from sealbench.formats import Leaderboard

    def run(run_id: str, mean: float, ci: list[float], tiers: list[int]) -> dict[str, Any]:
        return {"run_id": run_id, "ledger": "l.sqlite", "solver": f"python {run_id}.py",
                "n": 54, "mean": mean, "ci95": ci, "ci_method": "cluster-wilson",
                "tiers": tiers}

    board = {
        "format": "sealbench-leaderboard/v2", "protocol_id": "coding-repair.example",
        "identity": "sha256:" + "7" * 64, "alpha": 0.05, "correction": "holm",
        "runs": [run("rulebook-1", 0.667, [0.504, 0.797], [1]),
                 run("weaker-1", 0.333, [0.203, 0.496], [2])],
        "pairs": [{"a": "rulebook-1", "b": "weaker-1", "n": 54, "diff": -0.333,
                   "ci95": [-0.486, -0.18], "method": "cluster-t",
                   "test": "cluster-robust t (7 df)", "p": 0.0013, "p_holm": 0.0013,
                   "distinguishable": True, "unpaired": []}],
        "indistinguishable": [], "left_out": [],
    }
    dumped: dict[str, Any] = Leaderboard.model_validate(board).model_dump(mode="json")
    return dumped


# what the HTML pages take besides the document: a run's attempts, each run's task scores
CONTEXT = {"attempts": lambda: [], "scores": lambda: ({}, {})}
DOCUMENTS = {"report": golden_report, "compare": comparison, "leaderboard": leaderboard}
# what each rendering must show: the run, and a rate only with its n
SHOWS = {"report": ("golden", "n = 4"), "compare": ("rulebook-1", "54"),
         "leaderboard": ("weaker-1", "54")}


@pytest.mark.parametrize(("kind", "fmt"), sorted(PROVIDERS))
def test_each_registered_format_renders(kind: str, fmt: str) -> None:
    document = DOCUMENTS[kind]()
    text = render.render(kind, fmt, document, **CONTEXT)
    run, n = SHOWS[kind]
    assert text.endswith("\n")
    if fmt == "json":
        assert json.loads(text) == document
    else:
        assert run in text and n in text


@pytest.mark.parametrize(("kind", "fmt"), sorted(PROVIDERS))
def test_the_provider_named_is_the_module_that_registers(kind: str, fmt: str) -> None:
    assert lookup(kind, fmt).__module__ == PROVIDERS[(kind, fmt)]


@pytest.mark.parametrize(("kind", "formats"), [
    ("report", ["json", "md", "html"]),
    ("compare", ["text", "json", "md", "html"]),
    ("leaderboard", ["text", "md", "json", "html"]),
])
def test_formats_for_lists_the_cli_choices(kind: str, formats: list[str]) -> None:
    assert formats_for(kind) == formats


def test_a_renderer_given_less_than_it_takes_is_a_clear_error() -> None:
    with pytest.raises(TypeError, match="rendering report as html needs attempts"):
        render.render("report", "html", golden_report())


def test_context_a_renderer_does_not_take_is_never_computed() -> None:
    def never() -> list[object]:
        raise AssertionError("json needs no attempts")

    assert render.render("report", "json", golden_report(), attempts=never).startswith("{")


@pytest.mark.parametrize(("kind", "fmt", "message"), [
    ("report", "pdf", "cannot render report as 'pdf': report renders as json, md, html"),
    ("compare", "pdf", "cannot render compare as 'pdf': compare renders as text, json, md, "
                       "html"),
    ("receipt", "json", "no renderers for 'receipt'; kinds: "),
])
def test_an_unknown_renderer_is_a_clear_error(kind: str, fmt: str, message: str) -> None:
    with pytest.raises(UnknownRenderer) as caught:
        render.render(kind, fmt, {})
    assert str(caught.value).startswith(message)


def test_registering_a_format_twice_is_refused() -> None:
    first = lookup("report", "md")
    with pytest.raises(ValueError, match="registered already"):
        renderer("report", "md")(lambda document: "another")
    assert lookup("report", "md") is first


def test_a_provider_that_registers_nothing_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(PROVIDERS, ("report", "txt"), "sealbench.textsafe")
    with pytest.raises(UnknownRenderer) as caught:
        lookup("report", "txt")
    assert str(caught.value) == ("sealbench.textsafe was named as the renderer of report txt "
                                 "but registers none")


def test_the_cli_has_no_format_chains_for_what_the_registry_renders() -> None:
    """cli.py picks renderers from the registry: no `{"json": to_json, ...}[fmt]` tables."""
    source = (Path(__file__).resolve().parents[1] / "src" / "sealbench" / "cli.py").read_text()
    for name in ("to_json", "to_markdown", "to_html", "to_text"):
        assert name not in source
