"""Recognisable controls: seal's warnings about controls a solver could tell from the dataset
by their files, their prompt's wording or their size (docs/protocol.md#recognisable-controls)."""

from __future__ import annotations

import pytest

from sealbench.nullpack import (
    SIZE_FACTOR,
    Shape,
    masked,
    prompt_template,
    recognisability_warnings,
    templated,
)

LAYOUT = frozenset({"README.md", "calc/__init__.py", "calc/ops.py", "tests/test_calc.py"})
DATASET = [
    Shape("calc-001", LAYOUT, "Bug report for calc: `add(2, 3)` returns `-1`; expected `5`.",
          1000),
    Shape("calc-002", LAYOUT, "Bug report for calc: `div(1, 0)` raises `KeyError` — division "
          "by zero is bad input; expected a `ValueError`.", 1100),
    Shape("calc-003", LAYOUT, "Bug report for calc: `neg(4)` returns `4`; expected `-4`.", 1200),
]
MATCHING = Shape("NP-1", LAYOUT, "Bug report for calc: `mul(2, 3)` returns `5` — the product "
                 "is a sum; expected `6`.", 1050)
KIND = {"layout": "file layout", "wording": "prompt starts like no dataset prompt",
        "length": "prompt's length", "size": "fixture's total size"}


def warned(control: Shape, dataset: list[Shape] = DATASET) -> set[str]:
    """Which give-aways the warnings name for one control."""
    warnings = recognisability_warnings(dataset, [control])
    found = {kind for kind, text in KIND.items() for w in warnings if text in w}
    assert len(found) == len(warnings), warnings
    assert all(control.id in w for w in warnings)
    return found


@pytest.mark.parametrize(("control", "expected"), [
    pytest.param(MATCHING, set(), id="matching"),
    # one give-away at a time: everything else as the dataset's
    pytest.param(Shape("NP-1", LAYOUT | {"CONTRIBUTING.md"}, MATCHING.prompt, 1050),
                 {"layout"}, id="an-extra-file"),
    pytest.param(Shape("NP-1", frozenset({"README.md", "secrets/.env"}), MATCHING.prompt, 1050),
                 {"layout"}, id="other-files"),
    pytest.param(Shape("NP-1", LAYOUT, "In `calc/ops.py`, replace `a - b` with `a + b`; "
                       "nothing else needs to change.", 1050), {"wording"}, id="a-stub-prompt"),
    pytest.param(Shape("NP-1", LAYOUT, "Bug report for fetchkit: `get(1)` returns `2`; "
                       "expected `3`.", 1050), {"wording"}, id="another-library"),
    pytest.param(Shape("NP-1", LAYOUT, "Bug report for calc: `f()` returns `1`.", 1050),
                 {"length"}, id="a-short-prompt"),
    pytest.param(Shape("NP-1", LAYOUT, MATCHING.prompt + " " + "x" * 200, 1050), {"length"},
                 id="a-long-prompt"),
    pytest.param(Shape("NP-1", LAYOUT, MATCHING.prompt, 300), {"size"}, id="a-small-fixture"),
    pytest.param(Shape("NP-1", LAYOUT, MATCHING.prompt, 2000), {"size"}, id="a-large-fixture"),
    # within the tolerance: a factor of 1.25 beyond the dataset's range either way
    pytest.param(Shape("NP-1", LAYOUT, MATCHING.prompt, int(1200 * SIZE_FACTOR)), set(),
                 id="large-but-tolerated"),
    pytest.param(Shape("NP-1", LAYOUT, MATCHING.prompt, 801), set(), id="small-but-tolerated"),
    pytest.param(Shape("NP-1", frozenset({"x.txt"}), "Fix it.", 10),
                 {"layout", "wording", "length", "size"}, id="all-at-once"),
])
def test_each_give_away_is_warned_about_alone(control: Shape, expected: set[str]) -> None:
    assert warned(control) == expected


def test_a_warning_names_every_control_it_gives_away_and_how() -> None:
    small = Shape("NP-2", LAYOUT, MATCHING.prompt, 100)
    stub = Shape("NP-3", LAYOUT, "In `calc/ops.py`, replace `-` with `+`, and nothing else.",
                 1000)
    warnings = recognisability_warnings(DATASET, [MATCHING, small, stub])
    assert warnings == [
        'controls NP-3 ("in <code>, replace <code>"): their prompt starts like no dataset '
        "prompt, so a solver can recognise them by their wording",
        "controls NP-2 (100 bytes): their fixture's total size lies outside the dataset's "
        "1,000–1,200 bytes (allowed: 800–1,500, a factor of 1.25 either way), so a solver can "
        "recognise them by size",
    ]


def test_free_form_prompts_have_no_template_to_match() -> None:
    """Issue texts (SWE-bench's) share no template: a control's own wording is then no more
    telling than any dataset task's."""
    free = [Shape(f"t{i}", LAYOUT, text, 1000) for i, text in enumerate((
        "Crash when the config file is empty, traceback below.",
        "Feature request: allow a timeout per call in seconds.",
        "`parse()` mishandles unicode escapes in keys since 2.1"))]
    assert templated(free) is None
    assert warned(Shape("NP-1", LAYOUT, "Apply exactly this change and nothing else: x", 1000),
                  free) == set()


def test_templates_mask_code_quotes_and_numbers() -> None:
    assert masked("`chunk([1], 2)` returns 'ab' or \"c\" after 3.5 s; don't") == \
        "<code> returns <str> or <str> after <num> s; don't"
    assert prompt_template("Bug report for textkit: `chunk([1, 2, 3], 2)` returns `[[1]]`") == \
        ("bug", "report", "for", "textkit:")
    assert prompt_template("Repair R-039.") == prompt_template("Repair R-001.")
    assert prompt_template("") == ()


def test_the_old_controls_were_recognisable_in_every_way() -> None:
    """The shape the example's first stub had: a library of its own, a stub's wording, a few
    hundred bytes. Each give-away is warned about once, naming the control (its 46 characters
    are within a factor 1.25 of this dataset's shortest prompt, 57)."""
    stub = Shape("NP-STUB-01", frozenset({"README.md", "greeting.py", "tests/test_greeting.py"}),
                 "In `greeting.py`, replace `Helo` with `Hello`.", 299)
    assert warned(stub) == {"layout", "wording", "size"}
