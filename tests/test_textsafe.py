"""textsafe: what the solver wrote, made fit to show (terminal escapes are tested with the
paths in tests/test_patchpaths.py); here, what reads as a rate withheld before the gate."""

from __future__ import annotations

import pytest

from sealbench.textsafe import clip, rate_free


@pytest.mark.parametrize("raw,shown", [
    ("93.0% (95% CI 88.0%-97.0%, n = 54)",
     "[withheld] ([withheld] CI [withheld]-[withheld], n = 54)"),
    ("mean 0.93, .9", "[withheld] [withheld], [withheld]"),
    ("50/54 passed, 50 of 54, 50 out of 54", "[withheld] passed, [withheld], [withheld]"),
    ("93 per cent, 93 percent, 93\uff05, 93\u066a", "[withheld], [withheld], [withheld], "
     "[withheld]"),
    ("success rate: high; accuracy; ci95 interval", "success [withheld]: high; [withheld]; "
     "[withheld] [withheld]"),
    # what the harness writes itself stays as it is
    ("killed after 20 s", "killed after 20 s"),
    ("touched 3 files, budget.max_files_touched is 2",
     "touched 3 files, budget.max_files_touched is 2"),
    ("solver exited with status 1: python 3.11", "solver exited with status 1: python 3.11"),
    ("wrote forbidden path(s): secrets/.env", "wrote forbidden path(s): secrets/.env"),
])
def test_rate_free_withholds_what_reads_as_a_rate(raw: str, shown: str) -> None:
    assert rate_free(raw) == shown


@pytest.mark.parametrize("text,limit,shown", [
    ("short", 10, "short"),
    ("exactly ten", 11, "exactly ten"),
    # cut at the last whole word that fits with the mark, never mid-word
    ("could not open file agents/agent_a.py", 20, "could not open file…"),
    ("could not open file agents/agent_a.py", 19, "could not open…"),
    # trailing spaces before the cut are dropped
    ("one two   three four", 12, "one two…"),
    # one long word: cut inside it rather than leave a near-empty cell
    ("x" * 30, 10, "x" * 9 + "…"),
    ("a " + "y" * 30, 10, "a yyyyyyy…"),
])
def test_clip_cuts_at_a_word_and_says_so(text: str, limit: int, shown: str) -> None:
    assert clip(text, limit) == shown
    assert len(clip(text, limit)) <= limit
