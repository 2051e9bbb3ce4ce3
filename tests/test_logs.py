"""What `show` reads out of the ledger: tails of captured output, durations, egress lines."""

from __future__ import annotations

import re

import pytest

from sealbench.logs import duration_text, tail

RATE = re.compile(r"\d+(\.\d+)?\s*%|\b0\.\d+\b|\bmean\b|ci95|\binterval\b", re.IGNORECASE)


@pytest.mark.parametrize("data,full,text,cut", [
    (b"short\n", False, "short\n", 0),
    (b"x" * 5000, False, "x" * 4096, 904),
    (b"x" * 5000, True, "x" * 5000, 0),
    # 60 lines of 3 bytes: the last 50 lines, well under 4 KiB
    (b"".join(b"%02d\n" % i for i in range(60)), False,
     "".join(f"{i:02d}\n" for i in range(10, 60)), 30),
    # a cut inside a two-byte character starts after it, never with a broken one
    (("é" * 3000 + "a").encode(), False, "é" * 2047 + "a", 1906),
    (b"", False, "", 0),
])
def test_tail_keeps_the_end_and_says_how_much_was_cut(data: bytes, full: bool, text: str,
                                                      cut: int) -> None:
    captured = tail(data, full=full)
    assert captured.text == text
    assert captured.cut == cut and captured.size == len(data)
    assert ("cut (--full shows all)" in captured.note()) == bool(cut)
    assert captured.as_dict()["truncated"] == bool(cut)
    assert not captured.replaced


def test_tail_says_when_bytes_were_not_utf8() -> None:
    captured = tail(b"ok \xff\xfe end\n")
    assert captured.replaced and "\ufffd" in captured.text
    assert "not UTF-8" in captured.note()
    assert captured.as_dict()["encoding"].startswith("utf-8, undecodable")


@pytest.mark.parametrize("seconds,text", [
    (0.4, "400 ms"), (0.0, "0 ms"), (0.9994, "999 ms"), (1.25, "1.2 s"), (42.0, "42.0 s"),
    (412.6, "413 s"), (None, "-"), ("x", "-"),
])
def test_durations_never_read_as_a_fraction(seconds: object, text: str) -> None:
    assert duration_text(seconds) == text
    assert not RATE.search(duration_text(seconds))


